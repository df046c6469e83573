"""Pub/Sub Lite wiring: connector config → the official ``google-cloud-pubsublite`` clients.

The only module that talks to Pub/Sub Lite. Like :mod:`pubsub_connect.io.pubsub` it holds no
Spark code and its config object (:class:`LiteConnection`) is a frozen dataclass of primitives,
so the same code runs on the driver, in a Spark task and in the driver-side process of a Python
data source; clients are built where they are used (a gRPC channel cannot be pickled).

What the Lite pipelines need from the service, and how each is done:

* **Admin** (:func:`topic_partition_count`, :func:`subscription_topic`): the official
  ``AdminClient`` (``GetTopicPartitions``, ``GetSubscription``).
* **Publish one micro-batch partition, all or nothing** (:class:`PartitionPublisher`): one
  ordered ``Publish`` stream of the generated client per Lite partition (see
  :class:`_OrderedPublishStream` for why not the official single-partition publisher), running
  on the client's own process-wide event loop. ``wait`` returns only
  when every message has been acknowledged with an offset and raises :class:`LitePublishError`
  otherwise, so the Spark task and with it the micro-batch fail and are retried: at-least-once.
  Routing is the caller's choice (see :func:`default_router`), which is what makes the
  ``KAFKA`` ordering mode possible. Publisher idempotence (a client id) is deliberately *not*
  used: a micro-batch retried by Spark is a new stream anyway, so at-least-once is the
  guarantee either way.
* **Read an exact offset range** (:func:`read_range`): a ``Subscribe`` stream of the generated
  client, started with an explicit cursor seek at the range's start, granting flow-control
  tokens for no more than the range. The high-level subscriber cannot do this: it always starts
  at the committed cursor and acknowledges through it, while the source keeps its offsets in the
  Spark checkpoint and must be able to replay any planned range.
* **Offsets** (:func:`committed_cursors`, :func:`head_offsets`, :func:`range_bytes`,
  :func:`commit_cursors`): ``CursorService`` and ``TopicStatsService``.

Credentials follow Google's connector: ``gcp.credentials.json`` > ``gcp.credentials.file.path``
> Application Default Credentials, resolved with :class:`pubsub_connect.io.pubsub.Connection`.
With a loopback ``pubsublite.endpoint`` and no explicit credential keys the client connects
anonymously: a local test server cannot verify Google tokens, and real tokens must not be sent
to whatever listens on a local port.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import queue
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pubsub_connect.config import ConfigError, ConnectorConfig
from pubsub_connect.io.pubsub import Connection, PubSubIOError, _one_line

if TYPE_CHECKING:
    from concurrent.futures import Future

log = logging.getLogger(__name__)

#: Largest Lite message (the service rejects bigger ones); a reader's byte allowance is never
#: below it, otherwise such a message could never be delivered.
MAX_MESSAGE_BYTES = int(3.5 * 1024 * 1024)
#: Publish batch limits, as the official publisher's defaults (3 MiB, 1000 messages).
PUBLISH_BATCH_BYTES = 3 * 1024 * 1024
PUBLISH_BATCH_MESSAGES = 1000
#: Messages one task keeps in flight before it waits for acknowledgements (bounds memory).
MAX_IN_FLIGHT_MESSAGES = 20_000
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class LiteIOError(PubSubIOError):
    """A Lite operation failed. ``str(err)`` is one line, safe to print."""


class LitePublishError(LiteIOError):
    """Some messages of a micro-batch were not published; the batch must not be committed."""


class LiteDataLossError(LiteIOError):
    """Messages of a planned range are gone (retention) or a partition went backwards."""


# --------------------------------------------------------------------------------------------
# Connection
# --------------------------------------------------------------------------------------------


def _endpoint_host(endpoint: str) -> str:
    host = endpoint.split("///", 1)[-1]
    if host.startswith("["):  # [::1]:443
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(frozen=True)
class LiteConnection:
    """Project, location, endpoint and credentials of a Lite connector. Primitives only."""

    project: str
    location: str
    endpoint: str | None = None
    credentials_file: str | None = None
    credentials_json: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # the secret must not leak through a dataclass repr
        secret = "********" if self.credentials_json else None
        return (f"LiteConnection(project={self.project!r}, location={self.location!r}, "
                f"endpoint={self.endpoint!r}, credentials_file={self.credentials_file!r}, "
                f"credentials_json={secret!r})")

    __str__ = __repr__

    @classmethod
    def from_connector(cls, config: ConnectorConfig) -> LiteConnection:
        """The ``pubsublite.*`` and credential keys of a Lite connector, validated."""
        location = str(config.get("pubsublite.location")).strip()
        conn = cls(
            project=str(config.get("pubsublite.project")).strip(),
            location=location,
            endpoint=(config.get("pubsublite.endpoint") or "").strip() or None,
            credentials_file=config.get("gcp.credentials.file.path") or None,
            credentials_json=config.get("gcp.credentials.json") or None,
        )
        try:
            conn.region  # noqa: B018 - validates the location
        except ValueError as exc:
            raise ConfigError(f"{config.source}: pubsublite.location={location!r}: {exc}") from None
        return conn

    @property
    def region(self) -> str:
        """``europe-west1`` for the zone ``europe-west1-b`` or the region itself."""
        parts = self.location.split("-")
        if len(parts) == 3 and len(parts[2]) == 1 and all(parts):
            return f"{parts[0]}-{parts[1]}"
        if len(parts) == 2 and all(parts):
            return self.location
        raise ValueError("expected a zone like europe-west1-b or a region like europe-west1")

    @property
    def api_endpoint(self) -> str:
        """``pubsublite.endpoint``, else the regional endpoint the official clients use."""
        return self.endpoint or f"{self.region}-pubsublite.googleapis.com:443"

    @property
    def anonymous(self) -> bool:
        """A loopback endpoint without credential keys: a local (test) server."""
        return (bool(self.endpoint) and _endpoint_host(str(self.endpoint)) in _LOOPBACK_HOSTS
                and not (self.credentials_file or self.credentials_json))

    def secrets(self) -> tuple[str, ...]:
        return (self.credentials_json,) if self.credentials_json else ()

    def credentials(self) -> Any:
        if self.anonymous:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()
        if self.credentials_json or self.credentials_file:
            return Connection(project=self.project, credentials_file=self.credentials_file,
                              credentials_json=self.credentials_json).credentials()
        import google.auth
        from google.auth import exceptions as auth_exceptions

        try:
            creds, _ = google.auth.default()
        except auth_exceptions.DefaultCredentialsError as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(
                f"no Google Cloud credentials found for Pub/Sub Lite project {self.project!r} ({first}): set "
                "gcp.credentials.file.path or gcp.credentials.json, export GOOGLE_APPLICATION_CREDENTIALS, "
                "or run `gcloud auth application-default login`") from None
        return creds

    def client_options(self) -> Any:
        from google.api_core.client_options import ClientOptions

        return ClientOptions(api_endpoint=self.api_endpoint)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the generated ``google.cloud.pubsublite_v1`` clients."""
        return {"credentials": self.credentials(), "client_options": self.client_options()}

    def _path(self, kind: str, name: str) -> str:
        return name if name.startswith("projects/") else \
            f"projects/{self.project}/locations/{self.location}/{kind}/{name}"

    def topic_path(self, topic: str) -> str:
        return self._path("topics", topic)

    def subscription_path(self, subscription: str) -> str:
        return self._path("subscriptions", subscription)


