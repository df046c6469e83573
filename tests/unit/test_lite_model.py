"""Pub/Sub Lite data model: exact bytes for primitives, parsed protobuf ``Value`` for
ARRAY/MAP/STRUCT payloads (their serialized map order is not part of the contract)."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from google.protobuf import json_format, struct_pb2

from pubsub_connect.model.connect import (
    BOOLEAN,
    BYTES,
    FLOAT32,
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    OPTIONAL_STRING,
    STRING,
    DataError,
    Field,
    Schema,
    SchemaAndValue,
    Struct,
    Type,
)
from pubsub_connect.model.converters import BYTE_ARRAY_CONVERTER, REGISTRY_AVRO_CONVERTERS, make_converter
from pubsub_connect.model.lite.arrow import (
    KAFKA_OUTBOX_SCHEMA,
    LITE_BRONZE_SCHEMA,
    LITE_OUTBOX_SCHEMA,
    bronze_batch,
    kafka_outbox_batch,
    outbox_messages,
    sink_outbox_batch,
)
from pubsub_connect.model.lite.encoding import LiteEncodingError, encode_to_bytes, encode_value
from pubsub_connect.model.lite.sink import KAFKA_EVENT_TIME_TYPE_ATTRIBUTE as TYPE_ATTR
from pubsub_connect.model.lite.sink import KAFKA_OFFSET_ATTRIBUTE as OFFSET_ATTR
from pubsub_connect.model.lite.sink import KAFKA_PARTITION_ATTRIBUTE as PARTITION_ATTR
from pubsub_connect.model.lite.sink import KAFKA_TOPIC_ATTRIBUTE as TOPIC_ATTR
from pubsub_connect.model.lite.sink import LiteMessage, LiteSinkRecord, sink_message
from pubsub_connect.model.lite.source import (
    DEFAULT_SOURCE_CONVERTERS,
    KafkaPartitioner,
    KafkaSourceRecord,
    LiteReceived,
    LiteSourceConverters,
    UnsupportedLiteSourceConverter,
    murmur2,
    source_record,
)


def sv(schema: Schema | None, value: object) -> SchemaAndValue:
    return SchemaAndValue(schema, value)


def parsed(data: bytes) -> dict | list | str | float | bool | None:
    """A serialized ``google.protobuf.Value`` as plain JSON data (order-free comparison)."""
    return json_format.MessageToDict(struct_pb2.Value.FromString(data))


# ----------------------------------------------------------------------------------------------
# The data model's examples
# ----------------------------------------------------------------------------------------------


def test_worked_example_without_timestamp() -> None:
    record = LiteSinkRecord(key=sv(None, "dog"), value=sv(None, "fox"), topic="brown", partition=0, offset=-1)
    result = sink_message(record)
    assert result.message == LiteMessage(
        key=b"dog",
        data=b"fox",
        attributes={TOPIC_ATTR: (b"brown",), PARTITION_ATTR: (b"0",), OFFSET_ATTR: (b"-1",)},
        event_time_ms=None,
    )
    assert list(result.message.attributes) == [TOPIC_ATTR, PARTITION_ATTR, OFFSET_ATTR]
    assert result.skipped_headers == 0
    proto = result.message.to_proto()
    assert not proto.HasField("event_time")
    assert {k: list(v.values) for k, v in proto.attributes.items()} == {
        TOPIC_ATTR: [b"brown"],
        PARTITION_ATTR: [b"0"],
        OFFSET_ATTR: [b"-1"],
    }


def test_worked_example_log_append_time() -> None:
    record = LiteSinkRecord(
        key=sv(None, "dog"), value=sv(None, "fox"), topic="brown", partition=0, offset=-1,
        timestamp_ms=50001, timestamp_type=1,
    )
    message = sink_message(record).message
    assert message.event_time_ms == 50001
    assert message.event_time == (50, 1_000_000)  # 50.001 s
    assert message.attributes[TYPE_ATTR] == (b"LogAppendTime",)
    assert list(message.attributes) == [TOPIC_ATTR, PARTITION_ATTR, OFFSET_ATTR, TYPE_ATTR]
    proto = message.to_proto()
    assert (proto.event_time.seconds, proto.event_time.nanos) == (50, 1_000_000)


@pytest.mark.parametrize(("ts_type", "name"), [(0, "CreateTime"), (1, "LogAppendTime"), ("CreateTime", "CreateTime")])
def test_event_time_type_names(ts_type: int | str, name: str) -> None:
    message = sink_message(LiteSinkRecord(value=sv(None, "x"), timestamp_ms=0, timestamp_type=ts_type)).message
    assert message.attributes == {TYPE_ATTR: (name.encode(),)}
    assert message.event_time == (0, 0)


def test_negative_or_missing_timestamp_means_no_event_time() -> None:
    for ts in (None, -1):
        message = sink_message(LiteSinkRecord(value=sv(None, "x"), timestamp_ms=ts, timestamp_type=-1)).message
        assert message.event_time_ms is None
        assert TYPE_ATTR not in message.attributes


def test_timestamp_beyond_year_9999_is_a_data_error() -> None:
    with pytest.raises(DataError, match="after year 9999"):
        sink_message(LiteSinkRecord(value=sv(None, "x"), timestamp_ms=253_402_300_800_000))


def test_no_topic_or_partition_means_no_coordinate_attributes() -> None:
    message = sink_message(LiteSinkRecord(key=None, value=None, topic=None, partition=None, offset=5)).message
    assert message == LiteMessage(key=b"", data=b"", attributes={}, event_time_ms=None)
    # null key/value with a schema are unset too
    message = sink_message(LiteSinkRecord(key=sv(OPTIONAL_STRING, None), value=sv(BYTES, None))).message
    assert (message.key, message.data) == (b"", b"")


# ----------------------------------------------------------------------------------------------
# Primitive encodings (exact bytes)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        (None, "dog", b"dog"),  # null schema is STRING
        (None, "h\u00e9llo \u2603", "h\u00e9llo \u2603".encode()),
        (None, b"\x00\xff raw", b"\x00\xff raw"),  # schemaless bytes kept (Java would print [B@…)
        (None, 42, b"42"),
        (None, 2.5, b"2.5"),
        (None, True, b"true"),
        (None, {"a": [1, 2.5], "b": "x"}, b'{"a":[1,2.5],"b":"x"}'),  # project toString: compact JSON
        (BYTES, b"\x00\x01\xfe", b"\x00\x01\xfe"),
        (STRING, "fox", b"fox"),
        (STRING, "\u00e9", b"\xc3\xa9"),
        (STRING, "a\ud800b", b"a?b"),  # lone surrogate: copyFromUtf8 writes '?'
        (INT8, -128, b"-128"),
        (INT16, 32767, b"32767"),
        (INT32, -5, b"-5"),
        (INT64, -(2**63), b"-9223372036854775808"),
        (INT64, 2**63 - 1, b"9223372036854775807"),
        (FLOAT32, 1.1, b"1.100000023841858"),  # widened float32, Double.toString
        (FLOAT32, 1e7, b"1.0E7"),
        (FLOAT32, 2.5, b"2.5"),
        (FLOAT64, 1e7, b"1.0E7"),
        (FLOAT64, 2.5, b"2.5"),
        (FLOAT64, 1.1, b"1.1"),
        (FLOAT64, 0.001, b"0.001"),
        (FLOAT64, 1e-4, b"1.0E-4"),
        (FLOAT64, -0.0, b"-0.0"),
        (FLOAT64, math.nan, b"NaN"),
        (FLOAT64, -math.inf, b"-Infinity"),
        (FLOAT64, 3, b"3.0"),
        (FLOAT32, 3.5e38, b"Infinity"),  # (float) overflow
        (BOOLEAN, True, b"true"),
        (BOOLEAN, False, b"false"),
    ],
)
def test_encode_primitives(schema: Schema | None, value: object, expected: bytes) -> None:
    assert encode_to_bytes(schema, value) == expected


@pytest.mark.parametrize(
    ("schema", "value", "match"),
    [
        (INT8, 128, "out of range for INT8"),
        (INT32, "7", "expected an integer"),
        (BYTES, "text", "expected bytes"),
        (FLOAT64, "1.0", "expected a number"),
    ],
)
def test_encode_rejects_values_that_do_not_fit_their_schema(schema: Schema, value: object, match: str) -> None:
    with pytest.raises(LiteEncodingError, match=match):
        encode_to_bytes(schema, value)


# ----------------------------------------------------------------------------------------------
# ARRAY / MAP / STRUCT → google.protobuf.Value (compared parsed)
# ----------------------------------------------------------------------------------------------

INNER = Schema(Type.STRUCT, fields=(Field("flag", BOOLEAN), Field("blob", BYTES)))
OUTER = Schema(
    Type.STRUCT,
    fields=(
        Field("name", STRING),
        Field("count", INT64),
        Field("ratio", FLOAT32),
        Field("tags", Schema(Type.ARRAY, value_schema=STRING)),
        Field("inner", INNER),
        Field("scores", Schema(Type.MAP, key_schema=STRING, value_schema=FLOAT64)),
    ),
)


def test_struct_becomes_a_protobuf_struct() -> None:
    value = Struct(
        OUTER,
        {
            "name": "dog",
            "count": 2**53 + 1,  # a double cannot hold it: rounds like Java's long → double
            "ratio": 1.1,
            "tags": ["a", "b"],
            "inner": Struct(INNER, {"flag": True, "blob": b"\x00\xff"}),
            "scores": {"x": 0.5},
        },
    )
    data = encode_to_bytes(OUTER, value)
    assert parsed(data) == {
        "name": "dog",
        "count": 9007199254740992.0,
        "ratio": 1.100000023841858,  # numbers are doubles; FLOAT32 widened
        "tags": ["a", "b"],
        "inner": {"flag": True, "blob": "AP8="},  # nested BYTES → base64 text
        "scores": {"x": 0.5},
    }
    # The bytes are a serialized Value whose kind is struct_value (not a bare Struct message).
    assert struct_pb2.Value.FromString(data).WhichOneof("kind") == "struct_value"


def test_array_of_numbers_and_bytes() -> None:
    ints = Schema(Type.ARRAY, value_schema=INT8)
    assert parsed(encode_to_bytes(ints, [1, -2, 3])) == [1.0, -2.0, 3.0]
    blobs = Schema(Type.ARRAY, value_schema=BYTES)
    assert parsed(encode_to_bytes(blobs, [b"hi", b""])) == ["aGk=", ""]
    assert parsed(encode_to_bytes(ints, [])) == []
    assert encode_to_bytes(ints, []) == b"2\x00"  # Value{list_value: {}} (field 6, empty)
    assert parsed(encode_to_bytes(Schema(Type.MAP, key_schema=STRING, value_schema=STRING), {})) == {}


@pytest.mark.parametrize(
    ("key_schema", "mapping", "expected"),
    [
        (INT32, {1: "a", -7: "b"}, {"1": "a", "-7": "b"}),
        (FLOAT64, {2.5: "a", 1e7: "b"}, {"2.5": "a", "1.0E7": "b"}),
        (FLOAT32, {1.1: "a"}, {"1.100000023841858": "a"}),
        (BOOLEAN, {True: "a", False: "b"}, {"true": "a", "false": "b"}),
        (BYTES, {b"\x00\x01": "a"}, {"AAE=": "a"}),
        (STRING, {"k": "a"}, {"k": "a"}),
        (None, {"k": "a"}, {"k": "a"}),  # null key schema: STRING
    ],
)
def test_map_keys_as_text(key_schema: Schema | None, mapping: dict, expected: dict) -> None:
    schema = Schema(Type.MAP, key_schema=key_schema, value_schema=STRING)
    assert parsed(encode_to_bytes(schema, mapping)) == expected


def test_map_given_as_pairs() -> None:
    schema = Schema(Type.MAP, key_schema=BYTES, value_schema=INT32)
    assert parsed(encode_to_bytes(schema, [(b"a", 1), (b"b", 2)])) == {"YQ==": 1.0, "Yg==": 2.0}


@pytest.mark.parametrize(
    "key_schema",
    [
        Schema(Type.ARRAY, value_schema=INT32),
        Schema(Type.MAP, key_schema=STRING, value_schema=STRING),
        Schema(Type.STRUCT, fields=(Field("a", INT32),)),
    ],
)
def test_complex_map_keys_are_data_errors(key_schema: Schema) -> None:
    schema = Schema(Type.MAP, key_schema=key_schema, value_schema=STRING)
    with pytest.raises(LiteEncodingError, match="cannot convert") as info:
        encode_to_bytes(schema, [((1,), "a")])
    assert isinstance(info.value, DataError)
    assert info.value.error_class == "LiteEncodingError"


def test_nested_null_is_an_error_by_default_or_a_null_value_on_request() -> None:
    schema = Schema(Type.STRUCT, fields=(Field("a", OPTIONAL_STRING), Field("b", INT32)))
    value = Struct(schema, {"a": None, "b": 1})
    with pytest.raises(LiteEncodingError, match=r"value\.a: null"):
        encode_to_bytes(schema, value)
    assert parsed(encode_to_bytes(schema, value, nested_null="null_value")) == {"a": None, "b": 1.0}
    arr = Schema(Type.ARRAY, value_schema=INT32)
    with pytest.raises(LiteEncodingError, match=r"value\[1\]: null"):
        encode_value(arr, [1, None])


def test_struct_value_as_record_value_key_and_header() -> None:
    schema = Schema(Type.STRUCT, fields=(Field("id", INT32),))
    value = Struct(schema, {"id": 7})
    record = LiteSinkRecord(key=sv(schema, value), value=sv(schema, value), headers=[("h", sv(schema, value))])
    message = sink_message(record).message
    assert parsed(message.key) == parsed(message.data) == parsed(message.attributes["h"][0]) == {"id": 7.0}


# ----------------------------------------------------------------------------------------------
# Headers → attributes
# ----------------------------------------------------------------------------------------------


def test_headers_become_multi_valued_attributes_in_order() -> None:
    record = LiteSinkRecord(
        value=sv(BYTES, b"v"),
        topic="t",
        partition=3,
        offset=42,
        headers=[
            ("h1", b"\x00raw"),  # raw header bytes are BYTES: unchanged
            ("h2", sv(INT32, 5)),
            ("h1", sv(STRING, "second")),
            ("nul", None),  # null header value: skipped and counted
            ("h3", sv(None, None)),
            (TOPIC_ATTR, b"from-header"),  # same name as a connector attribute: values merge
            ("f", sv(FLOAT32, 1.1)),
        ],
    )
    result = sink_message(record)
    assert result.skipped_headers == 2
    assert list(result.message.attributes.items()) == [
        ("h1", (b"\x00raw", b"second")),
        ("h2", (b"5",)),
        (TOPIC_ATTR, (b"from-header", b"t")),
        ("f", (b"1.100000023841858",)),
        (PARTITION_ATTR, (b"3",)),
        (OFFSET_ATTR, (b"42",)),
    ]
    proto = result.message.to_proto()
    assert list(proto.attributes["h1"].values) == [b"\x00raw", b"second"]
    assert list(proto.attributes[TOPIC_ATTR].values) == [b"from-header", b"t"]


# ----------------------------------------------------------------------------------------------
# Source: SequencedMessage → Kafka record
# ----------------------------------------------------------------------------------------------


def _received(**kw: object) -> LiteReceived:
    base: dict = {"partition": 1, "offset": 10, "publish_time_ns": 1_700_000_000_123_456_789}
    base.update(kw)
    return LiteReceived(**base)


def test_source_record_maps_fields() -> None:
    message = _received(
        key=b"k",
        data=b"payload",
        attributes={"a": (b"1", b"2"), "b": (b"\xff",)},
        event_time_ns=50_001_999_999,
    )
    record = source_record(message, "kafka-topic", RAW_HEADERS)
    assert record == KafkaSourceRecord(
        topic="kafka-topic",
        key=b"k",
        value=b"payload",
        headers=(("a", b"1"), ("a", b"2"), ("b", b"\xff")),
        timestamp_ms=50_001,  # event time, ms rounded down
        lite_partition=1,
        lite_offset=10,
        partition=None,
    )


RAW_HEADERS = LiteSourceConverters(header_converter=BYTE_ARRAY_CONVERTER)
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"


def test_source_record_headers_are_base64_text_by_default() -> None:
    """Connect's default ``header.converter`` (SimpleHeaderConverter) prints the BYTES headers
    Google's source task adds as Base64: the bytes a Kafka consumer of the original sees."""
    record = source_record(_received(attributes={"a": (b"1", b"2"), "b": (b"\xff",), "e": (b"",)}), "t")
    assert record.headers == (("a", b"MQ=="), ("a", b"Mg=="), ("b", b"/w=="), ("e", b""))


