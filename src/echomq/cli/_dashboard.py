"""``echomq dashboard``: serve the web dashboard (:mod:`echomq.dashboard`) with uvicorn.

It binds 127.0.0.1:8765 unless told otherwise. ``--auth user:password`` and ``--token T``
(or, kept out of the process list, the environment variables ``ECHOMQ_DASHBOARD_AUTH`` and
``ECHOMQ_DASHBOARD_TOKEN``) require authentication; ``--read-only`` hides and refuses every
action. Binding anywhere but loopback without authentication prints a warning.
``--metrics-groups N`` sets how many of each queue's busiest groups ``/metrics`` exports
(default 20; 0: no group series).

Signals: SIGTERM or SIGINT stops the server (uvicorn's handlers); exit code 0. A port that
cannot be bound, a bad ``--auth``, ``--token``, ``--queue``, ``--metrics-groups`` or
``--prefix`` exits 2, checked
(and the port bound) before the URL is resolved, so no embedded server is started for nothing.
Needs ``pip install 'echomq[dashboard]'``.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import sys

from .._ops.prometheus import DEFAULT_GROUP_LIMIT
from ..errors import InvalidQueueNameError
from ._connect import check_names, listen_options, resolve
from ._errors import EXIT_OK, EXIT_USAGE, CliError
from ._metrics import nonnegative_int

DEFAULT_PORT = 8765
AUTH_ENV = "ECHOMQ_DASHBOARD_AUTH"
TOKEN_ENV = "ECHOMQ_DASHBOARD_TOKEN"


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``dashboard`` subcommand."""
    parser = subparsers.add_parser(
        "dashboard",
        parents=parents,
        help="serve the web dashboard of the queues under a prefix",
        description="Serve the web dashboard (queues, jobs, actions, /metrics) for the queues "
        "under --prefix. Stops on SIGTERM or SIGINT.",
    )
    listen_options(parser, DEFAULT_PORT)
    parser.add_argument(
        "--read-only", action="store_true", help="hide and refuse every action (retry, remove...)"
    )
    parser.add_argument(
        "--queue",
        dest="queues",
        action="append",
        metavar="NAME",
        help="show only this queue (repeat for more); default: every queue found with SCAN",
    )
    parser.add_argument(
        "--auth",
        metavar="USER:PASSWORD",
        default=os.environ.get(AUTH_ENV),
        help=f"require HTTP basic authentication (or set {AUTH_ENV})",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help=f"require a bearer token, or ?token= once in a browser (or set {TOKEN_ENV})",
    )
    parser.add_argument(
        "--metrics-groups",
        type=nonnegative_int,
        default=DEFAULT_GROUP_LIMIT,
        metavar="N",
        help="/metrics exports the jobs of each queue's N groups with the most waiting jobs "
        f"(default {DEFAULT_GROUP_LIMIT}; 0: no group series)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The ``dashboard`` subcommand: serve until SIGTERM or SIGINT."""
    try:
        import uvicorn

        from ..dashboard import create_app
    except ImportError as exc:
        raise CliError(
            f"the dashboard needs its extra: pip install 'echomq[dashboard]' ({exc})", EXIT_USAGE
        ) from exc
    _check(args)
    sock = _bind(args.host, args.port)
    try:
        url = resolve(args.url, args.durability).url
        app = create_app(
            connection=url,
            prefix=args.prefix,
            read_only=args.read_only,
            auth=args.auth,
            token=args.token,
            queues=args.queues,
            metrics_groups=args.metrics_groups,
        )
    except ValueError as exc:
        sock.close()
        raise CliError(str(exc), EXIT_USAGE) from exc
    except BaseException:
        sock.close()
        raise
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    mode = " read-only" if args.read_only else ""
    print(f"serving http://{shown}:{port}/ (prefix {args.prefix!r}{mode})", flush=True)
    if not (args.auth or args.token) and not _loopback(host):
        print(
            f"warning: {host} is reachable from other machines and no --auth or --token is set",
            file=sys.stderr,
            flush=True,
        )
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)

    def stop(signum: int, frame: object) -> None:
        server.should_exit = True

    # Until uvicorn installs its own handlers (and after it restores these ones and raises the
    # signal again), a SIGTERM or SIGINT asks the server to stop instead of killing the process,
    # so the command always ends with its own exit code.
    previous = {sig: signal.signal(sig, stop) for sig in _SIGNALS}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped", file=sys.stderr, flush=True)
    return EXIT_OK


_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _check(args: argparse.Namespace) -> None:
    """Refuse a bad ``--prefix``, ``--queue``, ``--auth`` or ``--token`` before anything starts
    (with the checks ``create_app`` makes)."""
    from ..dashboard._security import Access

    check_names([], args.prefix)
    try:
        check_names(args.queues or [], args.prefix)
    except InvalidQueueNameError as exc:
        raise CliError(f"--queue takes queue names without ':': {exc}", EXIT_USAGE) from None
    try:
        Access.build(args.read_only, args.auth, args.token)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CliError(f"cannot listen on {host}:{port}: {exc}", EXIT_USAGE) from exc
    sock.listen(2048)  # connections wait in the backlog until the server accepts them
    return sock


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
