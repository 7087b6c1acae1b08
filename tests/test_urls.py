"""The one check of Redis URLs (``echomq._redis.urls.check_url``), where the library turns a URL
into a client: careless URLs are refused with a ValidationError naming the part that is wrong,
before anything connects; every accepted form still makes a client.

Nothing here reaches a server: a refused URL raises while the client is made, and an accepted
one makes a client that connects only on its first command, which these tests never send (a
sync Redis Cluster client, which connects as it is made, is left out).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import echomq
import echomq.sync
from echomq._redis.topology import aclose, close, is_topology_url
from echomq._redis.urls import check_url

#: URLs a client is made from, one per accepted form.
ACCEPTED = [
    "redis://localhost:6379/0",
    "redis://localhost",
    "redis://",
    "redis://:secret@h:6379/15",
    "redis://user:secret@h:1/2",
    "redis://h:6379/0/",
    "redis://[::1]:6379/0",
    "redis://h:6379?db=3&socket_timeout=2.5",
    "rediss://h:6380/0?ssl_cert_reqs=none",
    "unix:///tmp/redis.sock",
    "unix:///tmp/redis.sock?db=1",
    "unix://:secret@/tmp/redis.sock?db=0",
    "redis+sentinel://h:26379/mymaster",
    "rediss+sentinel://a:b@h:1,h2:2/svc/2?sentinel_password=x",
    "redis+cluster://h:7000,h:7001",
    "rediss+cluster://h:7000",
]

#: Careless URLs and what their refusal must say.
REFUSED = [
    ("redis://127.0.0.1:notaport", "the port 'notaport' is not a number from 1 to 65535"),
    ("redis://127.0.0.1:99999", "the port '99999' is not a number from 1 to 65535"),
    ("redis://h:0", "the port 0 is not a number"),
    ("redis://h:6379/abc", "the database 'abc' (the URL's path) is not a number"),
    ("redis://h/1/2", "the database '1/2' (the URL's path) is not a number"),
    ("redis://h?db=x", "the database 'x' (option db) is not a number"),
    ("redis://h?db=-1", "the database '-1' (option db) is not a number"),
    ("redis://h?socket_timeout=soon", "Invalid value for 'socket_timeout'"),
    ("redis://[::1/0", "the host is not valid"),
    ("unix://", "the socket path is missing"),
    ("unix://tmp/redis.sock", "'tmp' stands where the socket path starts"),
    ("localhost:6379", "must start with redis://, rediss:// or unix:// (one node)"),
    ("localhost:6379", "did you mean redis://localhost:6379?"),
    ("http://x", "must start with redis://"),
    ("", "the connection URL is empty"),
    ("redis+cluster://h:99999", "'h:99999' is not host:port"),
]

Maker = Callable[[str], Any]
MAKERS: dict[str, Maker] = {
    "Queue": lambda url: echomq.Queue("q", connection=url),
    "sync.Queue": lambda url: echomq.sync.Queue("q", connection=url),
    "client_from_url": echomq.client_from_url,
    "sync.client_from_url": echomq.sync.client_from_url,
}


@pytest.mark.parametrize("make", MAKERS.values(), ids=MAKERS.keys())
@pytest.mark.parametrize(("url", "why"), REFUSED)
def test_a_careless_url_is_refused_naming_the_bad_part(make: Maker, url: str, why: str) -> None:
    with pytest.raises(echomq.ValidationError) as raised:
        make(url)
    assert why in str(raised.value)


@pytest.mark.parametrize(
    ("url", "form"),
    [
        ("redis://h:notaport", "expected redis://[[user]:password@]host[:port][/db]"),
        ("rediss://h/abc", "expected rediss://[[user]:password@]host[:port][/db]"),
        ("unix://tmp/redis.sock", "expected unix:///path/to/redis.sock[?db=N]"),
    ],
)
def test_the_refusal_shows_the_form_expected(url: str, form: str) -> None:
    with pytest.raises(echomq.ValidationError, match=r"; expected ") as raised:
        echomq.client_from_url(url)
    assert form in str(raised.value)


def test_the_refusal_masks_the_password() -> None:
    for url in ("redis://app:s3cret@h:bad/0", "redis://app:s3cret@[::1/0"):
        with pytest.raises(echomq.ValidationError) as raised:
            echomq.client_from_url(url)
        assert "s3cret" not in str(raised.value)
        assert "***@" in str(raised.value)


@pytest.mark.parametrize("url", ACCEPTED)
async def test_every_accepted_form_still_makes_a_client(url: str) -> None:
    check_url(url)
    await aclose(echomq.client_from_url(url))
    if not is_topology_url(url) or "cluster" not in url:  # a sync cluster connects at once
        close(echomq.sync.client_from_url(url))
