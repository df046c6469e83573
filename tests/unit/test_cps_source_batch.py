"""Batch (Spark) implementation of the Pub/Sub source data model == the per-record reference.

The corpus ``fixtures/records/cps_source/bronze_messages.jsonl`` holds the mapping's worked examples plus the
edge cases (redeliveries, hash -2147483648, name clashes, escaping, out-of-range timestamps); every
settings combination below must give exactly the rows :func:`reference_outbox` gives.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pubsub_connect.model.cps_source.batch import (
    java_string_hash_col,
    partition_for_hash_col,
    to_kafka_outbox,
)
from pubsub_connect.model.cps_source.reference import java_string_hash, partition_for_hash, reference_outbox
from pubsub_connect.model.cps_source.settings import (
    OUTBOX_COLUMNS,
    CpsSourceSettings,
    OutboxRow,
    PubsubReceived,
)
from pubsub_connect.model.json_columns import jackson_base64

BYTE_ARRAY = "org.apache.kafka.connect.converters.ByteArrayConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"
JSON = "org.apache.kafka.connect.json.JsonConverter"
#: b"the" as a BYTES value through the default JsonConverter with schemas.
THE_JSON = b'{"schema":{"type":"bytes","optional":false},"payload":"dGhl"}'

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "records" / "cps_source" / "bronze_messages.jsonl"

BRONZE_DDL = (
    "message_id string, data binary, attributes map<string,string>, ordering_key string, "
    "publish_ms long, delivery_attempt int, subscription string, ingest_ms long"
)
OUTBOX_SCHEMA = (
    "struct<key:binary,value:binary,headers:array<struct<key:string,value:binary>>,partition:int,"
    "timestamp:timestamp,message_id:string,error_class:string,error_message:string>"
)


def load_corpus() -> list[dict[str, Any]]:
    with CORPUS.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def to_received(row: dict[str, Any]) -> tuple[PubsubReceived, int | None]:
    message = PubsubReceived(
        row["message_id"],
        bytes.fromhex(row["data_hex"]) if row.get("data_hex") is not None else b"",
        dict(row.get("attributes") or {}),
        row.get("ordering_key") or "",
        row["publish_time_ms"],
    )
    return message, row.get("ingest_time_ms")


def bronze_df(spark: Any, rows: list[dict[str, Any]]) -> Any:
    """A DataFrame with exactly the Pub/Sub bronze schema; times built in Spark (no local tz)."""
    from pyspark.sql import functions as F

    tuples = [
        (
            r["message_id"],
            None if r.get("data_hex") is None else bytearray.fromhex(r["data_hex"]),
            r.get("attributes"),
            r.get("ordering_key"),
            r["publish_time_ms"],
            r.get("delivery_attempt"),
            "projects/p/subscriptions/s",
            r.get("ingest_time_ms"),
        )
        for r in rows
    ]
    df = spark.createDataFrame(tuples, BRONZE_DDL)
    return df.select(
        "message_id",
        "data",
        "attributes",
        "ordering_key",
        F.timestamp_millis("publish_ms").alias("publish_time"),
        "delivery_attempt",
        "subscription",
        F.timestamp_millis("ingest_ms").alias("ingest_time"),
    )


def outbox_row(r: Any) -> OutboxRow:
    """An :class:`OutboxRow` from a collected row of :func:`outbox_columns`."""
    return OutboxRow(
        key=None if r.key is None else bytes(r.key),
        value=None if r.value is None else bytes(r.value),
        headers=[(h.key, bytes(h.value)) for h in r.headers],
        partition=r.partition,
        timestamp_ms=r.ts,
        message_id=r.message_id,
        error_class=r.error_class,
        error_message=r.error_message,
    )


def outbox_columns() -> list[Any]:
    """The outbox's columns as :func:`collect` reads them, the timestamp as ``ts`` (ms)."""
    from pyspark.sql import functions as F

    return [*[c for c in OUTBOX_COLUMNS if c != "timestamp"], F.unix_millis("timestamp").alias("ts")]


def collect(outbox: Any) -> list[OutboxRow]:
    return collect_with(outbox)[0]


def collect_with(outbox: Any, *extra: Any) -> tuple[list[OutboxRow], list[Any]]:
    """:func:`collect`, and the collected rows themselves, which also hold the ``extra`` columns:
    one Spark job for a test that reads an outbox and more of its frame's columns."""
    rows = outbox.select(*outbox_columns(), *extra).collect()
    return sorted(map(outbox_row, rows), key=lambda r: r.message_id), rows


