#!/usr/bin/env python3
"""The dashboard under load: one queue with a million completed jobs, echomq beside bull-board.

    python3 bench/dashboard.py [--jobs 1000000] [--requests 50] [--warmup 5]
                               [--scan-requests 5] [--output FILE]

Runs on the system Python with the standard library only, like bench/run.py. It starts its
own redis-server on a free loopback port (no persistence) and on it:

1. **Layout probe.** A real echomq process (``--python``, default the repository's .venv,
   with ``PYTHONPATH=src``) adds three jobs to a probe queue, completes one, fails one and
   leaves one waiting. Their hash fields are the layout the fill must reproduce; the run
   stops if a filled job's fields differ. Then the database is flushed.
2. **Fill.** ``--jobs`` completed jobs in one queue, written by a Lua script of this file
   (``EVALSHA``, ``--batch`` jobs per call): the job hash ``bull:<q>:<id>`` with the probe's
   fields, and ``ZADD bull:<q>:completed <finishedOn> <id>``; then ``--failed`` failed jobs
   (``failed`` zset, ``failedReason``, ``stacktrace``), ``--waiting`` waiting jobs (``wait``
   list, ``marker``), the ``id`` counter and the ``meta`` hash. The fill time is reported.
3. **Servers.** The echomq dashboard through the real CLI (``python -m echomq.cli dashboard
   --port 0``, uvicorn), and bull-board through ``node tests/interop/node/board.mjs`` (Express,
   bull-board's own default ``validateResponses: false``), both on that Redis and queue.
4. **Requests.** Over HTTP on loopback, from this process, one keep-alive connection per
   server (``http.client``): per page, ``--warmup`` requests, then ``--requests`` sequential
   ones. A sample is the wall time from sending the request to having read the whole body.
   Every answer must be 200 and show the expected jobs. Redis commands per request are the
   ``total_commands_processed`` delta over the measured requests (commands inside Lua
   scripts count) divided by their number.

   echomq pages: the completed tab page 1 and page 20000 (25 jobs a page, so the jobs at
   offset 499 975), one job's page, and the queue list ``/``. bull-board: its JSON API,
   ``/api/queues?activeQueue=Q&status=completed&page=P&jobsPerPage=25`` (the same 25 jobs),
   ``/api/queues/Q/<id>`` and ``/api/queues`` (counts of its configured queues). bull-board is
   given its queue names; echomq finds them with ``SCAN`` over the whole prefix and reuses
   the answer for 10 s, so ``/`` is measured twice: as it comes (the scan of the first
   warm-up request reused, unless 10 s pass) and as ``/?refresh`` (``--scan-requests``
   requests, no warm-up, each a full scan), the price one ``/`` request pays every 10 s.
   A state tab and a job page check their queue with one ``EXISTS`` and never scan.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.redisproc import RedisServer, RespClient
from benchlib.report import publish, table
from run import machine

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
BOARD = REPO / "tests" / "interop" / "node" / "board.mjs"
PREFIX = "bull"
QUEUE = "mail"
PROBE_QUEUE = "layout-probe"
PAGE_SIZE = 25  # the echomq dashboard's page; bull-board is asked for the same
DEEP_PAGE = 20000

# One batch of completed jobs. ARGV: key head ("bull:<q>:"), first id, count, finishedOn of
# the first job (ms), ms between jobs. Writes the job hashes and the completed zset entries.
FILL_COMPLETED = """
local head, first, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t0, step = tonumber(ARGV[4]), tonumber(ARGV[5])
local done = head .. 'completed'
for i = 0, count - 1 do
  local id = string.format('%d', first + i)
  local added = t0 + i * step - 40
  local finished = string.format('%d', added + 40)
  redis.call('HSET', head .. id,
    'name', 'send-receipt',
    'data', '{"to":"customer' .. id .. '@example.com","order":' .. id .. ',"template":"receipt"}',
    'opts', '{"attempts":3,"backoff":{"type":"exponential","delay":1000}}',
    'timestamp', string.format('%d', added),
    'delay', '0',
    'priority', '0',
    'processedOn', string.format('%d', added + 12),
    'ats', '1',
    'atm', '1',
    'returnvalue', '{"messageId":"m-' .. id .. '","accepted":true}',
    'finishedOn', finished)
  redis.call('ZADD', done, finished, id)
