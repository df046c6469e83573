"""The Lite sink's convert stage as column expressions equals the per-record reference, row for
row and byte for byte: outbox columns, attribute order, event times and dead-letter rows."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from pubsub_connect.config.loader import validate_connector
from pubsub_connect.model.converters import BYTE_ARRAY_CONVERTER, JSON_CONVERTER, STRING_CONVERTER
from pubsub_connect.model.lite.columns import LiteColumnConversion, converted_columns, uses_columns
from pubsub_connect.model.lite.sink import (
    KAFKA_EVENT_TIME_TYPE_ATTRIBUTE,
    KAFKA_OFFSET_ATTRIBUTE,
    KAFKA_TOPIC_ATTRIBUTE,
    MAX_TIMESTAMP_MS,
)
from pubsub_connect.model.schemas import KAFKA_BRONZE, to_arrow
from pubsub_connect.pipelines.lite_sink import BRONZE_INPUT, ConvertPartition, converted_rows, converts_in_columns

BRONZE_ARROW = to_arrow(KAFKA_BRONZE)
INPUT_ARROW = pa.schema([BRONZE_ARROW.field(name) for name in BRONZE_INPUT])

FIXED_ROWS: list[dict[str, Any]] = [
    # no headers, every coordinate
    {"key": b"k", "value": b"v", "topic": "t", "partition": 2, "offset": 10,
     "timestamp": 1_700_000_000_123_456, "timestampType": 0, "headers": None},
    # null key and value; LogAppendTime; empty header list
    {"key": None, "value": None, "topic": "t", "partition": 0, "offset": 11,
     "timestamp": 5_000, "timestampType": 1, "headers": []},
    # no timestamp (Kafka's -1 ms), so no event time and no type attribute
    {"key": b"", "value": b"", "topic": "t", "partition": 0, "offset": 12,
     "timestamp": -1_000, "timestampType": -1, "headers": None},
    # headers: a repeated name grouped under its first occurrence, a null value skipped, a header
    # named like a coordinate attribute gathering the header's value first
    {"key": b"k", "value": b"v", "topic": "t", "partition": 1, "offset": 13, "timestamp": 0, "timestampType": 0,
     "headers": [{"key": "b", "value": b"1"}, {"key": "a", "value": None}, {"key": KAFKA_TOPIC_ATTRIBUTE,
                                                                            "value": b"h"},
                 {"key": "b", "value": b"2"}, {"key": "a", "value": b"\xff"},
                 {"key": KAFKA_EVENT_TIME_TYPE_ATTRIBUTE, "value": b""}]},
    # only null-valued headers: the coordinates alone
    {"key": b"k", "value": b"v", "topic": "t", "partition": 1, "offset": 14, "timestamp": 0, "timestampType": 0,
     "headers": [{"key": "a", "value": None}]},
    # malformed UTF-8 and non-ASCII text (a string converter replaces the former with U+FFFD)
    {"key": b"\xc3\x28k\xe2\x82", "value": "é €😀".encode() + b"\xed\xa0\x80\xf0\x9f", "topic": "t",
     "partition": 0, "offset": 15, "timestamp": 1, "timestampType": 0, "headers": None},
    # no partition (a table written by hand): no partition and offset attributes; no topic
    {"key": b"k", "value": b"v", "topic": None, "partition": None, "offset": 16, "timestamp": None,
     "timestampType": None, "headers": [{"key": KAFKA_OFFSET_ATTRIBUTE, "value": b"x"}]},
    # cannot be mapped: an unknown timestamp type, and a timestamp after year 9999
    {"key": b"k1", "value": b"v1", "topic": "t", "partition": 0, "offset": 17, "timestamp": 7_000,
     "timestampType": 5, "headers": None},
    {"key": b"k2", "value": None, "topic": "t", "partition": 0, "offset": 18,
     "timestamp": (MAX_TIMESTAMP_MS + 1) * 1000, "timestampType": 0, "headers": None},
]


def generated_rows(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    names = ["a", "b", "ü", KAFKA_TOPIC_ATTRIBUTE, KAFKA_OFFSET_ATTRIBUTE]
    texts = [None, b"", b"plain", "ünïcödé".encode(), b"\xff\xfe", b"\xe2\x82", "😀".encode(), b"a\x00b"]
    rows = []
    for offset in range(count):
        headers = None if rng.random() < 0.3 else [
            {"key": rng.choice(names), "value": rng.choice(texts)} for _ in range(rng.randint(0, 5))]
        rows.append({"key": rng.choice(texts), "value": rng.choice(texts), "topic": rng.choice(["t", "tö"]),
                     "partition": rng.choice([0, 3, 2_147_483_647]), "offset": rng.choice([offset, 2**63 - 1 - offset]),
                     "timestamp": rng.choice([None, -1_000, 0, 999, 1_700_000_000_123_456, 253_402_300_799_999_000]),
                     "timestampType": rng.choice([-1, 0, 1, 0, 0]), "headers": headers})
    return rows


def reference_rows(rows: list[dict[str, Any]], key_converter: str, value_converter: str) -> list[dict[str, Any]]:
    """The per-record reference (what the stage runs for other converters) on the same rows."""
    batch = pa.RecordBatch.from_pylist(rows, schema=INPUT_ARROW)
    convert = ConvertPartition(key_converter, False, value_converter, False)
    out = [row for produced in convert(iter([batch])) for row in produced.to_pylist()]
    return sorted(out, key=lambda row: row["offset"])


def column_rows(spark: Any, rows: list[dict[str, Any]], key_converter: str, value_converter: str) -> list[dict]:
    frame = spark.createDataFrame(pa.Table.from_pylist(rows, schema=INPUT_ARROW))
    out = converted_columns(frame, key_converter, value_converter).toArrow().to_pylist()
    return sorted(out, key=lambda row: row["offset"])


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with the attribute map as its ordered entries (Arrow gives a map as a list of pairs;
    the order is what a subscriber sees)."""
    return [{**row, "attributes": None if row["attributes"] is None else [(k, list(v)) for k, v in row["attributes"]]}
            for row in rows]


