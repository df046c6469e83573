"""Publishing pre-encoded ``PublishRequest``s over a gRPC channel, for the sink without ordering keys.

Why not the official client's ``publish()``: it costs a proto-plus message, a future and batch
bookkeeping per message, about 90 CPU-seconds per million 1 KB messages on this path, where
the messages are already columns. :mod:`pubsub_connect.model.pubsub_wire` encodes them a batch at
a time and this module sends the requests on the official client's channel (so credentials,
endpoint and emulator are the client's), with the publisher settings the connector exposes:

- batching: at most ``maxBufferSize`` messages and ``maxBufferBytes`` bytes per request. Every
  message is at hand when a Spark task starts, so ``delayThresholdMs`` has nothing to wait for;
- retry: the codes the client's publish retry treats as transient, with exponential backoff
  (0.1 s doubling, capped at the total budget or 60 s), each attempt bounded by
  ``maxRequestTimeoutMs`` and all attempts of a request by ``maxTotalTimeoutMs``. Other codes
  fail at once;
- a bounded window of unsettled messages and bytes (``maxOutstandingMessages`` /
  ``maxOutstandingRequestBytes`` when lower), so a large partition never queues in memory;
- gzip per request of at least ``compressionBytesThreshold`` bytes with ``enableCompression``.

Only unordered publishing comes here: ordering keys need the client's per-key sequencing.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pubsub_connect.model.pubsub_wire import FramedMessages, request_bounds, topic_field

PUBLISH_METHOD = "/google.pubsub.v1.Publisher/Publish"
#: gRPC codes worth retrying for Publish: those of the official client's default publish retry.
RETRYABLE_CODES = frozenset({"ABORTED", "CANCELLED", "DEADLINE_EXCEEDED", "INTERNAL",
                             "RESOURCE_EXHAUSTED", "UNAVAILABLE", "UNKNOWN"})
FIRST_BACKOFF_S = 0.1
BACKOFF_MULTIPLIER = 2.0
MAX_BACKOFF_S = 60.0
#: An attempt never gets less than this, even at the very end of the total budget.
MIN_ATTEMPT_S = 0.5


@dataclass(frozen=True)
class SenderSettings:
    """What :class:`RequestSender` needs of the publisher keys, in seconds and counts."""

    topic: str
    max_messages: int
    max_bytes: int
    attempt_timeout_s: float
    total_timeout_s: float
    window_messages: int
    window_bytes: int
    compression_threshold: int | None = None


@dataclass
class SendOutcome:
    """What one :meth:`RequestSender.send_all` call came to."""

    sent: int = 0
    data_bytes: int = 0
    failed: int = 0
    first_error: BaseException | None = None


@dataclass
class _Request:
    payload: bytes
    messages: int
    started: float
    future: Any = None


class RequestSender:
    """Sends the requests of :class:`FramedMessages` batches, several at a time, and settles each
    (all of its messages accepted, or failed after its retries). One per task; not thread-safe."""

    def __init__(self, channel: Any, settings: SenderSettings, metadata: tuple[tuple[str, str], ...] = (),
                 *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep):
        self._call = channel.unary_unary(PUBLISH_METHOD)  # bytes in, bytes out: no (de)serialiser
        self.settings = settings
        self._metadata = (*metadata, ("x-goog-request-params", f"topic={settings.topic}"))
        self._prefix = topic_field(settings.topic)
        self._clock = clock
        self._sleep = sleep
        self.compressed_requests = 0

    def send_all(self, batches: Iterable[FramedMessages]) -> SendOutcome:
        """Send every message of ``batches``; return once each request is settled. After the
        first failure nothing more is sent (the micro-batch fails and is retried as a whole) and
        the requests still in flight are waited for without retrying them."""
        s = self.settings
        outcome = SendOutcome()
        in_flight: collections.deque[_Request] = collections.deque()
        messages = payload_bytes = 0
        for framed in batches:
            for start, end in request_bounds(framed, s.max_messages, s.max_bytes, len(self._prefix)):
                begin, stop = framed.start(start), int(framed.ends[end - 1])
                request = _Request(b"".join((self._prefix, memoryview(framed.buffer)[begin:stop])),
                                   end - start, self._clock())
                self._attempt(request)
                in_flight.append(request)
                messages += request.messages
                payload_bytes += len(request.payload)
                outcome.sent += request.messages
                while in_flight and (messages >= s.window_messages or payload_bytes >= s.window_bytes):
                    oldest = in_flight.popleft()
                    messages -= oldest.messages
                    payload_bytes -= len(oldest.payload)
                    self._settle(oldest, outcome)
                    if outcome.failed:
                        break
                if outcome.failed:
                    break
            if outcome.failed:
                break
            outcome.data_bytes += framed.data_bytes
        while in_flight:
            self._settle(in_flight.popleft(), outcome)
        return outcome

    def _attempt(self, request: _Request) -> None:
        import grpc

        s = self.settings
        remaining = s.total_timeout_s - (self._clock() - request.started)
        compression = None
        if s.compression_threshold is not None and len(request.payload) >= s.compression_threshold:
            compression = grpc.Compression.Gzip
            self.compressed_requests += 1
        timeout = max(MIN_ATTEMPT_S, min(s.attempt_timeout_s, remaining))
        request.future = self._call.future(request.payload, timeout=timeout, metadata=self._metadata,
                                           compression=compression)

    def _settle(self, request: _Request, outcome: SendOutcome) -> None:
        """Wait for ``request`` (retrying it unless the call already failed) and count the result."""
        error = self._result(request, retry=not outcome.failed)
        if error is not None:
            outcome.failed += request.messages
            if outcome.first_error is None:
                outcome.first_error = error

    def _result(self, request: _Request, retry: bool) -> BaseException | None:
        import grpc
        from google.api_core import exceptions as gexc
        from google.pubsub_v1.types import PublishResponse

        s = self.settings
        delay = FIRST_BACKOFF_S
        while True:
            try:
                response = PublishResponse.pb().FromString(request.future.result())
            except grpc.RpcError as exc:
                error = gexc.from_grpc_error(exc)
                if not retry or exc.code().name not in RETRYABLE_CODES:
                    return error
                if self._clock() - request.started + delay >= s.total_timeout_s:
                    return gexc.RetryError(f"Timeout of {s.total_timeout_s:.1f}s exceeded", error)
                self._sleep(delay)
                delay = min(delay * BACKOFF_MULTIPLIER, s.total_timeout_s, MAX_BACKOFF_S)
                self._attempt(request)
                continue
            if len(response.message_ids) != request.messages:
                return gexc.InternalServerError(f"Pub/Sub returned {len(response.message_ids)} message id(s) "
                                                f"for {request.messages} message(s)")
            return None


def sender_settings(topic: str, *, max_messages: int, max_bytes: int, request_timeout_ms: int,
                    total_timeout_ms: int, flow_control_messages: int, flow_control_bytes: int,
                    window_messages: int, window_bytes: int, compression_threshold: int | None) -> SenderSettings:
    """Settings from the publisher keys. Finite flow-control limits bound both the window and
    each request, as they bound what the official client has outstanding."""
    return SenderSettings(
        topic=topic,
        max_messages=max(1, min(max_messages, flow_control_messages)),
        max_bytes=max(1, min(max_bytes, flow_control_bytes)),
        attempt_timeout_s=request_timeout_ms / 1000.0,
        total_timeout_s=total_timeout_ms / 1000.0,
        window_messages=max(1, min(window_messages, flow_control_messages)),
        window_bytes=max(1, min(window_bytes, flow_control_bytes)),
        compression_threshold=compression_threshold,
    )