end
return count
"""

STACK = (
    '["Traceback (most recent call last):\\n  File \\"app/mail.py\\", line 42, in send\\n'
    '    raise SmtpError(reply)\\nSmtpError: 451 4.7.1 try again later"]'
)

# The probe: one completed, one failed and one waiting job, made by echomq itself.
PROBE = """
import asyncio, sys
import echomq
import redis.asyncio as aioredis

async def main(url, name):
    conn = aioredis.Redis.from_url(url)
    queue = echomq.Queue(name, connection=conn)
    await queue.add("ok", {"n": 1})
    await queue.add("bad", {"n": 2}, attempts=1)
    finished = asyncio.Event()
    seen = []

    async def process(job):
        seen.append(job.id)
        if len(seen) == 2:
            finished.set()
        if job.name == "bad":
            raise RuntimeError("probe failure")
        return {"ok": True}

    worker = echomq.Worker(name, process, connection=url)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(finished.wait(), 30)
    while (await queue.get_job_counts("completed", "failed")) != {"completed": 1, "failed": 1}:
        await asyncio.sleep(0.05)
    await worker.close()
    await task
    await queue.add("waits", {"n": 3})
    await queue.aclose()
    await conn.aclose()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=1_000_000, help="completed jobs (1000000)")
    p.add_argument("--requests", type=int, default=50, help="measured requests per page (50)")
    p.add_argument("--warmup", type=int, default=5, help="unmeasured requests first (5)")
    p.add_argument(
        "--scan-requests",
        type=int,
        default=5,
        help="echomq /?refresh requests, each a full SCAN (5; 0: skip)",
    )
    p.add_argument("--batch", type=int, default=10_000, help="jobs per fill EVAL (10000)")
    p.add_argument("--failed", type=int, default=7, help="failed jobs besides (7)")
    p.add_argument("--waiting", type=int, default=5, help="waiting jobs besides (5)")
    p.add_argument(
        "--python",
        default=str(REPO / ".venv" / "bin" / "python"),
        help="Python with echomq's dashboard extra; src/ goes on its PYTHONPATH (.venv)",
    )
    p.add_argument("--node", default="node", help="node binary for bull-board")
    p.add_argument("--redis-server", default="redis-server", help="redis-server binary")
    p.add_argument("--output", type=Path, help="write FILE.md (tables) and FILE.json (all data)")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- data


def hash_fields(client: RespClient, key: str) -> list[str]:
    fields = client.call("HKEYS", key)
    assert isinstance(fields, list)
    return sorted(str(f) for f in fields)


def probe_layout(redis: RedisServer, opts: argparse.Namespace, log: Path) -> dict[str, list[str]]:
    """The hash fields of a completed, a failed and a waiting job made by echomq itself."""
    client = redis.client
    assert client is not None
    with open(log, "ab") as err:
        subprocess.run(
            [opts.python, "-c", PROBE, redis.url, PROBE_QUEUE],
            env=_echomq_env(),
            stdout=err,
            stderr=err,
            timeout=120,
            check=True,
        )
    base = f"{PREFIX}:{PROBE_QUEUE}"
    done, failed = (
        client.call("ZRANGE", f"{base}:completed", "0", "-1"),
        client.call("ZRANGE", f"{base}:failed", "0", "-1"),
    )
    waiting = client.call("LRANGE", f"{base}:wait", "0", "-1")
    assert isinstance(done, list) and isinstance(failed, list) and isinstance(waiting, list)
    layout = {
        "completed": hash_fields(client, f"{base}:{done[0]}"),
        "failed": hash_fields(client, f"{base}:{failed[0]}"),
        "waiting": hash_fields(client, f"{base}:{waiting[0]}"),
        "meta": hash_fields(client, f"{base}:meta"),
    }
    redis.flushall()
    return layout