def _fail(what: str, exc: BaseException, conn: LiteConnection,
          kind: type[LiteIOError] = LiteIOError) -> Exception:
    """The one-line error to raise for ``exc``; unusable credentials stay a :class:`ConfigError`."""
    if isinstance(exc, ConfigError):
        return exc
    return kind(f"{what}: {_one_line(exc, conn.secrets())}")


# --------------------------------------------------------------------------------------------
# Admin and offsets (unary RPCs, any process)
# --------------------------------------------------------------------------------------------


def admin_client(conn: LiteConnection) -> Any:
    """The generated ``AdminServiceClient`` (the ``google.cloud.pubsublite`` wrapper around it
    costs seconds of imports in every Spark Python process that plans or reads)."""
    from google.cloud.pubsublite_v1 import AdminServiceClient

    return AdminServiceClient(transport="grpc", **conn.client_kwargs())


def topic_partition_count(conn: LiteConnection, topic_path: str, admin: Any = None) -> int:
    """``GetTopicPartitions``: how many partitions the Lite topic has now."""
    try:
        return int((admin or admin_client(conn)).get_topic_partitions(name=topic_path).partition_count)
    except Exception as exc:
        raise _fail(f"cannot read the partitions of Lite topic {topic_path}", exc, conn) from None


def subscription_topic(conn: LiteConnection, subscription_path: str, admin: Any = None) -> str:
    """The topic a subscription reads (``GetSubscription``)."""
    try:
        return str((admin or admin_client(conn)).get_subscription(name=subscription_path).topic)
    except Exception as exc:
        raise _fail(f"cannot read Lite subscription {subscription_path}", exc, conn) from None


