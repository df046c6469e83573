"""The Pub/Sub sink data model, per record: the reference implementation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pubsub_connect.model.connect import (
    FLOAT32,
    INT32,
    DataError,
    Field,
    Schema,
    Struct,
    Type,
)
from pubsub_connect.model.converters import (
    BYTE_ARRAY_CONVERTER,
    FLOAT_CONVERTER,
    INTEGER_CONVERTER,
    JSON_CONVERTER,
    STRING_CONVERTER,
    ConverterError,
)
from pubsub_connect.model.cps_sink.reference import encode_body, map_record, record_to_message
from pubsub_connect.model.cps_sink.settings import (
    MAX_MESSAGE_BYTES,
    CpsSinkSettings,
    KafkaRecord,
    PubsubLimitError,
    PubsubMessage,
    UnsupportedValueError,
)
from unit.cps_sink_fixtures import FIXTURES, fixture_bytes


def fixture_record(raw: dict[str, Any], offset: int = 1000) -> KafkaRecord:
    return KafkaRecord(
        key=fixture_bytes(raw.get("key")),
        value=fixture_bytes(raw.get("value")),
        topic=raw.get("topic", "brown"),
        partition=raw.get("partition", 4),
        offset=raw.get("offset", offset),
        timestamp_ms=raw.get("timestamp_ms"),
        headers=[(k, fixture_bytes(v)) for k, v in raw.get("headers", [])],
    )


def load_examples() -> list[dict[str, Any]]:
    with open(FIXTURES / "issue4_examples.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def env(schema: Any, payload: Any) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}).encode()


STRING_KEYS = CpsSinkSettings(key_converter=STRING_CONVERTER)
JSON_VALUES = CpsSinkSettings(key_converter=STRING_CONVERTER, value_converter=JSON_CONVERTER)


def rec(value: bytes | None, key: bytes | None = b"dog", **kw: Any) -> KafkaRecord:
    fields: dict[str, Any] = {"topic": "brown", "partition": 4, "offset": 1000, "timestamp_ms": 50000}
    fields.update(kw)
    return KafkaRecord(key=key, value=value, **fields)


# ------------------------------------------------------------------------ data model examples


@pytest.mark.parametrize("example", load_examples(), ids=lambda e: e["name"])
def test_issue_examples(example: dict[str, Any]) -> None:
    message = record_to_message(fixture_record(example["record"]), CpsSinkSettings(**example["settings"]))
    expect = example["expect"]
    if expect is None:
        assert message is None
    else:
        assert message == PubsubMessage(bytes.fromhex(expect["data_hex"]), expect["attributes"], expect["ordering_key"])


def test_issue_examples_spelled_out() -> None:
    """The headline examples again, literally, so a broken fixture file cannot hide a regression."""
    assert record_to_message(rec(b"fox"), STRING_KEYS) == PubsubMessage(b"fox", {"key": "dog"})
    meta = CpsSinkSettings(key_converter=STRING_CONVERTER, metadata_publish=True)
    assert record_to_message(rec(b"fox"), meta) == PubsubMessage(
        b"fox",
        {
            "key": "dog",
            "kafka.topic": "brown",
            "kafka.partition": "4",
            "kafka.offset": "1000",
            "kafka.timestamp": "50000",
        },
    )
    struct_value = env(
        {
            "type": "struct",
            "fields": [{"type": "int32", "field": "cps_message_body"}, {"type": "string", "field": "a"}],
        },
        {"cps_message_body": 5, "a": "b"},
    )
    assert record_to_message(rec(struct_value), JSON_VALUES) == PubsubMessage(
        b"\x00\x00\x00\x05", {"a": "b", "key": "dog"}
    )
    assert record_to_message(rec(None, key=None), STRING_KEYS) is None


def test_metadata_attributes_follow_the_key_in_order() -> None:
    meta = CpsSinkSettings(key_converter=STRING_CONVERTER, metadata_publish=True)
    message = record_to_message(rec(b"fox"), meta)
    assert message is not None
    assert list(message.attributes) == [
        "key",
        "kafka.topic",
        "kafka.partition",
        "kafka.offset",
        "kafka.timestamp",
    ]


def test_negative_timestamp_means_no_timestamp() -> None:
    meta = CpsSinkSettings(metadata_publish=True)
    message = record_to_message(rec(b"fox", key=None, timestamp_ms=-1), meta)
    assert message == PubsubMessage(b"fox", {"kafka.topic": "brown", "kafka.partition": "4", "kafka.offset": "1000"})


# ------------------------------------------------------------------------------ bodies by type


@pytest.mark.parametrize(
    ("schema", "payload", "data"),
    [
        ({"type": "int8"}, -1, "ff"),
        ({"type": "int16"}, 5, "0005"),
        ({"type": "int32"}, 5, "00000005"),
        ({"type": "int32"}, -2, "fffffffe"),
        ({"type": "int64"}, 5, "0000000000000005"),
        ({"type": "float"}, 8.0, "41000000"),
        ({"type": "double"}, 8.0, "4020000000000000"),
        ({"type": "boolean"}, True, "01"),
        ({"type": "boolean"}, False, "00"),
        ({"type": "string"}, "fox", "666f78"),
        ({"type": "bytes"}, "AP8=", "00ff"),
        ({"type": "array", "items": {"type": "string"}}, ["Roll", "tide"], b"Rolltide".hex()),
        ({"type": "array", "items": {"type": "int16"}}, [1, 2], "00010002"),
        ({"type": "array", "items": {"type": "array", "items": {"type": "int8"}}}, [[1], [2, 3]], "010203"),
        ({"type": "array", "items": {"type": "int8"}}, [], ""),
    ],
)
def test_typed_bodies(schema: dict, payload: Any, data: str) -> None:
    message = record_to_message(rec(env(schema, payload)), JSON_VALUES)
    assert message == PubsubMessage(bytes.fromhex(data), {"key": "dog"})


@pytest.mark.parametrize(
    ("value", "data"),
    [
        (
            b'{ "b" : [1, 2.5, 1e7], "a": {"c": null}, "s": "\\u00e9" }',
            '{"b":[1,2.5,1.0E7],"a":{"c":null},"s":"é"}',
        ),
        (b"[1, 2]", "[1,2]"),
        (b'"text"', "text"),  # a JSON string is its text, no quotes
        (b"12", "12"),
        (b"1.5", "1.5"),
        (b"1e7", "1.0E7"),  # a double prints like Java's Double.toString
        (b"true", "true"),
    ],
)
def test_schemaless_json_bodies(value: bytes, data: str) -> None:
    settings = CpsSinkSettings(value_converter=JSON_CONVERTER, value_schemas_enable=False)
    assert record_to_message(rec(value, key=None), settings) == PubsubMessage(data.encode(), {})


def test_string_value_is_utf8_and_invalid_bytes_become_replacement_chars() -> None:
    settings = CpsSinkSettings(value_converter=STRING_CONVERTER)
    assert record_to_message(rec("é".encode(), key=None), settings) == PubsubMessage(b"\xc3\xa9", {})
    assert record_to_message(rec(b"f\xffx", key=None), settings) == PubsubMessage(b"f\xef\xbf\xbdx", {})


def test_number_converter_values() -> None:
    settings = CpsSinkSettings(value_converter=INTEGER_CONVERTER)
    assert record_to_message(rec(b"\x00\x00\x00\x05", key=None), settings) == PubsubMessage(b"\x00\x00\x00\x05", {})
    settings = CpsSinkSettings(value_converter=FLOAT_CONVERTER)
    assert record_to_message(rec(bytes.fromhex("41000000"), key=None), settings) == PubsubMessage(
        bytes.fromhex("41000000"), {}
    )


# ------------------------------------------------------------------------------ structs and maps

STRUCT_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "string", "field": "cps_message_body"},
        {"type": "int64", "field": "n"},
        {"type": "boolean", "field": "ok"},
        {"type": "double", "field": "big"},
        {"type": "double", "field": "small"},
        {"type": "double", "field": "tiny"},
        {"type": "float", "field": "f"},
        {"type": "bytes", "field": "raw"},
        {"type": "array", "items": {"type": "string"}, "field": "tags"},
        {"type": "string", "optional": True, "field": "missing"},
        {"type": "string", "field": "key"},
    ],
}


def test_struct_fields_become_java_text_attributes_and_the_record_key_overwrites() -> None:
    payload = {
        "cps_message_body": "fox",
        "n": -12,
        "ok": True,
        "big": 1e7,
        "small": 0.001,
        "tiny": 1e-4,
        "f": 0.1,
        "raw": "ZG9n",
        "tags": ["a", "b"],
        "missing": None,
        "key": "from struct",
    }
    message = record_to_message(rec(env(STRUCT_SCHEMA, payload)), JSON_VALUES)
    assert message == PubsubMessage(
        b"fox",
        {
            "n": "-12",
            "ok": "true",
            "big": "1.0E7",
            "small": "0.001",
            "tiny": "1.0E-4",
            "f": "0.1",
            "raw": "dog",
            "tags": '["a","b"]',
            "key": "dog",
        },
    )
    assert message is not None and list(message.attributes)[-1] == "key"  # overwritten in place


def test_custom_message_body_name() -> None:
    settings = CpsSinkSettings(
        key_converter=STRING_CONVERTER, value_converter=JSON_CONVERTER, message_body_name="payload"
    )
    value = env(
        {
            "type": "struct",
            "fields": [{"type": "int16", "field": "payload"}, {"type": "int16", "field": "cps_message_body"}],
        },
        {"payload": 1, "cps_message_body": 2},
    )
    assert record_to_message(rec(value), settings) == PubsubMessage(
        b"\x00\x01", {"cps_message_body": "2", "key": "dog"}
    )


def test_struct_without_body_and_all_nulls_publishes_nothing_without_key() -> None:
    value = env({"type": "struct", "fields": [{"type": "string", "optional": True, "field": "a"}]}, {"a": None})
    assert record_to_message(rec(value, key=None), JSON_VALUES) is None
    assert record_to_message(rec(value), JSON_VALUES) == PubsubMessage(b"", {"key": "dog"})


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (
            {"type": "struct", "optional": True, "fields": [], "field": "inner"},
            'value: struct field "inner" is a nested STRUCT; Pub/Sub attributes cannot hold it',
        ),
        (
            {
                "type": "map",
                "keys": {"type": "string"},
                "values": {"type": "string"},
                "optional": True,
                "field": "m",
            },
            'value: struct field "m" is a nested MAP; Pub/Sub attributes cannot hold it',
        ),
    ],
)
def test_nested_struct_or_map_field_is_an_error(field: dict, message: str) -> None:
    value = env({"type": "struct", "fields": [field]}, {})  # an error even when the field is null
    with pytest.raises(UnsupportedValueError) as e:
        record_to_message(rec(value), JSON_VALUES)
    assert str(e.value) == message
    assert e.value.error_class == "UnsupportedValueError"


def test_arrays_of_structs_or_maps_are_errors() -> None:
    value = env(
        {"type": "array", "items": {"type": "map", "keys": {"type": "string"}, "values": {"type": "string"}}},
        [],
    )
    with pytest.raises(
        UnsupportedValueError, match=r"^value: arrays of MAP are not supported; only arrays of primitives$"
    ):
        record_to_message(rec(value), JSON_VALUES)
    value = env({"type": "array", "items": {"type": "struct", "fields": []}}, [])
    with pytest.raises(UnsupportedValueError, match="arrays of STRUCT are not supported"):
        record_to_message(rec(value), JSON_VALUES)
    value = env({"type": "array", "items": {"type": "int8", "optional": True}}, [1, None])
    with pytest.raises(UnsupportedValueError, match=r"^value: array has a null element$"):
        record_to_message(rec(value), JSON_VALUES)


def test_encode_body_on_connect_values_directly() -> None:
    schema = Schema(Type.STRUCT, fields=(Field("a", INT32), Field("cps_message_body", FLOAT32)))
    attributes: dict[str, str] = {}
    assert encode_body(schema, Struct(schema, {"a": 1, "cps_message_body": 8.0}), "cps_message_body", attributes) == (
        bytes.fromhex("41000000")
    )
    assert attributes == {"a": "1"}
    with pytest.raises(UnsupportedValueError, match='struct is missing required field "a"'):
        encode_body(schema, Struct(schema, {"cps_message_body": 8.0}), "cps_message_body", {})
    with pytest.raises(UnsupportedValueError, match="unexpected str value for a BYTES schema"):
        encode_body(Schema(Type.BYTES), "x", "cps_message_body", {})
    assert encode_body(None, b"\x00", "b", {}) == b"\x00"
    assert encode_body(None, None, "b", {}) is None


def test_map_body_entry_is_text_and_other_entries_are_attributes() -> None:
    value = env(
        {"type": "map", "keys": {"type": "string"}, "values": {"type": "int32", "optional": True}},
        {"cps_message_body": 5, "x": 7, "gone": None},
    )
    # the body of a MAP is the UTF-8 text of the entry (Java: toString), not its binary encoding
    assert record_to_message(rec(value), JSON_VALUES) == PubsubMessage(b"5", {"x": "7", "key": "dog"})
    value = env({"type": "map", "keys": {"type": "int32"}, "values": {"type": "float"}}, [[1, 0.5], [2, 1e10]])
    assert record_to_message(rec(value), JSON_VALUES) == PubsubMessage(b"", {"1": "0.5", "2": "1.0E10", "key": "dog"})


# ------------------------------------------------------------------------------ keys and ordering


def test_key_text_per_key_converter() -> None:
    assert record_to_message(rec(b"v", key=b"d\xffg"), CpsSinkSettings()) == PubsubMessage(b"v", {"key": "d\ufffdg"})
    settings = CpsSinkSettings(key_converter=INTEGER_CONVERTER)
    assert record_to_message(rec(b"v", key=b"\xff\xff\xff\xfe"), settings) == PubsubMessage(b"v", {"key": "-2"})
    settings = CpsSinkSettings(key_converter=FLOAT_CONVERTER)
    assert record_to_message(rec(b"v", key=bytes.fromhex("4b189680")), settings) == PubsubMessage(
        b"v", {"key": "1.0E7"}
    )
    settings = CpsSinkSettings(key_converter=JSON_CONVERTER, key_schemas_enable=False)
    assert record_to_message(rec(b"v", key=b'{"id": 1}'), settings) == PubsubMessage(b"v", {"key": '{"id":1}'})


@pytest.mark.parametrize(
    ("source", "key", "ordering_key"),
    [
        ("none", b"dog", ""),
        ("key", b"dog", "dog"),
        ("key", b"", ""),  # only a non-empty key orders
        ("key", None, ""),
        ("partition", b"dog", "4"),
        ("partition", None, "4"),
    ],
)
def test_ordering_key_source(source: str, key: bytes | None, ordering_key: str) -> None:
    settings = CpsSinkSettings(key_converter=STRING_CONVERTER, ordering_key_source=source)
    message = record_to_message(rec(b"fox", key=key), settings)
    assert message is not None
    assert message.ordering_key == ordering_key


def test_settings_reject_unknown_values() -> None:
    with pytest.raises(ValueError, match="orderingKeySource must be one of none, key, partition"):
        CpsSinkSettings(ordering_key_source="Key")
    with pytest.raises(ValueError, match="unsupported converter"):
        CpsSinkSettings(value_converter="x.Y")


# ------------------------------------------------------------------------------ headers

HEADERS = CpsSinkSettings(key_converter=STRING_CONVERTER, headers_publish=True)


def test_headers_are_attributes_after_metadata_and_overwrite() -> None:
    settings = CpsSinkSettings(key_converter=STRING_CONVERTER, headers_publish=True, metadata_publish=True)
    headers = [("h", b"1"), ("key", b"header"), ("kafka.topic", b"t2"), ("h", b"2")]
    result = map_record(rec(b"fox", headers=headers, timestamp_ms=None), settings)
    assert result.message == PubsubMessage(
        b"fox",
        {"key": "header", "kafka.topic": "t2", "kafka.partition": "4", "kafka.offset": "1000", "h": "2"},
    )
    assert result.skipped_headers == 0


def test_headers_are_ignored_unless_enabled() -> None:
    result = map_record(rec(b"fox", headers=[("h", b"1"), ("bad", b"\xff")]), STRING_KEYS)
    assert result.message == PubsubMessage(b"fox", {"key": "dog"})
    assert result.skipped_headers == 0


def test_header_size_limits_count_utf8_bytes() -> None:
    headers = [
        ("k" * 256, b"ok"),
        ("k" * 257, b"key too long"),
        ("é" * 128, b"256-byte key ok"),
        ("é" * 128 + "x", b"257-byte key"),
        ("v", ("é" * 512).encode()),  # 1024 bytes
        ("w", ("é" * 512 + "x").encode()),  # 1025 bytes
        ("bad", b"\xc3"),  # invalid UTF-8: kept, as U+FFFD
        ("bad-long", b"\xff" * 342),  # 342 U+FFFD are 1026 bytes of text
        ("null", None),
        ("", b"empty key is allowed"),
    ]
    result = map_record(rec(b"fox", key=None, headers=headers), HEADERS)
    assert result.message == PubsubMessage(
        b"fox", {"k" * 256: "ok", "é" * 128: "256-byte key ok", "v": "é" * 512, "bad": "\ufffd",
                 "": "empty key is allowed"}
    )
    assert result.skipped_headers == 5


def test_at_most_100_attributes_in_total() -> None:
    headers = [(f"h{i:03d}", b"x") for i in range(120)]
    result = map_record(rec(b"fox", headers=headers), HEADERS)  # "key" + 99 headers
    assert result.message is not None
    assert len(result.message.attributes) == 100
    assert list(result.message.attributes)[-1] == "h098"
    assert result.skipped_headers == 21


def test_headers_at_the_cap_still_overwrite_existing_attributes() -> None:
    headers = [(f"h{i:03d}", b"x") for i in range(99)] + [("new", b"skipped"), ("key", b"k2"), ("h000", b"y")]
    result = map_record(rec(b"fox", headers=headers), HEADERS)
    assert result.message is not None
    attributes = result.message.attributes
    assert len(attributes) == 100
    assert "new" not in attributes
    assert attributes["key"] == "k2"
    assert attributes["h000"] == "y"
    assert result.skipped_headers == 1


def test_invalid_headers_alone_publish_nothing_but_are_counted() -> None:
    result = map_record(rec(None, key=None, headers=[("null", None), ("long", b"x" * 1025)]), HEADERS)
    assert result == type(result)(None, 2)
    result = map_record(rec(None, key=None, headers=[("h", b"x")]), HEADERS)
    assert result.message == PubsubMessage(b"", {"h": "x"})


# ------------------------------------------------------------------------------ nothing to publish


def test_null_or_empty_value_without_attributes_publishes_nothing() -> None:
    assert record_to_message(rec(None, key=None), CpsSinkSettings()) is None
    assert record_to_message(rec(b"", key=None), CpsSinkSettings()) is None
    assert record_to_message(rec(None, key=b""), CpsSinkSettings()) == PubsubMessage(b"", {"key": ""})
    assert record_to_message(rec(None, key=None), CpsSinkSettings(metadata_publish=True)) == PubsubMessage(
        b"",
        {"kafka.topic": "brown", "kafka.partition": "4", "kafka.offset": "1000", "kafka.timestamp": "50000"},
    )
    plain = CpsSinkSettings(value_converter=JSON_CONVERTER, value_schemas_enable=False)
    assert record_to_message(rec(b"null", key=None), plain) is None


# ------------------------------------------------------------------------------ errors and limits


@pytest.mark.parametrize(
    ("settings", "key", "value", "error", "message"),
    [
        (
            CpsSinkSettings(value_converter=INTEGER_CONVERTER),
            b"k",
            b"\x00\x05",
            ConverterError,
            "value: IntegerConverter: expected 4 bytes, got 2",
        ),
        (  # the key is converted (and fails) first
            CpsSinkSettings(key_converter=INTEGER_CONVERTER, value_converter=INTEGER_CONVERTER),
            b"k",
            b"\x00",
            ConverterError,
            "key: IntegerConverter: expected 4 bytes, got 1",
        ),
        (
            JSON_VALUES,
            b"k",
            b"{",
            ConverterError,
            "value: JsonConverter: invalid JSON: "
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (
            CpsSinkSettings(key_converter=JSON_CONVERTER),
            b"[",
            b"v",
            ConverterError,
            "key: JsonConverter: invalid JSON: Expecting value: line 1 column 2 (char 1)",
        ),
        (
            JSON_VALUES,
            b"k",
            env({"type": "int8"}, 128),
            ConverterError,
            "value: JsonConverter: payload: 128 is out of range for int8",
        ),
    ],
)
def test_malformed_input_raises_data_error(
    settings: CpsSinkSettings, key: bytes, value: bytes, error: type[DataError], message: str
) -> None:
    with pytest.raises(error) as e:
        record_to_message(rec(value, key=key), settings)
    assert str(e.value) == message
    assert isinstance(e.value, DataError)


def test_attribute_limits_from_values_and_keys_are_errors() -> None:
    long_key = b"k" * 1025
    with pytest.raises(PubsubLimitError) as e:
        record_to_message(rec(b"v", key=long_key), STRING_KEYS)
    assert str(e.value) == 'attribute "key" value is 1025 bytes; Pub/Sub allows at most 1024'
    assert e.value.error_class == "PubsubLimitError"
    assert record_to_message(rec(b"v", key=b"k" * 1024), STRING_KEYS) is not None

    name = "f" * 257
    value = env({"type": "struct", "fields": [{"type": "string", "field": name}]}, {name: "x"})
    with pytest.raises(
        PubsubLimitError, match=r'^attribute key "f{64}\.\.\." is 257 bytes; Pub/Sub allows at most 256$'
    ):
        record_to_message(rec(value), JSON_VALUES)

    many = env(
        {"type": "map", "keys": {"type": "string"}, "values": {"type": "string"}},
        {f"a{i}": "x" for i in range(101)},
    )
    with pytest.raises(PubsubLimitError, match=r"^message has 102 attributes; Pub/Sub allows at most 100$"):
        record_to_message(rec(many), JSON_VALUES)


def test_ordering_key_limit_applies_even_when_a_header_replaces_the_key_attribute() -> None:
    settings = CpsSinkSettings(key_converter=STRING_CONVERTER, headers_publish=True, ordering_key_source="key")
    with pytest.raises(PubsubLimitError, match=r"^ordering key is 1100 bytes; Pub/Sub allows at most 1024$"):
        record_to_message(rec(b"v", key=b"k" * 1100, headers=[("key", b"short")]), settings)


def test_message_size_limit() -> None:
    settings = CpsSinkSettings(key_converter=STRING_CONVERTER)
    fits = MAX_MESSAGE_BYTES - len("key") - len("dog")
    message = record_to_message(rec(b"x" * fits), settings)
    assert message is not None and len(message.data) == fits
    with pytest.raises(PubsubLimitError) as e:
        record_to_message(rec(b"x" * (fits + 1)), settings)
    assert str(e.value) == (
        f"message is {MAX_MESSAGE_BYTES + 1} bytes (data, attribute keys and values, ordering key); "
        f"Pub/Sub accepts at most {MAX_MESSAGE_BYTES}"
    )


def test_largest_accepted_message_fits_the_official_publishers_request_limit() -> None:
    """A message at our limit, with 100 maximal attributes, a maximal ordering key and the longest
    topic path, must still be accepted by google-cloud-pubsub's PublishRequest size check."""
    gapic = pytest.importorskip("google.pubsub_v1.types")
    from google.cloud.pubsub_v1.publisher._batch import thread

    attributes = {f"{i:03d}".ljust(256, "k"): "v" * 1024 for i in range(100)}
    ordering_key = "o" * 1024
    used = sum(len(k) + len(v) for k, v in attributes.items()) + len(ordering_key)
    message = gapic.PubsubMessage(
        data=b"x" * (MAX_MESSAGE_BYTES - used), attributes=attributes, ordering_key=ordering_key
    )
    topic = "projects/" + "p" * 30 + "/topics/" + "t" * 255
    size = gapic.PublishRequest(topic=topic)._pb.ByteSize() + gapic.PublishRequest(messages=[message])._pb.ByteSize()
    assert size <= thread._SERVER_PUBLISH_MAX_BYTES
    assert thread._SERVER_PUBLISH_MAX_BYTES - size < 4_000  # and the reserve is not wildly generous


def test_lone_surrogates_in_json_text_publish_as_question_marks() -> None:
    plain = CpsSinkSettings(value_converter=JSON_CONVERTER, value_schemas_enable=False)
    assert record_to_message(rec(b'"a\\ud800b"', key=None), plain) == PubsubMessage(b"a?b", {})
    value = env({"type": "struct", "fields": [{"type": "string", "field": "s\ud800"}]}, {"s\ud800": "x\udfff"})
    assert record_to_message(rec(value, key=None), JSON_VALUES) == PubsubMessage(b"", {"s?": "x?"})


def test_default_settings_are_google_defaults() -> None:
    s = CpsSinkSettings()
    assert (s.message_body_name, s.metadata_publish, s.headers_publish, s.ordering_key_source) == (
        "cps_message_body",
        False,
        False,
        "none",
    )
    assert s.key_converter == s.value_converter == BYTE_ARRAY_CONVERTER
