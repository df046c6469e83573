"""Cloud Pub/Sub wiring: connector config → the official ``google-cloud-pubsub`` clients.

This module is the only place that talks to Pub/Sub. It contains no Spark code, so the pipelines
can call it from a driver *or* from inside a Spark Python worker. That one constraint shapes
most of the design:

- Config objects (:class:`Connection`, :class:`PublisherConfig`, :class:`SubscriberConfig`) are
  frozen dataclasses of primitives. They pickle into a worker, and the gRPC clients are built
  lazily on the worker side (a channel cannot be pickled).
- The emulator host is captured when the config is built on the driver. A Spark worker does not
  necessarily see environment variables exported after the JVM started, so the worker must not
  rely on ``PUBSUB_EMULATOR_HOST``. The clients are always given an explicit plaintext channel.
- Secrets (``gcp.credentials.json``) travel inside the pickled config (the worker needs them to
  authenticate), but they never show up in ``repr``/``str``, logs or error messages.

Delivery guarantees the pipelines build on:

- **Publish (sink)**: :meth:`BatchPublisher.publish_all` returns only when *every* future has
  succeeded, and raises :class:`PublishError` otherwise. The Spark task then fails and the
  micro-batch is not committed. It is retried, so delivery is at-least-once and nothing is
  lost. Failed ordering keys are resumed before raising, so the retried batch is not stuck
  behind a paused key.
- **Pull (source)**: nothing here acks on its own. :func:`pull_batch` and
  :meth:`StreamingPuller.collect` return messages *unacked*. While the caller stages and commits
  them to Delta, their deadlines are extended: by a :class:`LeaseExtender` (synchronous pull) or
  by the client's lease management (streaming pull). The caller acks with :func:`ack` /
  :meth:`StreamingPuller.ack` only after the commit. A crash before that point means the
  messages are redelivered, never lost. Acks that come back ``INVALID_ACK_ID`` (exactly-once
  subscriptions, an expired lease) are *reported*, not raised. The message was committed, its
  redelivery gives a duplicate ``message_id``, and the convert stage drops it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pubsub_connect.config import CPS_ENDPOINT, LONG_MAX, ConfigError, ConnectorConfig

if TYPE_CHECKING:  # the client libraries are imported lazily: importing them costs ~0.5 s
    from google.cloud import pubsub_v1
    from google.cloud.pubsub_v1 import types as ps_types

log = logging.getLogger(__name__)

EMULATOR_ENV = "PUBSUB_EMULATOR_HOST"

#: Pub/Sub rejects Acknowledge/ModifyAckDeadline requests above 512 KB. Ack IDs are a few
#: hundred bytes on the real service, so the Python client sends 1000 per request. We do the
#: same and never exceed 2500 (the documented hard maximum).
ACK_IDS_PER_REQUEST = 1000
MAX_ACK_IDS_PER_REQUEST = 2500
#: Ack deadlines the service accepts (seconds).
MIN_ACK_DEADLINE_S = 10
MAX_ACK_DEADLINE_S = 600

# Attribute names that collide with parameters of ``PublisherClient.publish(topic, data,
# ordering_key, retry, timeout, **attrs)``. A message attribute with one of these names cannot
# be passed as a keyword. It would either raise TypeError or, worse, silently become the
# retry/timeout. Such attributes travel under a private alias and are renamed back right
# before the RPC (see _ConnectorPublisherClient._gapic_publish).
_RESERVED_ATTRIBUTE_NAMES = frozenset({"self", "topic", "data", "ordering_key", "retry", "timeout"})
_ALIAS_PREFIX = "\x00pubsub-connect-attr\x00"


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class PubSubIOError(RuntimeError):
    """A Pub/Sub operation failed at run time. ``str(err)`` is one line, safe to print."""


class PublishError(PubSubIOError):
    """Some messages of a batch were not published. The batch must not be committed."""

    def __init__(self, message: str, *, failed: int, total: int, first_error: BaseException | None,
                 resumed_keys: Sequence[str] = ()):
        super().__init__(message)
        self.failed = failed
        self.total = total
        self.first_error = first_error
        self.resumed_keys = tuple(resumed_keys)


class AckError(PubSubIOError):
    """Acknowledge / ModifyAckDeadline failed for a reason other than expired ack IDs."""


def _one_line(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """``Type: message`` on one line, secrets scrubbed. It goes into user-facing errors."""
    text = " ".join(str(exc).split()) or repr(exc)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "********")
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}"


# --------------------------------------------------------------------------------------------
# Connection: endpoint, emulator and credentials
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    """Where and as whom to connect. Primitives only, so it can be pickled into Spark workers.

    Credential precedence follows Google's connector: ``gcp.credentials.json`` >
    ``gcp.credentials.file.path`` > Application Default Credentials (which include
    ``GOOGLE_APPLICATION_CREDENTIALS``). With an emulator host, no credentials are used at all.
    """

    project: str
    endpoint: str = CPS_ENDPOINT
    emulator_host: str | None = None
    credentials_file: str | None = None
    credentials_json: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:  # explicit: the secret must not leak via a default dataclass repr
        secret = "********" if self.credentials_json else None
        return (f"Connection(project={self.project!r}, endpoint={self.endpoint!r}, "
                f"emulator_host={self.emulator_host!r}, credentials_file={self.credentials_file!r}, "
                f"credentials_json={secret!r})")

    __str__ = __repr__

    @classmethod
    def from_connector(cls, config: ConnectorConfig) -> Connection:
        """Resolve endpoint/emulator/credentials keys. Call this on the driver, where the user's
        environment (``PUBSUB_EMULATOR_HOST``) is the one that counts.

        ``cps.useEmulator=true`` without ``PUBSUB_EMULATOR_HOST`` is a config error. Setting
        ``PUBSUB_EMULATOR_HOST`` alone also selects the emulator, the same rule the Google
        client libraries apply.
        """
        env_host = os.environ.get(EMULATOR_ENV, "").strip() or None
        if config.get("cps.useEmulator") and not env_host:
            raise ConfigError(f"{config.source}: cps.useEmulator=true but {EMULATOR_ENV} is not set "
                              f"(start the emulator, e.g. `pubsub-connect services up`, and export "
                              f"{EMULATOR_ENV}=host:port)")
        creds_json = config.get("gcp.credentials.json")
        if creds_json:
            try:
                parsed = json.loads(creds_json)
            except ValueError:
                raise ConfigError(f"{config.source}: gcp.credentials.json is not valid JSON (expected "
                                  "the content of a Google credentials file)") from None
            if not isinstance(parsed, dict):
                raise ConfigError(f"{config.source}: gcp.credentials.json must be a JSON object")
        return cls(
            project=str(config.get("cps.project")),
            endpoint=str(config.get("cps.endpoint") or CPS_ENDPOINT),
            emulator_host=env_host,
            credentials_file=config.get("gcp.credentials.file.path") or None,
            credentials_json=creds_json or None,
        )

    @classmethod
    def for_emulator(cls, project: str, host: str | None = None) -> Connection:
        """A connection to a local emulator (default: ``$PUBSUB_EMULATOR_HOST``), for tests/quickstart."""
        host = host or os.environ.get(EMULATOR_ENV)
        if not host:
            raise ConfigError(f"no emulator host given and {EMULATOR_ENV} is not set")
        return cls(project=project, emulator_host=host)

    @property
    def uses_emulator(self) -> bool:
        return bool(self.emulator_host)

    def secrets(self) -> tuple[str, ...]:
        return (self.credentials_json,) if self.credentials_json else ()

    def topic_path(self, topic: str) -> str:
        return topic if topic.startswith("projects/") else f"projects/{self.project}/topics/{topic}"

    def subscription_path(self, subscription: str) -> str:
        if subscription.startswith("projects/"):
            return subscription
        return f"projects/{self.project}/subscriptions/{subscription}"

    def credentials(self) -> Any:
        """Google credentials for this connection, or ``None`` for the emulator.

        Credentials are resolved here and not inside the client, so that a missing or broken
        setup is reported as one actionable line (:class:`ConfigError`) rather than
        google-auth's multi-line message. The secret is kept out of the message.
        """
        if self.uses_emulator:
            return None
        import google.auth
        from google.auth import exceptions as auth_exceptions

        if self.credentials_json:
            try:
                creds, _ = google.auth.load_credentials_from_dict(json.loads(self.credentials_json))
            except (auth_exceptions.DefaultCredentialsError, ValueError, KeyError) as exc:
                raise ConfigError("gcp.credentials.json does not hold usable Google credentials "
                                  f"({_one_line(exc, self.secrets())})") from None
            return creds
        if self.credentials_file:
            try:
                creds, _ = google.auth.load_credentials_from_file(self.credentials_file)
            except (auth_exceptions.DefaultCredentialsError, ValueError, KeyError, OSError) as exc:
                raise ConfigError(f"gcp.credentials.file.path={self.credentials_file!r} does not hold usable "
                                  f"Google credentials ({_one_line(exc)})") from None
            return creds
        try:
            creds, _ = google.auth.default()
        except auth_exceptions.DefaultCredentialsError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"no Google Cloud credentials found for project {self.project!r} ({first}): set "
                "gcp.credentials.file.path or gcp.credentials.json, export GOOGLE_APPLICATION_CREDENTIALS, "
                "or run `gcloud auth application-default login`; for the local emulator set "
                f"cps.useEmulator=true and {EMULATOR_ENV}") from None
        return creds

    def client_kwargs(self, transport_cls: Any) -> dict[str, Any]:
        """Keyword arguments for a Pub/Sub client class whose gRPC transport is ``transport_cls``."""
        if self.uses_emulator:
            import grpc

            # Plaintext channel to the emulator with unlimited message sizes, like the client
            # would build from PUBSUB_EMULATOR_HOST. Pub/Sub messages go up to 10 MB, gRPC's
            # default receive limit is 4 MB.
            channel = grpc.insecure_channel(
                self.emulator_host,
                options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
            )
            return {"transport": transport_cls(channel=channel, host=self.emulator_host)}
        kwargs: dict[str, Any] = {"credentials": self.credentials()}
        if self.endpoint and self.endpoint != CPS_ENDPOINT:
            kwargs["client_options"] = {"api_endpoint": self.endpoint}
        return kwargs


# --------------------------------------------------------------------------------------------
# Publisher settings
# --------------------------------------------------------------------------------------------


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

    @classmethod
    def from_connector(cls, config: ConnectorConfig) -> PublisherConfig:
        """Map a ``CloudPubSubSinkConnector`` config (keys as in Google's connector)."""
        return cls(
            connection=Connection.from_connector(config),
            topic=str(config.get("cps.topic")),
            max_messages=int(config.get("maxBufferSize")),
            max_bytes=int(config.get("maxBufferBytes")),
            max_latency_ms=int(config.get("delayThresholdMs")),
            flow_control_messages=int(config.get("maxOutstandingMessages")),
            flow_control_bytes=int(config.get("maxOutstandingRequestBytes")),
            request_timeout_ms=int(config.get("maxRequestTimeoutMs")),
            total_timeout_ms=int(config.get("maxTotalTimeoutMs")),
            shutdown_timeout_ms=int(config.get("maxShutdownTimeoutMs")),
            enable_message_ordering=config.get("orderingKeySource") != "none",
            enable_compression=bool(config.get("enableCompression")),
            compression_bytes_threshold=int(config.get("compressionBytesThreshold")),
        )

    @property
    def topic_path(self) -> str:
        return self.connection.topic_path(self.topic)


#: Errors worth retrying for Publish. These are the codes the client's own default publish
#: retry uses. Anything else (NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT) fails at once.
def _publish_retry_predicate() -> Callable[[BaseException], bool]:
    from google.api_core import exceptions as gexc
    from google.api_core import retry as gretry

    return gretry.if_exception_type(
        gexc.Aborted, gexc.Cancelled, gexc.DeadlineExceeded, gexc.InternalServerError,
        gexc.ResourceExhausted, gexc.ServiceUnavailable, gexc.Unknown,
    )


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
            kwargs["timeout"] = max(0.5, min(self.attempt_s, remaining))
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


def publisher_settings(config: PublisherConfig | ConnectorConfig) -> tuple[ps_types.BatchSettings,
                                                                           ps_types.PublisherOptions]:
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

    if isinstance(config, ConnectorConfig):
        config = PublisherConfig.from_connector(config)
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


@functools.lru_cache(maxsize=1)
def _connector_publisher_class() -> type:
    """The publisher client subclass, created on first use (keeps the import lazy)."""
    import grpc
    from google.api_core import gapic_v1
    from google.cloud import pubsub_v1
    from google.pubsub_v1 import types as gapic_types

    class _ConnectorPublisherClient(pubsub_v1.PublisherClient):  # type: ignore[misc]
        """The official publisher plus three things the connector needs. Everything is done in
        ``_gapic_publish``, once per batch and never per message:

        1. gzip compression of Publish requests of at least ``compression_bytes_threshold``
           bytes (``enableCompression``), applied per call like Java/Go do. The Python client
           has no such option (googleapis/python-pubsub#854).
        2. A bounded retry even with message ordering. The client switches ordered publishes
           to an unbounded deadline (2**32 s). A connector task would then hang for ever on an
           outage instead of failing the micro-batch so that Spark retries it.
        3. Attributes whose names collide with ``publish()`` parameters get their names back.
        """

        def __init__(self, *args: Any, connector_retry: Any, connector_timeout: Any,
                     compression_threshold: int | None, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self._connector_retry = connector_retry
            self._connector_timeout = connector_timeout
            self._compression_threshold = compression_threshold
            self._aliased_attributes = False
            self.compressed_requests = 0  # observable for tests and progress reporting

        def _gapic_publish(self, *args: Any, **kwargs: Any) -> Any:
            kwargs["retry"] = self._connector_retry
            kwargs["timeout"] = self._connector_timeout
            if self._aliased_attributes:
                kwargs["messages"] = _restore_aliased_attributes(kwargs.get("messages") or ())
            if self._compression_threshold is None:
                return super()._gapic_publish(*args, **kwargs)
            request = gapic_types.PublishRequest(topic=kwargs["topic"], messages=kwargs["messages"])
            if gapic_types.PublishRequest.pb(request).ByteSize() < self._compression_threshold:
                return super()._gapic_publish(request=request, retry=kwargs["retry"],
                                              timeout=kwargs["timeout"])
            # Same steps as the generated PublisherClient.publish, plus compression.
            rpc = self._transport._wrapped_methods[self._transport.publish]
            metadata = (gapic_v1.routing_header.to_grpc_metadata((("topic", request.topic),)),)
            validate = getattr(self, "_validate_universe_domain", None)
            if validate is not None:
                validate()
            self.compressed_requests += 1
            return rpc(request, retry=kwargs["retry"], timeout=kwargs["timeout"], metadata=metadata,
                       compression=grpc.Compression.Gzip)

    return _ConnectorPublisherClient


def _restore_aliased_attributes(messages: Iterable[Any]) -> list[Any]:
    """The messages to send, with aliased attribute names restored on *copies*.

    The originals must stay as they are: the client's flow controller releases each message
    by its byte size. Renaming in place would shrink the size it subtracts, and the byte
    counter would creep up until publishing blocks for ever.
    """
    out = []
    for message in messages:
        raw = type(message).pb(message)
        if not any(k.startswith(_ALIAS_PREFIX) for k in raw.attributes):
            out.append(message)
            continue
        fixed = type(raw)()
        fixed.CopyFrom(raw)
        for key in [k for k in fixed.attributes if k.startswith(_ALIAS_PREFIX)]:
            value = fixed.attributes[key]
            del fixed.attributes[key]
            fixed.attributes[key[len(_ALIAS_PREFIX):]] = value
        out.append(type(message).wrap(fixed))
    return out


def publisher_client(config: PublisherConfig) -> pubsub_v1.PublisherClient:
    """An official ``PublisherClient`` configured from the sink keys (see :func:`publisher_settings`)."""
    from google.pubsub_v1.services.publisher.transports.grpc import PublisherGrpcTransport

    batch, options = publisher_settings(config)
    cls = _connector_publisher_class()
    return cls(
        batch, options,
        connector_retry=options.retry,
        connector_timeout=options.timeout,
        compression_threshold=config.compression_bytes_threshold if config.enable_compression else None,
        **config.connection.client_kwargs(PublisherGrpcTransport),
    )


# --------------------------------------------------------------------------------------------
# BatchPublisher: one micro-batch partition → Pub/Sub, all-or-error
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PublishStats:
    """What one :meth:`BatchPublisher.publish_all` call did."""

    messages: int
    data_bytes: int
    seconds: float

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


#: One message to publish: ``(data, attributes or None, ordering_key or None)`` (an outbox row).
OutboxMessage = tuple[bytes, "dict[str, str] | None", "str | None"]


class BatchPublisher:
    """Publishes one micro-batch partition and succeeds only if every message was accepted.

    Build it from a :class:`PublisherConfig` anywhere. The client is created on first use, so
    a pickled config becomes a working publisher inside a Spark Python worker. Not thread-safe:
    one instance per task (per-key ordering depends on publishing from one thread anyway).

    >>> with BatchPublisher(PublisherConfig.from_connector(cfg)) as pub:   # doctest: +SKIP
    ...     stats = pub.publish_all(rows)          # raises PublishError if anything failed
    """

    #: Extra seconds granted on top of maxTotalTimeoutMs when waiting for a batch to make
    #: progress: batching delay, flow control and scheduling.
    PROGRESS_SLACK_S = 10.0

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
        reserved = _RESERVED_ATTRIBUTE_NAMES
        futures: list[Any] = []
        keys: list[str] = []  # parallel to futures, only with ordering (to know what to resume)
        add_future = futures.append
        add_key = keys.append
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
                add_future(future)
                if ordering:
                    add_key(key)
                data_bytes += len(data)
        except Exception as exc:  # a message the client refused synchronously (type, size, …)
            sync_error = exc
        failed, first_error, failed_keys = self._wait(futures, keys if ordering else None)
        resumed = self._resume(topic, failed_keys)
        seconds = time.monotonic() - start
        if sync_error is not None or failed:
            total = len(futures) + (1 if sync_error is not None else 0)
            failures = failed + (1 if sync_error is not None else 0)
            first = sync_error if sync_error is not None else first_error
            secrets = self.config.connection.secrets()
            detail = _one_line(first, secrets) if first is not None else "unknown error"
            where = "stopped at a message the client rejected; " if sync_error is not None else ""
            resumed_text = f"; resumed {len(resumed)} ordering key(s)" if resumed else ""
            raise PublishError(
                f"publish to {topic} failed: {where}{failures} of {total} message(s) not published"
                f"{resumed_text}; first error: {detail}",
                failed=failures, total=total, first_error=first, resumed_keys=resumed,
            )
        return PublishStats(messages=len(futures), data_bytes=data_bytes, seconds=seconds)

    def _alias_reserved(self, attributes: dict[str, str]) -> dict[str, str]:
        self.client._aliased_attributes = True
        reserved = _RESERVED_ATTRIBUTE_NAMES
        return {(_ALIAS_PREFIX + k if k in reserved else k): v for k, v in attributes.items()}

    def _wait(self, futures: list[Any],
              keys: list[str] | None) -> tuple[int, BaseException | None, list[str]]:
        """Wait for every future. A batch with no progress for maxTotalTimeoutMs + slack counts
        as failed, so a hung RPC cannot hang the Spark task for ever."""
        cfg = self.config
        stall_s = (cfg.total_timeout_ms + cfg.max_latency_ms) / 1000.0 + self.PROGRESS_SLACK_S
        failed = 0
        first_error: BaseException | None = None
        failed_keys: dict[str, None] = {}
        last_progress = time.monotonic()
        stalled: BaseException | None = None  # once stalled, the rest is not waited for
        for index, future in enumerate(futures):
            if future.done():
                exc = future.exception()
            elif stalled is not None:
                exc = stalled
            else:
                remaining = stall_s - (time.monotonic() - last_progress)
                try:
                    exc = future.exception(timeout=max(0.0, remaining))
                except concurrent.futures.TimeoutError:
                    exc = stalled = PubSubIOError(f"no publish result within {stall_s:.1f} s")
                last_progress = time.monotonic()
            if exc is not None:
                failed += 1
                if first_error is None:
                    first_error = exc
                if keys is not None and keys[index]:
                    failed_keys[keys[index]] = None
        return failed, first_error, list(failed_keys)

    def _resume(self, topic: str, keys: list[str]) -> list[str]:
        resumed = []
        for key in keys:
            try:
                self.client.resume_publish(topic, key)
                resumed.append(key)
            except Exception as exc:  # never hide the publish failure behind a resume failure
                log.warning("could not resume ordering key %r on %s: %s", key, topic, _one_line(exc))
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
            log.debug("closing publisher channel: %s", _one_line(exc))

    def __enter__(self) -> BatchPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_SHARED_PUBLISHERS: dict[tuple[int, PublisherConfig], BatchPublisher] = {}
_SHARED_LOCK = threading.Lock()
_ATEXIT_REGISTERED: list[Any] = []  # non-empty once the exit hook is registered


def shared_publisher(config: PublisherConfig) -> BatchPublisher:
    """A per-process :class:`BatchPublisher` for ``config``, reused by later calls.

    Spark reuses Python worker processes across tasks and micro-batches. Reusing one client
    there saves the channel set-up and, on the real service, an OAuth token fetch per task.
    The key includes the process ID, so a forked worker never inherits its parent's gRPC
    channel. Do not ``close()`` a shared publisher: it is closed at interpreter exit.
    Use it from one task at a time, which is how Spark runs Python workers.
    """
    key = (os.getpid(), config)
    with _SHARED_LOCK:
        publisher = _SHARED_PUBLISHERS.get(key)
        if publisher is None or publisher._closed:
            if not _ATEXIT_REGISTERED:
                _ATEXIT_REGISTERED.append(atexit.register(_close_shared_publishers))
            publisher = _SHARED_PUBLISHERS[key] = BatchPublisher(config)
        return publisher


def _close_shared_publishers() -> None:
    with _SHARED_LOCK:
        mine = [p for (pid, _), p in _SHARED_PUBLISHERS.items() if pid == os.getpid()]
        _SHARED_PUBLISHERS.clear()
    for publisher in mine:
        publisher.close()


def _stop_publisher(client: Any) -> None:
    try:
        client.stop()
    except Exception as exc:
        log.debug("stopping publisher: %s", _one_line(exc))


# --------------------------------------------------------------------------------------------
# Subscriber side (source connector)
# --------------------------------------------------------------------------------------------


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

    @classmethod
    def from_connector(cls, config: ConnectorConfig) -> SubscriberConfig:
        """Map a ``CloudPubSubSourceConnector`` config (keys as in Google's connector)."""
        return cls(
            connection=Connection.from_connector(config),
            subscription=str(config.get("cps.subscription")),
            max_batch_size=int(config.get("cps.maxBatchSize")),
            streaming=bool(config.get("cps.streamingPull.enabled")),
            flow_control_messages=int(config.get("cps.streamingPull.flowControlMessages")),
            flow_control_bytes=int(config.get("cps.streamingPull.flowControlBytes")),
            parallel_streams=int(config.get("cps.streamingPull.parallelStreams")),
            max_ack_extension_ms=int(config.get("cps.streamingPull.maxAckExtensionMs")),
            max_ms_per_ack_extension=int(config.get("cps.streamingPull.maxMsPerAckExtension")),
        )

    @property
    def subscription_path(self) -> str:
        return self.connection.subscription_path(self.subscription)

    def stream_flow_control(self) -> ps_types.FlowControl:
        """Client ``FlowControl`` for *one* of ``parallel_streams`` streams.

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
        if self.max_ack_extension_ms > 0:
            kwargs["max_lease_duration"] = self.max_ack_extension_ms / 1000.0
        if self.max_ms_per_ack_extension > 0:
            # Whole seconds between 10 and 600: the client copies this value into the
            # StreamingPullRequest's integer stream_ack_deadline_seconds. A float there fails
            # every stream (re)open, and the client only logs it and retries forever.
            kwargs["max_duration_per_lease_extension"] = int(
                min(MAX_ACK_DEADLINE_S, max(MIN_ACK_DEADLINE_S, self.max_ms_per_ack_extension // 1000)))
        return types.FlowControl(**kwargs)


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
        log.warning("pull from %s: %s", subscription_path, _one_line(exc))
        return []
    except gexc.GoogleAPICallError as exc:
        raise PubSubIOError(f"pull from {subscription_path} failed: {_one_line(exc)}") from exc
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


@dataclass(frozen=True)
class AckResult:
    """Outcome of acking/modacking a set of ack IDs.

    ``invalid`` lists IDs Pub/Sub no longer accepts (exactly-once subscriptions report them as
    ``PERMANENT_FAILURE_INVALID_ACK_ID``): their lease had expired or they were acked already.
    For an ack after the Delta commit this is harmless. The message is redelivered and the
    convert stage drops the duplicate ``message_id``. For a deadline extension it means the
    lease was lost.
    """

    requested: int
    invalid: tuple[str, ...] = ()

    @property
    def succeeded(self) -> int:
        return self.requested - len(self.invalid)


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _ack_id_failures(exc: BaseException) -> dict[str, str] | None:
    """Per-ack-ID failures from an exactly-once error (ErrorInfo ``EXACTLY_ONCE_ACKID_FAILURE``
    with metadata ``{ack_id: PERMANENT_FAILURE_… | TRANSIENT_FAILURE_…}``), or ``None``."""
    for detail in getattr(exc, "details", None) or ():
        metadata = getattr(detail, "metadata", None)
        if metadata and getattr(detail, "reason", "") == "EXACTLY_ONCE_ACKID_FAILURE":
            return dict(metadata)
    return None


def _ack_rpc(call: Callable[[Sequence[str]], Any], ack_ids: Sequence[str], what: str, subscription_path: str,
             chunk_size: int, attempts: int = 5) -> AckResult:
    """Run an ack-type RPC over ``ack_ids`` in chunks, sorting out exactly-once failures.

    Per Pub/Sub semantics, IDs not named in an exactly-once error *succeeded*. IDs with
    ``TRANSIENT_FAILURE_*`` are retried, ``PERMANENT_FAILURE_*`` are reported as invalid.
    Transient RPC errors (UNAVAILABLE…) are retried by the client's default retry.
    """
    from google.api_core import exceptions as gexc

    if not 0 < chunk_size <= MAX_ACK_IDS_PER_REQUEST:
        raise ValueError(f"chunk_size must be 1..{MAX_ACK_IDS_PER_REQUEST}, got {chunk_size}")
    ids = list(dict.fromkeys(ack_ids))  # a duplicate ID in one request is an error on the service
    invalid: list[str] = []
    for chunk in _chunks(ids, chunk_size):
        pending: Sequence[str] = chunk
        for attempt in range(attempts):
            try:
                call(pending)
                break
            except gexc.GoogleAPICallError as exc:
                failures = _ack_id_failures(exc)
                if failures is None:
                    raise AckError(f"{what} on {subscription_path} failed for {len(pending)} ack ID(s): "
                                   f"{_one_line(exc)}") from exc
                invalid.extend(i for i, reason in failures.items() if not reason.startswith("TRANSIENT_"))
                pending = [i for i, reason in failures.items() if reason.startswith("TRANSIENT_")]
                if not pending:
                    break
                time.sleep(min(2.0, 0.2 * 2**attempt))
        else:
            raise AckError(f"{what} on {subscription_path}: {len(pending)} ack ID(s) still failing "
                           f"transiently after {attempts} attempts")
    return AckResult(requested=len(ids), invalid=tuple(invalid))


def ack(subscriber: Any, subscription_path: str, ack_ids: Sequence[str],
        chunk_size: int = ACK_IDS_PER_REQUEST) -> AckResult:
    """Acknowledge ``ack_ids`` (call this only after the Delta commit holding the messages)."""
    return _ack_rpc(
        lambda ids: subscriber.acknowledge(request={"subscription": subscription_path, "ack_ids": ids}),
        ack_ids, "acknowledge", subscription_path, chunk_size)


def modify_ack_deadline(subscriber: Any, subscription_path: str, ack_ids: Sequence[str], seconds: int,
                        chunk_size: int = ACK_IDS_PER_REQUEST) -> AckResult:
    """Set the ack deadline of ``ack_ids`` to ``seconds`` from now (0 = nack: redeliver now)."""
    if not (seconds == 0 or 0 < seconds <= MAX_ACK_DEADLINE_S):
        raise ValueError(f"ack deadline must be 0..{MAX_ACK_DEADLINE_S} s, got {seconds}")
    return _ack_rpc(
        lambda ids: subscriber.modify_ack_deadline(
            request={"subscription": subscription_path, "ack_ids": ids, "ack_deadline_seconds": seconds}),
        ack_ids, "modifyAckDeadline", subscription_path, chunk_size)


def nack(subscriber: Any, subscription_path: str, ack_ids: Sequence[str],
         chunk_size: int = ACK_IDS_PER_REQUEST) -> AckResult:
    """Give messages back for immediate redelivery (e.g. a batch that will not be committed)."""
    return modify_ack_deadline(subscriber, subscription_path, ack_ids, 0, chunk_size)


class LeaseExtender:
    """Keeps synchronously pulled messages leased while their batch is staged and committed.

    A background thread sets the deadline of every held ack ID to ``deadline_s`` right away
    and then every ``deadline_s / 3`` seconds, until :meth:`stop` (or until ``max_total_s``,
    so a wedged task cannot hold messages for ever). IDs whose lease turned out lost
    (``invalid``) are dropped from the set and recorded in :attr:`lost`.

    Usage in the pull stage::

        msgs = pull_batch(sub, path, n)
        with LeaseExtender(sub, path, [m.ack_id for m in msgs]):
            write_and_commit(msgs)          # may take longer than the subscription's deadline
        ack(sub, path, [m.ack_id for m in msgs])
    """

    def __init__(self, subscriber: Any, subscription_path: str, ack_ids: Iterable[str], deadline_s: int = 60,
                 max_total_s: float = 3600.0):
        if not MIN_ACK_DEADLINE_S <= deadline_s <= MAX_ACK_DEADLINE_S:
            raise ValueError(f"deadline_s must be {MIN_ACK_DEADLINE_S}..{MAX_ACK_DEADLINE_S}, "
                             f"got {deadline_s}")
        self._subscriber = subscriber
        self._path = subscription_path
        self._ids = list(dict.fromkeys(ack_ids))
        self._deadline_s = deadline_s
        self._max_total_s = max_total_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: list[str] = []
        self.extensions = 0
        self.error: BaseException | None = None

    def start(self) -> LeaseExtender:
        if self._ids:
            self._extend()  # first extension inline: the original deadline may be close already
            self._thread = threading.Thread(target=self._run, name="pubsub-lease-extender", daemon=True)
            self._thread.start()
        return self

    def _extend(self) -> None:
        try:
            result = modify_ack_deadline(self._subscriber, self._path, self._ids, self._deadline_s)
        except Exception as exc:  # keep trying; the next round may succeed before the deadline
            self.error = exc
            log.warning("extending %d lease(s) on %s failed: %s", len(self._ids), self._path, _one_line(exc))
            return
        self.extensions += 1
        if result.invalid:
            gone = set(result.invalid)
            self.lost.extend(result.invalid)
            self._ids = [i for i in self._ids if i not in gone]

    def _run(self) -> None:
        started = time.monotonic()
        interval = self._deadline_s / 3.0
        while not self._stop.wait(interval):
            if not self._ids or time.monotonic() - started > self._max_total_s:
                return
            self._extend()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> LeaseExtender:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StreamingPuller:
    """Streaming pull that hands out batches *without* acking them.

    Opens ``parallel_streams`` streams with the client's ``subscribe()``. Delivered messages
    stay under the client's lease management (deadlines extended up to ``maxAckExtensionMs``),
    so they stay leased for as long as the caller needs to commit them. Flow control
    (``flowControlMessages``/``Bytes``) counts them until they are acked or nacked, so one batch
    holds at most that many messages. Typical use::

        with StreamingPuller(config) as puller:
            while running:
                batch = puller.collect(max_messages=1000, timeout=5.0)
                commit_to_delta(batch)
                puller.ack(batch)           # only after the commit

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

    @property
    def subscriber(self) -> Any:
        if self._subscriber is None:
            self._subscriber = subscriber_client(self.config)
        return self._subscriber

    def start(self) -> StreamingPuller:
        if self._futures:
            return self
        flow = self.config.stream_flow_control()
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
                                        f"{_one_line(exc)}") from exc

    def collect(self, max_messages: int, timeout: float,
                idle_timeout: float | None = None) -> list[PulledMessage]:
        """Up to ``max_messages`` messages received within ``timeout`` seconds, unacked.

        With ``idle_timeout``, return earlier once at least one message arrived and no new one
        came for that long (useful to drain a backlog in ``--once`` mode).
        """
        if not self._futures:
            self.start()
        self._forget_expired()
        deadline = time.monotonic() + timeout
        out: list[PulledMessage] = []
        last_at = time.monotonic()
        while len(out) < max_messages:
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
            with self._lock:
                self._held[message.ack_id] = (message, last_at)
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

    def _release(self, ack_ids: Sequence[str]) -> None:
        with self._lock:
            messages = [self._held.pop(i)[0] for i in ack_ids if i in self._held]
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
                del self._held[ack_id]
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
                log.debug("streaming pull ended: %s", _one_line(exc))
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


# --------------------------------------------------------------------------------------------
# Admin helpers (quickstart, tests)
# --------------------------------------------------------------------------------------------


def ensure_topic(publisher: Any, topic_path: str) -> bool:
    """Create the topic unless it exists. Returns whether it was created."""
    from google.api_core import exceptions as gexc

    try:
        publisher.create_topic(request={"name": topic_path})
        return True
    except gexc.AlreadyExists:
        return False


def ensure_subscription(subscriber: Any, subscription_path: str, topic_path: str, *,
                        enable_message_ordering: bool = False, ack_deadline_seconds: int = 10,
                        enable_exactly_once_delivery: bool = False) -> bool:
    """Create the subscription unless it exists. Returns whether it was created.

    An existing subscription is left as it is (its settings are not compared or updated).
    """
    from google.api_core import exceptions as gexc

    try:
        subscriber.create_subscription(request={
            "name": subscription_path,
            "topic": topic_path,
            "ack_deadline_seconds": ack_deadline_seconds,
            "enable_message_ordering": enable_message_ordering,
            "enable_exactly_once_delivery": enable_exactly_once_delivery,
        })
        return True
    except gexc.AlreadyExists:
        return False
