"""Publishing one micro-batch partition to Pub/Sub Lite, all or nothing (:class:`PartitionPublisher`).

One ordered ``Publish`` stream of the generated client per Lite partition, on the client's own
process-wide event loop; see :class:`_OrderedPublishStream` for why not the official
single-partition publisher. Routing is the caller's choice (:func:`default_router`).
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pubsub_connect.io.pubsublite.connection import LiteConnection, LiteIOError, lite_error, routing_metadata

if TYPE_CHECKING:
    from concurrent.futures import Future

log = logging.getLogger(__name__)

#: Publish batch limits, as the official publisher's defaults (3 MiB, 1000 messages).
PUBLISH_BATCH_BYTES = 3 * 1024 * 1024
PUBLISH_BATCH_MESSAGES = 1000
#: Messages one task keeps in flight before it waits for acknowledgements (bounds memory).
MAX_IN_FLIGHT_MESSAGES = 20_000


class LitePublishError(LiteIOError):
    """Some messages of a micro-batch were not published; the batch must not be committed."""


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
            raise lite_error(f"Lite topic {self.topic_path}: cannot {what}", exc, self.conn, LitePublishError) from None

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
            raise lite_error(f"publish to {self.topic_path} partition {partition} did not complete", exc, self.conn,
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