def fill(client: RespClient, opts: argparse.Namespace) -> dict[str, Any]:
    """Write the queue: ``--jobs`` completed, then the failed and waiting ones; time it."""
    head = f"{PREFIX}:{QUEUE}:"
    now = int(time.time() * 1000)
    step = 7  # ms between finishes: a million jobs over about two hours, the last just now
    t0_ms = now - opts.jobs * step
    sha = client.call("SCRIPT", "LOAD", FILL_COMPLETED)
    assert isinstance(sha, str)
    started = time.perf_counter()
    for first in range(1, opts.jobs + 1, opts.batch):
        count = min(opts.batch, opts.jobs + 1 - first)
        t0 = t0_ms + (first - 1) * step
        client.call("EVALSHA", sha, "0", head, str(first), str(count), str(t0), str(step))
    completed_s = time.perf_counter() - started
    next_id = opts.jobs + 1
    commands: list[tuple[str, ...]] = []
    for i in range(opts.failed):
        job_id, added = str(next_id), now - 60_000 + i * 1000
        next_id += 1
        commands.append(
            ("HSET", head + job_id)
            + ("name", "send-receipt", "data", f'{{"to":"bounce{i}@example.com","order":{i}}}')
            + ("opts", '{"attempts":3,"backoff":{"type":"exponential","delay":1000}}')
            + ("timestamp", str(added), "delay", "0", "priority", "0")
            + ("processedOn", str(added + 9000), "ats", "3", "atm", "3")
            + ("failedReason", "451 4.7.1 try again later", "stacktrace", STACK)
            + ("finishedOn", str(added + 9050))
        )
        commands.append(("ZADD", head + "failed", str(added + 9050), job_id))
    for i in range(opts.waiting):
        job_id, added = str(next_id), now - 500 + i * 100
        next_id += 1
        commands.append(
            ("HSET", head + job_id)
            + ("name", "send-receipt", "data", f'{{"to":"new{i}@example.com","order":{i}}}')
            + ("opts", '{"attempts":3,"backoff":{"type":"exponential","delay":1000}}')
            + ("timestamp", str(added), "delay", "0", "priority", "0")
        )
        commands.append(("LPUSH", head + "wait", job_id))
    if opts.waiting:
        commands.append(("ZADD", head + "marker", "0", "0"))
    commands.append(("SET", head + "id", str(next_id - 1)))
    commands.append(("HSET", head + "meta", "opts.maxLenEvents", "10000"))
    client.pipeline(commands)
    total_s = time.perf_counter() - started
    info = client.info()
    return {
        "completed_s": completed_s,
        "total_s": total_s,
        "jobs_per_s": opts.jobs / completed_s,
        "used_memory_human": info["used_memory_human"],
        "keys": int(str(client.call("DBSIZE"))),
    }