def expected(rows: list[dict[str, Any]], settings: CpsSourceSettings, start_counter: int = 0) -> list[OutboxRow]:
    return sorted(reference_outbox([to_received(r) for r in rows], settings, start_counter), key=lambda r: r.message_id)


SETTINGS = {
    "defaults_round_robin": (CpsSourceSettings(partition_count=3), 0),
    "key_ts_struct_round_robin": (
        CpsSourceSettings(kafka_key_attribute="fox", kafka_timestamp_attribute="over", partition_count=3),
        7,
    ),
    "key_ts_headers_hash_key": (
        CpsSourceSettings(
            kafka_key_attribute="fox",
            kafka_timestamp_attribute="over",
            kafka_record_headers=True,
            partition_scheme="hash_key",
            partition_count=3,
        ),
        0,
    ),
    "ordering_key_struct": (
        CpsSourceSettings(
            kafka_key_attribute="orderingKey",
            make_ordering_key_attribute=True,
            partition_scheme="ordering_key",
            partition_count=4,
        ),
        2,
    ),
    "ordering_key_headers_hash_value": (
        CpsSourceSettings(
            kafka_key_attribute="orderingKey",
            make_ordering_key_attribute=True,
            kafka_record_headers=True,
            partition_scheme="hash_value",
            partition_count=5,
        ),
        0,
    ),
    "schemaless_kafka_partitioner": (
        CpsSourceSettings(
            kafka_key_attribute="fox",
            kafka_timestamp_attribute="over",
            value_schemas_enable=False,
            partition_scheme="kafka_partitioner",
            partition_count=3,
        ),
        0,
    ),
    "json_key_envelope_json_values": (
        CpsSourceSettings(
            kafka_key_attribute="fox",
            key_converter=JSON,
            make_ordering_key_attribute=True,
            partition_scheme="hash_key",
            partition_count=3,
        ),
        0,
    ),
    "plain_json_key_and_headers_plain_json_values": (
        CpsSourceSettings(
            kafka_key_attribute="orderingKey",
            key_converter=JSON,
            key_schemas_enable=False,
            kafka_record_headers=True,
            value_schemas_enable=False,
        ),
        0,
    ),
    "string_key_bytes_headers": (
        CpsSourceSettings(
            kafka_key_attribute="fox",
            key_converter=STRING,
            value_converter=BYTE_ARRAY,
            kafka_record_headers=True,
            partition_count=2,
        ),
        1,
    ),
    "long_key_converter_dead_letters_keyed_messages": (
        CpsSourceSettings(
            kafka_key_attribute="fox",
            key_converter="org.apache.kafka.connect.converters.LongConverter",
            value_converter=STRING,
            kafka_record_headers=True,
            partition_count=3,
        ),
        0,
    ),
    "byte_array_struct_mode_dead_letters_attributed_messages": (
        CpsSourceSettings(kafka_key_attribute="fox", kafka_timestamp_attribute="over", value_converter=BYTE_ARRAY,
                          partition_count=3),
        0,
    ),
    "string_struct_mode_with_a_long_key_converter": (
        CpsSourceSettings(kafka_key_attribute="fox", key_converter="org.apache.kafka.connect.converters.LongConverter",
                          value_converter=STRING, make_ordering_key_attribute=True, partition_count=2),
        0,
    ),
    "message_is_key_hash_key": (
        CpsSourceSettings(
            kafka_key_attribute="message",
            make_ordering_key_attribute=True,
            partition_scheme="hash_key",
            partition_count=7,
        ),
        0,
    ),
}


@pytest.fixture(scope="module")
def corpus() -> list[dict[str, Any]]:
    return load_corpus()


