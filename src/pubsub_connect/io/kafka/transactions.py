"""Exactly-once micro-batch writes to Kafka with a transactional producer.

Why: Spark's Kafka sink is at-least-once — a micro-batch replayed after a crash (produced, but
the checkpoint not yet committed) is produced twice. The source connectors promise no duplicates
in Kafka, so their produce stage writes each micro-batch in one Kafka transaction together with
a *marker* record ``{connector, batch_id}`` in a small marker topic. On start the writer reads
the marker topic (``read_committed``) to learn the last batch that really committed; a replayed
batch at or below it is skipped. A crash mid-transaction leaves an open transaction that the
next ``init_transactions`` with the same ``transactional.id`` aborts (fencing), so consumers
with ``isolation.level=read_committed`` see every record exactly once.

This is the same idea as Kafka Connect's exactly-once source support, where offsets are written
in the producer's transaction.

Batch ids restart at 0 when a stage's checkpoint is replaced, so a marker also names the
*sequence* it belongs to (the stage's checkpoint identity): a marker of another sequence says
nothing about this one's batches.

Where it runs: :class:`TransactionalPartitionWriter` is the ``mapInArrow`` function of the produce
stages. The micro-batch is brought into one Spark partition in its produce order and written by
an executor task; the driver only collects the count. A retried task fences the earlier attempt
(same ``transactional.id``) and finds its marker if it had committed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pubsub_connect.io.kafka.admin import create_topic
from pubsub_connect.io.kafka.librdkafka import connection_settings, with_client_logger

log = logging.getLogger(__name__)

DEFAULT_MARKER_TOPIC = "pubsub-connect-offsets"


class KafkaTransactionError(RuntimeError):
    """A transactional write failed (the batch is not committed and will be retried)."""


@dataclass(frozen=True)
class OutRecord:
    """A record to produce. ``partition`` None lets the producer's partitioner choose (murmur2,
    like Java's default partitioner); ``timestamp_ms`` None uses the producer's time."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None = None
    partition: int | None = None
    timestamp_ms: int | None = None


