"""Test mode that behaves like production: a real Redis, real Workers, no fakes.

The pytest plugin (:mod:`echomq.testing.plugin`, loaded through the ``pytest11`` entry point
when echomq is installed) gives fixtures:

- ``echomq_redis`` (session): a private ``redis-server`` on a free loopback port (the system
  binary, else the one of ``echomq[embedded]``), started the first time a test asks for it.
- ``echomq_url`` (session): its URL.
- ``echomq_queue``: an :class:`echomq.Queue` with a name no other test uses, obliterated
  after the test.

And helpers for any test, with or without the fixtures:

- :func:`run_until_drained`: run a real :class:`~echomq.Worker` until the queue is empty.
- :func:`assert_enqueued`: assert that a job waits in a queue.

Install with ``pip install 'echomq[testing]'`` (pytest and pytest-asyncio).
"""

from ._helpers import assert_enqueued, run_until_drained

__all__ = ["assert_enqueued", "run_until_drained"]