@pytest.mark.parametrize(
    ("converters", "key", "value", "null_key"),
    [
        (LiteSourceConverters(key_converter=JSON_CONVERTER, value_converter=JSON_CONVERTER),
         b'{"schema":{"type":"bytes","optional":true},"payload":"/wBr"}',
         b'{"schema":{"type":"bytes","optional":false},"payload":"ZGF0YQ=="}',
         b'{"schema":{"type":"bytes","optional":true},"payload":null}'),
        (LiteSourceConverters(key_converter=JSON_CONVERTER, key_schemas_enable=False,
                                   value_converter=JSON_CONVERTER, value_schemas_enable=False),
         b'"/wBr"', b'"ZGF0YQ=="', b"null"),
        # Java's StringConverter prints byte[].toString() (``[B@1b6d3586``); ours the UTF-8 text
        (LiteSourceConverters(key_converter=STRING_CONVERTER, value_converter=STRING_CONVERTER),
         "\ufffd\x00k".encode(), b"data", None),
    ],
)
def test_source_record_key_and_value_through_the_converters(converters: LiteSourceConverters, key: bytes,
                                                            value: bytes, null_key: bytes | None) -> None:
    """The worker serializes the source task's OPTIONAL_BYTES key and BYTES value with
    ``key.converter`` / ``value.converter``; an empty Lite key is a null key, which JsonConverter
    still writes (an envelope with a null payload, or ``null``)."""
    record = source_record(_received(key=b"\xff\x00k", data=b"data"), "t", converters)
    assert (record.key, record.value) == (key, value)
    assert source_record(_received(key=b"", data=b"data"), "t", converters).key == null_key


