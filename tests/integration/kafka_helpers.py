"""Small Kafka helpers for integration tests: create topics, produce, read everything back.

Deliberately independent of ``pubsub_connect.io.kafka.reader`` so tests check the product
against a plain client. ``consume_all`` and ``end_offsets`` read to the end-of-partition event
(the high watermark of a fetch response), independent of ListOffsets(latest).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass
class Rec:
    """One record to produce, or one record read back (then ``topic``/``offset``/``timestamp`` are set)."""

    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] | None = None
    partition: int | None = None
    topic: str | None = None
    offset: int | None = None
    timestamp_ms: int | None = None


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout_s: float = 30,
                 config: Mapping[str, str] | None = None) -> None:
    """Create ``name`` (with topic ``config``) and wait until every partition shows up in metadata."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, partitions, 1, config=dict(config or {}))
    for future in admin.create_topics([topic], operation_timeout=timeout_s).values():
        future.result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        topic = admin.list_topics(topic=name, timeout=5).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        time.sleep(0.05)
    raise TimeoutError(f"topic {name} did not get {partitions} partitions within {timeout_s} s")


def delete_topic(bootstrap: str, name: str, timeout_s: float = 30) -> None:
    """Delete ``name`` and wait until metadata no longer lists it (some brokers hang if a deleted
    topic's name is created again: use a new name instead)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([name], operation_timeout=timeout_s).values():
        future.result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while name in admin.list_topics(timeout=5).topics:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} still listed {timeout_s} s after deletion")
        time.sleep(0.05)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Rec | bytes | str],
    *,
    linger_ms: int = 5,
    config: Mapping[str, Any] | None = None,
) -> int:
    """Produce ``records`` (a ``Rec``, or a bare value) and wait for every acknowledgement.

    Raises if any delivery failed. A large ``linger_ms`` packs many records into one broker
    batch (where a broker's ListOffsets(latest) answer is easiest to get wrong).
    """
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "enable.idempotence": True, **(config or {})}
    )
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    count = 0
    for item in records:
        rec = item if isinstance(item, Rec) else Rec(value=item.encode() if isinstance(item, str) else item)
        kwargs: dict[str, Any] = {"value": rec.value, "key": rec.key, "on_delivery": on_delivery}
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        if rec.headers is not None:
            kwargs["headers"] = rec.headers
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
        if count % 5000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if remaining or errors:
        raise RuntimeError(f"produce to {topic}: {remaining} unacknowledged, errors: {errors[:3]}")
    return count


def _partitions(bootstrap: str, topic: str) -> list[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(topic=topic, timeout=10).topics[topic]
    return sorted(meta.partitions)


def consume_all(bootstrap: str, topic: str, timeout_s: float = 60, *,
                isolation: str = "read_committed") -> list[Rec]:
    """Every record of ``topic`` from offset 0 to the end of each partition, in offset order, as a
    ``read_committed`` consumer sees them (aborted transactions hidden; ``read_uncommitted``
    shows them too)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "isolation.level": isolation,
            "group.id": "tests-consume-all",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    parts = _partitions(bootstrap, topic)
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    pending = set(parts)
    out: list[Rec] = []
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(pending)} did not reach their end")
            for msg in consumer.consume(1000, 0.2):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise RuntimeError(f"consume {topic}: {err}")
                out.append(
                    Rec(
                        value=msg.value(),
                        key=msg.key(),
                        headers=msg.headers(),
                        partition=msg.partition(),
                        topic=msg.topic(),
                        offset=msg.offset(),
                        timestamp_ms=msg.timestamp()[1],
                    )
                )
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: high watermark}`` as counted by reading each partition to its end."""
    ends = {p: 0 for p in _partitions(bootstrap, topic)}
    for rec in consume_all(bootstrap, topic):
        assert rec.partition is not None and rec.offset is not None
        ends[rec.partition] = max(ends[rec.partition], rec.offset + 1)
    return ends
