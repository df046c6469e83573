"""Publishing to Cloud Pub/Sub: the publisher's settings and :class:`BatchPublisher`.

:class:`PublisherConfig` holds the sink's publisher settings as primitives (the pipeline layer
maps the connector's keys to it); :func:`publisher_settings` turns them into the official
client's batching, flow control, retry and timeout settings; :class:`BatchPublisher` publishes
one micro-batch partition and succeeds only if every message was accepted (at-least-once: a
failed batch raises :class:`PublishError`, is not committed, and Spark retries it).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pubsub_connect.config.keys import LONG_MAX
from pubsub_connect.io.pubsub.credentials import Connection
from pubsub_connect.io.pubsub.errors import PubSubIOError
from pubsub_connect.io.pubsub.publish_rpc import (
    RESERVED_ATTRIBUTE_NAMES,
    alias_reserved_attributes,
    connector_publisher_class,
)
from pubsub_connect.io.pubsub.request_sender import (
    MIN_ATTEMPT_S,
    RETRYABLE_CODES,
    RequestSender,
    sender_settings,
)
from pubsub_connect.model.error_text import one_line

if TYPE_CHECKING:  # the client libraries are imported lazily: importing them costs ~0.5 s
    import pyarrow as pa
    from google.cloud import pubsub_v1
    from google.cloud.pubsub_v1 import types as ps_types

log = logging.getLogger(__name__)


class PublishError(PubSubIOError):
    """Some messages of a batch were not published. The batch must not be committed."""

    def __init__(self, message: str, *, failed: int, total: int, first_error: BaseException | None,
                 resumed_keys: Sequence[str] = ()):
        super().__init__(message)
        self.failed = failed
        self.total = total
        self.first_error = first_error
        self.resumed_keys = tuple(resumed_keys)


@dataclass(frozen=True)
class PublisherConfig:
    """The sink's publisher keys as primitives. Picklable; build clients from it in a worker."""

    connection: Connection
    topic: str
    max_messages: int = 100
    max_bytes: int = 9_500_000
    max_latency_ms: int = 100
    flow_control_messages: int = LONG_MAX
    flow_control_bytes: int = LONG_MAX
    request_timeout_ms: int = 10_000
    total_timeout_ms: int = 60_000
    shutdown_timeout_ms: int = 60_000
    enable_message_ordering: bool = False
    enable_compression: bool = False
    compression_bytes_threshold: int = 240

    @property
    def topic_path(self) -> str:
        return self.connection.topic_path(self.topic)


#: Errors worth retrying for Publish: those of :data:`.request_sender.RETRYABLE_CODES`, the codes
#: the client's own default publish retry uses. Anything else (NOT_FOUND, PERMISSION_DENIED,
#: INVALID_ARGUMENT) fails at once.
def _publish_retry_predicate() -> Callable[[BaseException], bool]:
    import grpc
    from google.api_core import exceptions as gexc
    from google.api_core import retry as gretry

    return gretry.if_exception_type(*(gexc.exception_class_for_grpc_status(grpc.StatusCode[code])
                                      for code in sorted(RETRYABLE_CODES)))


class _AttemptTimeout:
    """Per-attempt RPC timeout, capped by what is left of the total budget.

    This reproduces the Java settings the connector exposes: ``maxRequestTimeoutMs`` bounds one
    RPC and ``maxTotalTimeoutMs`` bounds the call including retries. api_core offers
    only one of the two per object (constant timeout, or time-to-deadline), so it is composed
    here. api_core calls the instance once per logical call, which starts the total budget.
    """

    def __init__(self, attempt_s: float, total_s: float):
        self.attempt_s = attempt_s
        self.total_s = total_s

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        start = time.monotonic()

        @functools.wraps(func)
        def with_timeout(*args: Any, **kwargs: Any) -> Any:
            remaining = self.total_s - (time.monotonic() - start)
            kwargs["timeout"] = max(MIN_ATTEMPT_S, min(self.attempt_s, remaining))
            return func(*args, **kwargs)

        return with_timeout

    def __repr__(self) -> str:
        return f"_AttemptTimeout(attempt_s={self.attempt_s}, total_s={self.total_s})"


def _flow_control(max_messages: int, max_bytes: int) -> ps_types.PublishFlowControl:
    """Long.MAX_VALUE (Google's default for both keys) means "no flow control". The client
    then skips all accounting (IGNORE) instead of counting against a limit it never reaches.
    With any finite limit it blocks (like Java's ``LimitExceededBehavior.Block``), and a key left
    at Long.MAX_VALUE stays effectively unlimited."""
    from google.cloud.pubsub_v1 import types

    if max_messages >= LONG_MAX and max_bytes >= LONG_MAX:
        return types.PublishFlowControl(message_limit=LONG_MAX, byte_limit=LONG_MAX,
                                        limit_exceeded_behavior=types.LimitExceededBehavior.IGNORE)
    return types.PublishFlowControl(message_limit=max_messages, byte_limit=max_bytes,
                                    limit_exceeded_behavior=types.LimitExceededBehavior.BLOCK)



