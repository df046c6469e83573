"""A local Pub/Sub Lite service for tests, spoken to by the official client unmodified.

Why it exists: Pub/Sub Lite has no emulator and is being turned down, yet the Lite connectors
must be tested end to end. This server implements the Lite gRPC API (``google.cloud.
pubsublite.v1``) with the semantics the connectors depend on: per-partition append-only logs
with dense offsets and publish times, per-subscription committed cursors, flow-control tokens,
seeks (including the RESET signal the client expects), partition assignment and idempotent
publishing. It keeps everything in memory and binds ``127.0.0.1`` only.

Wire types come from ``google.cloud.pubsublite_v1`` (their protobuf classes via ``.pb()``),
served through ``grpc`` generic handlers on a ``grpc.aio`` server whose event loop runs in a
background thread; all service state is touched only on that loop, so no locks are needed.

Using it from a (pipeline) test
-------------------------------
::

    from lite_server import LiteServer          # tests/ is on sys.path under pytest

    with LiteServer() as lite:                  # TLS, self-signed cert, free port
        lite.create_topic(TOPIC, partitions=3)  # direct, synchronous helpers (no client needed)
        lite.create_subscription(SUB, TOPIC)
        env = lite.client_env()                 # {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": cert, ...}
        # run the pipeline / official client in a *subprocess* with env=env and the config key
        # pubsublite.endpoint=lite.endpoint ("localhost:PORT"); then inspect:
        lite.messages(TOPIC, 0)                 # list of SequencedMessage protos
        lite.committed_cursor(SUB, 0)           # int

The client must trust the certificate through ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``; gRPC reads
it once per process, before the first TLS channel, and it *replaces* the public roots. So code
using the official client runs in its own process (``lite_server.clientproc.run_python`` or the
CLI in a subprocess), or sets the variable before creating any channel (Spark Python workers
inherit it from the environment the JVM was started with). Clients pass
``client_options=ClientOptions(api_endpoint=lite.endpoint)`` and ``AnonymousCredentials()``.

Implemented RPCs: AdminService (topics, subscriptions incl. ``skip_backlog``, seeks as completed
long-running operations, reservations, GetTopicPartitions), PublisherService.Publish,
SubscriberService.Subscribe, PartitionAssignmentService.AssignPartitions,
CursorService.StreamingCommitCursor/CommitCursor/ListPartitionCursors,
TopicStatsService.ComputeHeadCursor/ComputeMessageStats/ComputeTimeCursor and
Operations.GetOperation. ``LiteServer.calls`` counts the RPCs clients made.

Semantics worth knowing: a subscription starts at offset 0 (or at the heads with
``skip_backlog``); committed cursors are "next offset to read"; Subscribe never exceeds the
flow-control tokens (a message larger than the byte allowance waits for more tokens); an admin
seek moves the cursors and aborts live Subscribe streams with the RESET status, ignoring
pre-seek commits until the client resubscribes; a subscriber that was offline during the seek
(between two streams) is sent RESET when it resumes at a cursor of its own, as the service
promises that offline subscribers react to a seek once they are online.

Not modelled: retention/expiry, quotas and throughput limits, export subscriptions, auth.
Run standalone with ``python -m lite_server`` (prints one JSON line with endpoint and cert).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import grpc
from google.cloud.pubsublite_v1.types import admin, common, cursor, publisher, subscriber, topic_stats
from google.longrunning import operations_pb2
from google.protobuf import any_pb2, empty_pb2, timestamp_pb2
from google.rpc import error_details_pb2, status_pb2

from .certs import TlsFiles, make_self_signed

_LOG = logging.getLogger(__name__)

# Raw protobuf classes (proto-plus wrappers are slow and unnecessary on the server side).
Topic = common.Topic.pb()
Subscription = common.Subscription.pb()
Reservation = common.Reservation.pb()
SequencedMessage = common.SequencedMessage.pb()
SeekRequest = subscriber.SeekRequest.pb()
SeekSubscriptionRequest = admin.SeekSubscriptionRequest.pb()

_T = TypeVar("_T")

#: Largest Subscribe response the server builds (the client's batches are ≤ 3.5 MiB as well).
MAX_RESPONSE_BYTES = 3_500_000
#: Largest number of messages in one Subscribe response.
MAX_RESPONSE_MESSAGES = 1000
#: Status sent to subscribers after an admin seek; the client recognises it as "reset state".
RESET_DOMAIN = "pubsublite.googleapis.com"


class RpcFailure(Exception):
    """Raised inside handlers to end the RPC with a gRPC status (mapped by the handler wrapper)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _not_found(what: str) -> RpcFailure:
    return RpcFailure(grpc.StatusCode.NOT_FOUND, f"{what} not found")


def _invalid(message: str) -> RpcFailure:
    return RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, message)