def routing_metadata(**params: str) -> list[tuple[str, str]]:
    """The ``x-goog-request-params`` header the service routes partition streams by (what the
    official ``routing_metadata`` helpers build, without importing the whole client package)."""
    from urllib.parse import urlencode

    return [("x-goog-request-params", urlencode(params))]


class OffsetClient:
    """Cursor and topic-stats look-ups of one subscription (driver side; clients built once)."""

    def __init__(self, conn: LiteConnection, subscription_path: str):
        self.conn = conn
        self.subscription_path = subscription_path
        self._admin: Any = None
        self._cursors: Any = None
        self._stats: Any = None
        self._topic: str | None = None

    @property
    def admin(self) -> Any:
        if self._admin is None:
            self._admin = admin_client(self.conn)
        return self._admin

    @property
    def topic_path(self) -> str:
        if self._topic is None:
            self._topic = subscription_topic(self.conn, self.subscription_path, self.admin)
        return self._topic

    def partition_count(self) -> int:
        return topic_partition_count(self.conn, self.topic_path, self.admin)

    def _cursor_client(self) -> Any:
        if self._cursors is None:
            from google.cloud.pubsublite_v1 import CursorServiceClient

            self._cursors = CursorServiceClient(transport="grpc", **self.conn.client_kwargs())
        return self._cursors

    def _stats_client(self) -> Any:
        if self._stats is None:
            from google.cloud.pubsublite_v1 import TopicStatsServiceClient

            self._stats = TopicStatsServiceClient(transport="grpc", **self.conn.client_kwargs())
        return self._stats

    def committed_cursors(self) -> dict[int, int]:
        """``{partition: committed offset}`` (partitions never committed are left out)."""
        try:
            pager = self._cursor_client().list_partition_cursors(parent=self.subscription_path)
            return {int(pc.partition): int(pc.cursor.offset) for pc in pager}
        except Exception as exc:
            raise _fail(f"cannot list the cursors of {self.subscription_path}", exc, self.conn) from None

    def head_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """``{partition: offset of the next message to be published}``."""
        from google.cloud.pubsublite_v1 import ComputeHeadCursorRequest

        client = self._stats_client()
        heads: dict[int, int] = {}
        for partition in partitions:
            try:
                request = ComputeHeadCursorRequest(topic=self.topic_path, partition=partition)
                response = client.compute_head_cursor(request=request)
            except Exception as exc:
                raise _fail(f"cannot read the head of {self.topic_path} partition {partition}", exc,
                            self.conn) from None
            heads[partition] = int(response.head_cursor.offset)
        return heads

    def earliest_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """``{partition: offset of the oldest retained message}`` (the head when none is left):
        the first message published at or after the epoch (``ComputeTimeCursor``)."""
        from google.cloud.pubsublite_v1 import ComputeTimeCursorRequest, TimeTarget
        from google.protobuf import timestamp_pb2

        partitions = list(partitions)
        client = self._stats_client()
        found: dict[int, int] = {}
        for partition in partitions:
            request = ComputeTimeCursorRequest(topic=self.topic_path, partition=partition,
                                               target=TimeTarget(publish_time=timestamp_pb2.Timestamp(seconds=0)))
            try:
                response = client.compute_time_cursor(request=request)
            except Exception as exc:
                raise _fail(f"cannot find the oldest message of {self.topic_path} partition {partition}", exc,
                            self.conn) from None
            if "cursor" in response:
                found[partition] = int(response.cursor.offset)
        missing = [p for p in partitions if p not in found]
        return {**found, **self.head_offsets(missing)} if missing else found

    def range_bytes(self, partition: int, start: int, end: int) -> int:
        """Bytes of the messages ``[start, end)`` of a partition (``ComputeMessageStats``)."""
        from google.cloud.pubsublite_v1 import ComputeMessageStatsRequest, Cursor

        request = ComputeMessageStatsRequest(topic=self.topic_path, partition=partition,
                                             start_cursor=Cursor(offset=start), end_cursor=Cursor(offset=end))
        try:
            return int(self._stats_client().compute_message_stats(request=request).message_bytes)
        except Exception as exc:
            raise _fail(f"cannot compute the size of {self.topic_path} partition {partition} [{start}, {end})",
                        exc, self.conn) from None

    def close(self) -> None:
        """Close the channels (the object can be used again; clients are rebuilt on demand)."""
        for client in (self._admin, self._cursors, self._stats):
            if client is not None:
                try:
                    client.transport.close()
                except Exception:  # closing must not mask what the caller is doing
                    log.debug("closing a Lite client failed", exc_info=True)
        self._admin = self._cursors = self._stats = None

    def commit(self, cursors: Mapping[int, int]) -> None:
        """Commit ``{partition: next offset to read}`` for the subscription (``CommitCursor``)."""
        from google.cloud.pubsublite_v1 import CommitCursorRequest, Cursor

        client = self._cursor_client()
        for partition, offset in sorted(cursors.items()):
            request = CommitCursorRequest(subscription=self.subscription_path, partition=partition,
                                          cursor=Cursor(offset=offset))
            try:
                client.commit_cursor(request=request)
            except Exception as exc:
                raise _fail(f"cannot commit cursor {offset} of {self.subscription_path} partition {partition}",
                            exc, self.conn) from None


