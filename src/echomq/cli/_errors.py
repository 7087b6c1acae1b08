"""The one exception the CLI raises for a user-facing error, with the exit code to use."""

from __future__ import annotations

#: Exit codes: success, an operation that failed, a usage or setup problem (as argparse).
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
#: ``echomq worker`` closed, but a sync processor's thread was still running: its job was
#: handed back to wait and the process exited without waiting for the thread.
EXIT_ABANDONED = 3
#: The reader of stdout went away (``echomq ... | head``): 128 + SIGPIPE, as a process the
#: signal had killed, but without a traceback.
EXIT_BROKEN_PIPE = 141


class CliError(Exception):
    """An error ``main`` prints as ``echomq: error: <message>`` before exiting with ``code``.

    Args:
        message: what went wrong and what to do about it.
        code: the process exit code.
    """

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code
