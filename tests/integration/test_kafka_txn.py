"""The exactly-once batch writer of the source connectors, against the real broker.

The writer learns the last committed batch of its sequence from its marker topic, and a replayed
batch id is a no-op — nothing produced at all; a new sequence (a replaced checkpoint, whose batch
ids start at 0 again) is not mistaken for a replay. Records the broker or the producer refuses
for good are left out of the committed batch and named by row index, in the outcome and in the
marker (so a replay still names them); with ``commit_rejects`` False nothing is committed.
"""

from __future__ import annotations

import json
import time

from integration.kafka_helpers import consume_all, create_topic
from pubsub_connect.io.kafka.transactions import BatchOutcome, OutRecord, TransactionalBatchWriter


def _records(start: int, count: int) -> list[OutRecord]:
    return [OutRecord(key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("seq", str(i).encode())],
                      partition=i % 2, timestamp_ms=1_700_000_000_000 + i) for i in range(start, start + count)]


def test_replayed_batches_are_skipped_across_writer_restarts(kafka_bootstrap: str, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    config = {"bootstrap.servers": kafka_bootstrap}
    marker = f"{unique_name}-offsets"
    first = TransactionalBatchWriter(config, f"{unique_name}-writer", unique_name, marker)
    assert first.last_committed_batch("q1") is None
    assert first.write_batch(0, _records(0, 5), "q1") == BatchOutcome(5)
    assert first.write_batch(1, _records(5, 3), "q1") == BatchOutcome(3)
    assert first.write_batch(1, _records(5, 3), "q1") == BatchOutcome(-1)  # same process, replay
    first.close()

    # a new process (same transactional.id) learns batch 1 from the marker topic
    second = TransactionalBatchWriter(config, f"{unique_name}-writer", unique_name, marker)
    assert second.last_committed_batch("q1") == 1
    assert second.write_batch(0, _records(0, 5), "q1") == BatchOutcome(-1)
    assert second.write_batch(1, _records(5, 3), "q1") == BatchOutcome(-1)
    assert second.write_batch(2, _records(8, 2), "q1") == BatchOutcome(2)
    second.close()

    # a replaced checkpoint: sequence q2 numbers its batches from 0 again, and they are written
    third = TransactionalBatchWriter(config, f"{unique_name}-writer", unique_name, marker)
    assert third.last_committed_batch("q2") is None
    assert third.write_batch(0, _records(10, 1), "q2") == BatchOutcome(1)
    assert third.write_batch(0, _records(10, 1), "q2") == BatchOutcome(-1)
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
    assert a.write_batch(0, _records(0, 1), "q") == BatchOutcome(1)
    a.close()
    b = TransactionalBatchWriter(config, f"{unique_name}-b", unique_name, marker)
    assert b.last_committed_batch("q") is None
    assert b.write_batch(0, _records(1, 1), "q") == BatchOutcome(1)
    b.close()
    assert len(consume_all(kafka_bootstrap, unique_name)) == 2


#: Topic limits the refused records of :func:`test_refused_records_are_left_out_and_named` break.
LIMITED_TOPIC = {"max.message.bytes": "100000", "message.timestamp.before.max.ms": str(24 * 3600_000)}
HOUR_MS = 3600_000


def _batch_with_refused_records(now_ms: int) -> tuple[list[OutRecord], dict[int, str]]:
    """Twenty records over two partitions; four of them refused for good: a timestamp two hours
    ahead (the broker's default ``message.timestamp.after.max.ms`` is one hour), one two days
    back (the topic's ``before`` limit is a day), a value over the topic's ``max.message.bytes``
    (the broker refuses it) and one over the producer's ``message.max.bytes`` (``produce()``
    refuses it)."""
    records = [OutRecord(key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("seq", str(i).encode())],
                         partition=i % 2, timestamp_ms=now_ms) for i in range(20)]
    bad = {3: ("INVALID_TIMESTAMP", {"timestamp_ms": now_ms + 2 * HOUR_MS}),
           7: ("MSG_SIZE_TOO_LARGE", {"value": b"x" * 200_000}),
           12: ("MSG_SIZE_TOO_LARGE", {"value": b"y" * 1_500_000}),
           15: ("INVALID_TIMESTAMP", {"timestamp_ms": now_ms - 48 * HOUR_MS})}
    for index, (_, change) in bad.items():
        records[index] = OutRecord(**{**records[index].__dict__, **change})
    return records, {index: code for index, (code, _) in bad.items()}


def test_refused_records_are_left_out_and_named(kafka_bootstrap: str, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=2, config=LIMITED_TOPIC)
    config = {"bootstrap.servers": kafka_bootstrap}
    marker = f"{unique_name}-offsets"
    records, refused = _batch_with_refused_records(int(time.time() * 1000))
    writer = TransactionalBatchWriter(config, f"{unique_name}-writer", unique_name, marker)
    assert writer.write_batch(0, records, "q") == BatchOutcome(16, True, refused)
    assert writer.write_batch(0, records, "q") == BatchOutcome(-1, True, refused)  # same process, replay
    writer.close()

    good = sorted(set(range(20)) - set(refused))
    assert sorted(int(dict(r.headers)["seq"]) for r in consume_all(kafka_bootstrap, unique_name)) == good
    (mark,) = consume_all(kafka_bootstrap, marker)
    assert json.loads(mark.value) == {"batch_id": 0, "records": 16, "sequence": "q", "rejected": {
        "INVALID_TIMESTAMP": [[3, 3], [15, 15]], "MSG_SIZE_TOO_LARGE": [[7, 7], [12, 12]]}}

    # a new process replaying the batch learns its refused records from the marker
    again = TransactionalBatchWriter(config, f"{unique_name}-writer", unique_name, marker)
    assert again.write_batch(0, records, "q") == BatchOutcome(-1, True, refused)
    # errors.tolerance=none: the next batch, with its first refused record at index 3, is not committed
    assert again.write_batch(1, records, "q", commit_rejects=False) == BatchOutcome(0, False, {3: "INVALID_TIMESTAMP"})
    # and a batch of good records after it commits (the aborted transactions left nothing behind)
    assert again.write_batch(1, [records[0]], "q", commit_rejects=False) == BatchOutcome(1)
    again.close()
    assert sorted(int(dict(r.headers)["seq"]) for r in consume_all(kafka_bootstrap, unique_name)) == sorted([*good, 0])