def bounded_end(partition_bytes: Callable[[int], int], start: int, end: int, budget: int) -> int:
    """The largest ``e`` in ``(start, end]`` whose range ``[start, e)`` is at most ``budget``
    bytes (``partition_bytes(e)`` is that size), at least ``start + 1`` so a single large message
    never stalls a partition. Binary search: O(log n) size look-ups, only when over budget."""
    if end <= start + 1 or partition_bytes(end) <= budget:
        return end
    lo, hi = start + 1, end - 1  # lo always fits (by definition), hi + 1 does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if partition_bytes(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


# --------------------------------------------------------------------------------------------
# Publish (Spark tasks)
# --------------------------------------------------------------------------------------------


def default_router(partition_count: int) -> Callable[[bytes], int]:
    """The official publisher's routing (``DefaultRoutingPolicy``): SHA-256 of a non-empty key
    modulo the partition count, empty keys round-robin from a random partition."""
    from google.cloud.pubsublite.internal.wire.default_routing_policy import DefaultRoutingPolicy
    from google.cloud.pubsublite_v1.types import PubSubMessage

    policy = DefaultRoutingPolicy(partition_count)
    return lambda key: int(policy.route(PubSubMessage(key=key)).value)


@dataclass
class PublishStats:
    messages: int = 0
    per_partition: dict[int, int] = field(default_factory=dict)


