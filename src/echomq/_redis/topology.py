"""The URL forms of the two topologies beyond one node: Redis Sentinel and Redis Cluster.

Every entry point that takes a URL (``connection=`` of the API, ``client_from_url``, the
CLI's ``--url`` and ``ECHOMQ_REDIS_URL``, the dashboard, the Django backend) reaches them
through ``_redis.connection.client_from_url`` (and its sync twin)::

    redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db][?options]
    rediss+sentinel://...      the same, TLS to the data nodes
    redis+cluster://[user:password@]host:port[,host:port...][?options]
    rediss+cluster://...       the same, TLS

The user and password in the URL are the data nodes'. Options (query parameters):
``sentinel_username`` / ``sentinel_password``, when the Sentinels require other credentials
than the data nodes. A URL is parsed once, here, into a :class:`Topology`; each client is made
with redis-py's own Sentinel and Cluster clients, which find the current master (and follow a
failover) or the slot owners themselves. ``connect_timeout`` bounds each TCP connect (to a
Sentinel, a master or a cluster node).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qsl, unquote, urlencode

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel

from ..errors import ValidationError

if TYPE_CHECKING:
    from ..protocol.keys import QueueKeys

#: Schemes of the topologies beyond one node, and what each means.
SCHEMES: dict[str, tuple[Literal["sentinel", "cluster"], bool]] = {
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
}
#: Query parameters a topology URL accepts.
OPTIONS = ("sentinel_username", "sentinel_password")


@dataclass(frozen=True)
class Topology:
    """A parsed Sentinel or Cluster URL."""

    kind: Literal["sentinel", "cluster"]
    tls: bool
    nodes: tuple[tuple[str, int], ...]  # the Sentinels, or the cluster's startup nodes
    service: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None

    @property
    def address(self) -> str:
        """Where the servers are, for messages (no credentials)."""
        hosts = [f"{host}:{port}" for host, port in self.nodes]
        if self.kind == "sentinel":
            return sentinel_address(str(self.service), hosts)
        return cluster_address(hosts)


def sentinel_address(service: str, sentinels: Iterable[str]) -> str:
    """``service NAME via sentinels h:p,h:p``: how messages name a Sentinel-managed master."""
    return f"service {service} via sentinels {','.join(sentinels) or '(none)'}"


def cluster_address(nodes: Iterable[str]) -> str:
    """``cluster h:p,h:p``: how messages name a cluster (the failing node is in redis-py's
    own message)."""
    return f"cluster {','.join(nodes)}"


def is_topology_url(url: str) -> bool:
    """Whether ``url`` is a Sentinel or Cluster URL."""
    return url.partition("://")[0].lower() in SCHEMES


def parse(url: str) -> Topology:
    """Parse a Sentinel or Cluster URL.

    Raises:
        ValidationError: the URL is malformed, says what is wrong and shows the form.
    """
    scheme, _, rest = url.partition("://")
    kind, tls = SCHEMES[scheme.lower()]
    form = (
        "redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]"
        if kind == "sentinel"
        else "redis+cluster://[user:password@]host:port[,host:port...]"
    )

    def bad(why: str) -> ValidationError:
        return ValidationError(f"connection URL {redact(url)!r}: {why}; expected {form}")

    rest, _, query = rest.partition("?")
    location, _, path = rest.partition("/")
    userinfo, at, hosts = location.rpartition("@")
    if not at:
        userinfo, hosts = "", location
    username = password = None
    if userinfo:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    nodes = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise bad(f"{item.strip() or 'an empty host'!r} is not host:port")
        nodes.append((host.strip("[]"), int(port)))
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise bad(f"unknown option(s) {', '.join(unknown)} (allowed: {', '.join(OPTIONS)})")
    parts = [unquote(p) for p in path.split("/") if p]
    service, db = None, 0
    if kind == "sentinel":
        if not parts:
            raise bad("the service name is missing")
        if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
            raise bad(f"the path /{path} is not /service_name[/db]")
        service, db = parts[0], int(parts[1]) if len(parts) == 2 else 0
    elif parts:
        raise bad("a cluster has no database number or service in its path")
    return Topology(
        kind=kind,
        tls=tls,
        nodes=tuple(nodes),
        service=service,
        db=db,
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_username"),
        sentinel_password=options.get("sentinel_password"),
    )


def redact(url: str) -> str:
    """A topology URL with its passwords (the userinfo's, any ``*password`` option) as ``***``."""
    scheme, _, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    location, slash, path = rest.partition("/")
    userinfo, at, hosts = location.rpartition("@")
    if at and ":" in userinfo:
        location = f"{userinfo.partition(':')[0]}:***@{hosts}"
    text = f"{scheme}://{location}{slash}{path}"
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        hidden = [(k, "***" if "password" in k else v) for k, v in pairs]
        text += "?" + urlencode(hidden, safe="*")
    return text


def node_kwargs(t: Topology, budget: float | None, options: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of a data node's connections: ``options`` with the URL's credentials
    and ``budget`` (a connect timeout) where ``options`` does not set them."""
    kwargs: dict[str, Any] = dict(options)
    if t.username is not None:
        kwargs.setdefault("username", t.username)
    if t.password is not None:
        kwargs.setdefault("password", t.password)
    if budget is not None:
        kwargs.setdefault("socket_connect_timeout", budget)
    return kwargs


def sentinel_kwargs(t: Topology, budget: float | None) -> dict[str, Any]:
    """Keyword arguments of the connections to the Sentinels themselves."""
    kwargs: dict[str, Any] = {}
    if t.sentinel_username is not None:
        kwargs["username"] = t.sentinel_username
    if t.sentinel_password is not None:
        kwargs["password"] = t.sentinel_password
    if budget is not None:
        kwargs["socket_connect_timeout"] = budget
        kwargs["socket_timeout"] = budget  # a Sentinel answers at once, or is not there
    return kwargs


async def aclose(client: Any) -> None:
    """Close an async client echomq made from a URL, and what redis-py opened behind it: a
    Sentinel-managed client's connections to the Sentinels (closing the client closes its
    master connections only)."""
    await client.aclose()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        await sentinel.aclose()


def close(client: Any) -> None:
    """The sync twin of :func:`aclose`; it also disconnects a sync ``RedisCluster``'s node
    pools, which its ``close()`` leaves connected (redis-py 8.1)."""
    nodes = list(getattr(getattr(client, "nodes_manager", None), "nodes_cache", {}).values())
    client.close()
    for node in nodes:
        if node.redis_connection is not None:
            node.redis_connection.connection_pool.disconnect()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        sentinel.close()


# -- Redis Cluster: a queue's keys in one slot ------------------------------------------------

_CLUSTERS = (
    redis.asyncio.cluster.RedisCluster,
    redis.cluster.RedisCluster,
    redis.asyncio.cluster.ClusterPipeline,
    redis.cluster.ClusterPipeline,
)
_CLUSTER_CLASSES: dict[type, bool] = {}


def is_cluster(kind: type) -> bool:
    """Whether clients (or pipelines) of class ``kind`` talk to Redis Cluster (remembered per
    class: an ``isinstance`` against the cluster classes goes through ``typing``, µs a call)."""
    known = _CLUSTER_CLASSES.get(kind)
    if known is None:
        known = _CLUSTER_CLASSES[kind] = issubclass(kind, _CLUSTERS)
    return known


def hash_tag(key: str) -> str | None:
    """The hash tag Redis Cluster hashes ``key`` by: the first non-empty ``{...}``."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    return key[start + 1 : end] if end > start + 1 else None


def has_hash_tag(key: str) -> bool:
    """Whether ``key`` carries a Redis Cluster hash tag (a non-empty ``{...}``)."""
    return hash_tag(key) is not None


def check_cluster_keys(client: object, keys: QueueKeys) -> None:
    """On Redis Cluster, refuse a queue whose keys would spread over several slots."""
    if is_cluster(type(client)) and not has_hash_tag(keys.base):
        raise ValidationError(
            f"queue {keys.name!r} with prefix {keys.prefix!r} has no hash tag, so its keys "
            "would land in different Redis Cluster slots; use a prefix like '{bull}' or a "
            "queue name like '{" + keys.name + "}'"
        )


def check_cluster_flow(client: object, queues: Sequence[QueueKeys]) -> None:
    """On Redis Cluster, refuse a flow whose queues do not all share one hash tag (its
    scripts touch keys of every queue of the flow)."""
    if not is_cluster(type(client)):
        return
    first = queues[0]
    tag = hash_tag(first.base)
    if tag is None:
        raise ValidationError(
            f"queue {first.name!r} (prefix {first.prefix!r}) has no hash tag; on Redis Cluster "
            "every queue of a flow must carry the same one, e.g. prefix '{flows}'"
        )
    for keys in queues:
        if hash_tag(keys.base) != tag:
            raise ValidationError(
                f"queue {keys.name!r} (prefix {keys.prefix!r}) does not share the hash tag "
                f"{{{tag}}} of queue {first.name!r}; on Redis Cluster every queue of a flow "
                "must carry the same hash tag, e.g. prefix '{flows}' for all of them"
            )