@pytest.mark.parametrize("name", ["org.apache.kafka.connect.converters.IntegerConverter",
                                  "org.apache.kafka.connect.converters.DoubleConverter"])
def test_source_converters_that_cannot_write_bytes_are_refused(name: str) -> None:
    for converters in (LiteSourceConverters(key_converter=name), LiteSourceConverters(value_converter=name)):
        with pytest.raises(UnsupportedLiteSourceConverter, match="cannot serialize the bytes"):
            converters.check()
    with pytest.raises(UnsupportedLiteSourceConverter, match=r"header\.converter"):
        LiteSourceConverters(header_converter=STRING_CONVERTER).check()
    LiteSourceConverters(key_converter=JSON_CONVERTER, value_converter=STRING_CONVERTER).check()


def test_source_record_empty_key_is_null_and_publish_time_is_the_fallback() -> None:
    record = source_record(_received(key=b"", data=b""), "t")
    assert record.key is None
    assert record.value == b""
    assert record.headers == ()
    assert record.timestamp_ms == 1_700_000_000_123
    # before 1970 the millisecond is rounded down too (Timestamps.toMillis)
    assert source_record(_received(event_time_ns=-1), "t").timestamp_ms == -1


def test_from_proto_sorts_attributes_and_reads_times() -> None:
    from google.cloud.pubsublite_v1.types import common

    seq = common.SequencedMessage.pb()()
    seq.cursor.offset = 77
    seq.publish_time.seconds, seq.publish_time.nanos = 100, 5
    seq.message.key = b"key"
    seq.message.data = b"data"
    seq.message.attributes["z"].values.extend([b"1", b"2"])
    seq.message.attributes["a"].values.append(b"3")
    received = LiteReceived.from_proto(4, seq)
    assert received == LiteReceived(
        partition=4, offset=77, publish_time_ns=100_000_000_005, key=b"key", data=b"data",
        attributes={"a": (b"3",), "z": (b"1", b"2")}, event_time_ns=None,
    )
    assert list(received.attributes) == ["a", "z"]
    seq.message.event_time.seconds, seq.message.event_time.nanos = 1, 2
    assert LiteReceived.from_proto(4, common.SequencedMessage.wrap(seq)).event_time_ns == 1_000_000_002


