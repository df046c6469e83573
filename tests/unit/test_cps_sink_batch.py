"""The batch convert stage (``to_outbox``) must equal the per-record reference, row for row."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from pubsub_connect.model.connect import DataError
from pubsub_connect.model.converters import (
    BOOLEAN_CONVERTER,
    DOUBLE_CONVERTER,
    FLOAT_CONVERTER,
    INTEGER_CONVERTER,
    JSON_CONVERTER,
    SHORT_CONVERTER,
    STRING_CONVERTER,
)
from pubsub_connect.model.cps_sink.batch import CpsSinkConversion, to_outbox, uses_column_path
from pubsub_connect.model.cps_sink.reference import CpsSinkMapper, map_record
from pubsub_connect.model.cps_sink.settings import MAX_MESSAGE_BYTES, CpsSinkSettings, KafkaRecord
from unit.cps_sink_fixtures import FIXTURES, fixture_bytes

BRONZE_DDL = (
    "key binary, value binary, topic string, partition int, offset long, ts_ms long, timestampType int, "
    "headers array<struct<key:string,value:binary>>"
)
OUTBOX_SIMPLE = (
    "struct<data:binary,attributes:map<string,string>,ordering_key:string,topic:string,partition:int,"
    "offset:bigint,key:binary,value:binary,error_class:string,error_message:string>"
)

SETTINGS = {
    "defaults": CpsSinkSettings(),
    "string-key-metadata-headers-order-key": CpsSinkSettings(
        key_converter=STRING_CONVERTER, metadata_publish=True, headers_publish=True, ordering_key_source="key"
    ),
    "string-string-headers-order-partition": CpsSinkSettings(
        key_converter=STRING_CONVERTER,
        value_converter=STRING_CONVERTER,
        headers_publish=True,
        ordering_key_source="partition",
    ),
    "integer-value-metadata": CpsSinkSettings(value_converter=INTEGER_CONVERTER, metadata_publish=True),
    "short-value-order-key": CpsSinkSettings(value_converter=SHORT_CONVERTER, ordering_key_source="key"),
    "boolean-value-headers": CpsSinkSettings(
        key_converter=STRING_CONVERTER, value_converter=BOOLEAN_CONVERTER, headers_publish=True
    ),
    "json-value-metadata-headers-order-key": CpsSinkSettings(
        key_converter=STRING_CONVERTER,
        value_converter=JSON_CONVERTER,
        metadata_publish=True,
        headers_publish=True,
        ordering_key_source="key",
    ),
    "schemaless-json-value-metadata-headers-order-partition": CpsSinkSettings(
        key_converter=STRING_CONVERTER,
        value_converter=JSON_CONVERTER,
        value_schemas_enable=False,
        metadata_publish=True,
        headers_publish=True,
        ordering_key_source="partition",
    ),
    "schemaless-json-both": CpsSinkSettings(
        key_converter=JSON_CONVERTER,
        key_schemas_enable=False,
        value_converter=JSON_CONVERTER,
        value_schemas_enable=False,
        headers_publish=True,
    ),
    "float-key-double-value": CpsSinkSettings(
        key_converter=FLOAT_CONVERTER,
        value_converter=DOUBLE_CONVERTER,
        headers_publish=True,
        ordering_key_source="key",
    ),
}
COLUMN_PATH = {name for name, s in SETTINGS.items() if uses_column_path(s)}


def corpus() -> list[KafkaRecord]:
    with open(FIXTURES / "corpus.jsonl", encoding="utf-8") as f:
        raws = [json.loads(line) for line in f if line.strip()]
    records = [
        KafkaRecord(
            key=fixture_bytes(raw["key"]),
            value=fixture_bytes(raw["value"]),
            topic="brown",
            partition=i % 3,
            offset=1000 + i,
            timestamp_ms=raw["timestamp_ms"],
            headers=[(k, fixture_bytes(v)) for k, v in raw["headers"]],
        )
        for i, raw in enumerate(raws)
    ]
    # Generated: the 100-attribute cap with duplicates on both sides of it.
    many = [(f"h{i:03d}", b"x") for i in range(120)] + [("h005", b"late"), ("h119", b"never")]
    records.append(KafkaRecord(b"dog", b"fox", "brown", 1, 5000, 50000, many))
    return records


def keyed_records(values: list[bytes | None], topic: str, keys: list[bytes | None] | None = None) -> list[KafkaRecord]:
    """One record per value at offsets 0, 1, …, over three partitions, keyed by ``keys`` in turn
    (by default ``k<offset>`` with every fourth key null)."""
    keys = keys or [f"k{i}".encode() if i % 4 else None for i in range(len(values))]
    return [KafkaRecord(keys[i % len(keys)], v, topic, i % 3, i, 1_700_000_000_000 + i, ())
            for i, v in enumerate(values)]


def registry_lookup(schemas: dict[int, Any]) -> Callable[[int], str]:
    """A Schema Registry of ``schemas`` by id, as the convert stage asks one (an unknown id is the
    record's fault)."""
    from pubsub_connect.model.avro.wire import UnknownSchemaIdError

    def lookup(schema_id: int) -> str:
        if schema_id not in schemas:
            raise UnknownSchemaIdError(f"no schema with id {schema_id} in the Schema Registry")
        return json.dumps(schemas[schema_id])

    return lookup


def bronze(spark: Any, records: list[KafkaRecord]) -> Any:
    rows = [
        (r.key, r.value, r.topic, r.partition, r.offset, r.timestamp_ms, 0, [(k, v) for k, v in r.headers])
        for r in records
    ]
    df = spark.createDataFrame(rows, BRONZE_DDL)
    return df.selectExpr(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp_millis(ts_ms) AS timestamp",
        "timestampType",
        "headers",
        "current_timestamp() AS ingest_time",
    )


def reference_rows(records: list[KafkaRecord], settings: CpsSinkSettings,
                   mapper: CpsSinkMapper | None = None) -> dict[int, tuple]:
    """What every outbox row must be, from the per-record reference (``mapper``, by default the
    settings' own): ``(data, attributes, ordering_key, topic, partition, key, value, error_class,
    error_message, skipped_headers)``, the raw key and value only in dead letters."""
    out = {}
    for r in records:
        try:
            result = mapper.map(r) if mapper else map_record(r, settings)
        except DataError as e:
            out[r.offset] = (None, None, None, r.topic, r.partition, r.key, r.value, e.error_class, str(e), None)
            continue
        m = result.message
        message = (None, None, None) if m is None else (m.data, m.attributes, m.ordering_key)
        out[r.offset] = (*message, r.topic, r.partition, None, None, None, None, result.skipped_headers)
    return out


def batch_rows(df: Any) -> dict[int, tuple]:
    def b(x: Any) -> bytes | None:
        return None if x is None else bytes(x)

    out = {}
    for row in df.collect():
        skipped = row["skipped_headers"] if row["error_class"] is None else None
        out[row["offset"]] = (
            b(row["data"]),
            row["attributes"],
            row["ordering_key"],
            row["topic"],
            row["partition"],
            b(row["key"]),
            b(row["value"]),
            row["error_class"],
            row["error_message"],
            skipped,
        )
    return out


@pytest.fixture(scope="module")
def corpus_df(spark: Any) -> Any:
    records = corpus()
    return records, bronze(spark, records).cache()


@pytest.mark.parametrize("name", list(SETTINGS))
def test_batch_equals_reference(corpus_df: Any, name: str) -> None:
    records, df = corpus_df
    settings = SETTINGS[name]
    outbox = to_outbox(df, settings, with_skipped_headers=True)
    expected = reference_rows(records, settings)
    actual = batch_rows(outbox)
    assert sorted(actual) == sorted(expected)
    for offset, row in expected.items():
        assert actual[offset] == row, f"{name}: offset {offset}"
    # the corpus exercises good, bad and empty rows under every setting (metadata leaves no row empty)
    kinds = {("error" if r[7] else "message" if r[0] is not None else "nothing") for r in expected.values()}
    assert kinds == ({"error", "message"} if settings.metadata_publish else {"error", "message", "nothing"})


@pytest.mark.parametrize("name", ["string-key-metadata-headers-order-key", "json-value-metadata-headers-order-key"])
def test_one_conversion_applied_to_batch_after_batch_equals_the_reference(spark: Any, name: str) -> None:
    """The convert stage builds its conversion once and applies it to every micro-batch: each
    batch, through the same expressions, comes out as the reference maps it."""
    records = corpus()
    settings = SETTINGS[name]
    conversion = CpsSinkConversion(settings, with_skipped_headers=True)
    thirds = [records[i::3] for i in range(3)]
    for batch in thirds:
        expected = reference_rows(batch, settings)
        assert batch_rows(conversion.to_outbox(bronze(spark, batch))) == expected
    converted, cached = conversion.outbox_and_cache(bronze(spark, thirds[0]))
    assert (cached is None) == (name in COLUMN_PATH)
    assert converted.count() == len(thirds[0])


def test_applying_a_built_conversion_makes_few_jvm_calls(corpus_df: Any) -> None:
    """Applying the prebuilt column mapping to a micro-batch is a few Py4J calls per step; building
    it is hundreds (each PySpark function call makes several), which a stage pays once."""
    import py4j.clientserver

    _, df = corpus_df
    settings = SETTINGS["string-key-metadata-headers-order-key"]
    sent: list[str] = []
    original = py4j.clientserver.ClientServerConnection.send_command

    def counting(self: Any, command: str) -> Any:
        if not command.startswith("m\nd\n"):  # not Python's garbage collector freeing JVM objects
            sent.append(command)
        return original(self, command)

    py4j.clientserver.ClientServerConnection.send_command = counting  # type: ignore[method-assign]
    try:
        conversion = CpsSinkConversion(settings)
        built = len(sent)
        conversion.to_outbox(df)
        applied = len(sent) - built
    finally:
        py4j.clientserver.ClientServerConnection.send_command = original  # type: ignore[method-assign]
    assert built > 5 * applied, (built, applied)
    assert applied < 120, applied


def test_outbox_schema_is_the_contract(corpus_df: Any) -> None:
    _, df = corpus_df
    for settings in (SETTINGS["defaults"], SETTINGS["json-value-metadata-headers-order-key"]):
        assert to_outbox(df, settings).schema.simpleString() == OUTBOX_SIMPLE


def test_column_path_runs_no_python(corpus_df: Any) -> None:
    """Byte/string/number converters are pure column expressions; JSON goes through mapInArrow
    (schemaless JSON values only for the records Spark's JSON text may not match)."""
    _, df = corpus_df
    expected_column_path = {
        "defaults",
        "string-key-metadata-headers-order-key",
        "string-string-headers-order-partition",
        "integer-value-metadata",
        "short-value-order-key",
        "boolean-value-headers",
    }
    assert sorted(COLUMN_PATH) == sorted(expected_column_path)
    for name, settings in SETTINGS.items():
        plan = to_outbox(df, settings)._jdf.queryExecution().executedPlan().toString()
        python_nodes = [
            node for node in ("MapInArrow", "PythonUDF", "BatchEvalPython", "ArrowEvalPython") if node in plan
        ]
        if name in COLUMN_PATH:
            assert python_nodes == [], name
        else:
            assert python_nodes == ["MapInArrow"], name
        # Without headers the attributes are plain (code-generated) map functions: higher-order
        # functions, interpreted per row, are left for header merging only.
        if name in COLUMN_PATH and not settings.headers_publish:
            assert "lambdafunction" not in plan.lower(), name


def test_issue_examples_through_the_batch_path(spark: Any) -> None:
    """The data model's headline examples, asserted literally on the DataFrame output."""
    records = [
        KafkaRecord(b"dog", b"fox", "brown", 4, 1000, 50000),
        KafkaRecord(b"dog", b"fox", "brown", 4, 1001, None),
        KafkaRecord(None, None, "brown", 4, 1002, 50000),
    ]
    settings = CpsSinkSettings(key_converter=STRING_CONVERTER, metadata_publish=True)
    rows = {r["offset"]: r for r in to_outbox(bronze(spark, records), settings).collect()}
    assert bytes(rows[1000]["data"]) == b"fox"
    assert rows[1000]["attributes"] == {
        "key": "dog",
        "kafka.topic": "brown",
        "kafka.partition": "4",
        "kafka.offset": "1000",
        "kafka.timestamp": "50000",
    }
    assert rows[1000]["ordering_key"] == ""
    assert "kafka.timestamp" not in rows[1001]["attributes"]
    # key and value null, but metadata is on: the metadata alone is published
    assert bytes(rows[1002]["data"]) == b""
    assert rows[1002]["attributes"]["kafka.offset"] == "1002"
    nothing = to_outbox(bronze(spark, records[2:]), CpsSinkSettings()).collect()
    assert [(r["data"], r["attributes"], r["error_class"]) for r in nothing] == [(None, None, None)]


@pytest.mark.parametrize("path", ["column", "arrow"])
def test_size_limit_in_both_paths(spark: Any, path: str) -> None:
    if path == "column":
        settings = CpsSinkSettings(key_converter=STRING_CONVERTER)
        key = b"dog"
    else:
        settings = CpsSinkSettings(key_converter=FLOAT_CONVERTER)
        key = bytes.fromhex("41000000")  # key text "8.0"
    assert uses_column_path(settings) == (path == "column")
    fits = MAX_MESSAGE_BYTES - len("key") - 3
    records = [
        KafkaRecord(key, b"x" * fits, "brown", 0, 1, 50000),
        KafkaRecord(key, b"x" * (fits + 1), "brown", 0, 2, 50000),
    ]
    rows = {
        r["offset"]: r
        for r in to_outbox(bronze(spark, records), settings)
        .selectExpr(
            "offset",
            "octet_length(data) AS n",
            "attributes",
            "error_class",
            "error_message",
            "octet_length(value) AS v",
        )
        .collect()
    }
    assert (rows[1]["n"], rows[1]["error_class"], rows[1]["v"]) == (fits, None, None)
    assert rows[2]["n"] is None
    assert rows[2]["v"] == fits + 1
    assert rows[2]["error_class"] == "PubsubLimitError"
    assert rows[2]["error_message"] == (
        f"message is {MAX_MESSAGE_BYTES + 1} bytes (data, attribute keys and values, ordering key); "
        f"Pub/Sub accepts at most {MAX_MESSAGE_BYTES}"
    )