def test_outbox_schema_is_the_contract(spark: Any, corpus: list[dict[str, Any]]) -> None:
    out = to_kafka_outbox(bronze_df(spark, corpus[:2]), CpsSourceSettings())
    assert tuple(out.columns) == OUTBOX_COLUMNS
    assert out.schema.simpleString() == OUTBOX_SCHEMA


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_batch_equals_reference(spark: Any, corpus: list[dict[str, Any]], name: str) -> None:
    settings, start = SETTINGS[name]
    got = collect(to_kafka_outbox(bronze_df(spark, corpus), settings, start_counter=start))
    assert got == expected(corpus, settings, start)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_with_message_adds_the_message_as_received(spark: Any, corpus: list[dict[str, Any]], name: str) -> None:
    """The convert stage takes the outbox's ``publish_time`` and the dead letters' message from
    these columns instead of joining back to bronze: the outbox columns stay exactly the same,
    and the added ones are the message's own (a message without data has empty data, as Pub/Sub
    delivers it)."""
    from pyspark.sql import functions as F

    settings, start = SETTINGS[name]
    out = to_kafka_outbox(bronze_df(spark, corpus), settings, start_counter=start, with_message=True)
    assert tuple(out.columns) == (*OUTBOX_COLUMNS, "publish_time", "data", "attributes", "subscription")
    reference = expected(corpus, settings, start)
    got, collected = collect_with(out, F.unix_millis("publish_time").alias("publish_ms"), "data", "attributes",
                                  "subscription")
    assert got == reference
    received = {r["message_id"]: r for r in corpus}
    carried = {r.message_id: r for r in collected}
    assert sorted(carried) == sorted(received)
    for message_id, row in carried.items():
        message = received[message_id]
        assert (row.publish_ms, row.subscription) == (message["publish_time_ms"], "projects/p/subscriptions/s")
        if row.error_class is not None:
            assert bytes(row.data) == bytes.fromhex(message.get("data_hex") or "")
            assert row.attributes == message.get("attributes")
    assert sum(r.error_class is not None for r in carried.values()) == sum(r.error_class is not None for r in reference)


def test_issue_examples_in_batch(spark: Any, corpus: list[dict[str, Any]]) -> None:
    """Spot checks with literal values, so a shared bug in batch and reference cannot hide."""
    by_id = {
        r.message_id: r
        for r in collect(
            to_kafka_outbox(bronze_df(spark, corpus), SETTINGS["key_ts_struct_round_robin"][0], start_counter=0)
        )
    }
    assert by_id["m02"].key == b"jumped" and by_id["m02"].value == THE_JSON
    assert by_id["m03"].timestamp_ms == 1234567890 and by_id["m03"].value == THE_JSON
    assert by_id["m04"].value == (
        b'{"schema":{"type":"struct","fields":[{"type":"bytes","optional":false,"field":"message"},'
        b'{"type":"string","optional":false,"field":"attribute1"},'
        b'{"type":"string","optional":false,"field":"attribute2"}],"optional":false},'
        b'"payload":{"message":"dGhl","attribute1":"a","attribute2":"b"}}'
    )
    assert by_id["m05"].timestamp_ms == 1_004  # not a number -> publish time
    assert (by_id["m06"].error_class, by_id["m06"].partition, by_id["m06"].timestamp_ms) == (
        "InvalidTimestampError",
        None,
        None,
    )
    assert by_id["m09"].error_class == "DuplicateFieldError"
    assert by_id["m15"].timestamp_ms == 1_014 and by_id["m16"].error_class == "InvalidTimestampError"
    assert by_id["m17"].timestamp_ms == 12 and by_id["m18"].timestamp_ms == 1_017
    # Round robin in (publish time, message_id) order, skipping dead letters: m19 (999), m00, m01 (1000) ...
    assert [by_id[m].partition for m in ("m19", "m00", "m01", "m02")] == [0, 1, 2, 0]
    headers = collect(
        to_kafka_outbox(bronze_df(spark, corpus), SETTINGS["key_ts_headers_hash_key"][0], start_counter=0)
    )
    m04 = next(r for r in headers if r.message_id == "m04")
    assert (m04.key, m04.value, m04.headers, m04.partition) == (
        b"jumped",
        THE_JSON,
        [("attribute1", b"a"), ("attribute2", b"b")],
        1,
    )
    m08 = next(r for r in headers if r.message_id == "m08")
    assert (m08.key, m08.partition) == (b"polygenelubricants", 0)


