"""``echomq server status|start|stop|path``: the private embedded Redis the CLI falls back to.

The server (see :func:`echomq.embedded.ensure_embedded_server`) outlives every command; these
actions show where its data is and how big it is, start it, and stop it. ``stop`` refuses while
workers are connected (their connections are recognised by the client name workers set, as
``Queue.get_workers`` does) unless ``--force``. The data directory is ``$ECHOMQ_DATA_DIR``, else
``$XDG_DATA_HOME/echomq``, else ``~/.local/share/echomq``; ``--url`` does not apply.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import re
from collections import Counter
from collections.abc import Iterable

import redis
import redis.exceptions

from ..embedded import (
    EmbeddedServerStatus,
    embedded_server_status,
    ensure_embedded_server,
    resolve_durability,
    stop_embedded_server,
)
from ..errors import EmbeddedRedisError
from ._connect import DURABILITY_HELP, connection_options
from ._errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError
from ._format import dumps

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``server`` subcommand and its actions.

    ``--durability`` is explained here in full (every other command's help points here); the
    actions that cannot start the server accept it, as every command does, without showing it.
    """
    del parents  # the server's own, with the whole help of --durability
    parents = [connection_options(DURABILITY_HELP)]
    quiet = [connection_options(argparse.SUPPRESS)]
    parser = subparsers.add_parser(
        "server",
        parents=parents,
        help="status, start, stop, reset or locate the embedded Redis",
        description="Manage the private embedded Redis that commands use when neither --url "
        "nor ECHOMQ_REDIS_URL is given. Its data directory is $ECHOMQ_DATA_DIR, else "
        "$XDG_DATA_HOME/echomq, else ~/.local/share/echomq.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", help="print JSON")

    p = actions.add_parser(
        "status",
        parents=[*quiet, json_flag],
        help="whether it runs, its pid, data directory and size",
    )
    p.set_defaults(action_fn=_status)
    p = actions.add_parser("start", parents=parents, help="start it (or reuse the running one)")
    p.set_defaults(action_fn=_start)
    p = actions.add_parser(
        "stop", parents=quiet, help="stop it (refused while workers use it, unless --force)"
    )
    p.add_argument("--force", action="store_true", help="stop it even while workers are connected")
    p.set_defaults(action_fn=_stop)
    p = actions.add_parser(
        "reset",
        parents=parents,
        help="delete every queue and job it holds (asks for --yes; refused while workers use it)",
    )
    p.add_argument("--yes", action="store_true", help="really delete everything it holds")
    p.add_argument("--force", action="store_true", help="reset it even while workers are connected")
    p.set_defaults(action_fn=_reset)
    p = actions.add_parser("path", parents=quiet, help="print its data directory")
    p.set_defaults(action_fn=_path)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The ``server`` subcommand."""
    if args.url is not None:
        raise CliError(
            "echomq server manages the embedded Redis only; --url does not apply", EXIT_USAGE
        )
    code: int = args.action_fn(args)
    return code


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _print_status(status: EmbeddedServerStatus) -> None:
    running = f"{status.state} (pid {status.pid})" if status.pid else status.state
    rows = [
        ("state", running),
        ("data dir", str(status.data_dir)),
        ("size", f"{_size(status.size)} ({status.size} bytes)"),
        ("url", status.url),
        ("log", str(status.log_path)),
    ]
    for label, value in rows:
        print(f"{label.ljust(8)}  {value}")


def _status(args: argparse.Namespace) -> int:
    status = embedded_server_status()
    if args.json:
        print(dumps(status))
        return EXIT_OK
    _print_status(status)
    return EXIT_OK


def _start(args: argparse.Namespace) -> int:
    policy = resolve_durability(args.durability)
    try:
        ensure_embedded_server(durability=policy)
    except EmbeddedRedisError as exc:
        raise CliError(f"the embedded Redis cannot run: {exc}", EXIT_USAGE) from exc
    _print_status(embedded_server_status())
    return EXIT_OK


def _path(args: argparse.Namespace) -> int:
    print(embedded_server_status().data_dir)
    return EXIT_OK


def worker_queue(client_name: str) -> tuple[str, str] | None:
    """The ``(prefix, queue)`` of a worker connection's client name, else ``None``.

    Workers (echomq's and BullMQ's) name their connections ``<prefix>:<base64 queue>`` or
    ``<prefix>:<base64 queue>:w:<worker name>``; QueueEvents readers add ``:qe`` and are not
    workers.
    """
    for i, char in enumerate(client_name):
        if char != ":" or i == 0:
            continue
        prefix, rest = client_name[:i], client_name[i + 1 :]
        encoded, sep, _worker = rest.partition(":w:")
        if not sep and ":" in rest:
            continue
        if not _BASE64.fullmatch(encoded):
            continue
        try:
            queue = base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue
        if queue and base64.b64encode(queue.encode()).decode() == encoded:
            return prefix, queue
    return None


def worker_connections(names: Iterable[str]) -> Counter[tuple[str, str]]:
    """How many worker connections each ``(prefix, queue)`` has among these client names."""
    found: Counter[tuple[str, str]] = Counter()
    for name in names:
        owner = worker_queue(name) if name else None
        if owner is not None:
            found[owner] += 1
    return found


def _connected_workers(url: str) -> Counter[tuple[str, str]]:
    client = redis.Redis.from_url(url, socket_timeout=5.0, decode_responses=True)
    try:
        clients = client.client_list()
    finally:
        client.close()
    return worker_connections(str(c.get("name", "")) for c in clients)


def _refuse_while_workers(url: str, pid: int | None, doing: str, force: bool) -> None:
    """Raise unless no worker is connected to the server at ``url`` (or ``force``)."""
    try:
        workers = _connected_workers(url)
    except redis.exceptions.RedisError as exc:
        if not force:
            raise CliError(
                f"cannot ask the embedded Redis which clients it has ({exc}); "
                "pass --force to go on anyway",
                EXIT_FAILURE,
            ) from exc
        workers = Counter()
    if workers and not force:
        used = ", ".join(
            f"queue {queue!r} (prefix {prefix!r}): {n}"
            for (prefix, queue), n in sorted(workers.items())
        )
        raise CliError(
            f"not {doing} the embedded Redis (pid {pid}): workers are connected to it "
            f"[{used}]; stop them first, or pass --force (their jobs stay active until a worker "
            "recovers them as stalled)",
            EXIT_FAILURE,
        )


def _reset(args: argparse.Namespace) -> int:
    if not args.yes:
        raise CliError(
            "echomq server reset deletes every queue and job the embedded Redis holds; "
            "run it again with --yes to do so",
            EXIT_USAGE,
        )
    status = embedded_server_status()
    if status.state != "stopped":
        _refuse_while_workers(status.url, status.pid, "resetting", args.force)
    try:
        url = ensure_embedded_server(durability=resolve_durability(args.durability))
    except EmbeddedRedisError as exc:
        raise CliError(f"the embedded Redis cannot run: {exc}", EXIT_USAGE) from exc
    # Our own private server: emptying it whole is what was asked.
    client = redis.Redis.from_url(url, socket_timeout=30.0)
    try:
        client.flushall()
        client.bgrewriteaof()  # the append-only file shrinks to the empty data set
    finally:
        client.close()
    print(f"reset the embedded Redis in {embedded_server_status().data_dir}: it holds nothing now")
    return EXIT_OK


def _stop(args: argparse.Namespace) -> int:
    status = embedded_server_status()
    if status.state == "stopped":
        print(f"the embedded Redis in {status.data_dir} is not running")
        return EXIT_OK
    _refuse_while_workers(status.url, status.pid, "stopping", args.force)
    stopped = stop_embedded_server(status.data_dir)
    if stopped:
        print(
            f"stopped the embedded Redis (pid {status.pid}); its data stays in "
            f"{status.data_dir} ({_size(status.size)})"
        )
    else:
        print(f"the embedded Redis in {status.data_dir} is not running")
    return EXIT_OK
