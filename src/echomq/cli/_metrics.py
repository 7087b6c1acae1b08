"""``echomq metrics [--host H] [--port P] [--groups N]``: serve ``/metrics`` for every queue
under a prefix.

Each scrape finds the queues with ``SCAN`` (as ``echomq queues`` does) and answers the text of
:meth:`Queue.export_prometheus_metrics` for all of them, each family written once, followed by
the group series of each queue's ``--groups N`` busiest groups (default 20; 0: none, and the
text is BullMQ's families alone) (docs/operations.md#prometheus). The server is the standard
library's threading HTTP server; each scrape opens one Redis connection and closes it. Any
other path answers 404; a scrape while Redis is unreachable answers 503.

Signals: SIGTERM or SIGINT stops the server; exit code 0. A port that cannot be bound, or a
negative ``--groups``, exits 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import redis.exceptions

from .._discovery import prometheus_text
from .._ops.prometheus import DEFAULT_GROUP_LIMIT
from .._redis import topology
from ..queue import client_from_url
from ._connect import check_names, listen_options, resolve
from ._errors import EXIT_OK, EXIT_USAGE, CliError

logger = logging.getLogger("echomq.cli")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_PORT = 9464


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``metrics`` subcommand."""
    parser = subparsers.add_parser(
        "metrics",
        parents=parents,
        help="serve Prometheus metrics of every queue under a prefix",
        description="Serve /metrics (Prometheus text, BullMQ's metric names, then the group "
        "series of each queue's busiest groups) for every queue under --prefix, found with SCAN "
        "at each scrape. Stops on SIGTERM or SIGINT.",
    )
    listen_options(parser, DEFAULT_PORT)
    parser.add_argument(
        "--groups",
        type=nonnegative_int,
        default=DEFAULT_GROUP_LIMIT,
        metavar="N",
        help="export the jobs of each queue's N groups with the most waiting jobs "
        f"(echomq_group_jobs) and its number of groups (echomq_groups); default "
        f"{DEFAULT_GROUP_LIMIT}, 0: no group series",
    )
    parser.set_defaults(handler=run)


def nonnegative_int(text: str) -> int:
    """An argparse type: an int >= 0 (``--groups``, ``echomq dashboard --metrics-groups``)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return n


async def collect(url: str, prefix: str, group_limit: int = DEFAULT_GROUP_LIMIT) -> str:
    """The exposition text of every queue under ``prefix``, with the group series of each
    queue's ``group_limit`` busiest groups."""
    client = client_from_url(url)
    try:
        return await prometheus_text(client, prefix, group_limit=group_limit)
    finally:
        await topology.aclose(client)


def _handler(url: str, prefix: str, group_limit: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._answer(404, "not found: try /metrics\n")
                return
            try:
                text = asyncio.run(collect(url, prefix, group_limit))
            except (redis.exceptions.RedisError, OSError) as exc:
                self._answer(503, f"redis unavailable: {exc}\n")
                return
            self._answer(200, text, CONTENT_TYPE)

        def _answer(self, status: int, body: str, ctype: str = "text/plain") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("%s - " + format, self.address_string(), *args)

    return Handler


def run(args: argparse.Namespace) -> int:
    """The ``metrics`` subcommand: serve until SIGTERM or SIGINT."""
    check_names([], args.prefix)
    # Bound before the URL is resolved: a port in use exits 2 without starting a server.
    try:
        server = ThreadingHTTPServer((args.host, args.port), BaseHTTPRequestHandler)
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc}", EXIT_USAGE) from exc
    try:
        url = resolve(args.url, args.durability).url
    except BaseException:
        server.server_close()
        raise
    server.RequestHandlerClass = _handler(url, args.prefix, args.groups)
    server.daemon_threads = True
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _SIGNALS}
    thread = threading.Thread(target=server.serve_forever, name="echomq-metrics", daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    print(f"serving http://{host!s}:{port}/metrics (prefix {args.prefix!r})", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped", file=sys.stderr, flush=True)
    return EXIT_OK


_SIGNALS = (signal.SIGTERM, signal.SIGINT)