def test_redelivered_message_yields_one_record(spark: Any, corpus: list[dict[str, Any]]) -> None:
    out = to_kafka_outbox(bronze_df(spark, corpus), CpsSourceSettings())
    ids = [r.message_id for r in out.select("message_id").collect()]
    assert len(corpus) == 23
    assert len(ids) == len(set(ids)) == 21
    # The copy with the earliest ingest_time is kept, whatever the input order.
    rows = [
        {
            "message_id": "d",
            "data_hex": b"late".hex(),
            "publish_time_ms": 5,
            "ingest_time_ms": 9,
            "attributes": {},
        },
        {
            "message_id": "d",
            "data_hex": b"early".hex(),
            "publish_time_ms": 5,
            "ingest_time_ms": 3,
            "attributes": {},
        },
        {
            "message_id": "d",
            "data_hex": b"none".hex(),
            "publish_time_ms": 5,
            "ingest_time_ms": None,
            "attributes": {},
        },
    ]
    for order in (rows, rows[::-1]):
        settings = CpsSourceSettings(value_converter=BYTE_ARRAY, kafka_record_headers=True)
        assert [r.value for r in collect(to_kafka_outbox(bronze_df(spark, order), settings))] == [b"early"]


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_one_conversion_applied_batch_after_batch_equals_the_reference(
    spark: Any, corpus: list[dict[str, Any]], name: str
) -> None:
    """The convert stage builds one conversion and applies it to every micro-batch, each with its
    own round-robin start: every application must be exactly the reference for its batch."""
    from pubsub_connect.model.cps_source.batch import KafkaOutboxConversion

    settings, start = SETTINGS[name]
    conversion = KafkaOutboxConversion(settings)
    half = len(corpus) // 2
    for batch, counter in ((corpus[:half], start), (corpus[half:], start + half), (corpus, start + 1)):
        assert collect(conversion.apply(bronze_df(spark, batch), counter)) == expected(batch, settings, counter)


def test_replayed_batch_gets_identical_partitions(spark: Any, corpus: list[dict[str, Any]]) -> None:
    settings = CpsSourceSettings(partition_count=4)
    first = collect(to_kafka_outbox(bronze_df(spark, corpus), settings, start_counter=3))
    replay_df = bronze_df(spark, list(reversed(corpus))).repartition(3)
    assert collect(to_kafka_outbox(replay_df, settings, start_counter=3)) == first
    by_id = {r.message_id: r.partition for r in first}
    assert [by_id[m] for m in ("m19", "m00", "m01", "m02")] == [3, 0, 1, 2]


def test_null_columns_are_empty_values(spark: Any) -> None:
    rows = [
        {"message_id": "n", "data_hex": None, "attributes": None, "ordering_key": None, "publish_time_ms": 7},
    ]
    settings = CpsSourceSettings(
        kafka_key_attribute="orderingKey",
        partition_scheme="hash_value",
        partition_count=3,
        value_converter=BYTE_ARRAY,
        kafka_record_headers=True,
    )
    assert collect(to_kafka_outbox(bronze_df(spark, rows), settings)) == [
        OutboxRow(b"", b"", [], 1 % 3, 7, "n")  # Arrays.hashCode(new byte[0]) == 1
    ]


def test_json_escaping_is_kafka_jackson(spark: Any) -> None:
    """Control characters as Kafka's Jackson writes them: short escapes or \\u00XX upper-case."""
    rows = [
        {
            "message_id": "e",
            "data_hex": "00",
            "attributes": {"k\u001f": '\u000b\u0000\b\f\r\n\t"\\/\u007f\u00e9'},
            "publish_time_ms": 1,
        }
    ]
    settings = CpsSourceSettings(value_schemas_enable=False)
    [row] = collect(to_kafka_outbox(bronze_df(spark, rows), settings))
    assert row.value == ('{"message":"AA==","k\\u001F":"\\u000B\\u0000\\b\\f\\r\\n\\t\\"\\\\/\u007f\u00e9"}').encode()


def test_long_data_base64_has_no_line_breaks(spark: Any) -> None:
    data = bytes(range(256)) * 4
    rows = [{"message_id": "l", "data_hex": data.hex(), "attributes": {"a": "1"}, "publish_time_ms": 1}]
    [row] = collect(to_kafka_outbox(bronze_df(spark, rows), CpsSourceSettings(value_schemas_enable=False)))
    import base64

    assert row.value == b'{"message":"' + base64.b64encode(data) + b'","a":"1"}'


def test_string_hash_sql_is_exact(spark: Any) -> None:
    from pyspark.sql import functions as F

    texts = [
        "",
        "a",
        "Aa",
        "BB",
        "jumped",
        "my-key",
        "polygenelubricants",
        "\u00e9\u00fc",
        "\U0001f600",
        "x\U0001f600y\u4e2d",
        "k" * 1000,
        None,
    ]
    df = spark.createDataFrame([(t,) for t in texts], "s string")
    got = df.select(
        "s",
        java_string_hash_col(F.col("s")).alias("h"),
        partition_for_hash_col(java_string_hash_col(F.col("s")), 3).alias("p"),
    ).collect()
    by_text = {r.s: (r.h, r.p) for r in got}
    for t in texts:
        if t is None:
            assert by_text[None] == (None, None)
        else:
            assert by_text[t] == (java_string_hash(t), partition_for_hash(java_string_hash(t), 3)), t
    assert by_text["polygenelubricants"] == (-2147483648, 0)


