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

A record Kafka refuses for good (:mod:`pubsub_connect.io.kafka.record_rejects`: a timestamp the
topic does not take, a record too large) would fail its batch on every retry. The writer leaves
such records out instead: it aborts, writes the batch again without them (singling them out of
their broker batch first), commits the rest, and lists them by row index in the marker, so that
a replayed batch still knows them. The stage dead-letters them from that list.

Where it runs: :class:`TransactionalPartitionWriter` is the ``mapInArrow`` function of the produce
stages. The micro-batch is brought into one Spark partition in its produce order and written by
an executor task; the driver only collects the outcome (a count, refused row indices). A retried
task fences the earlier attempt (same ``transactional.id``) and finds its marker if it had
committed.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pubsub_connect.io.kafka.admin import create_topic
from pubsub_connect.io.kafka.librdkafka import connection_settings, with_client_logger
from pubsub_connect.io.kafka.record_rejects import decode_rejects, encode_rejects, is_record_reject

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


@dataclass(frozen=True)
class BatchOutcome:
    """What became of a micro-batch: ``written`` records are in Kafka (-1: the batch had
    committed before, nothing was produced now); ``committed`` says whether the batch's
    transaction is committed (False only when refused records forbade the commit);
    ``rejected`` maps the row index (in the batch's order) of each record Kafka refused for good
    to its librdkafka error code (:mod:`pubsub_connect.io.kafka.record_rejects`)."""

    written: int
    committed: bool = True
    rejected: Mapping[int, str] = field(default_factory=dict)


