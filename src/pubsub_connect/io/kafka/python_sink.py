"""The Kafka sink of the Python data source (``pubsub_connect_kafka``), compatible with Spark's.

Why it is shaped like this:

* Input columns and options are those of Spark's Kafka sink (``value`` required; ``key``,
  ``topic``, ``partition``, ``headers`` optional; the ``topic`` option wins over the column), so
  the outbox tables written for Databricks work unchanged locally.
* A task reports success only after *every* record it produced was acknowledged by the broker:
  it flushes, then checks the delivery report of each record and raises on any error. Spark
  then retries the task / fails the batch, and the checkpoint does not advance, so a record can
  be duplicated by a retry (at-least-once, exactly like Spark's sink) but never silently dropped.
* The producer is idempotent by default (no duplicates from the client's own retries) and
  partitions keyed records with murmur2, the Java client's default, so a key lands in the same
  partition whichever connector wrote it. Both can be overridden with ``kafka.*`` options.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from pubsub_connect.io.kafka.librdkafka import with_client_logger
from pubsub_connect.io.kafka.options import KafkaOptionsError
from pubsub_connect.io.kafka.write_options import KafkaWriteOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import KafkaError, Message, Producer

log = logging.getLogger(__name__)

_FLUSH_TIMEOUT_S = 600.0


class KafkaProduceError(RuntimeError):
    """At least one record of a task was not acknowledged: the task fails so Spark retries it."""


@dataclass
class KafkaWriteResult(WriterCommitMessage):
    """What one task wrote (used for logging on the driver)."""

    records: int


class _Delivery:
    """Counts delivery reports; keeps the first few errors for the failure message."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.errors: list[str] = []

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.acked += 1
            return
        self.failed += 1
        if len(self.errors) < 3:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")


#: Producers kept per Python worker process, keyed by configuration. Why: an idempotent
#: producer spends 0.5-1 s acquiring its producer id, which every micro-batch task would pay
#: again; Spark's own sink caches producers for the same reason. Python workers run one task
#: at a time, so a cached producer is never shared by two running tasks.
_PRODUCERS: dict[tuple[tuple[str, str], ...], tuple[Producer, float]] = {}
_PRODUCER_IDLE_S = 600.0


def _producer(conf: Mapping[str, str]) -> tuple[tuple[tuple[str, str], ...], Producer]:
    from confluent_kafka import Producer

    now = time.monotonic()
    for stale_key, (stale, last_used) in list(_PRODUCERS.items()):
        if now - last_used > _PRODUCER_IDLE_S:
            del _PRODUCERS[stale_key]
            stale.flush(5)
    key = tuple(sorted(conf.items()))
    cached = _PRODUCERS.pop(key, None)
    return key, cached[0] if cached else Producer(with_client_logger(conf))


def produce_batches(opts: KafkaWriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row of ``batches``; return only when all were acknowledged, else raise.

    The producer goes back to the cache only after a fully acknowledged task; after any error
    it is dropped, so a producer in a fatal state (e.g. fenced idempotence) is never reused.
    """
    key, producer = _producer(opts.client)
    delivery = _Delivery()
    sent = 0
    try:
        for batch in batches:
            sent += _produce_batch(producer, opts, batch, delivery)
        remaining = producer.flush(_FLUSH_TIMEOUT_S)
    except BaseException:
        # Give in-flight records a moment so the client shuts down cleanly, then fail the task.
        producer.flush(5)
        raise
    if remaining or delivery.failed or delivery.acked != sent:
        queued = f", {remaining} still queued after {_FLUSH_TIMEOUT_S:.0f} s" if remaining else ""
        raise KafkaProduceError(
            f"Kafka sink: {sent - delivery.acked} of {sent} records were not acknowledged{queued}; "
            f"first errors: {'; '.join(delivery.errors) or 'none reported'}"
        )
    _PRODUCERS[key] = (producer, time.monotonic())
    return sent


def _produce_batch(producer: Producer, opts: KafkaWriteOptions, batch: pa.RecordBatch,
                   delivery: _Delivery) -> int:
    import pyarrow as pa
    from confluent_kafka import KafkaException

    n = batch.num_rows
    names = [name.lower() for name in batch.schema.names]

    def column(name: str) -> list[Any] | None:
        if name not in names:
            return None
        col = batch.column(names.index(name))
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            col = col.cast(pa.binary()) if name in ("key", "value") else col
        return col.to_pylist()

    values = column("value")
    assert values is not None
    keys = column("key") or [None] * n
    partitions = column("partition") or [None] * n
    raw_headers = column("headers")
    topics = [opts.topic] * n if opts.topic else column("topic")
    assert topics is not None
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise KafkaOptionsError(
                "Kafka sink: null topic in the data; set the 'topic' option or fill the column"
            )
        part = partitions[i]
        headers = None
        if raw_headers is not None and raw_headers[i]:
            headers = [(h["key"], h["value"]) for h in raw_headers[i]]
        while True:
            try:
                producer.produce(topic, values[i], keys[i], -1 if part is None else part,
                                 delivery, headers=headers)
                break
            except BufferError:
                # Local queue full: serve delivery reports until there is room again.
                producer.poll(0.1)
            except KafkaException as exc:
                # Rejected before sending (unknown partition, record too large, ...).
                raise KafkaProduceError(
                    f"Kafka sink: record {i} of the batch for {topic}[{'any' if part is None else part}] "
                    f"was rejected: {exc.args[0].str()}"
                ) from None
        if i % 1000 == 0:
            producer.poll(0)
    return n


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("pubsub_connect_kafka")``: each task produces through its worker's cached producer."""

    def __init__(self, opts: KafkaWriteOptions):
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaWriteResult:
        return KafkaWriteResult(produce_batches(self.opts, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, KafkaWriteResult))
        log.info("Kafka sink: wrote %d records", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records already acknowledged stay in Kafka (a log cannot be rolled back), as with
        Spark's sink; the failed write is retried or reported by Spark."""
        log.warning("Kafka sink: write aborted; acknowledged records remain in Kafka")


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("pubsub_connect_kafka")``: at-least-once per micro-batch."""

    def __init__(self, opts: KafkaWriteOptions):
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaWriteResult:
        started = time.monotonic()
        written = produce_batches(self.opts, iterator)
        log.debug("Kafka sink task: %d records in %.2f s", written, time.monotonic() - started)
        return KafkaWriteResult(written)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, KafkaWriteResult))
        log.info("Kafka sink: batch %d wrote %d records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("Kafka sink: batch %d aborted; it will be re-run from the checkpoint", batchId)
