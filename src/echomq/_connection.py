"""Who owns a Redis client: the caller (never closed by us) or echomq (opened from a URL).

Nothing connects here: redis-py clients connect lazily on their first command.
"""

from __future__ import annotations

import redis
import redis.asyncio

from .errors import ConnectionNotOpenError, ValidationError

AsyncConnection = redis.asyncio.Redis | str
SyncConnection = redis.Redis | str

_SCHEMES = ("redis://", "rediss://", "unix://")


def _check_url(url: str) -> None:
    if not url.startswith(_SCHEMES):
        raise ValidationError(
            f"connection URL {url!r} must start with redis://, rediss:// or unix://"
        )


class AsyncConn:
    """An async client plus whether we must close it."""

    __slots__ = ("_client", "owned", "url")

    def __init__(self, connection: AsyncConnection) -> None:
        if isinstance(connection, str):
            _check_url(connection)
            self._client: redis.asyncio.Redis | None = redis.asyncio.Redis.from_url(connection)
            self.owned = True
            self.url: str | None = connection
        elif isinstance(connection, redis.asyncio.Redis):
            self._client = connection
            self.owned = False
            self.url = None
        else:
            raise ValidationError(
                "connection must be a redis.asyncio.Redis or a redis:// / rediss:// / unix:// URL,"
                f" got {type(connection).__name__}"
            )

    @property
    def client(self) -> redis.asyncio.Redis:
        """The client; raises :class:`ConnectionNotOpenError` once closed."""
        if self._client is None:
            raise ConnectionNotOpenError(
                "this object's connection was closed; use a Queue that is still open, or pass a "
                "redis.asyncio.Redis client you own"
            )
        return self._client

    def new_client(self, **overrides: object) -> redis.asyncio.Redis:
        """A second, independent client to the same server (for blocking commands).

        Args:
            **overrides: connection keyword arguments to change (e.g. ``client_name``).
        """
        client = self.client
        pool = client.connection_pool
        kwargs = {**pool.connection_kwargs, **overrides}
        # from_pool: the new client owns its pool and closes it with itself.
        return redis.asyncio.Redis.from_pool(
            pool.__class__(connection_class=pool.connection_class, **kwargs)
        )

    async def aclose(self) -> None:
        """Close the client if we opened it; forget it either way."""
        client, self._client = self._client, None
        if client is not None and self.owned:
            await client.aclose()


class SyncConn:
    """A sync client plus whether we must close it."""

    __slots__ = ("_client", "owned")

    def __init__(self, connection: SyncConnection) -> None:
        if isinstance(connection, str):
            _check_url(connection)
            self._client: redis.Redis | None = redis.Redis.from_url(connection)
            self.owned = True
        elif isinstance(connection, redis.Redis):
            self._client = connection
            self.owned = False
        else:
            raise ValidationError(
                "connection must be a redis.Redis or a redis:// / rediss:// / unix:// URL,"
                f" got {type(connection).__name__}"
            )

    @property
    def client(self) -> redis.Redis:
        """The client; raises :class:`ConnectionNotOpenError` once closed."""
        if self._client is None:
            raise ConnectionNotOpenError(
                "this object's connection was closed; pass a redis.Redis client you own"
            )
        return self._client

    def close(self) -> None:
        """Close the client if we opened it; forget it either way."""
        client, self._client = self._client, None
        if client is not None and self.owned:
            client.close()
