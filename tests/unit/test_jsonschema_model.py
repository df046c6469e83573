"""Schema Registry JSON Schema, read by the sink: JSON Schemas mapped to Connect schemas as
Confluent's ``JsonSchemaData`` maps them, and the JVM path (Variant-read JSON, column
expressions) giving the per-record reference's messages and dead letters for every record of a
JSON corpus: every Connect type, several writer schemas in one batch, values that do not match
their schema, bytes that are not JSON."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from pubsub_connect.model.avro.wire import frame
from pubsub_connect.model.connect import DATE, DECIMAL, TIMESTAMP, Field, Schema, Type
from pubsub_connect.model.cps_sink.batch import CpsSinkConversion
from pubsub_connect.model.cps_sink.reference import CpsSinkMapper
from pubsub_connect.model.cps_sink.settings import CpsSinkSettings, KafkaRecord
from pubsub_connect.model.jsonschema.reference import RegistryJsonSchemaConverter
from pubsub_connect.model.jsonschema.schema import ENUM_PARAMETER, JsonSchemaError, connect_schema_of, java_hash_order
from unit.test_cps_sink_batch import batch_rows, bronze, keyed_records, registry_lookup
from unit.test_cps_sink_batch import reference_rows as sink_reference_rows

JSON_SCHEMA = "io.confluent.connect.json.JsonSchemaConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"


def optional(schema: dict[str, Any], index: int) -> dict[str, Any]:
    """A property as Connect's ``JsonSchemaData.fromConnectSchema`` writes an optional field."""
    return {"oneOf": [{"type": "null"}, schema], "connect.index": index}


#: A schema as Kafka Connect writes one for a struct (``connect.index`` gives the field order).
READING = {"type": "object", "title": "io.example.Reading", "properties": {
    "sensor": {"type": "string", "connect.index": 0},
    "celsius": {"type": "number", "connect.type": "float64", "connect.index": 1},
    "count": {"type": "integer", "connect.type": "int32", "connect.index": 2},
    "note": optional({"type": "string"}, 3),
    "body": optional({"type": "string"}, 4)}}
#: Every Connect type, written as users write schemas (no connect.index: Java's HashMap order).
EVERYTHING = {"type": "object", "properties": {
    "i8": {"type": "integer", "connect.type": "int8"}, "i16": {"type": "integer", "connect.type": "int16"},
    "i": {"type": "integer"}, "f32": {"type": "number", "connect.type": "float32"}, "f": {"type": "number"},
    "flag": {"type": "boolean"}, "s": {"type": "string"}, "raw": {"type": "string", "connect.type": "bytes"},
    "color": {"type": "string", "enum": ["RED", "GREEN"]},
    "price": {"type": "string", "title": DECIMAL, "connect.type": "bytes", "connect.parameters": {"scale": "2"}},
    "amount": {"type": "number", "title": DECIMAL, "connect.type": "bytes", "connect.parameters": {"scale": "3"}},
    "day": {"type": "integer", "title": DATE, "connect.type": "int32"},
    "at": {"type": "integer", "title": TIMESTAMP, "connect.type": "int64"},
    "longs": {"type": "array", "items": {"type": "integer"}},
    "words": {"type": "array", "items": {"type": ["string", "null"]}},
    "level": {"type": "string", "default": "info"},
    "maybe": {"type": ["integer", "null"]},
    "ref": {"$ref": "#/definitions/tag"}},
    "definitions": {"tag": {"type": "string"}}}