def test_murmur2_matches_kafka_utils_vectors() -> None:
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {k: murmur2(k) for k in vectors} == vectors


def test_partitioner_same_key_same_partition_null_keys_round_robin() -> None:
    p = KafkaPartitioner(3, start=1)
    keyed = [p.partition(b"user-1") for _ in range(5)]
    assert len(set(keyed)) == 1
    assert keyed[0] == (murmur2(b"user-1") & 0x7FFFFFFF) % 3
    assert [p.partition(None) for _ in range(4)] == [1, 2, 0, 1]
    assert p.partition(b"") == 2  # empty key counts as no key
    assert p.counter == 6
    with pytest.raises(ValueError):
        KafkaPartitioner(0)


# ----------------------------------------------------------------------------------------------
# Arrow-batched convert stages agree with the per-record reference
# ----------------------------------------------------------------------------------------------

_HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_KAFKA_BRONZE = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", _HEADERS),
    ]
)


def test_sink_outbox_batch() -> None:
    bronze = pa.RecordBatch.from_pylist(
        [
            {"key": b"dog", "value": b"\"fox\"", "topic": "brown", "partition": 0, "offset": -1,
             "timestamp": -1000, "timestampType": -1, "headers": []},
            {"key": None, "value": b'{"a":[1,2.5]}', "topic": "brown", "partition": 2, "offset": 9,
             "timestamp": 50_001_000, "timestampType": 1,
             "headers": [{"key": "h", "value": b"1"}, {"key": "h", "value": None}, {"key": "h", "value": b"2"}]},
            {"key": b"k", "value": b"not json", "topic": "brown", "partition": 2, "offset": 10,
             "timestamp": 0, "timestampType": 0, "headers": None},
        ],
        schema=_KAFKA_BRONZE,
    )
    json_schemaless = make_converter("org.apache.kafka.connect.json.JsonConverter", schemas_enable=False)
    outbox, failures, skipped = sink_outbox_batch(bronze, value_converter=json_schemaless)
    assert outbox.schema == LITE_OUTBOX_SCHEMA
    assert skipped == 1
    assert [f.index for f in failures] == [2]
    assert isinstance(failures[0].error, DataError)
    rows = outbox.to_pylist()
    assert rows[0]["key"] == b"dog" and rows[0]["data"] == b"fox"
    assert rows[0]["attributes"] == [(TOPIC_ATTR, [b"brown"]), (PARTITION_ATTR, [b"0"]), (OFFSET_ATTR, [b"-1"])]
    assert rows[0]["event_time"] is None
    assert rows[1]["key"] == b""
    assert rows[1]["data"] == b'{"a":[1,2.5]}'  # schemaless map → STRING → project toString (JSON)
    assert rows[1]["attributes"][0] == ("h", [b"1", b"2"])
    assert rows[1]["attributes"][-1] == (TYPE_ATTR, [b"LogAppendTime"])
    assert (rows[1]["partition"], rows[1]["offset"], rows[1]["topic"]) == (2, 9, "brown")
    messages = list(outbox_messages(outbox))
    assert messages[1] == (2, sink_message(
        LiteSinkRecord(
            key=None, value=json_schemaless.to_connect(b'{"a":[1,2.5]}'), topic="brown", partition=2, offset=9,
            timestamp_ms=50_001, timestamp_type=1, headers=[("h", b"1"), ("h", None), ("h", b"2")],
        )
    ).message)
    assert messages[1][1].event_time == (50, 1_000_000)