class TransactionalBatchWriter:
    """Writes numbered micro-batches to one topic exactly once. Driver-side, one per stage."""

    def __init__(self, client_config: Mapping[str, str], transactional_id: str, topic: str,
                 marker_topic: str = DEFAULT_MARKER_TOPIC, timeout_s: float = 60.0):
        self.client_config = dict(client_config)
        self.transactional_id = transactional_id
        self.topic = topic
        self.marker_topic = marker_topic
        self.timeout_s = timeout_s
        self._producer: Any = None
        self._last_marker: tuple[str | None, int] | None = None

    # -- set-up ------------------------------------------------------------------------------

    def _ensure_marker_topic(self) -> None:
        try:
            create_topic(self.client_config, self.marker_topic, 1, timeout_s=self.timeout_s)  # False: existed
        except Exception as exc:
            raise KafkaTransactionError(f"cannot create marker topic {self.marker_topic}: {exc}") from exc

    def _start(self) -> None:
        """Create the producer (fencing any earlier instance and aborting its open transaction),
        then read the last committed batch id from the marker topic."""
        from confluent_kafka import Producer

        self._ensure_marker_topic()
        self._producer = Producer(with_client_logger({
            "partitioner": "murmur2_random",  # Java's default partitioner for keyed records
            **self.client_config,
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
        }))
        self._producer.init_transactions(self.timeout_s)
        self._last_marker = self._read_last_marker()
        log.info("%s: last committed marker %s", self.transactional_id, self._last_marker)

    def _read_last_marker(self) -> tuple[str | None, int] | None:
        """Scan the marker topic to its (committed) end for this writer's latest marker:
        ``(sequence, batch id)``; the sequence is None in markers written without one."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer(with_client_logger({
            **connection_settings(self.client_config),
            "group.id": f"{self.transactional_id}-marker-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }))
        last: tuple[str | None, int] | None = None
        try:
            consumer.assign([TopicPartition(self.marker_topic, 0, 0)])
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        return last
                    raise KafkaTransactionError(f"reading {self.marker_topic}: {message.error()}")
                if message.key() == self.transactional_id.encode():
                    marker = json.loads(message.value())
                    last = (marker.get("sequence"), int(marker["batch_id"]))
            raise KafkaTransactionError(f"reading {self.marker_topic} did not reach its end in {self.timeout_s} s")
        finally:
            consumer.close()

    # -- writing -----------------------------------------------------------------------------

    def last_committed_batch(self, sequence: str | None = None) -> int | None:
        """The newest batch id committed in ``sequence`` (None: nothing of it yet)."""
        if self._producer is None:
            self._start()
        if self._last_marker is None or self._last_marker[0] != sequence:
            return None
        return self._last_marker[1]

    def write_batch(self, batch_id: int, records: Iterable[OutRecord], sequence: str | None = None) -> int:
        """Produce ``records`` and the marker for ``batch_id`` of ``sequence`` in one transaction.

        Returns how many records were written; -1 (and nothing written) when ``batch_id`` was
        already committed, which is what happens when Spark replays the last batch.
        """
        last = self.last_committed_batch(sequence)
        if last is not None and batch_id <= last:
            log.info("%s: batch %d already committed (last %d); skipped", self.transactional_id, batch_id, last)
            return -1
        producer = self._producer
        errors: list[str] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(str(err))

        producer.begin_transaction()
        count = 0
        try:
            for record in records:
                kwargs: dict[str, Any] = {"key": record.key, "value": record.value, "on_delivery": on_delivery}
                if record.partition is not None:
                    kwargs["partition"] = record.partition
                if record.timestamp_ms is not None:
                    kwargs["timestamp"] = record.timestamp_ms
                if record.headers:
                    kwargs["headers"] = record.headers
                while True:
                    try:
                        producer.produce(self.topic, **kwargs)
                        break
                    except BufferError:
                        producer.poll(0.05)
                count += 1
                if count % 10_000 == 0:
                    producer.poll(0)
            producer.produce(self.marker_topic, key=self.transactional_id.encode(),
                             value=json.dumps({"batch_id": batch_id, "records": count,
                                               "sequence": sequence}).encode(),
                             partition=0, on_delivery=on_delivery)
            producer.flush(self.timeout_s)
            if errors:
                raise KafkaTransactionError(f"{len(errors)} record(s) failed: {errors[0]}")
            producer.commit_transaction(self.timeout_s)
        except BaseException as exc:
            try:
                producer.abort_transaction(self.timeout_s)
            except Exception:  # the producer may be fenced or broken; the next start aborts
                self._producer = None
            if isinstance(exc, KafkaTransactionError):
                raise
            raise KafkaTransactionError(f"transaction for batch {batch_id} failed: {exc}") from exc
        self._last_marker = (sequence, batch_id)
        return count

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout_s)
            self._producer = None


#: Columns the partition writer reads, as the produce stages select them: ``timestamp_ms`` is the
#: record timestamp in epoch milliseconds (None: the producer's time).
RECORD_COLUMNS = ("key", "value", "headers", "partition", "timestamp_ms")

#: Writers kept per Python worker process, so a stage's micro-batches reuse one producer (its
#: ``init_transactions`` and marker scan happen once, not per batch).
_WRITERS: dict[str, TransactionalBatchWriter] = {}


def arrow_records(batches: Iterable[Any]) -> Iterator[OutRecord]:
    """Arrow record batches with :data:`RECORD_COLUMNS` → records, in row order."""
    for chunk in batches:
        columns = chunk.to_pydict()
        for key, value, headers, partition, stamp in zip(*(columns[c] for c in RECORD_COLUMNS), strict=True):
            yield OutRecord(key=key, value=value,
                            headers=[(h["key"], h["value"]) for h in headers] if headers else None,
                            partition=partition, timestamp_ms=stamp)


@dataclass(frozen=True)
class TransactionalPartitionWriter:
    """``mapInArrow`` function writing a whole micro-batch (one Spark partition) in one Kafka
    transaction with its marker; yields one row ``written`` (-1 when the batch had committed).

    The writer of a ``transactional.id`` is kept in the executor's Python worker across batches.
    When another process took the id over meanwhile (a task ran elsewhere), this writer is
    fenced: it is dropped and the batch is tried once more with a fresh one, which reads the
    marker topic again and so skips a batch that did commit."""

    client_config: tuple[tuple[str, str], ...]
    transactional_id: str
    topic: str
    marker_topic: str
    sequence: str
    batch_id: int

    def _writer(self) -> TransactionalBatchWriter:
        writer = _WRITERS.get(self.transactional_id)
        if writer is None or writer.client_config != dict(self.client_config) or writer.topic != self.topic:
            writer = TransactionalBatchWriter(dict(self.client_config), self.transactional_id, self.topic,
                                              self.marker_topic)
            _WRITERS[self.transactional_id] = writer
        return writer

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        chunks = list(batches)  # the batch's Arrow buffers: kept so that a second try can re-read them
        try:
            written = self._writer().write_batch(self.batch_id, arrow_records(chunks), self.sequence)
        except Exception:
            _WRITERS.pop(self.transactional_id, None)  # fenced or broken: start over once
            written = self._writer().write_batch(self.batch_id, arrow_records(chunks), self.sequence)
        yield pa.RecordBatch.from_pydict({"written": pa.array([written], pa.int64())})