NESTED = {"type": "object", "properties": {"a": {"type": "integer"},
                                           "inner": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
UNION = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
#: Maps as Connect writes them: string keys as an object, other keys as an array of entries.
COUNTS = {"type": "object", "connect.type": "map", "additionalProperties": {"type": "integer"}}
BY_ID = {"type": "array", "connect.type": "map", "items": {"type": "object", "properties": {
    "key": {"type": "integer"}, "value": {"type": "string"}}}}
SCHEMAS = {1: READING, 2: EVERYTHING, 3: NESTED, 4: {"type": "string"}, 5: {"type": "array", "items": {
    "type": "integer"}}, 6: UNION, 7: {"type": "integer", "title": TIMESTAMP}, 8: COUNTS, 9: BY_ID,
           10: {"type": "object", "title": "Empty"}}


def everything(n: int) -> dict[str, Any]:
    value: dict[str, Any] = {
        "i8": n % 100 - 50, "i16": n * 300, "i": n * 10**12, "f32": n / 3, "f": n * 1.5e-9, "flag": n % 2 == 0,
        "s": f"s-{n} \"q\" é 😀", "raw": base64.b64encode(bytes([n % 256, 0xff])).decode(),
        "color": "GREEN" if n % 2 else "RED",
        "price": base64.b64encode((n * 1000 - 15_000).to_bytes(3, "big", signed=True)).decode(),
        "amount": [1.2345, 7, -0.0005, 1e3][n % 4], "day": n * 1000 - 20_000, "at": 1_700_000_000_000 + n,
        "longs": list(range(n % 4)), "words": ["a", None, f"w{n}"][: n % 4],
        "maybe": None if n % 3 == 0 else n, "ref": f"tag{n}"}
    if n % 2:
        value["level"] = "debug"
    return value


def encode(schema_id: int, value: Any) -> bytes:
    return frame(schema_id, json.dumps(value).encode())


def values() -> list[bytes | None]:
    """Every kind of value, values that do not match their schema, and bytes that are not JSON."""
    out: list[bytes | None] = [
        encode(1, {"sensor": "s1", "celsius": 21.5, "count": 3, "note": None, "body": "hello"}),
        encode(1, {"sensor": "s2", "celsius": 7, "count": 4, "note": "n"}),        # body absent: null
        encode(1, {"sensor": "s3", "celsius": "warm", "count": 1}),               # text for FLOAT64
        encode(1, {"sensor": "s4", "celsius": 1.5, "count": 2**40}),              # outside INT32
        encode(1, {"sensor": None, "celsius": 1.5, "count": 1}),                  # null for a required field
        encode(1, {"sensor": "s5", "celsius": 1.5, "count": 1.0, "extra": [1]}),  # 1.0 is whole; extras dropped
        encode(3, {"a": 1, "inner": {"x": 2}}),                                   # a nested STRUCT
        encode(4, "just text"),
        encode(5, [1, -2, 300]),
        encode(5, [1, None]),                                                     # a null element
        encode(6, "either"),                                                      # a union: refused
        encode(7, 1_700_000_000_000),
        encode(2, {**everything(1), "raw": "not base64!"}),
        encode(8, {"b": 2, "a": -1, "body": 7}),
        encode(8, {"a": "many"}),                                                 # text for INT64
        encode(9, [{"key": 2, "value": "x"}, {"key": 1, "value": "y"}]),
        encode(9, [{"key": 1, "value": "x"}, {"key": 1, "value": "y"}]),          # a key twice
        encode(9, [{"key": 1}]),                                                  # not an entry
        encode(10, {"a": 1}),                                                     # no properties: none kept
        encode(10, 5),                                                            # not an object
        frame(1, b'{"sensor": "s", "sensor": "t"}'),                              # a name twice
        frame(1, b"{'sensor': 's'}"),                                             # not JSON
        frame(1, b'{"sensor": "\xff"}'),                                          # not UTF-8
        frame(4, b"null"),                                                        # a null value
        frame(99, b"{}"),                                                         # an unknown id
        b'{"not": "framed"}',                                                     # another magic byte
        None,                                                                     # a tombstone
    ]
    out += [encode(2, everything(n)) for n in range(1, 31)]
    return out


lookup = registry_lookup(SCHEMAS)


def reference_rows(rows: list[KafkaRecord], settings: CpsSinkSettings) -> dict[int, tuple]:
    converter = RegistryJsonSchemaConverter(lookup)
    key_converter = converter if settings.key_converter == JSON_SCHEMA else None
    value_converter = converter if settings.value_converter == JSON_SCHEMA else None
    return sink_reference_rows(rows, settings, CpsSinkMapper(settings, key_converter=key_converter,
                                                             value_converter=value_converter))


SETTINGS = {
    "body-field": CpsSinkSettings(key_converter=STRING, value_converter=JSON_SCHEMA, message_body_name="body"),
    "metadata-key-ordering": CpsSinkSettings(key_converter=STRING, value_converter=JSON_SCHEMA, metadata_publish=True,
                                             ordering_key_source="key", message_body_name="s"),
    "json-bodies": CpsSinkSettings(key_converter=STRING, value_converter=JSON_SCHEMA, message_body_format="json"),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_the_jvm_path_gives_the_references_messages(spark: Any, name: str) -> None:
    settings = SETTINGS[name]
    rows = keyed_records(values(), "json-topic")
    actual = batch_rows(CpsSinkConversion(settings, with_skipped_headers=True, schemas=lookup)
                        .to_outbox(bronze(spark, rows)))
    expected = reference_rows(rows, settings)
    assert sorted(actual) == sorted(expected)
    for offset, row in expected.items():
        assert actual[offset] == row, f"offset {offset}"
    classes = sorted({r[7] for r in expected.values() if r[7]})
    expected_classes = ["JsonDataError", "JsonSchemaError", "UnknownSchemaError", "WireFormatError"]
    if settings.message_body_format == "connect":
        expected_classes.append("UnsupportedValueError")  # the nested STRUCT
    assert classes == sorted(expected_classes)
    assert sum(1 for r in expected.values() if r[0] is not None) >= 35


def test_json_schema_keys(spark: Any) -> None:
    """A JSON Schema key is its Java text as the key attribute and ordering key."""
    settings = CpsSinkSettings(key_converter=JSON_SCHEMA, value_converter=STRING, ordering_key_source="key")
    keys = [encode(4, "key-text"), encode(7, 5), encode(5, [1, 2]), frame(4, b"7"), None]
    rows = [KafkaRecord(keys[i % len(keys)], f"v{i}".encode(), "t", 0, i, 1_700_000_000_000, ()) for i in range(10)]
    actual = batch_rows(CpsSinkConversion(settings, with_skipped_headers=True, schemas=lookup)
                        .to_outbox(bronze(spark, rows)))
    expected = reference_rows(rows, settings)
    assert actual == expected
    assert expected[0][1] == {"key": "key-text"}
    assert expected[3][7] == "JsonDataError" and expected[3][8] == "key: $: a number for STRING"


def test_connects_own_schemas_map_field_for_field() -> None:
    schema = connect_schema_of(json.dumps(READING))
    optional_string = Schema(Type.STRING, optional=True)
    assert schema == Schema(Type.STRUCT, fields=(
        Field("sensor", Schema(Type.STRING)), Field("celsius", Schema(Type.FLOAT64)),
        Field("count", Schema(Type.INT32)), Field("note", optional_string), Field("body", optional_string)),
        name="io.example.Reading")
    everything_schema = connect_schema_of(json.dumps(EVERYTHING))
    by_name = {f.name: f.schema for f in everything_schema.fields}
    assert by_name["color"].parameters == ((ENUM_PARAMETER, ""), (f"{ENUM_PARAMETER}.RED", "RED"),
                                           (f"{ENUM_PARAMETER}.GREEN", "GREEN"))
    assert by_name["price"] == Schema(Type.BYTES, name=DECIMAL, parameters=(("scale", "2"),))
    assert connect_schema_of(json.dumps(BY_ID)) == Schema(Type.MAP, key_schema=Schema(Type.INT64),
                                                          value_schema=Schema(Type.STRING))
    assert connect_schema_of(json.dumps(COUNTS)) == Schema(Type.MAP, key_schema=Schema(Type.STRING),
                                                           value_schema=Schema(Type.INT64))
    assert by_name["words"] == Schema(Type.ARRAY, value_schema=Schema(Type.STRING, optional=True))
    assert by_name["level"].default == "info" and by_name["maybe"] == Schema(Type.INT64, optional=True)
    assert by_name["ref"] == Schema(Type.STRING)


def test_properties_without_an_index_take_javas_hashmap_order(spark: Any) -> None:
    """Confluent's schema library keeps an object's properties in a ``java.util.HashMap``: the
    order is Java's own, asked of the JVM here."""
    names = sorted(EVERYTHING["properties"]) + [f"field_{i}" for i in range(40)] + ["ü", "日本", "😀x"]
    java_map = spark.sparkContext._jvm.java.util.HashMap()
    for name in names:
        java_map.put(name, 1)
    assert java_hash_order(names) == list(java_map.keySet())
    assert [f.name for f in connect_schema_of(json.dumps(EVERYTHING)).fields] == \
        java_hash_order(list(EVERYTHING["properties"]))


@pytest.mark.parametrize(("schema", "why"), [
    (UNION, "a oneOf of several types (Confluent's OneOf struct) is not supported"),
    ({"type": ["string", "integer"]}, "unites several types"),
    ({"allOf": [{"type": "string"}]}, "uses allOf"),
    ({}, "accepts any JSON value"),
    ({"type": "object", "properties": {"me": {"$ref": "#"}}}, "refers to itself"),
    ({"$ref": "other.json#/x"}, "names another document"),
    ({"type": "array"}, "Array schema did not specify the items type"),
    ({"type": "object", "properties": {"a": {"type": "integer", "connect.index": 1}, "b": {"type": "integer"},
                                       "c": {"type": "integer", "connect.index": 0}}},
     "properties a and b both take field position 1"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}, "default": [1]}}},
     "a default for a array"),
])
def test_what_has_no_connect_mapping_is_refused_with_the_reason(schema: dict[str, Any], why: str) -> None:
    with pytest.raises(JsonSchemaError, match=why.replace("(", r"\(").replace(")", r"\)")):
        connect_schema_of(json.dumps(schema))