def test_converters_in_batch(spark: Any) -> None:
    """Literal keys and BYTES values through the key/value converters (JSON escaping included)."""
    rows = [
        {"message_id": "a", "data_hex": "00ff", "attributes": {"fox": 'k"\u00fc\u0001'}, "publish_time_ms": 1},
        {"message_id": "b", "data_hex": "", "attributes": {}, "publish_time_ms": 2},
    ]
    settings = CpsSourceSettings(kafka_key_attribute="fox", key_converter=JSON, kafka_record_headers=True)
    a, b = collect(to_kafka_outbox(bronze_df(spark, rows), settings))
    assert a.key == '{"schema":{"type":"string","optional":true},"payload":"k\\"\u00fc\\u0001"}'.encode()
    assert a.value == b'{"schema":{"type":"bytes","optional":false},"payload":"AP8="}'
    assert b.key == b'{"schema":{"type":"string","optional":true},"payload":null}'
    assert b.value == b'{"schema":{"type":"bytes","optional":false},"payload":""}'
    plain = CpsSourceSettings(
        kafka_key_attribute="fox", key_converter=JSON, key_schemas_enable=False, value_schemas_enable=False
    )
    a, b = collect(to_kafka_outbox(bronze_df(spark, rows), plain))
    assert (a.key, b.key, b.value) == ('"k\\"\u00fc\\u0001"'.encode(), b"null", b'""')
    long_key = CpsSourceSettings(
        kafka_key_attribute="fox",
        key_converter="org.apache.kafka.connect.converters.LongConverter",
        value_converter=BYTE_ARRAY,
        kafka_record_headers=True,
    )
    a, b = collect(to_kafka_outbox(bronze_df(spark, rows), long_key))
    assert (a.error_class, a.key, a.value, a.partition) == (
        "KeyConverterError",
        'k"\u00fc\u0001'.encode(),
        b"\x00\xff",
        None,
    )
    assert (b.error_class, b.key, b.value, b.partition) == (None, None, b"", 0)


def test_unicode_digit_timestamps_in_batch(spark: Any) -> None:
    """Java's ``Long.valueOf`` reads any Unicode decimal digit; Spark's translate maps them (BMP
    and beyond) exactly like the reference."""
    texts = [
        "\u0661\u0662\u0663",
        "\uff11\uff12",
        "-\U0001d7d0",
        "+\U0001d7cf\U0001d7d0",
        "\u0661a",
        "\u00b2",
        "7",
        "-1",
    ]
    rows = [
        {"message_id": f"u{i}", "data_hex": "00", "attributes": {"ts": text}, "publish_time_ms": 5}
        for i, text in enumerate(texts)
    ]
    settings = CpsSourceSettings(kafka_timestamp_attribute="ts", value_converter=BYTE_ARRAY, kafka_record_headers=True)
    got = collect(to_kafka_outbox(bronze_df(spark, rows), settings))
    assert got == expected(rows, settings)
    assert [(r.timestamp_ms, r.error_class) for r in got] == [
        (123, None),
        (12, None),
        (None, "InvalidTimestampError"),
        (12, None),
        (5, None),
        (5, None),
        (7, None),
        (None, None),  # -1: Kafka's "no timestamp", the producer's clock
    ]


