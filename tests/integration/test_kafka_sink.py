"""The Python Kafka sink against a real Apache Kafka broker: placement, keys, headers, failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kafka_helpers import Rec, consume_all, create_topic, produce
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from pubsub_connect.io.kafka.options import KafkaOptionsError
from pubsub_connect.io.kafka.reader import read_kafka
from pubsub_connect.io.kafka.write_options import KafkaWriteOptions
from pubsub_connect.io.kafka.writer import write_kafka, write_kafka_stream
from pubsub_connect.io.services.process import free_port
from pubsub_connect.io.spark import Capabilities
from pubsub_connect.model.schemas import KAFKA_HEADERS

PYTHON = Capabilities(native_kafka=False, native_delta=False)
SINK_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("key", BinaryType()),
        StructField("value", StringType()),  # the sink also takes strings, like Spark's
        StructField("partition", IntegerType()),
        StructField("headers", KAFKA_HEADERS),
    ]
)


def java_murmur2(key: bytes) -> int:
    """The Java client's ``Utils.murmur2`` (signed 32-bit), to check partition compatibility."""
    m = 0x5BD1E995
    length = len(key)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = (int.from_bytes(key[i : i + 4], "little") * m) & 0xFFFFFFFF
        k = ((k ^ (k >> 24)) * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail, rem = length & ~3, length % 4
    if rem == 3:
        h ^= key[tail + 2] << 16
    if rem >= 2:
        h ^= key[tail + 1] << 8
    if rem >= 1:
        h = ((h ^ key[tail]) * m) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def test_java_murmur2_reference_values() -> None:
    # Values from the Java client's own unit tests.
    assert java_murmur2(b"21") == -973932308
    assert java_murmur2(b"foobar") == -790332482
    assert java_murmur2(b"a-little-bit-longer-string") == -1486304829


def test_batch_write_places_records_by_topic_column_and_partition(
    spark: Any, kafka_bootstrap: str, unique_name: str
) -> None:
    first, second = f"{unique_name}-1", f"{unique_name}-2"
    create_topic(kafka_bootstrap, first, 3)
    create_topic(kafka_bootstrap, second, 2)
    rows = []
    for i in range(300):
        headers = [("seq", str(i).encode()), ("dup", b"a"), ("dup", None)] if i % 2 else None
        rows.append(
            (
                first if i % 3 else second,
                None if i % 10 == 0 else f"k{i}".encode(),
                None if i % 25 == 0 else f"v{i}",
                i % 2,
                headers,
            )
        )
    write_kafka(spark.createDataFrame(rows, SINK_SCHEMA), {"kafka.bootstrap.servers": kafka_bootstrap}, caps=PYTHON)

    for topic in (first, second):
        got = consume_all(kafka_bootstrap, topic)
        expected = [r for r in rows if r[0] == topic]
        assert len(got) == len(expected)
        want = sorted(((r[3], r[1], None if r[2] is None else r[2].encode(), r[4]) for r in expected), key=repr)
        have = sorted(((g.partition, g.key, g.value, g.headers) for g in got), key=repr)
        assert have == want
    assert {g.partition for g in consume_all(kafka_bootstrap, first)} == {0, 1}  # partition column obeyed


def test_topic_option_overrides_the_topic_column(spark: Any, kafka_bootstrap: str, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, 1)
    df = spark.createDataFrame(
        [(f"{unique_name}-unused", b"k", f"v{i}") for i in range(50)], "topic string, key binary, value string"
    )
    write_kafka(df, {"kafka.bootstrap.servers": kafka_bootstrap, "topic": unique_name}, caps=PYTHON)
    assert sorted(r.value for r in consume_all(kafka_bootstrap, unique_name)) == sorted(
        f"v{i}".encode() for i in range(50)
    )


def test_keyed_records_land_where_the_java_client_puts_them(spark: Any, kafka_bootstrap: str, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, 6)
    keys = [f"customer-{i}".encode() for i in range(120)]
    df = spark.createDataFrame([(k, b"v") for k in keys], "key binary, value binary")
    write_kafka(df, {"kafka.bootstrap.servers": kafka_bootstrap, "topic": unique_name}, caps=PYTHON)
    got = consume_all(kafka_bootstrap, unique_name)
    assert sorted(r.key for r in got) == sorted(keys)
    assert {r.key: r.partition for r in got} == {k: (java_murmur2(k) & 0x7FFFFFFF) % 6 for k in keys}
    assert len({r.partition for r in got}) == 6


def test_streaming_copy_topic_to_topic_is_exact(
    spark: Any, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """Python source → Python sink: keys, values (incl. null), headers and partitions survive."""
    source, target = f"{unique_name}-in", f"{unique_name}-out"
    create_topic(kafka_bootstrap, source, 3)
    create_topic(kafka_bootstrap, target, 3)
    sent = [
        Rec(
            key=None if i % 9 == 0 else f"k{i}".encode(),
            value=None if i % 31 == 0 else f"v{i}".encode(),
            headers=[("h", str(i).encode()), ("h", None)] if i % 4 else None,
            partition=i % 3,
        )
        for i in range(2000)
    ]
    produce(kafka_bootstrap, source, sent)
    df = read_kafka(
        spark,
        {
            "kafka.bootstrap.servers": kafka_bootstrap,
            "subscribe": source,
            "startingOffsets": "earliest",
            "includeHeaders": "true",
            "maxOffsetsPerTrigger": "700",
        },
        caps=PYTHON,
    )
    query = write_kafka_stream(
        df.select("key", "value", "headers", "partition"),
        {"kafka.bootstrap.servers": kafka_bootstrap, "topic": target},
        str(tmp_path / "cp"),
        caps=PYTHON,
        trigger={"availableNow": True},
    )
    try:
        assert query.awaitTermination(180)
    finally:
        query.stop()
    got = consume_all(kafka_bootstrap, target)
    original = consume_all(kafka_bootstrap, source)
    assert len(got) == 2000
    # Same partition, same order within it: each source partition is one task per batch.
    assert [(r.partition, r.offset, r.key, r.value, r.headers) for r in got] == [
        (r.partition, r.offset, r.key, r.value, r.headers) for r in original
    ]


def test_a_record_the_broker_rejects_fails_the_write(spark: Any, kafka_bootstrap: str, unique_name: str) -> None:
    """Delivery errors must fail the task (Spark retries/fails the batch), never vanish."""
    create_topic(kafka_bootstrap, unique_name, 1)
    df = spark.createDataFrame([(b"ok", 0), (b"bad", 7)], "value binary, partition int")
    with pytest.raises(Exception, match=r"Kafka sink: .*Unknown partition"):
        write_kafka(
            df,
            {"kafka.bootstrap.servers": kafka_bootstrap, "topic": unique_name, "kafka.message.timeout.ms": "5000"},
            caps=PYTHON,
        )


def test_unacknowledged_records_fail_the_write(spark: Any) -> None:
    """Records the client accepted but could not deliver (broker unreachable until
    message.timeout.ms) are found in the delivery reports and fail the task."""
    df = spark.createDataFrame([(f"v{i}",) for i in range(5)], "value string").coalesce(1)
    closed = f"127.0.0.1:{free_port()}"
    with pytest.raises(Exception, match=r"Kafka sink: 5 of 5 records were not acknowledged.*timed out"):
        write_kafka(
            df, {"kafka.bootstrap.servers": closed, "topic": "t", "kafka.message.timeout.ms": "1500"}, caps=PYTHON
        )


def test_input_columns_are_validated_before_anything_runs(spark: Any) -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}
    with pytest.raises(KafkaOptionsError, match="'value' not found"):
        write_kafka(spark.range(1).select(F.lit(b"k").alias("key")), base, caps=PYTHON)
    with pytest.raises(KafkaOptionsError, match="no 'topic' column"):
        write_kafka(spark.range(1).select(F.lit("v").alias("value")), {"kafka.bootstrap.servers": "x"}, caps=PYTHON)
    with pytest.raises(KafkaOptionsError, match="'partition' must be int"):
        write_kafka(
            spark.range(1).select(F.lit("v").alias("value"), F.lit(1).cast("long").alias("partition")),
            base,
            caps=PYTHON,
        )
    bad_headers = StructType(
        [
            StructField("value", StringType()),
            StructField("headers", ArrayType(StructType([StructField("k", StringType())]))),
        ]
    )
    with pytest.raises(KafkaOptionsError, match="headers"):
        KafkaWriteOptions.parse(base, bad_headers)
    with pytest.raises(KafkaOptionsError, match="serializer"):
        KafkaWriteOptions.parse(
            {**base, "kafka.value.serializer": "x"}, StructType([StructField("value", StringType())])
        )
    parsed = KafkaWriteOptions.parse({**base, "kafka.enable.idempotence": "false"}, None)
    assert parsed.client["enable.idempotence"] == "false"  # defaults can be overridden
    assert KafkaWriteOptions.parse(base, None).client["partitioner"] == "murmur2_random"
