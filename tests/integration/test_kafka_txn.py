"""The exactly-once batch writer of the source connectors, against the real broker.

The writer learns the last committed batch of its sequence from its marker topic, and a replayed
batch id is a no-op — nothing produced at all; a new sequence (a replaced checkpoint, whose batch
ids start at 0 again) is not mistaken for a replay.
"""

from __future__ import annotations

from integration.kafka_helpers import consume_all, create_topic
from pubsub_connect.io.kafka.transactions import OutRecord, TransactionalBatchWriter


def _records(start: int, count: int) -> list[OutRecord]:
    return [OutRecord(key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("seq", str(i).encode())],
                      partition=i % 2, timestamp_ms=1_700_000_000_000 + i) for i in range(start, start + count)]


def test_replayed_batches_are_skipped_across_writer_restarts(kafka_bootstrap: str, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    config = {"bootstrap.servers": kafka_bootstrap}
    marker = f"{unique_name}-offsets"
    first = TransactionalBatchWriter(config, f"{unique_name}-writer", unique_name, marker)
    assert first.last_committed_batch("q1") is None
    assert first.write_batch(0, _records(0, 5), "q1") == 5
    assert first.write_batch(1, _records(5, 3), "q1") == 3
    assert first.write_batch(1, _records(5, 3), "q1") == -1  # same process, replay
    first.close()

    # a new process (same transactional.id) learns batch 1 from the marker topic
    second = TransactionalBatchWriter(config, f"{unique_name}-writer", unique_name, marker)
    assert second.last_committed_batch("q1") == 1
    assert second.write_batch(0, _records(0, 5), "q1") == -1
    assert second.write_batch(1, _records(5, 3), "q1") == -1
    assert second.write_batch(2, _records(8, 2), "q1") == 2
    second.close()

    # a replaced checkpoint: sequence q2 numbers its batches from 0 again, and they are written
    third = TransactionalBatchWriter(config, f"{unique_name}-writer", unique_name, marker)
    assert third.last_committed_batch("q2") is None
    assert third.write_batch(0, _records(10, 1), "q2") == 1
    assert third.write_batch(0, _records(10, 1), "q2") == -1
    third.close()

    records = consume_all(kafka_bootstrap, unique_name)
    assert sorted(int(dict(r.headers)["seq"]) for r in records) == list(range(11))
    by_seq = {int(dict(r.headers)["seq"]): r for r in records}
    assert (by_seq[7].key, by_seq[7].value, by_seq[7].partition, by_seq[7].timestamp_ms) == (
        b"k7", b"v7", 1, 1_700_000_000_007)
    markers = consume_all(kafka_bootstrap, marker)
    assert [(m.key, m.value) for m in markers] == [
        (f"{unique_name}-writer".encode(), b'{"batch_id": 0, "records": 5, "sequence": "q1"}'),
        (f"{unique_name}-writer".encode(), b'{"batch_id": 1, "records": 3, "sequence": "q1"}'),
        (f"{unique_name}-writer".encode(), b'{"batch_id": 2, "records": 2, "sequence": "q1"}'),
        (f"{unique_name}-writer".encode(), b'{"batch_id": 0, "records": 1, "sequence": "q2"}'),
    ]


def test_writers_of_different_connectors_do_not_share_batches(kafka_bootstrap: str, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    config = {"bootstrap.servers": kafka_bootstrap}
    marker = f"{unique_name}-offsets"
    a = TransactionalBatchWriter(config, f"{unique_name}-a", unique_name, marker)
    assert a.write_batch(0, _records(0, 1), "q") == 1
    a.close()
    b = TransactionalBatchWriter(config, f"{unique_name}-b", unique_name, marker)
    assert b.last_committed_batch("q") is None
    assert b.write_batch(0, _records(1, 1), "q") == 1
    b.close()
    assert len(consume_all(kafka_bootstrap, unique_name)) == 2
