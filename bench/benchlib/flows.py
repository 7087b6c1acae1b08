"""The flow phase: parent/child trees added in bulk, then drained by one worker.

On a flushed Redis, for a peer with a flow API (``Peer.flows``):

1. ``enqueue --mode flow``: TREES trees of 1 parent + C children, all in one queue, added
   with the library's bulk flow call, ``--flow-batch`` trees per call -> flows/s (and the
   jobs/s that makes). Then the harness checks the stored shape through its own RESP
   client: TREES parents in ``waiting-children``, TREES*C children in ``wait``, C pending
   dependencies per parent.
2. One worker process at concurrency 50 drains all TREES*(C+1) jobs; each processor
   returns 1 without reading anything. Drain rate = (jobs - 1) / (last processor start -
   first processor start), as in the plain drain phase; a parent can only start once its
   last child has completed, so the rate includes the parents' release.

Verification (any failure is a :class:`VerificationError`):

* every job ran exactly once (the worker's tracker, as in the other phases);
* in the worker, every parent's processor started after all its children's processors had
  returned (same-machine monotonic clock);
* in Redis: every job is in ``completed`` and nothing is left in ``wait``, ``active``,
  ``waiting-children`` or ``failed``; every parent has exactly C children pointing at it
  (``parentKey``), all from its own tree, C entries in ``<parent>:processed``, no
  ``:dependencies`` left, and ``processedOn`` not before any child's ``finishedOn``.

Redis CPU and commands are ``INFO`` deltas around each adapter process, divided by the
number of jobs (parents included), so the enqueue and drain figures add up to a per-job
cost of the whole flow. The harness's own checking commands run outside those deltas.
``INFO commandstats`` deltas (calls and CPU µs per job, by command) go to the JSON only.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from .peers import AdapterError, Peer, run_once
from .phases import VerificationError, check_worker, start_worker
from .redisproc import RedisServer, RespClient

PREFIX = "bull"  # both libraries' default key prefix
CONCURRENCY = 50


def _fail(peer: Peer, what: str, problems: list[str]) -> None:
    if problems:
        raise VerificationError(
            f"VERIFICATION FAILED for {peer.name} ({what}): " + "; ".join(problems)
        )


def _sizes(client: RespClient, base: str) -> dict[str, int]:
    cmds = [
        ("LLEN", f"{base}:wait"),
        ("LLEN", f"{base}:active"),
        ("ZCARD", f"{base}:waiting-children"),
        ("ZCARD", f"{base}:completed"),
        ("ZCARD", f"{base}:failed"),
        ("ZCARD", f"{base}:delayed"),
        ("ZCARD", f"{base}:prioritized"),
    ]
    names = ["wait", "active", "waiting-children", "completed", "failed", "delayed", "prio"]
    return {n: int(r) for n, r in zip(names, client.pipeline(cmds))}


def check_added(peer: Peer, client: RespClient, qname: str, trees: int, children: int) -> None:
    """The trees are stored as a flow should be, before any worker runs."""
    base = f"{PREFIX}:{qname}"
    got = _sizes(client, base)
    want = {"wait": trees * children, "waiting-children": trees, "completed": 0, "active": 0}
    problems = [f"{k}: {got[k]} (expected {v})" for k, v in want.items() if got[k] != v]
    parents = client.call("ZRANGE", f"{base}:waiting-children", "0", "-1")
    assert isinstance(parents, list)
    deps = client.pipeline([("SCARD", f"{base}:{p}:dependencies") for p in parents])
    bad = [p for p, d in zip(parents, deps) if d != children]
    if bad:
        problems.append(f"{len(bad)} parents without {children} pending children (e.g. {bad[:3]})")
    _fail(peer, "flow enqueue", problems)


def check_drained(peer: Peer, client: RespClient, qname: str, trees: int, children: int) -> None:
    """Every job completed, and every parent after (and with the results of) its children."""
    base = f"{PREFIX}:{qname}"
    total = trees * (children + 1)
    got = _sizes(client, base)
    want = {"completed": total, "wait": 0, "active": 0, "waiting-children": 0, "failed": 0}
    problems = [f"{k}: {got[k]} (expected {v})" for k, v in want.items() if got[k] != v]
    ids = client.call("ZRANGE", f"{base}:completed", "0", "-1")
    assert isinstance(ids, list)
    rows = client.pipeline(
        [
            ("HMGET", f"{base}:{j}", "name", "data", "processedOn", "finishedOn", "parentKey")
            for j in ids
        ]
    )
    parents: dict[str, dict[str, Any]] = {}
    kids: dict[str, list[dict[str, Any]]] = {}
    for j, row in zip(ids, rows):
        assert isinstance(row, list)
        name, data, processed_on, finished_on, parent_key = row
        job = {
            "tree": json.loads(data)["i"] // (children + 1) if data else None,
            "processed_on": int(processed_on or 0),
            "finished_on": int(finished_on or 0),
        }
        if parent_key:
            kids.setdefault(parent_key, []).append(job)
        else:
            parents[f"{base}:{j}"] = job | {"name": name}
    if len(parents) != trees:
        problems.append(f"{len(parents)} completed jobs without a parent, expected {trees}")
    orphans = set(kids) - set(parents)
    if orphans:
        problems.append(f"{len(orphans)} parent keys with no completed parent")
    keys = list(parents)
    hlens = client.pipeline([("HLEN", f"{k}:processed") for k in keys])
    exists = client.pipeline([("EXISTS", f"{k}:dependencies") for k in keys])
    shape = early = unrecorded = 0
    for key, hlen, left in zip(keys, hlens, exists):
        p, ks = parents[key], kids.get(key, [])
        if len(ks) != children or any(k["tree"] != p["tree"] for k in ks):
            shape += 1
        if hlen != children or left:
            unrecorded += 1
        if ks and p["processed_on"] < max(k["finished_on"] for k in ks):
            early += 1
    if shape:
        problems.append(f"{shape} parents without exactly their own {children} children")
    if unrecorded:
        problems.append(f"{unrecorded} parents without {children} processed results")
    if early:
        problems.append(f"{early} parents processed before a child finished (Redis times)")
    _fail(peer, "flow drain", problems)


def _release_ms(peer: Peer, res: dict[str, Any], trees: int, children: int) -> list[float]:
    """Per tree: parent processor start - last child processor return, in ms (must be > 0)."""
    starts, ends = res.get("starts", {}), res.get("ends", {})
    gaps, early = [], 0
    for t in range(trees):
        i = t * (children + 1)
        kid_ends = [ends.get(str(i + 1 + k)) for k in range(children)]
        if str(i) not in starts or None in kid_ends:
            continue  # reported as a missing job by check_worker
        gap = (starts[str(i)] - max(kid_ends)) / 1e6
        early += gap <= 0
        gaps.append(gap)
    _fail(
        peer,
        "flow drain",
        [f"{early} parents started before all their children returned"] if early else [],
    )
    return gaps


def _per_job(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], jobs: int
) -> dict[str, dict[str, float]]:
    """Per command: calls and Redis CPU µs per job over the phase (for the JSON, not the table)."""
    out = {}
    for cmd, a in after.items():
        b = before.get(cmd, {"calls": 0.0, "usec": 0.0})
        if a["calls"] > b["calls"]:
            out[cmd] = {
                "calls_per_job": (a["calls"] - b["calls"]) / jobs,
                "cpu_us_per_job": (a["usec"] - b["usec"]) / jobs,
            }
    return out


def flow(
    peer: Peer, redis: RedisServer, trees: int, children: int, batch: int, log: Path
) -> dict[str, Any] | None:
    """The flow phase for one peer and repeat; None when the peer has no flow API."""
    if not peer.flows:
        return None
    total = trees * (children + 1)
    qname = "bench-flow"
    client = redis.client
    assert client is not None
    redis.flushall()

    stats0, before = redis.commandstats(), redis.snapshot()
    msg = run_once(
        peer,
        "enqueue",
        ["--url", redis.url, "--queue", qname, "--n", str(trees), "--mode", "flow"]
        + ["--children", str(children), "--batch", str(batch)],
        log,
        max(120.0, total / 20),
    )
    after, stats1 = redis.snapshot(), redis.commandstats()
    if "unsupported" in msg:
        return None
    secs = msg["result"]["seconds"]
    check_added(peer, client, qname, trees, children)
    out: dict[str, Any] = {
        "enqueue": {
            "flows_per_s": trees / secs,
            "jobs_per_s": total / secs,
            "seconds": secs,
            "client_cpu_us_per_job": msg["result"]["cpu_s"] * 1e6 / total,
            "redis_cmds_per_job": (after["commands"] - before["commands"]) / total,
            "redis_cpu_us_per_job": (after["cpu_s"] - before["cpu_s"]) * 1e6 / total,
            "commands": _per_job(stats0, stats1, total),
        }
    }

    timeout = max(120.0, total / 5)
    stats0, before = redis.commandstats(), redis.snapshot()
    a, why = start_worker(
        peer,
        ["--url", redis.url, "--queue", qname, "--n", str(total), "--flow"]
        + ["--concurrency", str(CONCURRENCY), "--timeout", str(timeout)],
        log,
    )
    if a is None:
        raise AdapterError(f"{peer.name}: a flow worker answered unsupported: {why}")
    msg = a.next_message(timeout + 30)
    a.wait(timeout=60)
    after, stats1 = redis.snapshot(), redis.commandstats()
    res = msg["result"]
    check_worker(peer, f"flow drain c={CONCURRENCY}", res)
    gaps = _release_ms(peer, res, trees, children)
    check_drained(peer, client, qname, trees, children)
    span = (res["last_ns"] - res["first_ns"]) / 1e9
    out["drain"] = {
        "rate": (total - 1) / span if span > 0 else None,
        "first_to_last_s": span,
        "client_cpu_us_per_job": res["cpu_s"] * 1e6 / total,
        "redis_cmds_per_job": (after["commands"] - before["commands"]) / total,
        "redis_cpu_us_per_job": (after["cpu_s"] - before["cpu_s"]) * 1e6 / total,
        "release_p50_ms": statistics.median(gaps) if gaps else None,
        "commands": _per_job(stats0, stats1, total),
    }
    redis.flushall()
    return out