def _lite_messages() -> list[LiteReceived]:
    return [
        _received(offset=0, key=b"a", data=b"1", attributes={"x": (b"1", b"2"), "y": (b"3",)}),
        _received(offset=1, key=b"", data=b"2", attributes={}, event_time_ns=-1),
        _received(offset=2, key=b"a", data=b"", attributes={"e": ()}, event_time_ns=5_000_999_999),
        _received(offset=3, key=b"", data=b"4", attributes={"z": (b"",)}),
    ]


@pytest.mark.parametrize("converters", [
    DEFAULT_SOURCE_CONVERTERS, RAW_HEADERS,
    LiteSourceConverters(key_converter=JSON_CONVERTER, value_converter=JSON_CONVERTER, value_schemas_enable=False),
    LiteSourceConverters(key_converter=STRING_CONVERTER, value_converter=STRING_CONVERTER,
                              header_converter=BYTE_ARRAY_CONVERTER),
    LiteSourceConverters(key_converter=REGISTRY_AVRO_CONVERTERS[0], value_converter=REGISTRY_AVRO_CONVERTERS[1],
                         key_frame=b"\x00\x00\x00\x00\x07", value_frame=b"\x00\x00\x00\x01\x00"),
], ids=["default", "raw-headers", "json", "string", "avro"])
@pytest.mark.parametrize("sliced", [False, True])
def test_kafka_outbox_batch_matches_reference(sliced: bool, converters: LiteSourceConverters) -> None:
    """The batch convert equals the per-record reference, partition (hash of the *serialized*
    key, as the producer computes it) included."""
    messages = _lite_messages()
    bronze = bronze_batch(messages)
    assert bronze.schema == LITE_BRONZE_SCHEMA
    if sliced:
        bronze, messages = bronze.slice(1, 3), messages[1:]
    out, counter = kafka_outbox_batch(bronze, num_partitions=4, round_robin_start=5, converters=converters)
    assert out.schema == KAFKA_OUTBOX_SCHEMA
    partitioner = KafkaPartitioner(4, start=5)
    expected = []
    for m in messages:
        r = source_record(m, "t", converters)
        expected.append(
            {
                "key": r.key,
                "value": r.value,
                "headers": [{"key": k, "value": v} for k, v in r.headers],
                "partition": partitioner.partition(r.key),
                "timestamp_ms": r.timestamp_ms,
                "lite_partition": r.lite_partition,
                "lite_offset": r.lite_offset,
            }
        )
    got = out.to_pylist()
    for row in got:
        ts = row.pop("timestamp")
        row["timestamp_ms"] = round(ts.timestamp() * 1000)
    assert got == expected
    assert counter == partitioner.counter