def publisher_settings(config: PublisherConfig) -> tuple[ps_types.BatchSettings, ps_types.PublisherOptions]:
    """``(BatchSettings, PublisherOptions)`` for ``pubsub_v1.PublisherClient`` from the sink keys.

    - batching: ``maxBufferSize`` / ``maxBufferBytes`` / ``delayThresholdMs``;
    - ordering: enabled whenever ``orderingKeySource`` is not ``none`` (the client rejects
      ordering keys otherwise);
    - flow control: ``maxOutstandingMessages`` / ``maxOutstandingRequestBytes``, blocking;
    - retry: transient codes retried with backoff, each RPC bounded by ``maxRequestTimeoutMs``,
      the whole call by ``maxTotalTimeoutMs``;
    - OpenTelemetry off: it costs time per message and the pipelines report their own progress.

    ``enableCompression`` is not a client setting in google-cloud-pubsub 2.44 (Java and Go
    have it; Python does not). :func:`publisher_client` applies it per request instead.
    """
    from google.api_core import retry as gretry
    from google.cloud.pubsub_v1 import types

    total_s = config.total_timeout_ms / 1000.0
    batch = types.BatchSettings(
        max_bytes=config.max_bytes,
        max_latency=config.max_latency_ms / 1000.0,
        max_messages=config.max_messages,
    )
    retry = gretry.Retry(
        predicate=_publish_retry_predicate(),
        initial=0.1,
        maximum=min(60.0, max(0.1, total_s)),
        multiplier=2.0,
        timeout=total_s,
    )
    options = types.PublisherOptions(
        enable_message_ordering=config.enable_message_ordering,
        flow_control=_flow_control(config.flow_control_messages, config.flow_control_bytes),
        retry=retry,
        timeout=_AttemptTimeout(config.request_timeout_ms / 1000.0, total_s),
        enable_open_telemetry_tracing=False,
    )
    return batch, options




def publisher_client(config: PublisherConfig) -> pubsub_v1.PublisherClient:
    """An official ``PublisherClient`` configured from the sink keys (see :func:`publisher_settings`)."""
    from google.pubsub_v1.services.publisher.transports.grpc import PublisherGrpcTransport

    batch, options = publisher_settings(config)
    cls = connector_publisher_class()
    return cls(
        batch, options,
        connector_retry=options.retry,
        connector_timeout=options.timeout,
        compression_threshold=config.compression_bytes_threshold if config.enable_compression else None,
        **config.connection.client_kwargs(PublisherGrpcTransport),
    )


@dataclass(frozen=True)
class PublishStats:
    """What one :meth:`BatchPublisher.publish_all` call did."""

    messages: int
    data_bytes: int
    seconds: float

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Settled:
    """What the publishes of one :meth:`BatchPublisher.publish_all` call came to so far."""

    failed: int = 0
    first_error: BaseException | None = None
    failed_keys: dict[str, None] = field(default_factory=dict)  # ordering keys with a failure, in order
    stalled: BaseException | None = None


#: One message to publish: ``(data, attributes or None, ordering_key or None)`` (an outbox row).
OutboxMessage = tuple[bytes, "dict[str, str] | None", "str | None"]


def outbox_messages(batches: Iterable[pa.RecordBatch]) -> Iterator[OutboxMessage]:
    """The rows of outbox Arrow batches as :data:`OutboxMessage` tuples, one batch at a time."""
    for batch in batches:
        data = batch.column("data").to_pylist()
        attributes = batch.column("attributes").to_pylist()
        ordering_keys = batch.column("ordering_key").to_pylist()
        for body, attrs, key in zip(data, attributes, ordering_keys, strict=True):
            yield body, dict(attrs) if attrs else {}, key or ""


