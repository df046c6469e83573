"""Which options Spark's native Kafka source is given: the larger fetch defaults unless the user
set the same consumer keys."""

from __future__ import annotations

from typing import Any

from pubsub_connect.io.kafka.reader import read_kafka
from pubsub_connect.io.spark import Capabilities

NATIVE = Capabilities(native_kafka=True, native_delta=True)


class RecordingReader:
    """Stands in for ``spark.read``/``spark.readStream``: records the format and options."""

    def __init__(self) -> None:
        self.format_name = ""
        self.given: dict[str, str] = {}

    def format(self, name: str) -> RecordingReader:
        self.format_name = name
        return self

    def options(self, **options: str) -> RecordingReader:
        self.given = options
        return self

    def load(self) -> str:
        return "loaded"


class FakeSpark:
    def __init__(self) -> None:
        self.readStream = RecordingReader()
        self.read = RecordingReader()


BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def test_native_source_gets_the_fetch_defaults() -> None:
    spark: Any = FakeSpark()
    assert read_kafka(spark, dict(BASE), caps=NATIVE) == "loaded"
    assert spark.readStream.format_name == "kafka"
    assert spark.readStream.given == {**BASE, "kafka.max.partition.fetch.bytes": "4194304",
                                      "kafka.receive.buffer.bytes": "4194304"}


def test_the_users_consumer_keys_win() -> None:
    spark: Any = FakeSpark()
    read_kafka(spark, {**BASE, "kafka.max.partition.fetch.bytes": "1048576"}, streaming=False, caps=NATIVE)
    assert spark.read.given == {**BASE, "kafka.max.partition.fetch.bytes": "1048576",
                                "kafka.receive.buffer.bytes": "4194304"}
