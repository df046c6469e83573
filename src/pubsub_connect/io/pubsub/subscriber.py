"""Receiving from Cloud Pub/Sub: synchronous pull and streaming pull, both handing out messages
*unacked*.

Nothing here acks on its own. :func:`pull_batch` and :meth:`StreamingPuller.collect` return
messages unacked; while the caller stages and commits them to Delta their deadlines are
extended (a :class:`~pubsub_connect.io.pubsub.leases.LeaseExtender` for synchronous pull, the
client's lease management for streaming pull), and the caller acks only after the commit. A
crash before that point means the messages are redelivered, never lost.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pubsub_connect.io.pubsub.credentials import Connection
from pubsub_connect.io.pubsub.errors import PubSubIOError
from pubsub_connect.io.pubsub.leases import MAX_ACK_DEADLINE_S, MIN_ACK_DEADLINE_S, AckResult, ack, nack
from pubsub_connect.model.error_text import one_line

if TYPE_CHECKING:  # the client libraries are imported lazily: importing them costs ~0.5 s
    from google.cloud import pubsub_v1
    from google.cloud.pubsub_v1 import types as ps_types

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SubscriberConfig:
    """The source's subscription keys as primitives (picklable)."""

    connection: Connection
    subscription: str
    max_batch_size: int = 100
    streaming: bool = False
    flow_control_messages: int = 1000
    flow_control_bytes: int = 100 * 1024 * 1024
    parallel_streams: int = 1
    max_ack_extension_ms: int = 0
    max_ms_per_ack_extension: int = 0

    @property
    def subscription_path(self) -> str:
        return self.connection.subscription_path(self.subscription)

    def stream_flow_control(self) -> ps_types.FlowControl:
        """Client ``FlowControl`` for *one* of ``parallel_streams`` streams: the connector's limits.

        The connector's limits are per task. Each Python streaming pull enforces its own
        limits, so the totals are split evenly across the streams (rounded up). A value of 0
        for the ack-extension keys means "library default", as in Google's connector.
        """
        from google.cloud.pubsub_v1 import types

        streams = max(1, self.parallel_streams)
        kwargs: dict[str, Any] = {
            "max_messages": max(1, -(-self.flow_control_messages // streams)),
            "max_bytes": max(1, -(-self.flow_control_bytes // streams)),
        }
        kwargs.update(self._lease_extension_limits())
        return types.FlowControl(**kwargs)

    def client_flow_control(self) -> ps_types.FlowControl:
        """The ``FlowControl`` the client is given for one stream.

        The Pub/Sub service honours the stream's flow control (the client sends its limits as
        ``max_outstanding_messages`` / ``bytes``): the connector's limits, as they are.

        The emulator ignores them. Measured with emulator 0.8.20: a stream opened with
        ``max_outstanding_messages=1000`` received 15,100 messages in 8 s without one ack. The
        client still pauses reading at its limits, so the rest wait in the transport, their
        60 s stream ack deadline running from when the emulator sent them and no lease on them
        (the client has not seen them). A backlog that takes longer than that to commit is then
        redelivered while it waits, and again: 20,000 messages gave 25,000 deliveries under load,
        50,000 never drained. On the emulator the client therefore takes in everything it is
        sent, so that every received message is leased at once, and :class:`StreamingPuller`
        applies the connector's limits where it hands out batches. The leases of that larger
        holding are extended by at least the stream's deadline, not by the client's 10 s with its
        1 s margin before expiry, so that renewing them under load does not lose any.
        """
        if not self.connection.uses_emulator:
            return self.stream_flow_control()
        from google.cloud.pubsub_v1 import types

        extension = self._lease_extension_limits()
        longest = extension.get("max_duration_per_lease_extension", EMULATOR_MIN_LEASE_EXTENSION_S)
        return types.FlowControl(max_messages=EMULATOR_CLIENT_UNLIMITED, max_bytes=EMULATOR_CLIENT_UNLIMITED,
                                 min_duration_per_lease_extension=min(longest, EMULATOR_MIN_LEASE_EXTENSION_S),
                                 **extension)

    def _lease_extension_limits(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.max_ack_extension_ms > 0:
            kwargs["max_lease_duration"] = self.max_ack_extension_ms / 1000.0
        if self.max_ms_per_ack_extension > 0:
            # Whole seconds between 10 and 600: the client copies this value into the
            # StreamingPullRequest's integer stream_ack_deadline_seconds. A float there fails
            # every stream (re)open, and the client only logs it and retries forever.
            kwargs["max_duration_per_lease_extension"] = int(
                min(MAX_ACK_DEADLINE_S, max(MIN_ACK_DEADLINE_S, self.max_ms_per_ack_extension // 1000)))
        return kwargs


#: On the emulator (which ignores stream flow control) the client's own limits, high enough never
#: to pause reading the stream: :meth:`SubscriberConfig.client_flow_control`.
EMULATOR_CLIENT_UNLIMITED = 2**62
#: On the emulator, the least time each lease extension asks for: the stream ack deadline the
#: Python client opens streams with by default.
EMULATOR_MIN_LEASE_EXTENSION_S = 60


def subscriber_client(config: SubscriberConfig | Connection) -> pubsub_v1.SubscriberClient:
    """An official ``SubscriberClient`` for the connection (emulator, endpoint, credentials)."""
    from google.cloud import pubsub_v1
    from google.cloud.pubsub_v1 import types
    from google.pubsub_v1.services.subscriber.transports.grpc import SubscriberGrpcTransport

    connection = config.connection if isinstance(config, SubscriberConfig) else config
    return pubsub_v1.SubscriberClient(types.SubscriberOptions(enable_open_telemetry_tracing=False),
                                      **connection.client_kwargs(SubscriberGrpcTransport))


@dataclass(frozen=True)
class PulledMessage:
    """One received message, in the shape of the Pub/Sub bronze table (plus its ack ID).

    ``delivery_attempt`` is ``None`` unless the subscription has a dead-letter policy (that is
    when Pub/Sub counts attempts).
    """

    message_id: str
    data: bytes
    attributes: dict[str, str]
    ordering_key: str
    publish_time: datetime
    delivery_attempt: int | None
    ack_id: str


def pull_batch(subscriber: Any, subscription_path: str, max_messages: int,
               timeout: float = 10.0) -> list[PulledMessage]:
    """Synchronous pull of up to ``max_messages`` (``cps.maxBatchSize``), *not* acked.

    Returns ``[]`` when nothing arrives within ``timeout`` seconds. Pub/Sub may return fewer
    messages than are available, so callers loop. Transient errors are retried within
    ``timeout``. Anything else (NOT_FOUND, PERMISSION_DENIED) is raised as
    :class:`PubSubIOError`.
    """
    from google.api_core import exceptions as gexc
    from google.api_core import retry as gretry
    from google.pubsub_v1 import types as gapic_types

    retry = gretry.Retry(
        predicate=gretry.if_exception_type(gexc.ServiceUnavailable, gexc.InternalServerError, gexc.Unknown,
                                           gexc.Aborted, gexc.ResourceExhausted),
        initial=0.1, maximum=2.0, multiplier=2.0, timeout=timeout,
    )
    try:
        response = subscriber.pull(
            request={"subscription": subscription_path, "max_messages": max_messages},
            retry=retry, timeout=timeout,
        )
    except gexc.DeadlineExceeded:
        return []
    except gexc.RetryError as exc:  # transient errors until the deadline: nothing pulled
        log.warning("pull from %s: %s", subscription_path, one_line(exc))
        return []
    except gexc.GoogleAPICallError as exc:
        raise PubSubIOError(f"pull from {subscription_path} failed: {one_line(exc)}") from exc
    # Read the raw protobuf: proto-plus wrappers cost several µs per field access.
    raw = gapic_types.PullResponse.pb(response)
    out = []
    for received in raw.received_messages:
        msg = received.message
        out.append(PulledMessage(
            message_id=msg.message_id,
            data=msg.data,
            attributes=dict(msg.attributes),
            ordering_key=msg.ordering_key,
            publish_time=msg.publish_time.ToDatetime(tzinfo=timezone.utc),
            delivery_attempt=received.delivery_attempt or None,
            ack_id=received.ack_id,
        ))
    return out



class StreamingPuller:
    """Streaming pull that hands out batches *without* acking them.

    Opens ``parallel_streams`` streams with the client's ``subscribe()``. Delivered messages
    stay under the client's lease management (deadlines extended up to ``maxAckExtensionMs``),
    so they stay leased for as long as the caller needs to commit them. Flow control
    (``flowControlMessages``/``Bytes``) counts them until they are acked or nacked, so one batch
    holds at most that many messages: the service's, and on the emulator (which sends more than
    that) this class's own (:meth:`SubscriberConfig.client_flow_control`). Typical use::

        with StreamingPuller(config) as puller:
            while running:
                batch = puller.collect(max_messages=1000, timeout=5.0)
                commit_to_delta(batch)
                puller.ack(batch)           # only after the commit

    A batch that reaches the flow-control limits is handed out at once: the client delivers
    nothing more until some of it is acked, so waiting out the window or the idle timeout would
    only add that wait to every batch of a backlog.

    Acks go out as synchronous Acknowledge RPCs (:func:`ack`), so the result is known
    (``INVALID_ACK_ID`` reported) when :meth:`ack` returns. Then the messages are dropped from
    lease management and flow control.

    On subscriptions with message ordering, the Python client delivers the next message of an
    ordering key only after the previous one was acked. A streaming batch therefore holds at
    most one message per ordering key. Use synchronous pull for ordered subscriptions with few
    keys.

    Emulator caveat (0.8.20): the emulator does not process a client's stream cancellation
    (``NoSuchMethodError`` in ``onRstStreamRead`` in its log), and neither does it process a
    killed process. It keeps sending redeliveries into the dead stream for a while. Messages
    left unacked by a closed or killed puller then come back only after one or more *stream*
    ack deadlines: 60 s by default in the Python client, or ``maxMsPerAckExtension`` when set.
    Seen on this machine: 10 to 70 s with a 10 s setting. The real service redelivers after the
    lease deadline.
    """

    def __init__(self, config: SubscriberConfig, subscriber: Any = None):
        self.config = config
        self._owns_client = subscriber is None
        self._subscriber = subscriber
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # ack_id → (client Message, monotonic receive time): to drop it from lease management
        # after ack/nack, and to forget messages whose lease the client stopped extending.
        self._held: dict[str, tuple[Any, float]] = {}
        ext_ms = config.max_ack_extension_ms
        self._lease_limit_s = ext_ms / 1000.0 if ext_ms > 0 else 3600.0  # client default: 1 h
        self._lock = threading.Lock()
        self._futures: list[Any] = []
        # What all streams together let through before they wait for acks (the client's flow
        # control admits messages while below both limits, so the last one may overshoot bytes).
        streams = max(1, config.parallel_streams)
        flow = config.stream_flow_control()
        self._flow_messages = int(flow.max_messages) * streams
        self._flow_bytes = int(flow.max_bytes) * streams
        self._held_bytes = 0

    @property
    def subscriber(self) -> Any:
        if self._subscriber is None:
            self._subscriber = subscriber_client(self.config)
        return self._subscriber

    def start(self) -> StreamingPuller:
        if self._futures:
            return self
        flow = self.config.client_flow_control()
        for _ in range(max(1, self.config.parallel_streams)):
            self._futures.append(self.subscriber.subscribe(self.config.subscription_path, self._queue.put,
                                                           flow_control=flow))
        return self

    def _check_streams(self) -> None:
        for future in self._futures:
            if future.done():
                exc = future.exception()
                if exc is not None:
                    raise PubSubIOError(f"streaming pull from {self.config.subscription_path} failed: "
                                        f"{one_line(exc)}") from exc

    def collect(self, max_messages: int, timeout: float,
                idle_timeout: float | None = None, linger: float | None = None) -> list[PulledMessage]:
        """Up to ``max_messages`` messages received within ``timeout`` seconds, unacked.

        With ``idle_timeout``, return earlier once at least one message arrived and no new one
        came for that long (useful to drain a backlog in ``--once`` mode). With ``linger``, return
        at most that long after the first message arrived (a low-latency caller: what came while
        it wrote the last batch is handed out at once, with what follows for ``linger``). Nothing, at once, while
        the messages handed out and not acked fill the flow-control limits: on the emulator the
        client holds more than that, and the limits are this method's to keep.
        """
        if not self._futures:
            self.start()
        self._forget_expired()
        deadline = time.monotonic() + timeout
        out: list[PulledMessage] = []
        last_at = time.monotonic()
        while len(out) < max_messages and not self._flow_saturated():
            now = time.monotonic()
            wait = deadline - now
            if out and idle_timeout is not None:
                wait = min(wait, idle_timeout)
            if wait <= 0:
                break
            try:
                message = self._queue.get(timeout=min(wait, 0.5))
            except queue.Empty:
                self._check_streams()
                if out and idle_timeout is not None and time.monotonic() - last_at >= idle_timeout:
                    break
                continue
            last_at = time.monotonic()
            if not out and linger is not None:
                deadline = min(deadline, last_at + linger)
            with self._lock:
                self._held[message.ack_id] = (message, last_at)
                self._held_bytes += message.size
            out.append(PulledMessage(
                message_id=message.message_id,
                data=message.data,
                attributes=dict(message.attributes),
                ordering_key=message.ordering_key,
                publish_time=message.publish_time,
                delivery_attempt=message.delivery_attempt,
                ack_id=message.ack_id,
            ))
        return out

    def _flow_saturated(self) -> bool:
        """Whether the held messages use up the flow-control limits of all streams together."""
        with self._lock:
            return len(self._held) >= self._flow_messages or self._held_bytes >= self._flow_bytes

    def _release(self, ack_ids: Sequence[str]) -> None:
        with self._lock:
            messages = [self._held.pop(i)[0] for i in ack_ids if i in self._held]
            self._held_bytes -= sum(message.size for message in messages)
        for message in messages:
            message.drop()

    def _forget_expired(self) -> None:
        """Forget held messages older than ``maxAckExtensionMs``: the client has stopped
        extending them, so Pub/Sub redelivers them. Keeping them would only leak memory."""
        if not self._held:
            return
        cutoff = time.monotonic() - self._lease_limit_s
        with self._lock:
            expired = [i for i, (_, received) in self._held.items() if received < cutoff]
            for ack_id in expired:
                self._held_bytes -= self._held.pop(ack_id)[0].size
        if expired:
            log.warning("%d message(s) from %s were held longer than maxAckExtensionMs=%d without ack; "
                        "Pub/Sub redelivers them", len(expired), self.config.subscription_path,
                        int(self._lease_limit_s * 1000))

    @staticmethod
    def _ids(items: Iterable[PulledMessage | str]) -> list[str]:
        return [i if isinstance(i, str) else i.ack_id for i in items]

    def ack(self, items: Iterable[PulledMessage | str]) -> AckResult:
        """Acknowledge (after the Delta commit), then release lease management / flow control."""
        ids = self._ids(items)
        try:
            return ack(self.subscriber, self.config.subscription_path, ids)
        finally:
            self._release(ids)

    def nack(self, items: Iterable[PulledMessage | str]) -> AckResult:
        """Give messages back for immediate redelivery."""
        ids = self._ids(items)
        try:
            return nack(self.subscriber, self.config.subscription_path, ids)
        finally:
            self._release(ids)

    @property
    def held(self) -> int:
        """Messages handed out and neither acked nor nacked yet."""
        return len(self._held)

    def close(self, timeout: float = 30.0, nack_held: bool = False) -> None:
        """Stop the streams. Messages still held are never acked. By default they are left
        to expire: their leases are no longer extended, and Pub/Sub redelivers them after the
        ack deadline, just as after a crash. With ``nack_held=True`` they are handed back for
        immediate redelivery (a clean shutdown that abandons an uncommitted batch). Messages
        the client had received but not handed out are nacked by the client."""
        for future in self._futures:
            future.cancel()
        for future in self._futures:
            try:
                future.result(timeout=timeout)
            except Exception as exc:  # cancelled / failed streams: nothing more to do
                log.debug("streaming pull ended: %s", one_line(exc))
        self._futures = []
        # Nack only after the streams are gone, so the messages cannot come straight back to us.
        if nack_held and self._held and self._subscriber is not None:
            try:
                nack(self._subscriber, self.config.subscription_path, list(self._held))
            except PubSubIOError as exc:  # they expire instead; nothing is lost
                log.warning("nack of %d held message(s) failed: %s", len(self._held), exc)
        # Anything the scheduler delivered after we stopped looking stays unacked as well.
        with self._lock:
            self._held.clear()
            self._held_bytes = 0
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._owns_client and self._subscriber is not None:
            self._subscriber.close()
            self._subscriber = None

    def __enter__(self) -> StreamingPuller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