def batch_offsets(response: Any, count: int) -> list[int]:
    """The offsets a ``MessagePublishResponse`` gives the ``count`` messages of its batch, read
    as the official client reads them (``cursor_ranges``); -1 for a message in no range (one
    the service did not append)."""
    offsets = [-1] * count
    for cursor_range in response.cursor_ranges:
        first = cursor_range.start_cursor.offset - cursor_range.start_index
        for index in range(cursor_range.start_index, min(cursor_range.end_index, count)):
            offsets[index] = first + index
    return offsets


class _OrderedPublishStream:
    """One partition's ``Publish`` stream, on the client's event loop: batches go out in the
    order :meth:`publish` is called, and each response settles the oldest unanswered batch (the
    service answers a partition's stream in order).

    Why not the official single-partition publisher: in client 1.13 it hands each flushed batch
    to a one-slot queue and records it as outstanding before the slot is free, and a flush that
    finds the slot free can overtake one woken to take it. Under load, batches then reach the
    service in another order than the one responses are matched in: offsets are given to the
    wrong messages (-1 when the batch sizes differ) and, worse, batches are appended out of
    order, breaking per-key order. Here one unbounded queue (``put_nowait`` never waits, so
    never reorders) feeds the request stream. A broken stream fails every waiting batch; the
    Spark task fails and the micro-batch is retried, as for any other publish error.
    """

    def __init__(self, client: Any, topic_path: str, partition: int):
        import asyncio

        self._client = client
        self._topic_path = topic_path
        self._partition = partition
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        self._waiting: collections.deque[tuple[int, asyncio.Future[list[int]]]] = collections.deque()
        self._reader: asyncio.Future[None] | None = None
        self._error: Exception | None = None
        self._closing = False

    async def open(self) -> None:
        import asyncio

        from google.api_core.exceptions import FailedPrecondition
        from google.cloud.pubsublite_v1 import InitialPublishRequest, PublishRequest

        initial = PublishRequest(initial_request=InitialPublishRequest(topic=self._topic_path,
                                                                       partition=self._partition))

        async def requests() -> Any:
            yield initial
            while (request := await self._requests.get()) is not None:
                yield request

        metadata = routing_metadata(partition=str(self._partition), topic=self._topic_path)
        responses = (await self._client.publish(requests(), metadata=metadata)).__aiter__()
        first = await responses.__anext__()
        if "initial_response" not in first:
            raise FailedPrecondition(f"partition {self._partition}: the publish stream did not start with an "
                                     "initial response")
        self._reader = asyncio.ensure_future(self._read(responses))

    async def _read(self, responses: Any) -> None:
        from google.api_core.exceptions import FailedPrecondition

        try:
            async for response in responses:
                if not self._waiting:
                    raise FailedPrecondition("a publish response arrived with no batch waiting for it")
                count, future = self._waiting.popleft()
                if not future.done():
                    future.set_result(batch_offsets(response.message_response, count))
            if not self._closing:
                raise FailedPrecondition("the service closed the publish stream")
        except BaseException as exc:  # CancelledError too: whoever waits must hear of it
            self._error = exc if isinstance(exc, Exception) else RuntimeError("the publish stream was closed")
            while self._waiting:
                _, future = self._waiting.popleft()
                if not future.done():
                    future.set_exception(self._error)
            if not isinstance(exc, Exception):
                raise

    async def publish(self, request: Any, count: int) -> list[int]:
        """Send one ``MessagePublishRequest``; returns its messages' offsets once answered."""
        import asyncio

        if self._error is not None:
            raise self._error
        future: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._waiting.append((count, future))
        self._requests.put_nowait(request)
        return await future

    async def close(self) -> None:
        import asyncio

        self._closing = True
        self._requests.put_nowait(None)  # ends the request stream: the service then ends its side
        if self._reader is not None:
            with contextlib.suppress(Exception):  # closing must not hide the outcome of the batches
                await asyncio.wait_for(asyncio.shield(self._reader), 10)
            self._reader.cancel()


