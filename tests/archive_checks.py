"""What the archive's tests share: records stamped in 2016 on a real broker, and the archive's
files read back and checked file by file, to compare with the topic itself.

Used by the archive's unit and end-to-end tests, the fallback and security end-to-end tests and the
kill -9 loops' archive scenario.
"""

from __future__ import annotations

from confluent_kafka import Producer

from integration.kafka_helpers import consume_all
from pubsub_connect.io.objectstore.archive_files import list_archive_files
from pubsub_connect.io.objectstore.base import ObjectStore
from pubsub_connect.model.blockgzip.blocks import read_block
from pubsub_connect.model.blockgzip.index import parse_index

T0 = 1_456_272_000_000  # 2016-02-24T00:00:00Z

#: Topic config for records stamped in 2016 (date folders come from record time): a broker with
#: Kafka's default retention.ms (7 days) would delete them within seconds.
KEEP = {"retention.ms": "-1"}


def archived_records(store: ObjectStore, prefix: str) -> dict[tuple[str, int], list[tuple[int, bytes | None]]]:
    """Every record in the store per topic-partition, checking each visible file on the way:
    it has an index, its blocks tile it, each block decompresses alone to its index counts, and
    consecutive files of a partition meet without gap or overlap."""
    out: dict[tuple[str, int], list[tuple[int, bytes | None]]] = {}
    for tp, files in list_archive_files(store, prefix).items():
        records: list[tuple[int, bytes | None]] = []
        for file in files:
            assert file.has_index, file.name.gz_key
            data = store.read(file.name.gz_key)
            chunks = parse_index(store.read(file.name.index_key))
            assert chunks[0].first_record_offset == file.name.first_offset
            assert chunks[-1].byte_end == len(data) == file.size
            if records:
                assert file.name.first_offset == records[-1][0] + 1, f"gap/overlap before {file.name.gz_key}"
            for chunk in chunks:
                values = read_block(data[chunk.byte_offset:chunk.byte_end])
                assert len(values) == chunk.num_records
                records.extend((chunk.first_record_offset + i, v) for i, v in enumerate(values))
        out[tp] = records
    return out


def produce_at(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, int]]) -> None:
    """(partition, value, timestamp ms) — the test helper's produce() has no timestamps."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    errors: list[str] = []
    for partition, value, ts in records:
        producer.produce(topic, value=value, partition=partition, timestamp=ts,
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors


def topic_records(bootstrap: str, topic: str) -> dict[tuple[str, int], list[tuple[int, bytes | None]]]:
    out: dict[tuple[str, int], list[tuple[int, bytes | None]]] = {}
    for rec in consume_all(bootstrap, topic):
        assert rec.partition is not None and rec.offset is not None
        out.setdefault((topic, rec.partition), []).append((rec.offset, rec.value))
    return out


def archive_values(partition: int, start: int, count: int) -> list[bytes | None]:
    out: list[bytes | None] = []
    for i in range(start, start + count):
        if i % 101 == 7:
            out.append(None)
        elif i % 53 == 3:
            out.append(b"multi\nline\r\nvalue %d \\ end" % i)
        else:
            out.append(b'{"p":%d,"i":%d,"pad":"%s"}' % (partition, i, b"z" * (i % 23)))
    return out