@dataclass
class _Attempt:
    """One transaction over a batch: what it produced and how far it got."""

    produced: int = 0
    #: row index → the delivery error of each record whose delivery failed
    failures: dict[int, Any] = field(default_factory=dict)
    #: the row index at which producing stopped (a delivery had failed); None: every record was produced
    stopped_at: int | None = None


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
        self._last_rejected: dict[int, str] = {}

    # -- set-up ------------------------------------------------------------------------------

    def _ensure_marker_topic(self) -> None:
        try:
            create_topic(self.client_config, self.marker_topic, 1, timeout_s=self.timeout_s)  # False: existed
        except Exception as exc:
            raise KafkaTransactionError(f"cannot create marker topic {self.marker_topic}: {exc}") from exc

    def _start(self) -> None:
        """Create the producer (fencing any earlier instance and aborting its open transaction),
        then read the last committed batch id from the marker topic."""
        self._ensure_marker_topic()
        self._new_producer()
        self._last_marker, self._last_rejected = self._read_last_marker()
        log.info("%s: last committed marker %s", self.transactional_id, self._last_marker)

    def _new_producer(self) -> None:
        """A producer of this ``transactional.id``, ready for transactions: it fences the one
        before it, whose open transaction the broker aborts."""
        from confluent_kafka import Producer

        self._producer = Producer(with_client_logger({
            "partitioner": "murmur2_random",  # Java's default partitioner for keyed records
            **self.client_config,
            "transactional.id": self.transactional_id,
            "enable.idempotence": True,
        }))
        self._producer.init_transactions(self.timeout_s)

    def _read_last_marker(self) -> tuple[tuple[str | None, int] | None, dict[int, str]]:
        """Scan the marker topic to its (committed) end for this writer's latest marker:
        ``(sequence, batch id)`` and the records that batch's Kafka refused; the sequence is None
        in markers written without one."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer(with_client_logger({
            **connection_settings(self.client_config),
            "group.id": f"{self.transactional_id}-marker-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }))
        last: tuple[str | None, int] | None = None
        rejected: dict[int, str] = {}
        try:
            consumer.assign([TopicPartition(self.marker_topic, 0, 0)])
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        return last, rejected
                    raise KafkaTransactionError(f"reading {self.marker_topic}: {message.error()}")
                if message.key() == self.transactional_id.encode():
                    marker = json.loads(message.value())
                    last = (marker.get("sequence"), int(marker["batch_id"]))
                    rejected = decode_rejects(marker.get("rejected"))
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

    def write_batch(self, batch_id: int, records: Iterable[OutRecord], sequence: str | None = None, *,
                    commit_rejects: bool = True) -> BatchOutcome:
        """Produce ``records`` and the marker for ``batch_id`` of ``sequence`` in one transaction.

        A record Kafka refuses for good (:func:`~pubsub_connect.io.kafka.record_rejects.is_record_reject`)
        is left out and reported by its index in ``records``; the others are committed with a
        marker that lists the refused ones, so that a replay knows them too. With
        ``commit_rejects`` False such a batch is not committed at all, and the outcome names its
        first refused record only (``errors.tolerance=none`` stops there; once a refused record
        is known, the transactions tried next stop before it).

        When ``batch_id`` had committed before (Spark replays the last batch after a crash),
        nothing is produced: ``written`` is -1 and ``rejected`` what its marker lists. Any other
        failure (the cluster, fencing) raises :class:`KafkaTransactionError` with nothing
        committed. ``records`` is iterated once per transaction tried: refused records cost an
        aborted transaction each, plus a few to single them out of their broker batch.
        """
        last = self.last_committed_batch(sequence)
        if last is not None and batch_id <= last:
            log.info("%s: batch %d already committed (last %d); skipped", self.transactional_id, batch_id, last)
            return BatchOutcome(-1, True, dict(self._last_rejected) if batch_id == last else {})
        rejected: dict[int, str] = {}
        isolated: list[list[int]] = []
        while True:
            limit = None if commit_rejects or not rejected else min(rejected)
            try:
                attempt = self._attempt(batch_id, sequence, records, rejected, isolated, limit)
                if attempt.failures:
                    isolated = self._single_out(attempt, rejected, isolated)
                    self._abort(batch_id)
                    self._new_producer()  # the aborted one would fail its next transaction
                    continue
                if rejected and not commit_rejects:
                    self._producer.abort_transaction(self.timeout_s)
                    first = min(rejected)
                    return BatchOutcome(0, False, {first: rejected[first]})
                self._producer.commit_transaction(self.timeout_s)
            except BaseException as exc:
                self._abort(batch_id)
                if isinstance(exc, KafkaTransactionError):
                    raise
                raise KafkaTransactionError(f"transaction for batch {batch_id} failed: {exc}") from exc
            self._last_marker, self._last_rejected = (sequence, batch_id), rejected
            return BatchOutcome(attempt.produced, True, rejected)

    def _abort(self, batch_id: int) -> None:
        if self._producer is None:
            return
        try:
            self._producer.abort_transaction(self.timeout_s)
        except Exception as exc:  # the producer may be fenced or broken; the next start aborts
            log.info("%s: abort of batch %d failed (%s); a new producer will fence it", self.transactional_id,
                     batch_id, exc)
            self._producer = None

    def _attempt(self, batch_id: int, sequence: str | None, records: Iterable[OutRecord],
                 rejected: dict[int, str], isolated: list[list[int]], limit: int | None) -> _Attempt:
        """Begin a transaction and produce every record not in ``rejected`` (nor at or after
        ``limit``), then the marker; the transaction is left open for the caller.

        Each group of ``isolated`` (row indices) goes alone into its broker batches: the
        producer is flushed before and after it, so a broker refusal names that group only. The
        first delivery failure ends the attempt (the transaction has to be aborted anyway), with
        :attr:`_Attempt.failures` set; the marker is produced only when there was none. A record
        the producer refuses itself (too large for ``message.max.bytes``) is added to
        ``rejected`` and skipped; the transaction stays usable."""
        if self._producer is None:
            self._start()
        producer = self._producer
        attempt = _Attempt()

        def on_delivery(index: int, err: Any, _msg: Any) -> None:
            if err is not None:
                attempt.failures[index] = err

        group_of = {index: number for number, group in enumerate(isolated) for index in group}
        current: int | None = None
        producer.begin_transaction()
        for index, record in enumerate(records):
            if limit is not None and index >= limit:
                break
            if index in rejected:
                continue
            group = group_of.get(index)
            if group != current:
                producer.flush(self.timeout_s)
                if attempt.failures:
                    attempt.stopped_at = index
                    return attempt
                current = group
            try:
                self._produce(producer, record, functools.partial(on_delivery, index))
            except Exception as exc:
                error = exc.args[0] if exc.args else None
                if is_record_reject(error):
                    rejected[index] = error.name()
                    if limit is not None:
                        limit = min(limit, index)
                    continue
                if not _transaction_must_abort(error):
                    raise
                attempt.stopped_at = index  # a delivery failed meanwhile: its report says which
                break
            attempt.produced += 1
            if attempt.produced % 10_000 == 0:
                producer.poll(0)
        producer.flush(self.timeout_s)
        if attempt.failures:
            return attempt
        if attempt.stopped_at is not None:
            raise KafkaTransactionError(f"the transaction of batch {batch_id} became unusable without a failed "
                                        f"delivery (at record {attempt.stopped_at})")
        marker_errors: list[Any] = []
        marker: dict[str, Any] = {"batch_id": batch_id, "records": attempt.produced, "sequence": sequence}
        if rejected:
            marker["rejected"] = encode_rejects(rejected)
        producer.produce(self.marker_topic, key=self.transactional_id.encode(), value=json.dumps(marker).encode(),
                         partition=0, on_delivery=lambda err, _msg: marker_errors.append(err) if err else None)
        producer.flush(self.timeout_s)
        if attempt.failures or marker_errors:
            first = next(iter(attempt.failures.values()), None) or marker_errors[0]
            raise KafkaTransactionError(f"{len(attempt.failures) + len(marker_errors)} record(s) failed: {first}")
        return attempt

    def _produce(self, producer: Any, record: OutRecord, on_delivery: Callable[[Any, Any], None]) -> None:
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
                return
            except BufferError:
                producer.poll(0.05)

    def _single_out(self, attempt: _Attempt, rejected: dict[int, str], isolated: list[list[int]]) -> list[list[int]]:
        """After an attempt that failed: the record-level refusals narrow down the suspects, the
        next attempt's isolated groups are returned; any other failure raises.

        A record refused while it was alone (a group of one) is refused for good and goes to
        ``rejected``. The refused records of a larger group are split in halves, the refused
        records produced outside any group become one group, groups delivered whole are
        dropped (their records are fine), and groups not reached yet are kept. Each round
        either finds a refused record or shrinks a group, so the rounds end."""
        refused = {index: err for index, err in attempt.failures.items() if is_record_reject(err)}
        if not refused:  # the cluster, not a record: the batch fails as a whole
            first = next(iter(attempt.failures.values()))
            raise KafkaTransactionError(f"{len(attempt.failures)} record(s) failed: {first}")
        group_of = {index: number for number, group in enumerate(isolated) for index in group}
        by_group: dict[int | None, list[int]] = {}
        for index in sorted(refused):
            by_group.setdefault(group_of.get(index), []).append(index)
        stopped_at = attempt.stopped_at

        def delivered(group: list[int]) -> bool:
            """Every record of ``group`` was produced, and none failed."""
            return (stopped_at is None or max(group) < stopped_at) and not any(i in attempt.failures for i in group)

        kept = [group for number, group in enumerate(isolated) if number not in by_group and not delivered(group)]
        for number, indices in by_group.items():
            if number is not None and len(isolated[number]) == 1:
                rejected[indices[0]] = refused[indices[0]].name()
            elif len(indices) == 1:
                kept.append(indices)
            else:
                half = len(indices) // 2
                kept.extend([indices[:half], indices[half:]])
        log.info("%s: Kafka refused %d record(s) of a broker batch; %d refused for good so far, %d group(s) "
                 "of suspects to write alone", self.transactional_id, len(refused), len(rejected), len(kept))
        return sorted(kept)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout_s)
            self._producer = None


def _transaction_must_abort(error: Any) -> bool:
    """Whether a ``produce()`` error says the transaction is already failed (a delivery failed:
    librdkafka then refuses every further record with ``_STATE``)."""
    if error is None or not callable(getattr(error, "name", None)):
        return False
    return bool(error.txn_requires_abort()) or error.name() == "_STATE"


#: Columns the partition writer reads, as the produce stages select them: ``timestamp_ms`` is the
#: record timestamp in epoch milliseconds (None: the producer's time).
RECORD_COLUMNS = ("key", "value", "headers", "partition", "timestamp_ms")

#: Writers kept per Python worker process, so a stage's micro-batches reuse one producer (its
#: ``init_transactions`` and marker scan happen once, not per batch).
_WRITERS: dict[str, TransactionalBatchWriter] = {}


@dataclass(frozen=True)
class ArrowRecords:
    """Arrow record batches with :data:`RECORD_COLUMNS` as records, in row order; each iteration
    starts from the first row again (the writer goes through a batch once per transaction it
    tries)."""

    chunks: tuple[Any, ...]

    def __iter__(self) -> Iterator[OutRecord]:
        for chunk in self.chunks:
            columns = chunk.to_pydict()
            for key, value, headers, partition, stamp in zip(*(columns[c] for c in RECORD_COLUMNS), strict=True):
                yield OutRecord(key=key, value=value,
                                headers=[(h["key"], h["value"]) for h in headers] if headers else None,
                                partition=partition, timestamp_ms=stamp)


#: The row the partition writer yields per micro-batch (Spark DDL): the :class:`BatchOutcome`,
#: each refused record by its row index and error code. Indices and codes only: no record data
#: goes to the driver.
OUTCOME_SCHEMA = "written long, committed boolean, rejected array<struct<index: long, code: string>>"


@dataclass(frozen=True)
class TransactionalPartitionWriter:
    """``mapInArrow`` function writing a whole micro-batch (one Spark partition) in one Kafka
    transaction with its marker; yields one :data:`OUTCOME_SCHEMA` row.

    The writer of a ``transactional.id`` is kept in the executor's Python worker across batches.
    When another process took the id over meanwhile (a task ran elsewhere), this writer is
    fenced: it is dropped and the batch is tried once more with a fresh one, which reads the
    marker topic again and so skips a batch that did commit. ``commit_rejects`` False
    (``errors.tolerance=none``): a batch with a record Kafka refuses is not committed."""

    client_config: tuple[tuple[str, str], ...]
    transactional_id: str
    topic: str
    marker_topic: str
    sequence: str
    batch_id: int
    commit_rejects: bool = True

    def _writer(self) -> TransactionalBatchWriter:
        writer = _WRITERS.get(self.transactional_id)
        if writer is None or writer.client_config != dict(self.client_config) or writer.topic != self.topic:
            writer = TransactionalBatchWriter(dict(self.client_config), self.transactional_id, self.topic,
                                              self.marker_topic)
            _WRITERS[self.transactional_id] = writer
        return writer

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        records = ArrowRecords(tuple(batches))  # the batch's Arrow buffers, read again by each try
        try:
            outcome = self._writer().write_batch(self.batch_id, records, self.sequence,
                                                 commit_rejects=self.commit_rejects)
        except Exception:
            _WRITERS.pop(self.transactional_id, None)  # fenced or broken: start over once
            outcome = self._writer().write_batch(self.batch_id, records, self.sequence,
                                                 commit_rejects=self.commit_rejects)
        rejected = [{"index": index, "code": code} for index, code in sorted(outcome.rejected.items())]
        yield pa.RecordBatch.from_pydict({
            "written": pa.array([outcome.written], pa.int64()),
            "committed": pa.array([outcome.committed], pa.bool_()),
            "rejected": pa.array([rejected], pa.list_(pa.struct([("index", pa.int64()), ("code", pa.string())]))),
        })