class PartitionPublisher:
    """Publishes raw ``PubSubMessage`` protos to chosen partitions of one Lite topic and waits
    for every acknowledgement. One instance per Spark task; use as a context manager.

    Messages given for one partition are published in the order given: they are cut into
    batches (at most 1000 messages and 3 MiB, the official publisher's limits) that go out in
    order on one stream per partition (:class:`_OrderedPublishStream`), and the service appends
    a partition's batches in order. That is what keeps per-key order: the caller gives each
    key's messages in Kafka order.
    """

    def __init__(self, conn: LiteConnection, topic_path: str, *, timeout_s: float = 300.0):
        self.conn = conn
        self.topic_path = topic_path
        self.timeout_s = timeout_s
        self._loop: Any = None
        self._client: Any = None
        self._streams: dict[int, _OrderedPublishStream] = {}
        self._pending: collections.deque[tuple[int, int, Future[list[int]]]] = collections.deque()
        self._in_flight = 0
        self._chunks: dict[int, list[Any]] = {}
        self._chunk_bytes: dict[int, int] = {}
        self.stats = PublishStats()

    def __enter__(self) -> PartitionPublisher:
        from google.cloud.pubsublite.cloudpubsub.internal.managed_event_loop import ManagedEventLoop

        self._loop = ManagedEventLoop()  # the client's process-wide loop (grpc.aio needs one loop)
        credentials = self.conn.credentials()
        options = self.conn.client_options()

        async def make_client() -> Any:
            from google.cloud.pubsublite_v1.services.publisher_service import async_client

            return async_client.PublisherServiceAsyncClient(credentials=credentials, transport="grpc_asyncio",
                                                            client_options=options)

        self._client = self._run(make_client(), "create the publisher client")
        return self

    def _run(self, coro: Any, what: str) -> Any:
        try:
            return self._loop.submit(coro).result(self.timeout_s)
        except LiteIOError:
            raise
        except Exception as exc:
            raise _fail(f"Lite topic {self.topic_path}: cannot {what}", exc, self.conn, LitePublishError) from None

    def _stream(self, partition: int) -> _OrderedPublishStream:
        stream = self._streams.get(partition)
        if stream is None:
            stream = _OrderedPublishStream(self._client, self.topic_path, partition)
            self._run(stream.open(), f"open a publish stream to partition {partition}")
            self._streams[partition] = stream
        return stream

    def publish(self, partition: int, message: Any) -> None:
        """Queue one raw ``PubSubMessage`` proto for ``partition`` (sent in batches)."""
        size = message.ByteSize()
        if self._chunks.get(partition) and (len(self._chunks[partition]) >= PUBLISH_BATCH_MESSAGES
                                            or self._chunk_bytes[partition] + size > PUBLISH_BATCH_BYTES):
            self._send(partition)
        self._chunks.setdefault(partition, []).append(message)
        self._chunk_bytes[partition] = self._chunk_bytes.get(partition, 0) + size

    def _send(self, partition: int) -> None:
        from google.cloud.pubsublite_v1 import PublishRequest

        messages = self._chunks.pop(partition, [])
        self._chunk_bytes.pop(partition, None)
        if not messages:
            return
        stream = self._stream(partition)
        request = PublishRequest.pb()()
        request.message_publish_request.messages.extend(messages)
        # submitted in call order, so the stream's queue receives the batches in that order
        future = self._loop.submit(stream.publish(PublishRequest.wrap(request), len(messages)))
        self._pending.append((partition, len(messages), future))
        self._in_flight += len(messages)
        while self._in_flight > MAX_IN_FLIGHT_MESSAGES:
            self._settle_oldest()

    def _settle_oldest(self) -> None:
        partition, count, future = self._pending.popleft()
        self._in_flight -= count
        try:
            offsets = future.result(self.timeout_s)
        except Exception as exc:
            raise _fail(f"publish to {self.topic_path} partition {partition} did not complete", exc, self.conn,
                        LitePublishError) from None
        missing = sum(1 for offset in offsets if offset < 0)
        if missing:
            raise LitePublishError(f"{missing} of {count} messages to {self.topic_path} partition {partition} were "
                                   "not published: acknowledged without an offset")
        self.stats.messages += count
        self.stats.per_partition[partition] = self.stats.per_partition.get(partition, 0) + count

    def wait(self) -> PublishStats:
        """Send what is queued and wait for every acknowledgement; raise unless all succeeded."""
        for partition in list(self._chunks):
            self._send(partition)
        while self._pending:
            self._settle_oldest()
        return self.stats

    def __exit__(self, *exc: object) -> None:
        # On error, pending batches are abandoned: the task fails and Spark retries the batch.
        for partition, stream in list(self._streams.items()):
            try:
                self._loop.submit(stream.close()).result(30)
            except Exception:  # closing must not hide the original error
                log.debug("closing the publish stream of partition %d failed", partition, exc_info=True)
        self._streams.clear()
        if self._client is not None:
            try:
                self._loop.submit(self._client.transport.close()).result(30)
            except Exception:
                log.debug("closing the publisher client failed", exc_info=True)
            self._client = None


