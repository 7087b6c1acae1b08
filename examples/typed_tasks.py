"""Typed tasks: enqueue calls of typed functions, run them in a worker, read typed results.

    python examples/typed_tasks.py [redis://localhost:6379/0]

Without a URL it uses echomq's connection rule (``echomq.default_redis_url()``):
``$ECHOMQ_REDIS_URL``, else the embedded Redis that ``echomq demo`` started.

``mypy --strict`` accepts this program (tests/test_tasks_example.py checks it): the arguments of
``aenqueue`` are checked against each function's parameters, and ``aresult`` returns the
function's return type (the awaited one for an ``async def``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys

import echomq


@dataclasses.dataclass
class Receipt:
    to: str
    words: int


@echomq.task(queue="typed-example", attempts=2)
async def welcome(to: str, name: str = "there") -> Receipt:
    """Greet someone; the receipt says how many words their name has."""
    return Receipt(to=to, words=len(name.split()))


@echomq.task(queue="typed-example", name="shout")
def shout(text: str) -> str:
    """A plain ``def`` task: the worker runs it in its thread pool."""
    return text.upper()


async def main(url: str) -> None:
    echomq.set_default_connection(url)
    job = await welcome.aenqueue("ada@example.com", name="Ada Lovelace")
    loud = await shout.using(priority=1).aenqueue("hello")
    async with echomq.Worker.for_tasks([welcome, shout], concurrency=2):
        receipt: Receipt = await welcome.aresult(job, timeout=10)
        text: str = await shout.aresult(loud, timeout=10)
    plain: str = shout("called directly")
    print(f"{receipt.to}: {receipt.words} words")
    print(f"{text}; {plain}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else echomq.default_redis_url()))