def check_layout(
    client: RespClient, layout: dict[str, list[str]], opts: argparse.Namespace
) -> None:
    """The filled queue has what echomq itself writes, or the run stops here."""
    head = f"{PREFIX}:{QUEUE}:"
    n = opts.jobs
    keys = [("completed", f"{head}{i}") for i in (1, n // 2, n)] + [("meta", f"{head}meta")]
    if opts.failed:
        keys.append(("failed", f"{head}{n + 1}"))
    if opts.waiting:
        keys.append(("waiting", f"{head}{n + opts.failed + 1}"))
    problems = []
    for kind, key in keys:
        got = hash_fields(client, key)
        if got != layout[kind]:
            problems.append(f"{key}: fields {got}, echomq writes {layout[kind]}")
    counts = client.pipeline(
        [("ZCARD", head + "completed"), ("ZCARD", head + "failed"), ("LLEN", head + "wait")]
    )
    if counts != [opts.jobs, opts.failed, opts.waiting]:
        problems.append(f"completed/failed/wait sizes {counts}")
    if problems:
        raise SystemExit(
            "the filled queue is not laid out as echomq lays it out:\n" + "\n".join(problems)
        )


# --------------------------------------------------------------------------- servers


def _echomq_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    return env


def _first_line(proc: subprocess.Popen[str], what: str, log: Path, timeout: float = 60) -> str:
    """The first stdout line of a server (its address), or stop the run."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip():
            return line.strip()
        if proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"{what} did not start (see {log})")


def start_echomq(
    redis: RedisServer, opts: argparse.Namespace, log: Path
) -> tuple[Any, int, list[str]]:
    cmd = [opts.python, "-m", "echomq.cli", "dashboard", "--url", redis.url, "--port", "0"]
    err = open(log, "ab")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=_echomq_env())
    line = _first_line(proc, "the echomq dashboard", log)
    if not line.startswith("serving http://"):
        proc.kill()
        raise SystemExit(f"unexpected echomq dashboard output {line!r}")
    port = int(line.split()[1].rstrip("/").rsplit(":", 1)[1])
    return proc, port, cmd


def start_board(
    redis: RedisServer, opts: argparse.Namespace, log: Path
) -> tuple[Any, int, dict[str, Any]]:
    config = {"url": redis.url, "queues": [QUEUE], "prefix": PREFIX, "validateResponses": False}
    err = open(log, "ab")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(
        [opts.node, str(BOARD), json.dumps(config)], stdout=subprocess.PIPE, stderr=err, text=True
    )
    msg = json.loads(_first_line(proc, "bull-board", log))
    if msg.get("event") != "listening":
        proc.kill()
        raise SystemExit(f"bull-board did not start: {msg}")
    return proc, int(msg["port"]), msg["versions"]


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- requests


class Client:
    """One keep-alive HTTP/1.1 connection to one server.

    A connection idle for over a second is replaced before the next request (outside the
    timed part): both servers close idle connections after 5 s, and a slow page of the other
    server can take longer than that.
    """

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        self.used = 0.0

    def get(self, path: str) -> tuple[float, int, bytes]:
        """(ms from sending the request to the end of the body, status, body)."""
        if time.monotonic() - self.used > 1.0:
            self.conn.close()
            self.conn.connect()
        t0 = time.perf_counter()
        self.conn.request("GET", path)
        response = self.conn.getresponse()
        body = response.read()
        ms = (time.perf_counter() - t0) * 1000
        self.used = time.monotonic()
        return ms, response.status, body

    def close(self) -> None:
        self.conn.close()


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "p50_ms": s[math.ceil(0.50 * len(s)) - 1],
        "p95_ms": s[math.ceil(0.95 * len(s)) - 1],
        "max_ms": s[-1],
        "mean_ms": sum(s) / len(s),
    }


def measure(
    client: Client, redis: RespClient, path: str, check: Any, warmup: int, requests: int
) -> dict[str, Any]:
    """``warmup`` requests, then ``requests`` timed ones; each answer is checked."""
    for _ in range(warmup):
        _ok(path, *client.get(path)[1:], check)
    before = int(redis.info()["total_commands_processed"])
    samples = []
    size = 0
    for _ in range(requests):
        ms, status, body = client.get(path)
        _ok(path, status, body, check)
        samples.append(ms)
        size = len(body)
    after = int(redis.info()["total_commands_processed"])
    # the INFO call itself is one command
    cmds = (after - before - 1) / requests
    return {"path": path, "samples_ms": samples, "bytes": size, "redis_cmds": cmds} | percentiles(
        samples
    )


def _ok(path: str, status: int, body: bytes, check: Any) -> None:
    if status != 200:
        raise SystemExit(f"GET {path}: HTTP {status}: {body[:300]!r}")
    problem = check(body)
    if problem:
        raise SystemExit(f"GET {path}: {problem}")


def html_jobs(first: int, count: int) -> Any:
    """An echomq page check: it lists jobs ``first`` down to ``first - count + 1``."""

    def check(body: bytes) -> str | None:
        text = body.decode()
        missing = [i for i in range(first, first - count, -1) if f'data-job="{i}"' not in text]
        return f"jobs {missing[:5]} missing from the page" if missing else None

    return check


def json_jobs(first: int, count: int, total: int) -> Any:
    """A bull-board check: its active queue lists the same jobs and counts ``total``."""

    def check(body: bytes) -> str | None:
        queue = json.loads(body)["queues"][0]
        ids = [j["id"] for j in queue["jobs"]]
        want = [str(i) for i in range(first, first - count, -1)]
        if ids != want or queue["counts"]["completed"] != total:
            return f"jobs {ids[:3]}..., completed {queue['counts']['completed']}"
        return None

    return check


def contains(text: str) -> Any:
    def check(body: bytes) -> str | None:
        return None if text.encode() in body else f"{text!r} not in the answer"

    return check


def run_requests(
    redis: RespClient, echo_port: int, board_port: int, opts: argparse.Namespace
) -> dict[str, Any]:
    n, q = opts.jobs, QUEUE
    deep = min(DEEP_PAGE, math.ceil(n / PAGE_SIZE))  # the last page when there are fewer
    deep_first = n - (deep - 1) * PAGE_SIZE  # newest job of that page (newest first)
    deep_count = min(PAGE_SIZE, deep_first)
    job_id = str(max(1, n // 2))
    email = contains(f"customer{job_id}@example.com")
    echo, board = Client(echo_port), Client(board_port)
    bb = f"/api/queues?activeQueue={q}&status=completed&jobsPerPage={PAGE_SIZE}"
    rows_plan: list[tuple[str, tuple[str, Any], tuple[str, Any] | None]] = [
        ("queue page 1 (completed)",
         (f"/queues/{q}?state=completed&page=1", html_jobs(n, PAGE_SIZE)),
         (f"{bb}&page=1", json_jobs(n, PAGE_SIZE, n))),
        (f"page {deep} (jobs {deep_first - deep_count + 1}-{deep_first})",
         (f"/queues/{q}?state=completed&page={deep}", html_jobs(deep_first, deep_count)),
         (f"{bb}&page={deep}", json_jobs(deep_first, deep_count, n))),
        (f"one job (id {job_id})", (f"/queues/{q}/jobs/{job_id}", email),
         (f"/api/queues/{q}/{job_id}", email)),
        ("queue list", ("/", contains(f">{q}<")), ("/api/queues", contains(f'"name":"{q}"'))),
        ("queue list, rescanned", ("/?refresh", contains(f">{q}<")), None),
    ]  # fmt: skip
    rows = []
    try:
        for label, (e_path, e_check), b_side in rows_plan:
            rescan = e_path.endswith("?refresh")
            warmup, requests = (0, opts.scan_requests) if rescan else (opts.warmup, opts.requests)
            if requests <= 0:
                continue
            row: dict[str, Any] = {"page": label, "bull-board": None}
            sides = [("echomq", echo, e_path, e_check)]
            if b_side:
                sides.append(("bull-board", board, *b_side))
            for side, client, path, check in sides:
                row[side] = r = measure(client, redis, path, check, warmup, requests)
                print(
                    f"  {side:10} {label:38} p50 {r['p50_ms']:8.1f} ms  p95 {r['p95_ms']:8.1f} ms"
                    f"  max {r['max_ms']:8.1f} ms  {r['redis_cmds']:7.1f} Redis cmds",
                    flush=True,
                )
            rows.append(row)
    finally:
        echo.close()
        board.close()
    return {"rows": rows}


# --------------------------------------------------------------------------- report


def _fig(r: dict[str, Any]) -> str:
    return f"{r['p50_ms']:.1f} / {r['p95_ms']:.1f} / {r['max_ms']:.1f}"


def render(data: dict[str, Any]) -> str:
    m, f, v = data["machine"], data["fill"], data["versions"]
    out = [
        f"### {data['jobs']:,} completed jobs, {data['requests']} requests per page",
        "",
        f"Command: `{data['command']}`, at commit {data['commit']}"
        + (
            f" with uncommitted changes in src/ (digest {data['src_digest']})."
            if data["src_changes"]
            else "."
        ),
        "",
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['os']}; Redis {m['redis']}; "
        f"Python {m['python']}; Node {m['node']}. Load average (1 min) "
        f"{data['loadavg_start'][0]:.2f} at the start, {data['loadavg_end'][0]:.2f} at the end. "
        f"bull-board {v['@bull-board/api']} (Express {v['express']}, bullmq {v['bullmq']}).",
        "",
        f"Fill: {data['jobs']:,} completed jobs in {f['completed_s']:.1f} s "
        f"({f['jobs_per_s']:,.0f} jobs/s, Lua in batches of {data['batch']:,}), plus "
        f"{data['failed']} failed and {data['waiting']} waiting; {f['keys']:,} keys, "
        f"Redis memory {f['used_memory_human']}.",
        "",
        f"p50 / p95 / max ms over {data['requests']} sequential requests after "
        f"{data['warmup']} warm-up ones, one keep-alive connection, request sent to body "
        "read; Redis cmds = Redis commands per request.",
        "",
    ]
    rows = []
    for row in data["results"]["rows"]:
        e, b = row["echomq"], row["bull-board"]
        rows.append(
            [
                row["page"],
                f"`{e['path']}`",
                _fig(e),
                f"{e['redis_cmds']:.0f}",
                f"{e['bytes'] / 1024:.1f}",
                *(
                    [_fig(b), f"{b['redis_cmds']:.0f}", f"{b['bytes'] / 1024:.1f}"]
                    if b
                    else ["n/a (no discovery)", "", ""]
                ),
            ]
        )
    out.append(
        table(
            [
                "page",
                "echomq path",
                "echomq ms",
                "Redis cmds",
                "KiB (HTML)",
                "bull-board ms",
                "Redis cmds",
                "KiB (JSON)",
            ],
            rows,
        )
    )
    return "\n".join(out) + "\n"


def _git(*args: str) -> str:
    """A read-only git answer about the measured tree ("" when git is not there)."""
    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
    except OSError:
        return ""
    return done.stdout.strip()


def _digest(root: Path) -> str:
    """A hash of the measured package's files, to tell runs of the same tree apart."""
    sha = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            sha.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()[:12]


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.jobs < PAGE_SIZE:
        sys.exit(f"--jobs must be at least {PAGE_SIZE}")
    workdir = Path(tempfile.mkdtemp(prefix="echomq-dashboard-bench-"))
    log = workdir / "dashboard-bench.log"
    print(f"logs: {workdir}", flush=True)
    load_start = os.getloadavg()
    redis = RedisServer(workdir, opts.redis_server)
    redis.start()
    procs: list[subprocess.Popen[str]] = []
    try:
        client = redis.client
        assert client is not None
        env = machine(redis)
        layout = probe_layout(redis, opts, log)
        print(f"echomq's completed job fields: {', '.join(layout['completed'])}", flush=True)
        print(f"filling {opts.jobs:,} completed jobs", flush=True)
        filled = fill(client, opts)
        check_layout(client, layout, opts)
        print(
            f"  filled in {filled['completed_s']:.1f} s ({filled['jobs_per_s']:,.0f} jobs/s); "
            f"{filled['keys']:,} keys, {filled['used_memory_human']}",
            flush=True,
        )
        echo_proc, echo_port, echo_cmd = start_echomq(redis, opts, log)
        procs.append(echo_proc)
        board_proc, board_port, versions = start_board(redis, opts, log)
        procs.append(board_proc)
        print(f"echomq dashboard on {echo_port}, bull-board on {board_port}", flush=True)
        results = run_requests(client, echo_port, board_port, opts)
    finally:
        for proc in procs:
            stop(proc)
        redis.stop()
    data = {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "src_changes": _git("status", "--porcelain", "src"),
        "src_digest": _digest(REPO / "src" / "echomq"),
        "command": " ".join(
            ["python3", Path(sys.argv[0]).as_posix(), *(sys.argv[1:] if argv is None else argv)]
        ),
        "machine": env,
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "jobs": opts.jobs,
        "failed": opts.failed,
        "waiting": opts.waiting,
        "batch": opts.batch,
        "requests": opts.requests,
        "warmup": opts.warmup,
        "layout": layout,
        "fill": filled,
        "echomq_command": " ".join(echo_cmd),
        "versions": versions,
        "results": results,
    }
    text = render(data)
    publish(text, data, opts.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