# --------------------------------------------------------------------------------------------
# Read an exact offset range (Spark tasks)
# --------------------------------------------------------------------------------------------

_RETRYABLE_CODES = frozenset({"ABORTED", "CANCELLED", "DEADLINE_EXCEEDED", "INTERNAL", "RESOURCE_EXHAUSTED",
                              "UNAVAILABLE", "UNKNOWN"})
_MAX_READ_RETRIES = 10


def _is_retryable(exc: BaseException) -> bool:
    code = getattr(exc, "grpc_status_code", None)
    if code is None and hasattr(exc, "code") and callable(exc.code):
        try:
            code = exc.code()
        except Exception:
            code = None
    return getattr(code, "name", None) in _RETRYABLE_CODES


def read_range(conn: LiteConnection, subscription_path: str, partition: int, start: int, end: int, *,
               flow_messages: int, flow_bytes: int, timeout_s: float = 120.0) -> Iterator[list[Any]]:
    """Yield the raw ``SequencedMessage`` protos with offsets ``[start, end)`` of one partition,
    in offset order, as lists (one per server response).

    The stream seeks to ``start`` explicitly (the committed cursor plays no part) and holds at
    most ``flow_messages`` messages / ``flow_bytes`` bytes of tokens, never more messages than the
    range still needs, so nothing beyond ``end`` is delivered. A broken stream is reopened at the
    next offset (bounded retries). Offsets are dense in Lite: a gap means retention deleted
    messages of the range (:class:`LiteDataLossError`); no message for ``timeout_s`` fails.
    """
    from google.cloud.pubsublite_v1 import SubscriberServiceClient

    if end <= start:
        return
    metadata = routing_metadata(partition=str(partition), subscription=subscription_path)
    client = SubscriberServiceClient(transport="grpc", **conn.client_kwargs())
    where = f"{subscription_path} partition {partition}"
    offset = start
    failures = 0
    try:
        while offset < end:
            stream = _RangeStream(client, metadata, subscription_path, partition, offset, end,
                                  flow_messages, max(flow_bytes, MAX_MESSAGE_BYTES), timeout_s)
            try:
                for batch in stream.batches():
                    first, last = batch[0].cursor.offset, batch[-1].cursor.offset
                    if first != offset or last - first + 1 != len(batch):
                        raise LiteDataLossError(f"{where}: expected offset {offset}, got {first}..{last} in "
                                                f"{len(batch)} messages (deleted by retention?)")
                    batch = batch[: end - offset]
                    offset += len(batch)
                    failures = 0
                    yield batch
                    if offset >= end:
                        break
                    stream.consumed(batch, end - offset)
                else:
                    raise _StreamEnded(f"the service closed the stream at offset {offset}")
            except LiteIOError:
                raise
            except Exception as exc:
                if stream.timed_out:
                    raise LiteIOError(f"{where}: no message at offset {offset} within {timeout_s:.0f} s "
                                      f"(range [{start}, {end}))") from None
                failures += 1
                if not (_is_retryable(exc) or isinstance(exc, _StreamEnded)) or failures > _MAX_READ_RETRIES:
                    raise _fail(f"reading {where} at offset {offset}", exc, conn) from None
                log.info("%s: subscribe stream broke at offset %d (%s); reconnecting", where, offset,
                         _one_line(exc))
                time.sleep(min(10.0, 0.1 * 2 ** failures))
            finally:
                stream.close()
    finally:
        try:
            client.transport.close()
        except Exception:
            log.debug("closing the subscriber client failed", exc_info=True)