CONVERTER_PAIRS = [(BYTE_ARRAY_CONVERTER, BYTE_ARRAY_CONVERTER), (STRING_CONVERTER, BYTE_ARRAY_CONVERTER),
                   (BYTE_ARRAY_CONVERTER, STRING_CONVERTER), (STRING_CONVERTER, STRING_CONVERTER)]


@pytest.mark.parametrize(("key_converter", "value_converter"), CONVERTER_PAIRS)
def test_fixed_rows_equal_the_reference(spark: Any, key_converter: str, value_converter: str) -> None:
    got = comparable(column_rows(spark, FIXED_ROWS, key_converter, value_converter))
    assert got == comparable(reference_rows(FIXED_ROWS, key_converter, value_converter))


def test_fixed_rows_exact_values(spark: Any) -> None:
    """What the reference says, spelled out, so that a change to both would still be caught."""
    got = {row["offset"]: row for row in column_rows(spark, FIXED_ROWS, STRING_CONVERTER, BYTE_ARRAY_CONVERTER)}
    assert [(k, list(v)) for k, v in got[13]["attributes"]] == [
        ("b", [b"1", b"2"]), (KAFKA_TOPIC_ATTRIBUTE, [b"h", b"t"]), ("a", [b"\xff"]),
        (KAFKA_EVENT_TIME_TYPE_ATTRIBUTE, [b"", b"CreateTime"]),
        ("x-goog-pubsublite-source-kafka-partition", [b"1"]), (KAFKA_OFFSET_ATTRIBUTE, [b"13"])]
    assert [k for k, _ in got[12]["attributes"]] == [KAFKA_TOPIC_ATTRIBUTE, "x-goog-pubsublite-source-kafka-partition",
                                                     KAFKA_OFFSET_ATTRIBUTE]
    assert got[12]["event_time"] is None and got[11]["event_time"].timestamp() == 0.005  # 5,000 µs: 5 ms
    assert (got[11]["key"], got[11]["data"]) == (b"", b"")
    assert got[15]["key"] == "\ufffd(k\ufffd".encode() and got[15]["data"] == "é €😀".encode() + b"\xed\xa0\x80\xf0\x9f"
    assert [(k, list(v)) for k, v in got[16]["attributes"]] == [(KAFKA_OFFSET_ATTRIBUTE, [b"x"])]
    assert (got[17]["error_class"], got[17]["error_message"]) == ("LiteEncodingError", "unknown Kafka timestamp type 5")
    assert got[18]["error_message"] == f"timestamp {MAX_TIMESTAMP_MS + 1} ms is after year 9999"
    assert [(got[o]["raw_key"], got[o]["raw_value"], got[o]["data"], got[o]["attributes"]) for o in (17, 18)] == [
        (b"k1", b"v1", None, None), (b"k2", None, None, None)]
    assert all(got[o]["error_class"] is None and got[o]["raw_key"] is None for o in range(10, 17))


@pytest.mark.parametrize(("key_converter", "value_converter"), CONVERTER_PAIRS)
def test_generated_rows_equal_the_reference(spark: Any, key_converter: str, value_converter: str) -> None:
    rows = generated_rows(600, seed=len(key_converter) * 31 + len(value_converter))
    got = comparable(column_rows(spark, rows, key_converter, value_converter))
    assert len(got) == 600
    assert got == comparable(reference_rows(rows, key_converter, value_converter))


def test_one_conversion_applied_to_batch_after_batch_equals_the_reference(spark: Any) -> None:
    """The convert stage builds its column mapping once and applies it to every micro-batch."""
    conversion = LiteColumnConversion(STRING_CONVERTER, STRING_CONVERTER)
    for seed in (1, 2, 3):
        rows = generated_rows(50, seed)
        frame = spark.createDataFrame(pa.Table.from_pylist(rows, schema=INPUT_ARROW))
        got = sorted(conversion.apply(frame).toArrow().to_pylist(), key=lambda row: row["offset"])
        assert comparable(got) == comparable(reference_rows(rows, STRING_CONVERTER, STRING_CONVERTER))


def test_the_stage_takes_the_columns_only_for_byte_and_string_converters(spark: Any) -> None:
    def config(**keys: str) -> Any:
        return validate_connector({"name": "lite", "connector.class": "PubSubLiteSinkConnector",
                                   "pubsublite.project": "p", "pubsublite.location": "us-central1-a",
                                   "pubsublite.topic": "t", "topics": "k", **keys})

    assert converts_in_columns(config())
    assert converts_in_columns(config(**{"key.converter": STRING_CONVERTER, "value.converter": STRING_CONVERTER}))
    json_value = config(**{"value.converter": JSON_CONVERTER})
    assert not converts_in_columns(json_value) and not uses_columns(BYTE_ARRAY_CONVERTER, JSON_CONVERTER)
    frame = spark.createDataFrame(pa.Table.from_pylist(FIXED_ROWS[:1], schema=INPUT_ARROW))
    assert "MapInArrow" not in converted_rows(frame, config())._jdf.queryExecution().toString()
    assert "MapInArrow" in converted_rows(frame, json_value)._jdf.queryExecution().toString()
