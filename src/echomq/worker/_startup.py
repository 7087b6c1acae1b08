"""Fail fast at start-up: a worker given ``connect_timeout`` checks that Redis answers before
it starts, and raises a clear error instead of retrying for ever.

Once started, a worker keeps riding out outages (its loops log, back off and retry): the check
is about configuration (a wrong URL, host, port or password), which no retry fixes.
"""

from __future__ import annotations

import asyncio

from redis.exceptions import AuthenticationError, AuthorizationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._connection import AsyncConn
from ..errors import RedisUnavailableError


async def check_reachable(conn: AsyncConn, budget: float, queue: str) -> None:
    """PING Redis within ``budget`` seconds.

    Raises:
        RedisUnavailableError: no answer in time, the connection was refused, the host is
            unknown, or the server refused the credentials (the message says which).
    """
    where = conn.address
    try:
        await asyncio.wait_for(conn.client.ping(), budget)
    except asyncio.TimeoutError:
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: Redis at {where} did not answer within "
            f"connect_timeout={budget:g} s",
            address=where,
        ) from None
    except (AuthenticationError, AuthorizationError) as exc:
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: Redis at {where} refused the "
            f"credentials ({exc}); check the user name and password in the URL",
            address=where,
        ) from exc
    except RedisUnavailableError as exc:
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: {exc}", address=where
        ) from exc
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: cannot reach Redis at {where} ({exc}); "
            "check the host, port and TLS settings of the URL",
            address=where,
        ) from exc
    except ResponseError as exc:  # e.g. NOAUTH: a password is needed
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: Redis at {where} refused PING ({exc}); "
            "check the password in the URL",
            address=where,
        ) from exc