class _RangeStream:
    """One ``Subscribe`` stream from ``offset``: requests go through a queue that gRPC consumes;
    a watchdog thread cancels the call when nothing arrives for ``timeout_s`` (a blocked response
    iterator cannot time out by itself)."""

    def __init__(self, client: Any, metadata: list[tuple[str, str]], subscription_path: str, partition: int,
                 offset: int, end: int, flow_messages: int, flow_bytes: int, timeout_s: float):
        import threading

        from google.cloud.pubsublite_v1 import (
            Cursor,
            FlowControlRequest,
            InitialSubscribeRequest,
            SeekRequest,
            SubscribeRequest,
        )

        self._request_type, self._flow_type = SubscribeRequest, FlowControlRequest
        self.flow_messages = flow_messages
        self.outstanding = min(flow_messages, end - offset)  # messages asked for, not yet received
        self.timeout_s = timeout_s
        self.timed_out = False
        self._requests: queue.Queue[Any] = queue.Queue()
        self._requests.put(SubscribeRequest(initial=InitialSubscribeRequest(
            subscription=subscription_path, partition=partition,
            initial_location=SeekRequest(cursor=Cursor(offset=offset)))))
        self._requests.put(SubscribeRequest(flow_control=FlowControlRequest(
            allowed_messages=self.outstanding, allowed_bytes=flow_bytes)))
        self._client, self._metadata = client, metadata
        self._call: Any = None
        self._last = time.monotonic()
        self._done = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, daemon=True, name="lite-read-watchdog")
        self._watchdog.start()

    def _outgoing(self) -> Iterator[Any]:
        while (item := self._requests.get()) is not None:
            yield item

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            if time.monotonic() - self._last > self.timeout_s:
                self.timed_out = True
                if self._call is not None:
                    self._call.cancel()
                return

    def batches(self) -> Iterator[list[Any]]:
        """Lists of ``SequencedMessage`` protos; the initial response is checked and skipped."""
        self._call = self._client.subscribe(requests=self._outgoing(), metadata=self._metadata)
        if self.timed_out:
            self._call.cancel()
        for response in self._call:
            pb = response._pb
            if pb.WhichOneof("response") == "messages" and len(pb.messages.messages):
                self._last = time.monotonic()
                yield list(pb.messages.messages)

    def consumed(self, batch: Sequence[Any], remaining: int) -> None:
        """Return the tokens of a received batch, never asking for more than ``remaining``."""
        self.outstanding -= len(batch)
        more = max(0, min(self.flow_messages, remaining) - self.outstanding)
        size = sum(m.size_bytes for m in batch)
        self.outstanding += more
        self._requests.put(self._request_type(flow_control=self._flow_type(allowed_messages=more,
                                                                           allowed_bytes=size)))

    def close(self) -> None:
        self._done.set()
        self._requests.put(None)
        if self._call is not None:
            self._call.cancel()


class _StreamEnded(Exception):
    """The server closed a Subscribe stream before the range was read."""


# --------------------------------------------------------------------------------------------
# Offsets as JSON (the Spark checkpoint form)
# --------------------------------------------------------------------------------------------


def offsets_to_json(offsets: Mapping[int, int]) -> dict[str, int]:
    """Canonical form ``{"0": 12, "1": 7}`` (numeric partition order): Spark compares serialised
    offsets to decide whether a batch has new data, so equal offsets must serialise equally."""
    return {str(p): int(offsets[p]) for p in sorted(offsets)}


def offsets_from_json(offsets: Mapping[str, Any] | str | None) -> dict[int, int]:
    if isinstance(offsets, str):
        offsets = json.loads(offsets) if offsets.strip() else {}
    return {int(p): int(o) for p, o in (offsets or {}).items()}