def test_kafka_outbox_batch_without_partition_count_and_empty_table() -> None:
    out, counter = kafka_outbox_batch(pa.Table.from_batches([bronze_batch(_lite_messages())]))
    assert out.column("partition").null_count == 4
    assert counter == 0
    empty, _ = kafka_outbox_batch(bronze_batch([]))
    assert empty.num_rows == 0
    assert empty.schema == KAFKA_OUTBOX_SCHEMA


def test_sink_outbox_batch_matches_reference_on_random_rows() -> None:
    import random

    rng = random.Random(11)
    rows = []
    for i in range(300):
        headers = None if rng.random() < 0.1 else [
            {"key": rng.choice(["a", "b", TOPIC_ATTR]), "value": rng.choice([None, b"", b"v1", b"\xff"])}
            for _ in range(rng.randint(0, 4))
        ]
        rows.append(
            {
                "key": rng.choice([None, b"", b"k1", b"k2"]),
                "value": rng.choice([None, b"", b"payload"]),
                "topic": rng.choice([None, "topic"]),
                "partition": rng.choice([None, 0, 7]),
                "offset": i,
                "timestamp": rng.choice([None, -1000, 0, 1_700_000_000_123_456, -5]),
                "timestampType": rng.choice([0, 1]),
                "headers": headers,
            }
        )
    outbox, failures, skipped = sink_outbox_batch(pa.RecordBatch.from_pylist(rows, schema=_KAFKA_BRONZE))
    assert failures == []
    expected_skipped = 0
    got = list(outbox_messages(outbox))
    for row, (partition, message) in zip(rows, got, strict=True):
        ts = row["timestamp"]
        result = sink_message(
            LiteSinkRecord(
                key=None if row["key"] is None else sv(BYTES, row["key"]),
                value=None if row["value"] is None else sv(BYTES, row["value"]),
                topic=row["topic"],
                partition=row["partition"],
                offset=row["offset"],
                timestamp_ms=None if ts is None else ts // 1000,
                timestamp_type=row["timestampType"],
                headers=[(h["key"], h["value"]) for h in row["headers"] or []],
            )
        )
        expected_skipped += result.skipped_headers
        assert partition == row["partition"]
        assert message == result.message
        assert list(message.attributes) == list(result.message.attributes)
    assert skipped == expected_skipped