class BatchPublisher:
    """Publishes one micro-batch partition and succeeds only if every message was accepted.

    Build it from a :class:`PublisherConfig` anywhere. The client is created on first use, so
    a pickled config becomes a working publisher inside a Spark Python worker. Not thread-safe:
    one instance per task (per-key ordering depends on publishing from one thread anyway).

    >>> with BatchPublisher(config) as pub:          # doctest: +SKIP
    ...     stats = pub.publish_all(rows)          # raises PublishError if anything failed
    """

    #: Extra seconds granted on top of maxTotalTimeoutMs when waiting for a batch to make
    #: progress: batching delay, flow control and scheduling.
    PROGRESS_SLACK_S = 10.0
    #: Most messages (and data bytes) handed to the client and not yet settled. Without a window
    #: the client queues a whole Spark partition when reading outruns publishing, and the worker's
    #: memory grows with the micro-batch; with it memory stays bounded while hundreds of batches
    #: are still in flight. The user's flow-control keys, when lower, still apply in the client.
    WINDOW_MESSAGES = 20_000
    WINDOW_BYTES = 64 * 1024 * 1024

    def __init__(self, config: PublisherConfig,
                 client_factory: Callable[[PublisherConfig], Any] | None = None):
        self.config = config
        self._client_factory = client_factory or publisher_client
        self._client: Any = None
        self._closed = False

    # The lazily built client is not picklable. A BatchPublisher may be pickled before use
    # (e.g. captured in a Spark closure), so only the config travels.
    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_client_factory": self._client_factory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"], state["_client_factory"])  # type: ignore[misc]

    def __repr__(self) -> str:
        state = "open" if self._client else "lazy"
        return f"BatchPublisher(topic={self.config.topic_path!r}, client={state})"

    @property
    def client(self) -> Any:
        if self._closed:
            raise PubSubIOError("BatchPublisher is closed")
        if self._client is None:
            self._client = self._client_factory(self.config)
        return self._client

    def publish_all(self, messages: Iterable[OutboxMessage], topic_path: str | None = None) -> PublishStats:
        """Publish ``(data, attributes, ordering_key)`` tuples and wait for every result.

        ``attributes`` and ``ordering_key`` may be ``None``/empty. Returns when all messages
        have been acknowledged by Pub/Sub. Otherwise raises :class:`PublishError` (one line:
        failure count, first error). Before raising, every ordering key with a failure is
        resumed, so the retried batch can publish on it again. Messages that did get published
        before a failure are published again by the retry (at-least-once).
        """
        topic = topic_path or self.config.topic_path
        client = self.client
        publish = client.publish
        ordering = self.config.enable_message_ordering
        reserved = RESERVED_ATTRIBUTE_NAMES
        pending: collections.deque[tuple[Any, str, int]] = collections.deque()  # future, key, data bytes
        pending_bytes = 0
        settled = _Settled()
        published = 0
        data_bytes = 0
        sync_error: BaseException | None = None
        start = time.monotonic()
        try:
            for data, attributes, ordering_key in messages:
                key = ordering_key or ""
                if attributes:
                    if not reserved.isdisjoint(attributes):
                        attributes = self._alias_reserved(attributes)
                    future = publish(topic, data, key, **attributes)
                else:
                    future = publish(topic, data, key)
                pending.append((future, key if ordering else "", len(data)))
                published += 1
                pending_bytes += len(data)
                data_bytes += len(data)
                if len(pending) >= self.WINDOW_MESSAGES or pending_bytes >= self.WINDOW_BYTES:
                    oldest = [pending.popleft() for _ in range(max(1, len(pending) // 2))]
                    pending_bytes -= sum(size for _, _, size in oldest)
                    self._wait(oldest, settled)
                    if settled.failed:  # the batch fails anyway: publish no more of it
                        break
        except Exception as exc:  # a message the client refused synchronously (type, size, …)
            sync_error = exc
        self._wait(list(pending), settled)
        resumed = self._resume(topic, list(settled.failed_keys))
        seconds = time.monotonic() - start
        if sync_error is not None or settled.failed:
            total = published + (1 if sync_error is not None else 0)
            failures = settled.failed + (1 if sync_error is not None else 0)
            first = sync_error if sync_error is not None else settled.first_error
            where = "stopped at a message the client rejected; " if sync_error is not None else ""
            raise self._publish_error(topic, failures, total, first, where, resumed)
        return PublishStats(messages=published, data_bytes=data_bytes, seconds=seconds)

    def publish_batches(self, batches: Iterable[pa.RecordBatch], topic_path: str | None = None) -> PublishStats:
        """Publish outbox Arrow batches (``data``, ``attributes``, ``ordering_key``); same outcome
        and errors as :meth:`publish_all`.

        Without message ordering the batches are encoded as whole ``PublishRequest``s and sent on
        the client's channel (:mod:`.request_sender`), with no per-message work in Python. With
        ordering, each key needs the client's sequencing, so the rows go through :meth:`publish_all`.
        """
        if self.config.enable_message_ordering:
            return self.publish_all(outbox_messages(batches), topic_path)
        from pubsub_connect.model.pubsub_wire import framed_messages

        topic = topic_path or self.config.topic_path
        start = time.monotonic()
        sender = self._request_sender(topic)
        outcome = sender.send_all(framed_messages(batch.column("data"), batch.column("attributes"))
                                  for batch in batches)
        self.client.compressed_requests += sender.compressed_requests
        if outcome.failed:
            raise self._publish_error(topic, outcome.failed, outcome.sent, outcome.first_error)
        return PublishStats(messages=outcome.sent, data_bytes=outcome.data_bytes, seconds=time.monotonic() - start)

    def _publish_error(self, topic: str, failed: int, total: int, first: BaseException | None, where: str = "",
                       resumed: Sequence[str] = ()) -> PublishError:
        """The one line a failed batch reports, the same from either publishing path."""
        detail = one_line(first, self.config.connection.secrets()) if first is not None else "unknown error"
        resumed_text = f"; resumed {len(resumed)} ordering key(s)" if resumed else ""
        return PublishError(f"publish to {topic} failed: {where}{failed} of {total} message(s) not published"
                            f"{resumed_text}; first error: {detail}",
                            failed=failed, total=total, first_error=first, resumed_keys=resumed)

    def _request_sender(self, topic: str) -> RequestSender:
        from google.pubsub_v1.services.publisher.transports.base import DEFAULT_CLIENT_INFO

        cfg = self.config
        settings = sender_settings(
            topic, max_messages=cfg.max_messages, max_bytes=cfg.max_bytes,
            request_timeout_ms=cfg.request_timeout_ms, total_timeout_ms=cfg.total_timeout_ms,
            flow_control_messages=cfg.flow_control_messages, flow_control_bytes=cfg.flow_control_bytes,
            window_messages=self.WINDOW_MESSAGES, window_bytes=self.WINDOW_BYTES,
            compression_threshold=cfg.compression_bytes_threshold if cfg.enable_compression else None)
        return RequestSender(self.client.transport.grpc_channel, settings, (DEFAULT_CLIENT_INFO.to_grpc_metadata(),))

    def _alias_reserved(self, attributes: dict[str, str]) -> dict[str, str]:
        self.client.aliased_attributes = True  # the client renames them back (publish_rpc)
        return alias_reserved_attributes(attributes)

    def _wait(self, futures: list[tuple[Any, str, int]], settled: _Settled) -> None:
        """Wait for every ``(future, ordering key, size)`` and add the outcome to ``settled``. A
        publish with no progress for maxTotalTimeoutMs + slack counts as failed, so a hung RPC
        cannot hang the Spark task for ever; once one stalled, the rest is not waited for."""
        cfg = self.config
        stall_s = (cfg.total_timeout_ms + cfg.max_latency_ms) / 1000.0 + self.PROGRESS_SLACK_S
        last_progress = time.monotonic()
        for future, key, _size in futures:
            if future.done():
                exc = future.exception()
            elif settled.stalled is not None:
                exc = settled.stalled
            else:
                remaining = stall_s - (time.monotonic() - last_progress)
                try:
                    exc = future.exception(timeout=max(0.0, remaining))
                except concurrent.futures.TimeoutError:
                    exc = settled.stalled = PubSubIOError(f"no publish result within {stall_s:.1f} s")
                last_progress = time.monotonic()
            if exc is not None:
                settled.failed += 1
                if settled.first_error is None:
                    settled.first_error = exc
                if key:
                    settled.failed_keys[key] = None

    def _resume(self, topic: str, keys: list[str]) -> list[str]:
        resumed = []
        for key in keys:
            try:
                self.client.resume_publish(topic, key)
                resumed.append(key)
            except Exception as exc:  # never hide the publish failure behind a resume failure
                log.warning("could not resume ordering key %r on %s: %s", key, topic, one_line(exc))
        return resumed

    def close(self, timeout: float | None = None) -> None:
        """Flush and stop the client, then close its channel. Waits at most ``timeout`` seconds
        (default ``maxShutdownTimeoutMs``). After publish_all returned nothing is pending, so
        this is quick. It matters after a failed batch, when publishes may still be in flight."""
        if self._closed:
            return
        self._closed = True
        client, self._client = self._client, None
        if client is None:
            return
        timeout = self.config.shutdown_timeout_ms / 1000.0 if timeout is None else timeout
        stopper = threading.Thread(target=_stop_publisher, args=(client,), name="pubsub-publisher-stop",
                                   daemon=True)
        stopper.start()
        stopper.join(timeout)
        if stopper.is_alive():
            log.warning("Pub/Sub publisher did not stop within %.1f s; closing its channel anyway", timeout)
        try:
            client.transport.close()
        except Exception as exc:
            log.debug("closing publisher channel: %s", one_line(exc))

    def __enter__(self) -> BatchPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stop_publisher(client: Any) -> None:
    try:
        client.stop()
    except Exception as exc:
        log.debug("stopping publisher: %s", one_line(exc))
