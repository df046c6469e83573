"""Task-side reading of the fallback engine's source: one planned offset range → Arrow batches.

Records are read in Spark tasks with ``assign`` + ``seek`` (no consumer group, nothing committed
to Kafka) and handed to Spark as Arrow record batches, not Python rows.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pubsub_connect.io.kafka.librdkafka import with_client_logger
from pubsub_connect.io.kafka.offsets import KafkaInputPartition
from pubsub_connect.io.kafka.read_options import KafkaReadOptions, report_data_loss
from pubsub_connect.model.schemas import to_arrow

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Consumer, Message

log = logging.getLogger(__name__)

#: Records per Arrow batch handed to Spark (Spark's own default for Arrow batches).
_ARROW_BATCH_RECORDS = 10_000
#: How long a task tolerates a high watermark below its planned range before calling it data
#: loss: on a real cluster a new partition leader can briefly report a lower watermark.
_DATA_LOSS_GRACE_S = 5.0


class ArrowBatchBuilder:
    """Column-wise conversion of one partition's consumed messages to Arrow batches.

    Why column-wise: building Python row tuples costs roughly twice as much per record, and the
    Python data source API takes Arrow batches directly. The topic and partition columns are
    constant for a task, so they are built once and sliced (zero-copy) per batch.
    ``timestampType`` follows the Java client's numbering (0 = CreateTime, 1 = LogAppendTime,
    -1 = none), which is librdkafka's numbering minus one.
    """

    def __init__(self, topic: str, partition: int, schema: pa.Schema, include_headers: bool,
                 max_rows: int = _ARROW_BATCH_RECORDS):
        import numpy as np
        import pyarrow as pa

        self.schema = schema
        self.include_headers = include_headers
        self._topic = pa.array([topic] * max_rows, pa.string())
        self._partition = pa.array(np.full(max_rows, partition, dtype=np.int32))
        self._ts_type = schema.field("timestamp").type
        self._headers_type = schema.field("headers").type if include_headers else None

    def build(self, messages: Sequence[Message], offsets: Any) -> pa.RecordBatch:
        """``offsets``: the messages' offsets (a list, or a numpy range when contiguous)."""
        import numpy as np
        import pyarrow as pa

        n = len(messages)
        stamps = [m.timestamp() for m in messages]
        ts_type = np.fromiter((s[0] for s in stamps), dtype=np.int32, count=n) - 1
        ts_us = np.fromiter((s[1] for s in stamps), dtype=np.int64, count=n) * 1000
        arrays = [
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([m.value() for m in messages], pa.binary()),
            self._topic.slice(0, n),
            self._partition.slice(0, n),
            pa.array(offsets, pa.int64()),
            pa.array(ts_us, self._ts_type),
            pa.array(ts_type),
        ]
        if self.include_headers:
            # Spark gives null (not an empty array) for a record without headers.
            arrays.append(pa.array([m.headers() or None for m in messages], self._headers_type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def read_partition(opts: KafkaReadOptions, part: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    """Read exactly the offsets ``[part.start, part.end)`` of one partition as Arrow batches.

    Offsets inside the range that hold no record (compaction, transaction markers) are skipped
    silently, as in Spark; a range that starts before the log start or ends beyond the high
    watermark is data loss (fail, or skip with a warning when ``failOnDataLoss=false``).
    """
    import numpy as np
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    topic, partition, until = part.topic, part.partition, part.end
    builder = ArrowBatchBuilder(topic, partition, to_arrow(opts.schema), opts.include_headers)
    # Bound read-ahead to the range (librdkafka would otherwise prefetch up to 64 MB beyond it),
    # and resume fetching as soon as the bounded queue drains, not after the default 1 s pause.
    read_ahead = max(1, min(until - part.start, 100_000))
    consumer = Consumer(with_client_logger(opts.consumer_config(**{"queued.min.messages": read_ahead,
                                                                   "fetch.queue.backoff.ms": 5})))
    tp = TopicPartition(topic, partition, part.start)
    position = part.start
    try:
        consumer.assign([tp])
        last_progress = time.monotonic()
        while position < until:
            batch: list[Message] = []
            offsets: Any = []  # list[int], or a numpy range for a contiguous batch
            msgs = consumer.consume(num_messages=min(until - position, _ARROW_BATCH_RECORDS), timeout=0.1)
            n = len(msgs)
            if n and all(m.error() is None for m in msgs):
                # Common case, records only. Offsets ascend; when they are contiguous the wanted
                # slice is plain arithmetic, otherwise (compaction, markers) a bisection.
                first, last = msgs[0].offset(), msgs[-1].offset()
                if last - first == n - 1:
                    lo = min(max(0, position - first), n)
                    hi = max(lo, min(n, until - first))
                    offsets = np.arange(first + lo, first + hi, dtype=np.int64)
                else:
                    all_offsets = [m.offset() for m in msgs]
                    lo = bisect.bisect_left(all_offsets, position)
                    hi = bisect.bisect_left(all_offsets, until)
                    offsets = all_offsets[lo:hi]
                batch = msgs[lo:hi]
                position = until if hi < n else max(position, last + 1)
                msgs = []
            for msg in msgs:
                err = msg.error()
                if err is None:
                    offset = msg.offset()
                    if offset >= until:
                        position = until
                        break
                    if offset >= position:
                        batch.append(msg)
                        offsets.append(offset)
                        position = offset + 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    # Everything below the high watermark has been delivered: offsets without a
                    # record up to it (markers, compaction) are done.
                    position = max(position, min(msg.offset(), until))
                elif err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                    position = _out_of_range(opts, consumer, topic, partition, position, until)
                elif err.fatal():
                    raise KafkaException(err)
                else:
                    log.warning("transient Kafka error reading %s-%d: %s", topic, partition, err)
            now = time.monotonic()
            if batch:
                yield builder.build(batch, offsets)
                last_progress = now
                continue
            if position >= until:
                break
            stalled = now - last_progress
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            if 0 <= high <= position and stalled > _DATA_LOSS_GRACE_S:
                report_data_loss(
                    opts,
                    f"{topic}-{partition}: records [{position}, {until}) were planned but the partition now "
                    f"ends at {high} (topic recreated or log truncated)",
                )
                return
            if stalled * 1000 > opts.poll_timeout_ms:
                raise TimeoutError(
                    f"{topic}-{partition}: no record at offset {position} within {opts.poll_timeout_ms} ms "
                    "(option kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        consumer.close()


def _out_of_range(opts: KafkaReadOptions, consumer: Consumer, topic: str, partition: int,
                  position: int, until: int) -> int:
    """The broker refused ``position``: decide between aged-out records and a shrunken log."""
    from confluent_kafka import TopicPartition

    low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                            timeout=opts.offset_timeout_ms / 1000)
    if position < low:
        report_data_loss(opts, f"{topic}-{partition}: records [{position}, {min(low, until)}) were deleted "
                                f"(retention?) before they could be read")
        if low >= until:
            return until
        consumer.assign([TopicPartition(topic, partition, low)])
        return low
    report_data_loss(opts, f"{topic}-{partition}: offset {position} is beyond the end of the partition "
                            "(topic recreated or log truncated)")
    return until