def test_sink_outbox_batch_reports_rows_it_cannot_map() -> None:
    json_with_schema = make_converter("org.apache.kafka.connect.json.JsonConverter", schemas_enable=True)
    bad_key = b'{"schema":{"type":"map","keys":{"type":"array","items":{"type":"int32"}},"values":{"type":"string"}},' \
        b'"payload":[[[1],"a"]]}'
    rows = [
        {"key": bad_key, "value": b"v", "topic": "t", "partition": 0, "offset": 0, "timestamp": 0,
         "timestampType": 0, "headers": []},
        {"key": b'{"schema":{"type":"int32"},"payload":5}', "value": b"v", "topic": "t", "partition": 0, "offset": 1,
         "timestamp": 0, "timestampType": 0, "headers": []},
    ]
    outbox, failures, _ = sink_outbox_batch(
        pa.RecordBatch.from_pylist(rows, schema=_KAFKA_BRONZE), key_converter=json_with_schema
    )
    assert [(f.index, type(f.error).__name__) for f in failures] == [(0, "LiteEncodingError")]
    assert outbox.num_rows == 1
    assert outbox.column("key").to_pylist() == [b"5"]
    assert outbox.column("offset").to_pylist() == [1]


def _lite_source_config(**keys: str) -> object:
    from pubsub_connect.config.loader import validate_connector

    return validate_connector({"name": "lite-src", "connector.class": "PubSubLiteSourceConnector",
                               "pubsublite.project": "p", "pubsublite.location": "us-central1-a",
                               "pubsublite.subscription": "s", "kafka.topic": "t", **keys})