def test_characters_outside_the_bmp_are_escaped_like_kafka_json(spark: Any) -> None:
    """Kafka's JsonConverter writes an emoji as its two escaped UTF-16 halves; Spark's to_json as
    UTF-8. Key, attribute names and values, ordering key: all escaped, batch == reference."""
    rows = [
        {
            "message_id": "s",
            "data_hex": "f09f9880",  # the data is base64: never affected
            "attributes": {"id": "k\U0001f600", "\U0001f389name": "v\U0001d7cf\u00fc", "plain": "x"},
            "ordering_key": "o\U0001f600",
            "publish_time_ms": 1,
        },
        {"message_id": "t", "data_hex": "00", "attributes": {"id": "no-emoji", "a": "\u00fc"}, "publish_time_ms": 2},
    ]
    settings = CpsSourceSettings(kafka_key_attribute="id", key_converter=JSON, make_ordering_key_attribute=True)
    got = collect(to_kafka_outbox(bronze_df(spark, rows), settings))
    assert got == expected(rows, settings)
    s, t = got
    assert s.key == b'{"schema":{"type":"string","optional":true},"payload":"k\\uD83D\\uDE00"}'
    assert s.value == (
        b'{"schema":{"type":"struct","fields":[{"type":"bytes","optional":false,"field":"message"},'
        b'{"type":"string","optional":false,"field":"plain"},'
        b'{"type":"string","optional":false,"field":"\\uD83C\\uDF89name"},'
        b'{"type":"string","optional":false,"field":"orderingKey"}],"optional":false},'
        b'"payload":{"message":"8J+YgA==","plain":"x","\\uD83C\\uDF89name":"v\\uD835\\uDFCF\xc3\xbc",'
        b'"orderingKey":"o\\uD83D\\uDE00"}}'
    )
    assert t.key == b'{"schema":{"type":"string","optional":true},"payload":"no-emoji"}'


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_streaming_conversion_equals_the_batch_one_but_for_round_robin(spark: Any, corpus: list[dict[str, Any]],
                                                                       name: str) -> None:
    """A declarative pipeline converts with ``to_kafka_outbox_stream`` (one row per message given,
    no window): every column as the batch conversion gives it, except that a row the batch
    numbers round-robin goes to ``pmod(xxhash64(message_id), count)``."""
    from pyspark.sql import functions as F

    from pubsub_connect.model.cps_source.batch import deduplicate_messages, to_kafka_outbox_stream
    from pubsub_connect.model.cps_source.reference import uses_round_robin

    settings, _ = SETTINGS[name]
    messages = deduplicate_messages(bronze_df(spark, corpus))
    batch = {r.message_id: r for r in collect(to_kafka_outbox(messages, settings, start_counter=0))}
    streamed = to_kafka_outbox_stream(messages, settings)
    outbox, collected = collect_with(streamed, F.pmod(F.xxhash64("message_id"), F.lit(settings.partition_count))
                                     .cast("int").alias("p"), "subscription", "data")
    got = {r.message_id: r for r in outbox}
    spread = {r.message_id: r.p for r in collected}
    round_robin = {m.message_id for m, _ in map(to_received, corpus)
                   if uses_round_robin(m, settings) and batch[m.message_id].error_class is None}
    assert sorted(got) == sorted(batch)
    for message_id, row in batch.items():
        partition = spread[message_id] if message_id in round_robin else row.partition
        assert got[message_id] == dataclasses.replace(row, partition=partition), message_id
    assert bool(round_robin) == (settings.partition_scheme in ("round_robin", "ordering_key"))
    # the columns the pipeline's outbox and dead letters take besides the outbox's own
    extra = {r.message_id: r for r in collected}
    assert {r.subscription for r in extra.values()} == {"projects/p/subscriptions/s"}
    raw = {r["message_id"]: r.get("data_hex") for r in corpus}
    for message_id, r in extra.items():
        if r.error_class is not None:  # a dead letter keeps the data as received
            assert (None if r.data is None else bytes(r.data).hex()) == (raw[message_id] or ""), message_id


@pytest.mark.parametrize("chunked", ["true", "false"])
def test_base64_is_unchunked_whatever_the_session_setting(spark: Any, chunked: str) -> None:
    """Kafka's JsonConverter writes bytes as one line of base64; Spark chunks it into lines of 76
    characters unless ``spark.sql.chunkBase64String.enabled`` is off. Lengths around one line
    (57 bytes) and several lines."""
    import base64

    from pyspark.sql import functions as F

    values = [b"", b"\x00", bytes(range(56)), bytes(range(57)), bytes(range(58)), bytes(range(256)) * 4 + b"\xff"]
    key = "spark.sql.chunkBase64String.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, chunked)
    try:
        rows = spark.createDataFrame([(v,) for v in values], "data binary").select(
            jackson_base64(F.col("data")).alias("b64"), F.base64(F.col("data")).alias("spark")).collect()
    finally:
        spark.conf.set(key, before)
    assert [r["b64"] for r in rows] == [base64.b64encode(v).decode("ascii") for v in values]
    assert any("\r\n" in r["spark"] for r in rows) == (chunked == "true")  # the setting took effect
