"""The transactional writer's handling of records Kafka refuses, against a stand-in producer that
behaves as librdkafka was measured to (``io.kafka.record_rejects``): every record of a refused
broker batch gets the refusal, the transaction must then be aborted, and ``produce()`` refuses a
record over ``message.max.bytes`` itself. The real broker runs the same writer in
``tests/integration/test_kafka_txn.py``; here the search for the refused records is checked
exactly, batch shapes included, in milliseconds."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pubsub_connect.io.kafka import transactions
from pubsub_connect.io.kafka.transactions import (
    BatchOutcome,
    KafkaTransactionError,
    OutRecord,
    TransactionalBatchWriter,
)

MARKERS = "markers"


class StandInProducer:
    """Records go into one pending broker batch per partition until ``flush``; a flushed batch
    that holds a bad record (``bad(value)`` gives its error code) fails whole, and makes the
    transaction abortable; ``produce`` then raises ``_STATE``. ``too_large`` values are refused
    by ``produce`` itself. Committed records land in ``log``."""

    def __init__(self, bad: Callable[[bytes], str | None], log: list[tuple[str, bytes]], stats: dict[str, Any],
                 cluster_error: str | None = None):
        self.bad, self.log, self.stats, self.cluster_error = bad, log, stats, cluster_error
        #: the records (not markers) produced in the latest transaction, shared by the producers
        self.produced: list[bytes] = stats.setdefault("produced", [])  # type: ignore[assignment]
        self.pending: dict[tuple[str, int], list[tuple[bytes, Any]]] = {}
        self.delivered: list[tuple[str, bytes]] = []
        self.abortable = False

    def init_transactions(self, _timeout: float) -> None:
        self.stats["producers"] += 1

    def begin_transaction(self) -> None:
        self.stats["transactions"] += 1
        self.delivered, self.abortable = [], False
        self.produced.clear()

    def produce(self, topic: str, key: Any = None, value: bytes = b"", partition: int = 0,
                on_delivery: Callable[[Any, Any], None] | None = None, **_kw: Any) -> None:
        if self.abortable:
            raise KafkaException(KafkaError(KafkaError._STATE))
        if value.startswith(b"huge"):
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
        if topic != MARKERS:
            self.produced.append(value)
        self.pending.setdefault((topic, partition), []).append((value, on_delivery))

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, _timeout: float = 0) -> int:
        for (topic, _partition), batch in self.pending.items():
            codes = [self.bad(value) for value, _ in batch]
            code = next((c for c in codes if c), None) or self.cluster_error
            for value, on_delivery in batch:
                if code is None:
                    self.delivered.append((topic, value))
                else:
                    self.abortable = True
                if on_delivery is not None:
                    on_delivery(None if code is None else KafkaError(getattr(KafkaError, code)), None)
        self.pending = {}
        return 0

    def commit_transaction(self, _timeout: float) -> None:
        assert not self.abortable and not self.pending
        self.log.extend(self.delivered)

    def abort_transaction(self, _timeout: float) -> None:
        self.stats["aborts"] += 1
        self.pending, self.delivered, self.abortable = {}, [], False


def writer_with(monkeypatch: pytest.MonkeyPatch, bad: Callable[[bytes], str | None], log: list[tuple[str, bytes]],
                stats: dict[str, Any], cluster_error: str | None = None) -> TransactionalBatchWriter:
    writer = TransactionalBatchWriter({}, "w", "topic", MARKERS)

    def new_producer() -> None:
        writer._producer = StandInProducer(bad, log, stats, cluster_error)
        writer._producer.init_transactions(1)

    monkeypatch.setattr(writer, "_new_producer", new_producer)
    monkeypatch.setattr(writer, "_ensure_marker_topic", lambda: None)
    monkeypatch.setattr(writer, "_read_last_marker", lambda: (None, {}))
    return writer


def records(values: list[str], partitions: int = 1) -> list[OutRecord]:
    return [OutRecord(key=None, value=v.encode(), partition=i % partitions) for i, v in enumerate(values)]


def bad_by_prefix(value: bytes) -> str | None:
    return {b"ts": "INVALID_TIMESTAMP", b"big": "MSG_SIZE_TOO_LARGE", b"nokey": "INVALID_RECORD"}.get(
        value.split(b"-")[0])


@pytest.fixture
def stats() -> dict[str, Any]:
    return {"producers": 0, "transactions": 0, "aborts": 0}


def test_a_clean_batch_is_one_transaction(monkeypatch: pytest.MonkeyPatch, stats: dict[str, Any]) -> None:
    log: list[tuple[str, bytes]] = []
    writer = writer_with(monkeypatch, bad_by_prefix, log, stats)
    assert writer.write_batch(0, records([f"g{i}" for i in range(6)], 2), "q") == BatchOutcome(6)
    assert [v for t, v in log if t == "topic"] == [b"g0", b"g2", b"g4", b"g1", b"g3", b"g5"]
    assert stats == {"producers": 1, "transactions": 1, "aborts": 0,
                     "produced": [b"g0", b"g1", b"g2", b"g3", b"g4", b"g5"]}


def test_refused_records_are_singled_out_of_their_broker_batches(monkeypatch: pytest.MonkeyPatch,
                                                                 stats: dict[str, Any]) -> None:
    log: list[tuple[str, bytes]] = []
    writer = writer_with(monkeypatch, bad_by_prefix, log, stats)
    values = ["g0", "ts-1", "g2", "g3", "big-4", "huge-5", "g6", "nokey-7", "g8", "g9", "g10", "ts-11"]
    outcome = writer.write_batch(0, records(values, 2), "q")
    refused = {1: "INVALID_TIMESTAMP", 4: "MSG_SIZE_TOO_LARGE", 5: "MSG_SIZE_TOO_LARGE", 7: "INVALID_RECORD",
               11: "INVALID_TIMESTAMP"}
    assert outcome == BatchOutcome(7, True, refused)
    good = [v.encode() for i, v in enumerate(values) if i not in refused]
    assert sorted(v for t, v in log if t == "topic") == sorted(good)  # each good record once, nothing else
    (marker,) = [json.loads(v) for t, v in log if t == MARKERS]
    assert marker == {"batch_id": 0, "records": 7, "sequence": "q", "rejected": {
        "INVALID_TIMESTAMP": [[1, 1], [11, 11]], "MSG_SIZE_TOO_LARGE": [[4, 5]], "INVALID_RECORD": [[7, 7]]}}
    # one aborted transaction per broker refusal at least, a new producer after each abort
    assert stats["aborts"] == stats["transactions"] - 1 == stats["producers"] - 1
    assert 4 <= stats["aborts"] <= 4 * 4


def test_tolerance_none_commits_nothing_and_names_the_first_refused_record(
        monkeypatch: pytest.MonkeyPatch, stats: dict[str, Any]) -> None:
    log: list[tuple[str, bytes]] = []
    writer = writer_with(monkeypatch, bad_by_prefix, log, stats)
    values = ["g0", "g1", "huge-2", "g3", "ts-4", "g5"]  # the producer refuses 2 before the broker sees 4
    assert writer.write_batch(0, records(values, 2), "q", commit_rejects=False) == BatchOutcome(
        0, False, {2: "MSG_SIZE_TOO_LARGE"})
    values = ["g0", "ts-1", "g2", "huge-3", "g4"]
    assert writer.write_batch(0, records(values), "q", commit_rejects=False) == BatchOutcome(
        0, False, {1: "INVALID_TIMESTAMP"})
    assert stats["produced"] == [b"g0"]  # the last try stops before the first refused record
    assert log == []


def test_a_refusal_of_the_cluster_fails_the_batch(monkeypatch: pytest.MonkeyPatch, stats: dict[str, Any]) -> None:
    log: list[tuple[str, bytes]] = []
    writer = writer_with(monkeypatch, bad_by_prefix, log, stats, cluster_error="_MSG_TIMED_OUT")
    with pytest.raises(KafkaTransactionError, match="_MSG_TIMED_OUT"):
        writer.write_batch(0, records(["g0", "g1"]), "q")
    assert log == [] and stats["aborts"] == 1


def test_the_partition_writer_reads_its_batch_again_for_each_transaction() -> None:
    import pyarrow as pa

    chunk = pa.RecordBatch.from_pydict({
        "key": [b"k", None], "value": [b"v", b"w"], "headers": [[{"key": "h", "value": b"1"}], None],
        "partition": [1, None], "timestamp_ms": [5, None]})
    rows = transactions.ArrowRecords((chunk,))
    expected = [OutRecord(b"k", b"v", [("h", b"1")], 1, 5), OutRecord(None, b"w", None, None, None)]
    assert list(rows) == expected
    assert list(rows) == expected
