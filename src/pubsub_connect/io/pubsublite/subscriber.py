"""Reading an exact offset range of one Lite partition (:func:`read_range`), in Spark tasks.

A ``Subscribe`` stream seeks to the range's start explicitly (the committed cursor plays no
part) and is granted flow-control tokens for no more than the range, so a planned range can be
replayed exactly after a crash.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pubsub_connect.io.pubsublite.connection import LiteConnection, LiteIOError, lite_error, routing_metadata
from pubsub_connect.model.error_text import one_line

log = logging.getLogger(__name__)

#: Largest Lite message (the service rejects bigger ones); a reader's byte allowance is never
#: below it, otherwise such a message could never be delivered.
MAX_MESSAGE_BYTES = int(3.5 * 1024 * 1024)


class LiteDataLossError(LiteIOError):
    """Messages of a planned range are gone (retention) or a partition went backwards."""


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
                    raise lite_error(f"reading {where} at offset {offset}", exc, conn) from None
                log.info("%s: subscribe stream broke at offset %d (%s); reconnecting", where, offset,
                         one_line(exc))
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