def _ts_ns(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1_000_000_000 + ts.nanos


def _ns_ts(ns: int) -> timestamp_pb2.Timestamp:
    seconds, nanos = divmod(ns, 1_000_000_000)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


# ----------------------------------------------------------------------------------------------
# State
# ----------------------------------------------------------------------------------------------


@dataclass
class _Partition:
    """One partition: an append-only log whose list index is the offset."""

    log: list[Any] = field(default_factory=list)  # SequencedMessage protos
    last_publish_ns: int = 0
    listeners: set[asyncio.Event] = field(default_factory=set)

    @property
    def head(self) -> int:
        return len(self.log)

    def notify(self) -> None:
        for event in self.listeners:
            event.set()


@dataclass
class _TopicState:
    proto: Any  # Topic
    partitions: list[_Partition]


@dataclass(eq=False)  # identity semantics: sessions live in sets
class _SubscribeSession:
    """Server side of one Subscribe stream."""

    partition: int
    offset: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    allowed_messages: int = 0
    allowed_bytes: int = 0
    pending_seek: Any = None  # SeekRequest
    reset: bool = False
    closed: bool = False
    error: RpcFailure | None = None


@dataclass(eq=False)
class _AssignSession:
    """Server side of one AssignPartitions stream (one subscriber client)."""

    client_id: bytes
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    target: frozenset[int] | None = None
    pending: frozenset[int] | None = None
    awaiting_ack: bool = False
    closed: bool = False


@dataclass
class _SubscriptionState:
    proto: Any  # Subscription
    cursors: dict[int, int] = field(default_factory=dict)
    sessions: set[_SubscribeSession] = field(default_factory=set)
    assigners: list[_AssignSession] = field(default_factory=list)
    #: partitions whose streaming commits are ignored until the client resubscribes after a seek
    #: (its commit stream still flushes acknowledgements for messages from before the seek).
    stale_commits: set[int] = field(default_factory=set)
    #: partitions seeked since a subscriber last started there, so a stream that resumes at an
    #: offset of its own (a reconnect after the seek) has not seen the seek yet and is reset.
    unseen_seeks: set[int] = field(default_factory=set)


def _apply_mask(target: Any, source: Any, paths: Iterable[str]) -> None:
    """Copy the fields named by an update mask from ``source`` into ``target``."""
    from google.protobuf import field_mask_pb2

    mask = field_mask_pb2.FieldMask(paths=list(paths))
    mask.MergeMessage(source, target, replace_message_field=True, replace_repeated_field=True)


# ----------------------------------------------------------------------------------------------
# Server
# ----------------------------------------------------------------------------------------------


class LiteServer:
    """In-memory Pub/Sub Lite over TLS on ``127.0.0.1:<free port>``.

    ``clock_ns`` supplies publish times (nanoseconds since the epoch); tests may inject a fake
    clock for deterministic publish times. Publish times never go backwards within a partition.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        cert_dir: Path | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._requested_port = port
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if cert_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="lite-server-")
            cert_dir = Path(self._tmp.name)
        self.tls: TlsFiles = make_self_signed(Path(cert_dir))
        self._clock_ns = clock_ns
        self.port: int = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None
        self._topics: dict[str, _TopicState] = {}
        self._subscriptions: dict[str, _SubscriptionState] = {}
        self._reservations: dict[str, Any] = {}
        self._operations: dict[str, Any] = {}
        self._idempotence: dict[tuple[str, int, bytes], int] = {}
        self._op_ids = itertools.count(1)
        #: RPC name → number of calls, e.g. ``calls["SubscriberService.Subscribe"]``.
        self.calls: collections.Counter[str] = collections.Counter()

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """``host:port`` for ``ClientOptions(api_endpoint=...)``; the certificate names localhost."""
        return f"localhost:{self.port}"

    @property
    def cert_path(self) -> Path:
        return self.tls.cert_path

    def client_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for a client process: trust the server's certificate (and nothing else)."""
        import os

        env = dict(os.environ if base is None else base)
        env["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(self.cert_path)
        env["LITE_ENDPOINT"] = self.endpoint
        return env

    def start(self) -> LiteServer:
        if self._thread is not None:
            raise RuntimeError("server already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=self._run_loop, name="lite-server", daemon=True)
        self._thread.start()
        try:
            self._call(self._astart(), timeout=30)
        except BaseException:
            self.stop()
            raise
        _LOG.info("Pub/Sub Lite test server on %s", self.endpoint)
        return self

    def stop(self) -> None:
        """Stop serving (open streams are cancelled) and join the loop thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            if self._server is not None:
                self._call(self._server.stop(grace=0.2), timeout=30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()
            self._loop = self._thread = self._server = None
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None

    def __enter__(self) -> LiteServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run_loop(self) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()
        # Cancel whatever handler tasks survived server.stop() so the loop closes cleanly.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))

    def _call(self, coro: Awaitable[_T], timeout: float = 30) -> _T:
        """Run a coroutine on the server loop from another thread and wait for its result."""
        if self._loop is None:
            raise RuntimeError("server not started")
        future: Future[_T] = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        return future.result(timeout)

    async def _astart(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", 32 * 1024 * 1024),
                ("grpc.max_send_message_length", 32 * 1024 * 1024),
                ("grpc.so_reuseport", 0),
            ]
        )
        server.add_generic_rpc_handlers(self._handlers())
        creds = grpc.ssl_server_credentials([(self.tls.key_pem, self.tls.cert_pem)])
        self.port = server.add_secure_port(f"127.0.0.1:{self._requested_port}", creds)
        if self.port == 0:
            raise RuntimeError(f"could not bind 127.0.0.1:{self._requested_port}")
        await server.start()
        self._server = server

    # -- direct helpers for tests (thread-safe: they run on the server loop) -------------------

    def create_topic(self, path: str, partitions: int) -> None:
        """Create ``projects/P/locations/L/topics/T`` with ``partitions`` partitions."""

        async def run() -> None:
            topic = Topic(name=path)
            topic.partition_config.count = partitions
            self._create_topic(topic)

        self._call(run())

    def create_subscription(self, path: str, topic: str, *, skip_backlog: bool = False) -> None:
        """Create a subscription; ``skip_backlog`` starts its cursors at the current heads."""

        async def run() -> None:
            self._create_subscription(Subscription(name=path, topic=topic), skip_backlog)

        self._call(run())

    def publish(self, topic: str, partition: int, messages: Iterable[Any]) -> list[int]:
        """Append ``PubSubMessage`` protos (or proto-plus messages) directly; returns offsets."""
        raw = [m._pb if hasattr(m, "_pb") else m for m in messages]

        async def run() -> list[int]:
            return self._append(self._partition(topic, partition), raw)

        return self._call(run())

    def messages(self, topic: str, partition: int) -> list[Any]:
        """Copies of all ``SequencedMessage`` protos of a partition, in offset order."""

        async def run() -> list[Any]:
            out = []
            for m in self._partition(topic, partition).log:
                c = SequencedMessage()
                c.CopyFrom(m)
                out.append(c)
            return out

        return self._call(run())

    def head(self, topic: str, partition: int) -> int:
        async def run() -> int:
            return self._partition(topic, partition).head

        return self._call(run())

    def committed_cursor(self, subscription: str, partition: int) -> int | None:
        async def run() -> int | None:
            return self._subscription(subscription).cursors.get(partition)

        return self._call(run())

    def set_committed_cursor(self, subscription: str, partition: int, offset: int) -> None:
        async def run() -> None:
            self._subscription(subscription).cursors[partition] = offset

        self._call(run())

    # -- state operations (loop thread only) ---------------------------------------------------

    def _topic(self, path: str) -> _TopicState:
        state = self._topics.get(path)
        if state is None:
            raise _not_found(f"topic {path}")
        return state

    def _partition(self, topic: str, partition: int) -> _Partition:
        state = self._topic(topic)
        if not 0 <= partition < len(state.partitions):
            raise _invalid(f"partition {partition} out of range for {topic} ({len(state.partitions)})")
        return state.partitions[partition]

    def _subscription(self, path: str) -> _SubscriptionState:
        state = self._subscriptions.get(path)
        if state is None:
            raise _not_found(f"subscription {path}")
        return state

    def _create_topic(self, topic: Any) -> Any:
        if topic.name in self._topics:
            raise RpcFailure(grpc.StatusCode.ALREADY_EXISTS, f"topic {topic.name} already exists")
        count = topic.partition_config.count
        if count < 1:
            raise _invalid("partition_config.count must be at least 1")
        stored = Topic()
        stored.CopyFrom(topic)
        self._topics[topic.name] = _TopicState(stored, [_Partition() for _ in range(count)])
        return stored

    def _create_subscription(self, sub: Any, skip_backlog: bool) -> Any:
        if sub.name in self._subscriptions:
            raise RpcFailure(grpc.StatusCode.ALREADY_EXISTS, f"subscription {sub.name} already exists")
        topic = self._topic(sub.topic)
        stored = Subscription()
        stored.CopyFrom(sub)
        state = _SubscriptionState(stored)
        for i, part in enumerate(topic.partitions):
            state.cursors[i] = part.head if skip_backlog else 0
        self._subscriptions[sub.name] = state
        return stored

    def _append(self, part: _Partition, messages: list[Any]) -> list[int]:
        """Append messages to a partition; publish times are monotone per partition."""
        offsets = []
        now = max(self._clock_ns(), part.last_publish_ns)
        part.last_publish_ns = now
        publish_time = _ns_ts(now)
        for message in messages:
            seq = SequencedMessage()
            seq.cursor.offset = part.head
            seq.publish_time.CopyFrom(publish_time)
            seq.message.CopyFrom(message)
            seq.size_bytes = message.ByteSize()
            offsets.append(part.head)
            part.log.append(seq)
        if messages:
            part.notify()
        return offsets

    def _resolve_seek(self, part: _Partition, sub: _SubscriptionState, partition: int, seek: Any) -> int:
        which = seek.WhichOneof("target")
        if which == "cursor":
            return max(0, seek.cursor.offset)
        if seek.named_target == SeekRequest.NamedTarget.HEAD:
            return part.head
        # COMMITTED_CURSOR, and the client's default when it sends no location.
        return sub.cursors.get(partition, 0)

    @staticmethod
    def _time_cursor(part: _Partition, target: Any) -> int | None:
        """First offset whose publish (or event, falling back to publish) time is ≥ target."""
        which = target.WhichOneof("time")
        if which is None:
            raise _invalid("time target is empty")
        wanted = _ts_ns(getattr(target, which))
        for m in part.log:
            if which == "event_time" and m.message.HasField("event_time"):
                t = _ts_ns(m.message.event_time)
            else:
                t = _ts_ns(m.publish_time)
            if t >= wanted:
                return m.cursor.offset
        return None

    def _rebalance(self, sub: _SubscriptionState) -> None:
        """Spread the topic's partitions over the subscription's live assignment streams."""
        live = [a for a in sub.assigners if not a.closed]
        try:
            count = len(self._topic(sub.proto.topic).partitions)
        except RpcFailure:
            count = 0
        targets: dict[int, set[int]] = {i: set() for i in range(len(live))}
        for p in range(count):
            if live:
                targets[p % len(live)].add(p)
        for i, session in enumerate(live):
            new = frozenset(targets[i])
            if new != session.target:
                session.target = new
                session.pending = new
                session.wake.set()

    # -- gRPC plumbing ---------------------------------------------------------------------------

    def _handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        def unary(name: str, fn: Callable[[Any], Awaitable[Any]], req: Any, resp: Any) -> Any:
            async def handler(request: Any, context: grpc.aio.ServicerContext) -> Any:
                self.calls[name] += 1
                try:
                    return await fn(request)
                except RpcFailure as e:
                    await context.abort(e.code, e.message)

            return grpc.unary_unary_rpc_method_handler(
                handler, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
            )

        def bidi(name: str, fn: Callable[..., Awaitable[None]], req: Any, resp: Any) -> Any:
            async def handler(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> None:
                self.calls[name] += 1
                try:
                    await fn(requests, context)
                except RpcFailure as e:
                    await context.abort(e.code, e.message)

            return grpc.stream_stream_rpc_method_handler(
                handler, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
            )

        adm, cur, pub, sub, stats = admin, cursor, publisher, subscriber, topic_stats
        ops = operations_pb2
        ADM = "AdminService"
        # (service, method, implementation, request type, response type); proto-plus types are
        # turned into their protobuf classes below.
        unary_methods: list[tuple[str, str, Any, Any, Any]] = [
            (ADM, "CreateTopic", self._rpc_create_topic, adm.CreateTopicRequest, Topic),
            (ADM, "GetTopic", self._rpc_get_topic, adm.GetTopicRequest, Topic),
            (ADM, "GetTopicPartitions", self._rpc_get_topic_partitions,
             adm.GetTopicPartitionsRequest, adm.TopicPartitions),
            (ADM, "ListTopics", self._rpc_list_topics, adm.ListTopicsRequest, adm.ListTopicsResponse),
            (ADM, "UpdateTopic", self._rpc_update_topic, adm.UpdateTopicRequest, Topic),
            (ADM, "DeleteTopic", self._rpc_delete_topic, adm.DeleteTopicRequest, empty_pb2.Empty),
            (ADM, "ListTopicSubscriptions", self._rpc_list_topic_subscriptions,
             adm.ListTopicSubscriptionsRequest, adm.ListTopicSubscriptionsResponse),
            (ADM, "CreateSubscription", self._rpc_create_subscription,
             adm.CreateSubscriptionRequest, Subscription),
            (ADM, "GetSubscription", self._rpc_get_subscription, adm.GetSubscriptionRequest, Subscription),
            (ADM, "ListSubscriptions", self._rpc_list_subscriptions,
             adm.ListSubscriptionsRequest, adm.ListSubscriptionsResponse),
            (ADM, "UpdateSubscription", self._rpc_update_subscription,
             adm.UpdateSubscriptionRequest, Subscription),
            (ADM, "DeleteSubscription", self._rpc_delete_subscription,
             adm.DeleteSubscriptionRequest, empty_pb2.Empty),
            (ADM, "SeekSubscription", self._rpc_seek_subscription, SeekSubscriptionRequest, ops.Operation),
            (ADM, "CreateReservation", self._rpc_create_reservation,
             adm.CreateReservationRequest, Reservation),
            (ADM, "GetReservation", self._rpc_get_reservation, adm.GetReservationRequest, Reservation),
            (ADM, "ListReservations", self._rpc_list_reservations,
             adm.ListReservationsRequest, adm.ListReservationsResponse),
            (ADM, "UpdateReservation", self._rpc_update_reservation,
             adm.UpdateReservationRequest, Reservation),
            (ADM, "DeleteReservation", self._rpc_delete_reservation,
             adm.DeleteReservationRequest, empty_pb2.Empty),
            (ADM, "ListReservationTopics", self._rpc_list_reservation_topics,
             adm.ListReservationTopicsRequest, adm.ListReservationTopicsResponse),
            ("CursorService", "CommitCursor", self._rpc_commit_cursor,
             cur.CommitCursorRequest, cur.CommitCursorResponse),
            ("CursorService", "ListPartitionCursors", self._rpc_list_partition_cursors,
             cur.ListPartitionCursorsRequest, cur.ListPartitionCursorsResponse),
            ("TopicStatsService", "ComputeHeadCursor", self._rpc_compute_head_cursor,
             stats.ComputeHeadCursorRequest, stats.ComputeHeadCursorResponse),
            ("TopicStatsService", "ComputeMessageStats", self._rpc_compute_message_stats,
             stats.ComputeMessageStatsRequest, stats.ComputeMessageStatsResponse),
            ("TopicStatsService", "ComputeTimeCursor", self._rpc_compute_time_cursor,
             stats.ComputeTimeCursorRequest, stats.ComputeTimeCursorResponse),
            ("google.longrunning.Operations", "GetOperation", self._rpc_get_operation,
             ops.GetOperationRequest, ops.Operation),
        ]
        stream_methods: list[tuple[str, str, Any, Any, Any]] = [
            ("PublisherService", "Publish", self._rpc_publish, pub.PublishRequest, pub.PublishResponse),
            ("SubscriberService", "Subscribe", self._rpc_subscribe,
             sub.SubscribeRequest, sub.SubscribeResponse),
            ("PartitionAssignmentService", "AssignPartitions", self._rpc_assign_partitions,
             sub.PartitionAssignmentRequest, sub.PartitionAssignment),
            ("CursorService", "StreamingCommitCursor", self._rpc_streaming_commit_cursor,
             cur.StreamingCommitCursorRequest, cur.StreamingCommitCursorResponse),
        ]

        def raw(t: Any) -> Any:
            return t.pb() if hasattr(t, "pb") else t

        merged: dict[str, dict[str, Any]] = collections.defaultdict(dict)
        for methods, make in ((unary_methods, unary), (stream_methods, bidi)):
            for service, method, fn, req, resp in methods:
                full = service if "." in service else f"google.cloud.pubsublite.v1.{service}"
                short = full.rsplit(".", 1)[-1]
                merged[full][method] = make(f"{short}.{method}", fn, raw(req), raw(resp))
        return tuple(grpc.method_handlers_generic_handler(s, m) for s, m in merged.items())

    # -- AdminService ----------------------------------------------------------------------------

    async def _rpc_create_topic(self, req: Any) -> Any:
        topic = Topic()
        topic.CopyFrom(req.topic)
        topic.name = f"{req.parent}/topics/{req.topic_id}"
        return self._create_topic(topic)

    async def _rpc_get_topic(self, req: Any) -> Any:
        return self._topic(req.name).proto

    async def _rpc_get_topic_partitions(self, req: Any) -> Any:
        return admin.TopicPartitions.pb()(partition_count=len(self._topic(req.name).partitions))

    async def _rpc_list_topics(self, req: Any) -> Any:
        prefix = f"{req.parent}/topics/"
        return admin.ListTopicsResponse.pb()(
            topics=[t.proto for name, t in sorted(self._topics.items()) if name.startswith(prefix)]
        )

    async def _rpc_update_topic(self, req: Any) -> Any:
        state = self._topic(req.topic.name)
        updated = Topic()
        updated.CopyFrom(state.proto)
        _apply_mask(updated, req.topic, req.update_mask.paths)
        new_count = updated.partition_config.count
        if new_count < len(state.partitions):
            raise _invalid("the number of partitions of a topic cannot be decreased")
        for _ in range(new_count - len(state.partitions)):
            state.partitions.append(_Partition())
        for sub in self._subscriptions.values():
            if sub.proto.topic == req.topic.name:
                for p in range(new_count):
                    sub.cursors.setdefault(p, 0)
                self._rebalance(sub)
        state.proto = updated
        return updated

    async def _rpc_delete_topic(self, req: Any) -> Any:
        self._topic(req.name)
        del self._topics[req.name]
        return empty_pb2.Empty()

    async def _rpc_list_topic_subscriptions(self, req: Any) -> Any:
        self._topic(req.name)
        names = sorted(n for n, s in self._subscriptions.items() if s.proto.topic == req.name)
        return admin.ListTopicSubscriptionsResponse.pb()(subscriptions=names)

    async def _rpc_create_subscription(self, req: Any) -> Any:
        sub = Subscription()
        sub.CopyFrom(req.subscription)
        sub.name = f"{req.parent}/subscriptions/{req.subscription_id}"
        return self._create_subscription(sub, req.skip_backlog)

    async def _rpc_get_subscription(self, req: Any) -> Any:
        return self._subscription(req.name).proto

    async def _rpc_list_subscriptions(self, req: Any) -> Any:
        prefix = f"{req.parent}/subscriptions/"
        return admin.ListSubscriptionsResponse.pb()(
            subscriptions=[s.proto for n, s in sorted(self._subscriptions.items()) if n.startswith(prefix)]
        )

    async def _rpc_update_subscription(self, req: Any) -> Any:
        state = self._subscription(req.subscription.name)
        updated = Subscription()
        updated.CopyFrom(state.proto)
        _apply_mask(updated, req.subscription, req.update_mask.paths)
        state.proto = updated
        return updated

    async def _rpc_delete_subscription(self, req: Any) -> Any:
        state = self._subscription(req.name)
        for session in list(state.sessions):
            session.error = _not_found(f"subscription {req.name}")
            session.wake.set()
        del self._subscriptions[req.name]
        return empty_pb2.Empty()

    async def _rpc_seek_subscription(self, req: Any) -> Any:
        """Move every partition's committed cursor, then RESET live subscribers.

        The client reacts to RESET by flushing its pending commits and resubscribing from the
        committed cursor; commits that arrive in between are for pre-seek messages, so they are
        acknowledged but not applied (the real service does the same bookkeeping).
        """
        sub = self._subscription(req.name)
        topic = self._topic(sub.proto.topic)
        which = req.WhichOneof("target")
        for p, part in enumerate(topic.partitions):
            if which == "named_target" and req.named_target == SeekSubscriptionRequest.NamedTarget.HEAD:
                target = part.head
            elif which == "named_target" and req.named_target == SeekSubscriptionRequest.NamedTarget.TAIL:
                target = 0
            elif which == "time_target":
                found = self._time_cursor(part, req.time_target)
                target = part.head if found is None else found
            else:
                raise _invalid("seek target must be set")
            sub.cursors[p] = target
            sub.unseen_seeks.add(p)
        for session in sub.sessions:
            sub.stale_commits.add(session.partition)
            session.reset = True
            session.wake.set()
        op_name = f"{req.name.split('/subscriptions/')[0]}/operations/seek-{next(self._op_ids)}"
        metadata = admin.OperationMetadata.pb()(target=req.name, verb="seek")
        now = _ns_ts(self._clock_ns())
        metadata.create_time.CopyFrom(now)
        metadata.end_time.CopyFrom(now)
        op = operations_pb2.Operation(name=op_name, done=True)
        op.metadata.Pack(metadata)
        op.response.Pack(admin.SeekSubscriptionResponse.pb()())
        self._operations[op_name] = op
        return op

    async def _rpc_get_operation(self, req: Any) -> Any:
        op = self._operations.get(req.name)
        if op is None:
            raise _not_found(f"operation {req.name}")
        return op

    async def _rpc_create_reservation(self, req: Any) -> Any:
        name = f"{req.parent}/reservations/{req.reservation_id}"
        if name in self._reservations:
            raise RpcFailure(grpc.StatusCode.ALREADY_EXISTS, f"reservation {name} already exists")
        res = Reservation()
        res.CopyFrom(req.reservation)
        res.name = name
        self._reservations[name] = res
        return res

    async def _rpc_get_reservation(self, req: Any) -> Any:
        if req.name not in self._reservations:
            raise _not_found(f"reservation {req.name}")
        return self._reservations[req.name]

    async def _rpc_list_reservations(self, req: Any) -> Any:
        prefix = f"{req.parent}/reservations/"
        return admin.ListReservationsResponse.pb()(
            reservations=[r for n, r in sorted(self._reservations.items()) if n.startswith(prefix)]
        )

    async def _rpc_update_reservation(self, req: Any) -> Any:
        res = self._reservations.get(req.reservation.name)
        if res is None:
            raise _not_found(f"reservation {req.reservation.name}")
        _apply_mask(res, req.reservation, req.update_mask.paths)
        return res

    async def _rpc_delete_reservation(self, req: Any) -> Any:
        if self._reservations.pop(req.name, None) is None:
            raise _not_found(f"reservation {req.name}")
        return empty_pb2.Empty()

    async def _rpc_list_reservation_topics(self, req: Any) -> Any:
        names = sorted(
            name
            for name, t in self._topics.items()
            if t.proto.reservation_config.throughput_reservation == req.name
        )
        return admin.ListReservationTopicsResponse.pb()(topics=names)

    # -- CursorService / TopicStatsService (unary) -----------------------------------------------

    async def _rpc_commit_cursor(self, req: Any) -> Any:
        sub = self._subscription(req.subscription)
        self._partition(sub.proto.topic, req.partition)
        sub.cursors[req.partition] = req.cursor.offset
        return cursor.CommitCursorResponse.pb()()

    async def _rpc_list_partition_cursors(self, req: Any) -> Any:
        sub = self._subscription(req.parent)
        out = cursor.ListPartitionCursorsResponse.pb()()
        for p, off in sorted(sub.cursors.items()):
            pc = out.partition_cursors.add()
            pc.partition = p
            pc.cursor.offset = off
        return out

    async def _rpc_compute_head_cursor(self, req: Any) -> Any:
        part = self._partition(req.topic, req.partition)
        out = topic_stats.ComputeHeadCursorResponse.pb()()
        out.head_cursor.offset = part.head
        return out

    async def _rpc_compute_message_stats(self, req: Any) -> Any:
        part = self._partition(req.topic, req.partition)
        start = max(0, req.start_cursor.offset)
        end = part.head if not req.HasField("end_cursor") else min(part.head, req.end_cursor.offset)
        out = topic_stats.ComputeMessageStatsResponse.pb()()
        window = part.log[start:end]
        out.message_count = len(window)
        out.message_bytes = sum(m.size_bytes for m in window)
        if window:
            out.minimum_publish_time.CopyFrom(min(window, key=lambda m: _ts_ns(m.publish_time)).publish_time)
            events = [m.message.event_time for m in window if m.message.HasField("event_time")]
            if events:
                out.minimum_event_time.CopyFrom(min(events, key=_ts_ns))
        return out

    async def _rpc_compute_time_cursor(self, req: Any) -> Any:
        part = self._partition(req.topic, req.partition)
        out = topic_stats.ComputeTimeCursorResponse.pb()()
        found = self._time_cursor(part, req.target)
        if found is not None:
            out.cursor.offset = found
        return out

    # -- streaming RPCs --------------------------------------------------------------------------

    @staticmethod
    async def _first(requests: AsyncIterator[Any], what: str) -> Any:
        """The stream's first request. Callers keep iterating the *same* iterator afterwards."""
        request = await anext(requests, None)
        if request is None:
            raise _invalid(f"stream closed before the initial {what} request")
        return request

    async def _rpc_publish(self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> None:
        """Publish stream for one partition; batches are appended atomically in arrival order.

        With a client id (idempotent publisher) a batch carries the sequence number of its first
        message; messages below the highest sequence number seen for (topic, partition, client)
        are duplicates from a retried batch: they are dropped and left out of ``cursor_ranges``.
        """
        requests = aiter(requests)
        first = await self._first(requests, "publish")
        if first.WhichOneof("request_type") != "initial_request":
            raise _invalid("first publish request must be an initial request")
        init = first.initial_request
        self._partition(init.topic, init.partition)  # validate
        response_type = publisher.PublishResponse.pb()
        initial = response_type()
        initial.initial_response.SetInParent()
        await context.write(initial)
        id_key = (init.topic, init.partition, bytes(init.client_id))
        async for request in requests:
            if request.WhichOneof("request_type") != "message_publish_request":
                raise _invalid("subsequent publish requests must be message publish requests")
            part = self._partition(init.topic, init.partition)
            batch = request.message_publish_request
            accepted: list[int] = list(range(len(batch.messages)))
            if init.client_id:
                next_seq = self._idempotence.get(id_key, 0)
                first_seq = batch.first_sequence_number
                accepted = [i for i in accepted if first_seq + i >= next_seq]
                self._idempotence[id_key] = max(next_seq, first_seq + len(batch.messages))
            offsets = self._append(part, [batch.messages[i] for i in accepted])
            response = response_type()
            resp = response.message_response
            if offsets:
                resp.start_cursor.offset = offsets[0]
            run_start = 0
            for j in range(1, len(accepted) + 1):
                if j == len(accepted) or accepted[j] != accepted[j - 1] + 1:
                    rng = resp.cursor_ranges.add()
                    rng.start_cursor.offset = offsets[run_start]
                    rng.start_index = accepted[run_start]
                    rng.end_index = accepted[j - 1] + 1
                    run_start = j
            await context.write(response)

    async def _rpc_subscribe(self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> None:
        """Deliver one partition from a start position, never exceeding the flow-control tokens."""
        requests = aiter(requests)
        first = await self._first(requests, "subscribe")
        if first.WhichOneof("request") != "initial":
            raise _invalid("first subscribe request must be an initial request")
        init = first.initial
        sub = self._subscription(init.subscription)
        part = self._partition(sub.proto.topic, init.partition)
        if init.partition in sub.unseen_seeks:
            sub.unseen_seeks.discard(init.partition)
            if init.initial_location.WhichOneof("target") == "cursor":
                # Resuming where it stopped would skip the seek: the client must first flush its
                # pre-seek commits (ignored) and come back from the committed cursor.
                sub.stale_commits.add(init.partition)
                await self._abort_reset(context)
        # A new stream after a seek means the client flushed its pre-seek commits.
        sub.stale_commits.discard(init.partition)
        start = self._resolve_seek(part, sub, init.partition, init.initial_location)
        session = _SubscribeSession(partition=init.partition, offset=start)
        response_type = subscriber.SubscribeResponse.pb()
        initial = response_type()
        initial.initial.cursor.offset = start
        await context.write(initial)

        async def read_requests() -> None:
            try:
                async for request in requests:
                    kind = request.WhichOneof("request")
                    if kind == "flow_control":
                        session.allowed_messages += request.flow_control.allowed_messages
                        session.allowed_bytes += request.flow_control.allowed_bytes
                    elif kind == "seek":
                        session.pending_seek = request.seek
                    else:
                        session.error = _invalid("unexpected initial request on an open subscribe stream")
                    session.wake.set()
            finally:
                session.closed = True
                session.wake.set()

        sub.sessions.add(session)
        part.listeners.add(session.wake)
        reader = asyncio.ensure_future(read_requests())
        try:
            while True:
                session.wake.clear()
                if session.error is not None:
                    raise session.error
                if session.reset:
                    await self._abort_reset(context)
                if session.pending_seek is not None:
                    seek, session.pending_seek = session.pending_seek, None
                    session.offset = self._resolve_seek(part, sub, init.partition, seek)
                    seek_response = response_type()
                    seek_response.seek.cursor.offset = session.offset
                    await context.write(seek_response)
                    continue
                if session.closed:
                    return
                batch = self._take(part, session)
                if batch:
                    response = response_type()
                    response.messages.messages.extend(batch)
                    await context.write(response)
                    continue
                await session.wake.wait()
        finally:
            reader.cancel()
            sub.sessions.discard(session)
            part.listeners.discard(session.wake)

    @staticmethod
    def _take(part: _Partition, session: _SubscribeSession) -> list[Any]:
        batch: list[Any] = []
        size = 0
        while session.offset < part.head and session.allowed_messages > 0:
            if len(batch) >= MAX_RESPONSE_MESSAGES:
                break
            message = part.log[session.offset]
            if message.size_bytes > session.allowed_bytes:
                break
            if batch and size + message.size_bytes > MAX_RESPONSE_BYTES:
                break
            batch.append(message)
            size += message.size_bytes
            session.allowed_messages -= 1
            session.allowed_bytes -= message.size_bytes
            session.offset += 1
        return batch

    @staticmethod
    async def _abort_reset(context: grpc.aio.ServicerContext) -> NoReturn:
        info = error_details_pb2.ErrorInfo(reason="RESET", domain=RESET_DOMAIN)
        detail = any_pb2.Any()
        detail.Pack(info)
        message = "subscriber must reset its state after a seek"
        status = status_pb2.Status(code=grpc.StatusCode.ABORTED.value[0], message=message, details=[detail])
        await context.abort(
            grpc.StatusCode.ABORTED,
            message,
            trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
        )
        raise AssertionError("unreachable")  # pragma: no cover

    async def _rpc_streaming_commit_cursor(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> None:
        requests = aiter(requests)
        first = await self._first(requests, "commit")
        if first.WhichOneof("request") != "initial":
            raise _invalid("first commit request must be an initial request")
        init = first.initial
        sub = self._subscription(init.subscription)
        self._partition(sub.proto.topic, init.partition)
        response_type = cursor.StreamingCommitCursorResponse.pb()
        initial = response_type()
        initial.initial.SetInParent()
        await context.write(initial)
        async for request in requests:
            if request.WhichOneof("request") != "commit":
                raise _invalid("subsequent commit requests must be commits")
            if init.partition not in sub.stale_commits:
                sub.cursors[init.partition] = request.commit.cursor.offset
            ack = response_type()
            ack.commit.acknowledged_commits = 1
            await context.write(ack)

    async def _rpc_assign_partitions(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> None:
        """Balance partitions over the subscription's clients; one outstanding assignment each."""
        requests = aiter(requests)
        first = await self._first(requests, "assignment")
        if first.WhichOneof("request") != "initial":
            raise _invalid("first assignment request must be an initial request")
        sub = self._subscription(first.initial.subscription)
        session = _AssignSession(client_id=bytes(first.initial.client_id))

        async def read_requests() -> None:
            try:
                async for request in requests:
                    if request.WhichOneof("request") == "ack":
                        session.awaiting_ack = False
                        session.wake.set()
            finally:
                session.closed = True
                session.wake.set()

        sub.assigners.append(session)
        self._rebalance(sub)
        reader = asyncio.ensure_future(read_requests())
        try:
            while True:
                session.wake.clear()
                if session.closed:
                    return
                if session.pending is not None and not session.awaiting_ack:
                    assignment = subscriber.PartitionAssignment.pb()(partitions=sorted(session.pending))
                    session.pending = None
                    session.awaiting_ack = True
                    await context.write(assignment)
                    continue
                await session.wake.wait()
        finally:
            reader.cancel()
            if session in sub.assigners:
                sub.assigners.remove(session)
            self._rebalance(sub)
