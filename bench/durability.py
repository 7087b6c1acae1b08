#!/usr/bin/env python3
"""What an acknowledged echomq add survives under each AOF fsync policy, and what each costs.

    python3 bench/durability.py [--runs 10] [--disk-load] [--jobs 5000] [--batch 500]
                                [--repeats 3] [--output FILE] [--no-setup] [--seed N]

Runs on the system Python with the standard library only, like bench/run.py, and uses the
same echomq environment (bench/.venvs/echomq, the working tree installed).

Loss: for each of ``appendfsync everysec`` and ``always``, ``--runs`` times: a fresh
redis-server with AOF (no RDB) in its own directory; one producer process adds jobs one at a
time with ``Queue.add`` and keeps the id of every acknowledged add in its own memory (the
ledger, bench/peers/echomq_ledger.py); after a random delay (``--kill-after``) the harness
sends the server SIGKILL, restarts it on the same directory and counts the acknowledged jobs
that are gone: job hash missing, or id not in the queue's ``wait`` list. While it waits to
kill, the harness samples ``INFO persistence`` every 2 ms: the share of samples with a
background AOF fsync in progress (``aof_pending_bio_fsync``) is the share of moments at which
an everysec server holds acknowledged writes back from the file. ``--disk-load``
keeps the disk busy during both parts (a thread writing and fsyncing 8 MiB at a time in the
same directory), as another database, a backup or a log shipper would.

Cost: sequential adds/s and bulk adds/s (``Queue.add_bulk`` in batches of ``--batch``)
with no persistence, AOF everysec and AOF always, through the enqueue phase of bench/run.py
(benchlib/phases.py), on a fresh server per measurement, ``--repeats`` times, interleaved;
figures are medians.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.peers import PEERS, Adapter, Peer, setup
from benchlib.phases import enqueue
from benchlib.redisproc import RedisServer, RespClient
from benchlib.report import publish, table
from run import machine

ECHOMQ = PEERS["echomq"]
LEDGER = Peer("echomq-ledger", "python", "echomq", "echomq_ledger.py")
QUEUE = "durability"
PREFIX = "bull"
POLICIES = ("everysec", "always")
COST_MODES: list[tuple[str, str | None]] = [
    ("no persistence", None),
    ("AOF everysec", "everysec"),
    ("AOF always", "always"),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=10, help="kill -9 runs per policy (10)")
    p.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help=f"comma-separated fsync policies of the kill runs (default: {','.join(POLICIES)})",
    )
    p.add_argument(
        "--kill-after",
        type=float,
        nargs=2,
        default=(0.5, 3.0),
        metavar=("MIN", "MAX"),
        help="seconds of adding before the kill, uniform in [MIN, MAX] (0.5 3.0)",
    )
    p.add_argument("--seed", type=int, help="seed of the kill delays (default: random)")
    p.add_argument(
        "--disk-load", action="store_true", help="keep the disk busy during the kill runs"
    )
    p.add_argument("--jobs", type=int, default=5000, help="jobs per cost measurement (5000)")
    p.add_argument("--batch", type=int, default=500, help="jobs per add_bulk call (500)")
    p.add_argument("--repeats", type=int, default=3, help="cost repeats; medians (3)")
    p.add_argument("--skip-loss", action="store_true", help="only measure the cost")
    p.add_argument("--skip-cost", action="store_true", help="only measure the loss")
    p.add_argument("--redis-server", default="redis-server", help="redis-server binary")
    p.add_argument("--no-setup", action="store_true", help="do not refresh bench/.venvs/echomq")
    p.add_argument("--output", type=Path, help="write FILE.md (tables) and FILE.json (all data)")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- environment


def fsync_probe(directory: Path, count: int = 200) -> dict[str, float]:
    """Latency of appending 300 bytes and fsyncing, in the directory the servers use."""
    path = directory / "fsync-probe"
    times = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(count):
            os.write(fd, b"x" * 300)
            t0 = time.perf_counter()
            os.fsync(fd)
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        os.close(fd)
        path.unlink()
    times.sort()
    return {"p50_ms": times[len(times) // 2], "p99_ms": times[int(len(times) * 0.99)]}


def filesystem(directory: Path) -> str:
    """``type (device)`` of the mount holding ``directory``, best effort."""
    best = ("", "unknown", "")
    try:
        for row in Path("/proc/mounts").read_text().splitlines():
            device, mount, kind = row.split()[:3]
            if str(directory).startswith(mount.rstrip("/") + "/") and len(mount) > len(best[0]):
                best = (mount, kind, device)
    except OSError:
        pass
    return f"{best[1]} ({best[2]})" if best[2] else best[1]


@contextmanager
def disk_load(directory: Path, enabled: bool) -> Iterator[None]:
    """Write and fsync 8 MiB at a time in ``directory`` until the block exits (if enabled)."""
    if not enabled:
        yield
        return
    stop = threading.Event()
    path = directory / "disk-load"

    def run() -> None:
        block = os.urandom(1 << 20)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while not stop.is_set():
                for _ in range(8):
                    os.write(fd, block)
                os.fsync(fd)
                if os.lseek(fd, 0, os.SEEK_CUR) >= 64 << 20:  # keep the file small
                    os.ftruncate(fd, 0)
                    os.lseek(fd, 0, os.SEEK_SET)
        finally:
            os.close(fd)
            path.unlink()

    thread = threading.Thread(target=run, name="disk-load", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# --------------------------------------------------------------------------- loss


def lost_acks(client: RespClient, ledger: list[str]) -> tuple[list[str], int]:
    """The acknowledged ids whose job hash is gone or that are not waiting; and ``LLEN wait``."""
    waiting = client.call("LRANGE", f"{PREFIX}:{QUEUE}:wait", "0", "-1")
    assert isinstance(waiting, list)
    in_wait = set(waiting)
    gone = {job_id for job_id in ledger if job_id not in in_wait}
    for start in range(0, len(ledger), 1000):
        chunk = ledger[start : start + 1000]
        present = client.call("EXISTS", *[f"{PREFIX}:{QUEUE}:{job_id}" for job_id in chunk])
        if present != len(chunk):
            gone.update(
                job_id
                for job_id in chunk
                if client.call("EXISTS", f"{PREFIX}:{QUEUE}:{job_id}") == 0
            )
    return [job_id for job_id in ledger if job_id in gone], len(waiting)


def sample_fsync(port: int, seconds: float) -> tuple[int, int]:
    """Poll ``INFO persistence`` for ``seconds``: (samples with a background fsync, samples)."""
    client = RespClient(port)
    busy = samples = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            info = client.call("INFO", "persistence")
            assert isinstance(info, str)
            samples += 1
            busy += "aof_pending_bio_fsync:0\r\n" not in info
            time.sleep(0.002)
    finally:
        client.close()
    return busy, samples


def loss_run(
    policy: str, index: int, delay: float, opts: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """One producer, one SIGKILL after ``delay`` seconds, one restart, one count."""
    directory = workdir / f"loss-{policy}-{index}"
    directory.mkdir()
    log = workdir / "durability.log"
    ledger_path = directory / "ledger.txt"
    redis = RedisServer(directory, opts.redis_server, appendfsync=policy)
    redis.start()
    try:
        producer = Adapter(
            LEDGER,
            "produce",
            ["--url", redis.url, "--queue", QUEUE, "--ledger", str(ledger_path)]
            + ["--max-seconds", str(opts.kill_after[1] + 30)],
            log,
        )
        if not producer.next_message(60).get("ready"):
            producer.kill()
            raise RuntimeError(f"the ledger producer did not start (see {log})")
        busy, samples = sample_fsync(redis.port, delay)
        redis.kill()
        result = producer.next_message(60)["result"]
        producer.wait()
        ledger = ledger_path.read_text().split()
        redis.start()  # same port and directory: Redis loads the AOF it had written
        assert redis.client is not None
        lost, waiting = lost_acks(redis.client, ledger)
    finally:
        redis.stop()
    tail = bool(lost) and lost == ledger[len(ledger) - len(lost) :]
    log_text = (directory / "redis-server.log").read_text(errors="replace")
    row = {
        "policy": policy,
        "run": index + 1,
        "kill_after_s": round(delay, 3),
        "acked": len(ledger),
        "lost": len(lost),
        "lost_ids": lost[:50],
        "lost_is_tail": tail,
        "waiting_after_restart": waiting,
        "fsync_busy_pct": 100.0 * busy / samples if samples else None,
        # Redis logs this when it let a write wait behind a slow background fsync (everysec)
        "slow_fsync_warnings": log_text.count("Asynchronous AOF fsync is taking too long"),
        "producer_stopped_by": result["stopped_by"],
    }
    shutil.rmtree(directory, ignore_errors=True)
    return row


def measure_loss(opts: argparse.Namespace, workdir: Path, rng: random.Random) -> list[dict]:
    rows = []
    for index in range(opts.runs):
        for policy in opts.policies:  # interleaved, so all see the same machine
            row = loss_run(policy, index, rng.uniform(*opts.kill_after), opts, workdir)
            rows.append(row)
            print(
                f"  loss {policy:8} run {index + 1}/{opts.runs}: killed after "
                f"{row['kill_after_s']:.2f}s, {row['acked']} acked, {row['lost']} lost, "
                f"fsync busy {row['fsync_busy_pct']:.1f}% of the time, "
                f"{row['slow_fsync_warnings']} slow-fsync warnings",
                flush=True,
            )
    return rows


# --------------------------------------------------------------------------- cost


def measure_cost(opts: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    log = workdir / "durability.log"
    timeout = max(120.0, opts.jobs / 20)
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {
        label: {"seq": [], "bulk": []} for label, _ in COST_MODES
    }
    for repeat in range(opts.repeats):
        for label, policy in COST_MODES:
            directory = workdir / f"cost-{policy or 'none'}-{repeat}"
            directory.mkdir()
            redis = RedisServer(directory, opts.redis_server, appendfsync=policy)
            redis.start()
            try:
                for mode in ("seq", "bulk"):
                    redis.flushall()
                    res = enqueue(
                        ECHOMQ, redis, f"cost-{mode}", opts.jobs, mode, opts.batch, log, timeout
                    )
                    assert res is not None
                    samples[label][mode].append(res)
            finally:
                redis.stop()
                shutil.rmtree(directory, ignore_errors=True)
            seq, bulk = samples[label]["seq"][-1], samples[label]["bulk"][-1]
            print(
                f"  cost {label:15} repeat {repeat + 1}/{opts.repeats}: "
                f"seq {seq['rate']:,.0f}/s, bulk {bulk['rate']:,.0f}/s",
                flush=True,
            )
    medians: dict[str, Any] = {}
    for label, modes in samples.items():
        medians[label] = {
            mode: {
                key: statistics.median(r[key] for r in rows)
                for key in ("rate", "redis_cpu_us_per_job")
            }
            for mode, rows in modes.items()
        }
    return {"samples": samples, "median": medians}


# --------------------------------------------------------------------------- report


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    out = [
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['os']}; Redis {m['redis']}; "
        f"Python {m['python']}. Data directory on {m['filesystem']}; fsync of a 300-byte "
        f"append: p50 {m['fsync']['p50_ms']:.2f} ms, p99 {m['fsync']['p99_ms']:.2f} ms.",
        "",
    ]
    load = ", disk kept busy (`--disk-load`)" if data["disk_load"] else ", idle disk"
    if data.get("loss"):
        lo, hi = data["kill_after"]
        out += [
            f"### Acknowledged adds lost to `kill -9`: {data['runs']} runs per policy{load}",
            "",
            f"Sequential `Queue.add`, SIGKILL after a random {lo}-{hi} s, restart on the same "
            "AOF; lost = acknowledged, but job hash missing or not in `wait`. Fsync busy: "
            "share of `INFO` samples (every 2 ms) with a background AOF fsync in progress, "
            "the moments when an everysec server holds acknowledged writes back from the "
            "file. Slow-fsync warnings: runs whose Redis log says a write waited over 2 s.",
            "",
        ]
        rows = []
        for policy in data["policies"]:
            runs = [r for r in data["loss"] if r["policy"] == policy]
            lost = [r["lost"] for r in runs]
            rows.append(
                [
                    f"`appendfsync {policy}`",
                    f"{sum(r['acked'] for r in runs):,}",
                    f"{sum(1 for n in lost if n)} of {len(runs)}",
                    f"{sum(lost):,}",
                    f"{max(lost):,}",
                    ", ".join(str(n) for n in lost),
                    f"{statistics.mean(r['fsync_busy_pct'] or 0.0 for r in runs):.2f}%",
                    f"{sum(1 for r in runs if r['slow_fsync_warnings'])} of {len(runs)}",
                ]
            )
        out.append(
            table(
                [
                    "policy",
                    "acked adds (all runs)",
                    "runs with loss",
                    "lost acks",
                    "most in one run",
                    "lost acks per run",
                    "fsync busy (mean)",
                    "runs with slow-fsync warnings",
                ],
                rows,
            )
        )
        tails = [r for r in data["loss"] if r["lost"]]
        if tails:
            every_tail = all(r["lost_is_tail"] for r in tails)
            out += [
                "",
                "Every loss was the contiguous tail of the ledger (the last adds before the kill)."
                if every_tail
                else "Some losses were not the contiguous tail of the ledger: see the JSON.",
            ]
        out.append("")
    if data.get("cost"):
        med = data["cost"]["median"]
        base = med["no persistence"]
        out += [
            f"### Cost: {data['jobs']:,} jobs, median of {data['repeats']} repeats{load}",
            "",
        ]
        rows = []
        for label, _policy in COST_MODES:
            seq, bulk = med[label]["seq"], med[label]["bulk"]
            rows.append(
                [
                    label,
                    f"{seq['rate']:,.0f} ({seq['rate'] / base['seq']['rate']:.2f}×)",
                    f"{bulk['rate']:,.0f} ({bulk['rate'] / base['bulk']['rate']:.2f}×)",
                    f"{seq['redis_cpu_us_per_job']:.1f}",
                    f"{bulk['redis_cpu_us_per_job']:.1f}",
                ]
            )
        out.append(
            table(
                [
                    "persistence",
                    "sequential adds/s (× none)",
                    f"bulk adds/s, batches of {data['batch']} (× none)",
                    "Redis CPU µs/add, seq",
                    "Redis CPU µs/add, bulk",
                ],
                rows,
            )
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    opts.policies = [name.strip() for name in opts.policies.split(",") if name.strip()]
    unknown = set(opts.policies) - set(POLICIES)
    if unknown:
        sys.exit(f"unknown --policies {sorted(unknown)}; known: {', '.join(POLICIES)}")
    seed = opts.seed if opts.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    workdir = Path(tempfile.mkdtemp(prefix="echomq-durability-"))
    print(f"logs and redis dirs: {workdir}; seed {seed}", flush=True)
    if not opts.no_setup:
        setup(ECHOMQ, workdir / "setup-echomq.log")

    probe = RedisServer(workdir, opts.redis_server)
    probe.start()
    try:
        env = machine(probe)
    finally:
        probe.stop()
    env.pop("node", None)
    env["filesystem"] = filesystem(workdir)
    env["fsync"] = fsync_probe(workdir)

    data: dict[str, Any] = {
        "command": " ".join(
            [Path(sys.argv[0]).as_posix(), *(sys.argv[1:] if argv is None else argv)]
        ),
        "seed": seed,
        "machine": env,
        "runs": opts.runs,
        "kill_after": list(opts.kill_after),
        "disk_load": opts.disk_load,
        "policies": opts.policies,
        "jobs": opts.jobs,
        "batch": opts.batch,
        "repeats": opts.repeats,
        "logs": str(workdir),
    }
    with disk_load(workdir, opts.disk_load):
        if not opts.skip_loss:
            data["loss"] = measure_loss(opts, workdir, rng)
        if not opts.skip_cost:
            data["cost"] = measure_cost(opts, workdir)
    text = render(data)
    publish(text, data, opts.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