def test_lite_source_pipeline_reads_the_converters_and_refuses_unusable_ones() -> None:
    """The convert stage gets the connector's converters (Connect's defaults when unset), and a
    converter that cannot serialize bytes stops the connector before any batch runs."""
    from pubsub_connect.pipelines.context import ConnectorError
    from pubsub_connect.pipelines.lite_source import source_converters

    assert source_converters(_lite_source_config()) == DEFAULT_SOURCE_CONVERTERS
    assert source_converters(_lite_source_config(**{
        "key.converter": JSON_CONVERTER, "key.converter.schemas.enable": "false", "value.converter": STRING_CONVERTER,
        "header.converter": BYTE_ARRAY_CONVERTER})) == LiteSourceConverters(
        key_converter=JSON_CONVERTER, key_schemas_enable=False, value_converter=STRING_CONVERTER,
        header_converter=BYTE_ARRAY_CONVERTER)
    with pytest.raises(ConnectorError, match=r"lite-src: value\.converter=\S*IntegerConverter cannot serialize"):
        source_converters(_lite_source_config(**{
            "value.converter": "org.apache.kafka.connect.converters.IntegerConverter"}))


def test_avro_keys_and_values_are_framed_as_confluents_serializer_writes_them() -> None:
    """Schema Registry Avro: a key is the union ``["null","bytes"]``'s bytes branch (an empty key,
    null, stays null), a value the data as it is after the frame (a top-level ``bytes``)."""
    converters = LiteSourceConverters(key_converter=REGISTRY_AVRO_CONVERTERS[0],
                                      value_converter=REGISTRY_AVRO_CONVERTERS[0],
                                      key_frame=b"\x00\x00\x00\x00\x07", value_frame=b"\x00\x00\x00\x00\x08")
    keyed = source_record(_received(key=b"abc", data=b"\x00\xffdata"), "t", converters)
    assert (keyed.key, keyed.value) == (b"\x00\x00\x00\x00\x07\x02\x06abc", b"\x00\x00\x00\x00\x08\x00\xffdata")
    assert source_record(_received(key=b"", data=b"d"), "t", converters).key is None
    with pytest.raises(ValueError, match="schema id was not resolved"):
        LiteSourceConverters(value_converter=REGISTRY_AVRO_CONVERTERS[0]).value(b"d")
