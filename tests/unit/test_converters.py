"""Kafka Connect converters and Java text forms (pure, no Spark)."""

from __future__ import annotations

import json
import math
import random
import struct

import pytest

from pubsub_connect.model.connect import (
    BOOLEAN,
    BYTES,
    FLOAT32,
    INT32,
    STRING,
    DataError,
    Field,
    Schema,
    SchemaAndValue,
    Struct,
    Type,
)
from pubsub_connect.model.converters import (
    BOOLEAN_CONVERTER,
    BYTE_ARRAY_CONVERTER,
    DOUBLE_CONVERTER,
    FLOAT_CONVERTER,
    INTEGER_CONVERTER,
    JSON_CONVERTER,
    KNOWN_CONVERTERS,
    LONG_CONVERTER,
    SHORT_CONVERTER,
    STRING_CONVERTER,
    ConverterError,
    dump_json,
    java_double_to_string,
    java_float_to_string,
    java_text,
    make_converter,
    schema_to_json,
)

OPT_BYTES = Schema(Type.BYTES, optional=True)
OPT_STRING = Schema(Type.STRING, optional=True)


def envelope(schema: object, payload: object) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}).encode()


# ------------------------------------------------------------------------------ factory


def test_known_converters_are_the_java_class_names() -> None:
    assert KNOWN_CONVERTERS == (
        "org.apache.kafka.connect.converters.ByteArrayConverter",
        "org.apache.kafka.connect.storage.StringConverter",
        "org.apache.kafka.connect.json.JsonConverter",
        "org.apache.kafka.connect.converters.ShortConverter",
        "org.apache.kafka.connect.converters.IntegerConverter",
        "org.apache.kafka.connect.converters.LongConverter",
        "org.apache.kafka.connect.converters.FloatConverter",
        "org.apache.kafka.connect.converters.DoubleConverter",
        "org.apache.kafka.connect.converters.BooleanConverter",
    )
    for name in KNOWN_CONVERTERS:
        assert make_converter(name).class_name == name


def test_unknown_converter_is_a_config_error_not_a_data_error() -> None:
    with pytest.raises(ValueError, match=r"unsupported converter 'io\.confluent\.connect\.avro\.AvroConverter'") as e:
        make_converter("io.confluent.connect.avro.AvroConverter")
    assert not isinstance(e.value, DataError)
    with pytest.raises(ValueError):
        make_converter("StringConverter")  # short names are not accepted


@pytest.mark.parametrize("name", KNOWN_CONVERTERS)
def test_null_bytes_are_null(name: str) -> None:
    conv = make_converter(name)
    assert conv.to_connect(None) == SchemaAndValue(None, None)
    assert conv.from_connect(None, None) is None


# ------------------------------------------------------------------------------ bytes / string


def test_byte_array_converter_passes_bytes_through() -> None:
    conv = make_converter(BYTE_ARRAY_CONVERTER)
    assert conv.to_connect(b"\x00\xfffox") == SchemaAndValue(OPT_BYTES, b"\x00\xfffox")
    assert conv.to_connect(b"") == SchemaAndValue(OPT_BYTES, b"")
    assert conv.from_connect(BYTES, b"abc") == b"abc"
    assert conv.from_connect(None, bytearray(b"abc")) == b"abc"
    with pytest.raises(ConverterError, match="invalid schema type string"):
        conv.from_connect(STRING, "abc")
    with pytest.raises(ConverterError, match="expected bytes, got str"):
        conv.from_connect(None, "abc")


def test_string_converter_decodes_utf8_and_replaces_invalid_sequences_like_java() -> None:
    conv = make_converter(STRING_CONVERTER)
    assert conv.to_connect("héllo".encode()) == SchemaAndValue(OPT_STRING, "héllo")
    assert conv.to_connect(b"a\xffb\xe2\x82") == SchemaAndValue(OPT_STRING, "a\ufffdb\ufffd")
    assert conv.from_connect(STRING, "héllo") == "héllo".encode()
    # any value goes through its Java text
    assert conv.from_connect(INT32, 5) == b"5"
    assert conv.from_connect(None, 1e7) == b"1.0E7"
    assert conv.from_connect(FLOAT32, 0.1) == b"0.1"
    assert conv.from_connect(BOOLEAN, True) == b"true"
    assert conv.from_connect(STRING, "\ud800x") == b"?x"  # lone surrogate -> '?' like getBytes(UTF_8)


# ------------------------------------------------------------------------------ numbers


@pytest.mark.parametrize(
    ("name", "data", "type_", "value"),
    [
        (SHORT_CONVERTER, "0005", Type.INT16, 5),
        (SHORT_CONVERTER, "ffff", Type.INT16, -1),
        (SHORT_CONVERTER, "8000", Type.INT16, -32768),
        (INTEGER_CONVERTER, "00000005", Type.INT32, 5),
        (INTEGER_CONVERTER, "fffffffe", Type.INT32, -2),
        (LONG_CONVERTER, "7fffffffffffffff", Type.INT64, 2**63 - 1),
        (LONG_CONVERTER, "8000000000000000", Type.INT64, -(2**63)),
        (FLOAT_CONVERTER, "41000000", Type.FLOAT32, 8.0),
        (FLOAT_CONVERTER, "3dcccccd", Type.FLOAT32, struct.unpack(">f", bytes.fromhex("3dcccccd"))[0]),
        (DOUBLE_CONVERTER, "4020000000000000", Type.FLOAT64, 8.0),
        (DOUBLE_CONVERTER, "c000000000000000", Type.FLOAT64, -2.0),
        (BOOLEAN_CONVERTER, "01", Type.BOOLEAN, True),
        (BOOLEAN_CONVERTER, "00", Type.BOOLEAN, False),
    ],
)
def test_number_converters_are_big_endian_and_round_trip(name: str, data: str, type_: Type, value: object) -> None:
    conv = make_converter(name)
    sv = conv.to_connect(bytes.fromhex(data))
    assert sv == SchemaAndValue(Schema(type_, optional=True), value)
    assert type(sv.value) is type(value)
    assert conv.from_connect(sv.schema, sv.value) == bytes.fromhex(data)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (SHORT_CONVERTER, "000005", "ShortConverter: expected 2 bytes, got 3"),
        (INTEGER_CONVERTER, "0005", "IntegerConverter: expected 4 bytes, got 2"),
        (INTEGER_CONVERTER, "", "IntegerConverter: expected 4 bytes, got 0"),
        (LONG_CONVERTER, "00000005", "LongConverter: expected 8 bytes, got 4"),
        (FLOAT_CONVERTER, "4100000000", "FloatConverter: expected 4 bytes, got 5"),
        (DOUBLE_CONVERTER, "41000000", "DoubleConverter: expected 8 bytes, got 4"),
        (BOOLEAN_CONVERTER, "0101", "BooleanConverter: expected 1 byte, got 2"),
        (BOOLEAN_CONVERTER, "02", "BooleanConverter: expected byte 00 or 01, got 02"),
    ],
)
def test_number_converters_reject_wrong_lengths(name: str, data: str, message: str) -> None:
    with pytest.raises(ConverterError) as e:
        make_converter(name).to_connect(bytes.fromhex(data))
    assert str(e.value) == message
    assert e.value.error_class == "ConverterError"


def test_number_converters_from_connect_check_types_and_ranges() -> None:
    assert make_converter(INTEGER_CONVERTER).from_connect(None, -2) == b"\xff\xff\xff\xfe"
    assert make_converter(FLOAT_CONVERTER).from_connect(None, 0.1) == bytes.fromhex("3dcccccd")
    assert make_converter(DOUBLE_CONVERTER).from_connect(None, 5) == bytes.fromhex("4014000000000000")
    with pytest.raises(ConverterError, match="40000 is out of range for int16"):
        make_converter(SHORT_CONVERTER).from_connect(None, 40000)
    with pytest.raises(ConverterError, match="expected int32, got str"):
        make_converter(INTEGER_CONVERTER).from_connect(None, "5")
    with pytest.raises(ConverterError, match="expected int64, got bool"):
        make_converter(LONG_CONVERTER).from_connect(None, True)
    with pytest.raises(ConverterError, match="expected boolean, got int"):
        make_converter(BOOLEAN_CONVERTER).from_connect(None, 1)


# ------------------------------------------------------------------------------ JSON with schemas

JSON = make_converter(JSON_CONVERTER, schemas_enable=True)


@pytest.mark.parametrize(
    ("schema", "payload", "expected_type", "value"),
    [
        ({"type": "boolean"}, True, Type.BOOLEAN, True),
        ({"type": "int8"}, -128, Type.INT8, -128),
        ({"type": "int16"}, 5, Type.INT16, 5),
        ({"type": "int32"}, 2147483647, Type.INT32, 2147483647),
        ({"type": "int64"}, -(2**63), Type.INT64, -(2**63)),
        ({"type": "int64"}, 5.0, Type.INT64, 5),  # an integral JSON float is accepted, like Jackson
        ({"type": "float"}, 0.1, Type.FLOAT32, struct.unpack(">f", struct.pack(">f", 0.1))[0]),
        ({"type": "float"}, 8, Type.FLOAT32, 8.0),
        ({"type": "double"}, 0.1, Type.FLOAT64, 0.1),
        ({"type": "string"}, "fox", Type.STRING, "fox"),
        ({"type": "bytes"}, "AP9mb3g=", Type.BYTES, b"\x00\xfffox"),
    ],
)
def test_json_envelope_primitives(schema: dict, payload: object, expected_type: Type, value: object) -> None:
    sv = JSON.to_connect(envelope(schema, payload))
    assert sv.schema == Schema(expected_type)
    assert sv.value == value
    assert type(sv.value) is type(value)


def test_json_envelope_struct_with_optional_default_and_name() -> None:
    schema = {
        "type": "struct",
        "name": "com.example.Fox",
        "fields": [
            {"type": "int32", "field": "id"},
            {"type": "string", "optional": True, "field": "color"},
            {"type": "string", "optional": False, "default": "brown", "field": "coat"},
            {"type": "array", "items": {"type": "double"}, "optional": True, "field": "xs"},
        ],
    }
    sv = JSON.to_connect(envelope(schema, {"id": 7, "xs": [1.5, 2], "ignored": 1}))
    expected_schema = Schema(
        Type.STRUCT,
        name="com.example.Fox",
        fields=(
            Field("id", INT32),
            Field("color", Schema(Type.STRING, optional=True)),
            Field("coat", STRING),
            Field("xs", Schema(Type.ARRAY, optional=True, value_schema=Schema(Type.FLOAT64))),
        ),
    )
    assert sv.schema == expected_schema
    assert isinstance(sv.value, Struct)
    assert sv.value.values == {"id": 7, "color": None, "coat": "brown", "xs": [1.5, 2.0]}


def test_json_envelope_maps_with_string_and_non_string_keys() -> None:
    sv = JSON.to_connect(envelope({"type": "map", "keys": {"type": "string"}, "values": {"type": "int32"}}, {"a": 1}))
    assert sv.schema == Schema(Type.MAP, key_schema=STRING, value_schema=INT32)
    assert sv.value == {"a": 1}
    sv = JSON.to_connect(
        envelope(
            {"type": "map", "keys": {"type": "int64"}, "values": {"type": "string"}},
            [[1, "a"], [2, "b"], [1, "c"]],
        )
    )
    assert sv.value == {1: "c", 2: "b"}  # later duplicates win, like HashMap.put
    sv = JSON.to_connect(
        envelope(
            {
                "type": "map",
                "keys": {"type": "array", "items": {"type": "int8"}},
                "values": {"type": "string"},
            },
            [[[1, 2], "a"]],
        )
    )
    assert sv.value == [([1, 2], "a")]  # unhashable keys stay as pairs


def test_json_null_payloads() -> None:
    assert JSON.to_connect(b'{"schema":null,"payload":null}') == SchemaAndValue(None, None)
    assert JSON.to_connect(envelope({"type": "string", "optional": True}, None)) == SchemaAndValue(OPT_STRING, None)
    assert JSON.to_connect(envelope({"type": "int32", "default": 3}, None)).value == 3
    with pytest.raises(ConverterError, match="null value for required int32 field"):
        JSON.to_connect(envelope({"type": "int32"}, None))


def test_json_schema_null_means_schemaless_payload() -> None:
    assert JSON.to_connect(b'{"schema":null,"payload":{"a":[1,2.5]}}') == SchemaAndValue(None, {"a": [1, 2.5]})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b"{",
            "JsonConverter: invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (b"", "JsonConverter: invalid JSON: Expecting value: line 1 column 1 (char 0)"),
        (b"\xff\xfe\x00", "JsonConverter: invalid JSON: "),
        (b'{"schema":{"type":"double"},"payload":NaN}', "JsonConverter: invalid JSON: NaN is not valid JSON"),
        (b'{"payload":5}', 'JsonConverter with schemas.enable requires "schema" and "payload" fields'),
        (b'{"schema":null,"payload":5,"x":1}', 'requires "schema" and "payload" fields and no others'),
        (b"[1]", 'requires "schema" and "payload"'),
        (envelope({"type": "int8"}, 300), "JsonConverter: payload: 300 is out of range for int8"),
        (envelope({"type": "int32"}, "abc"), "JsonConverter: payload: expected int32, got string"),
        (envelope({"type": "int32"}, 1.5), "JsonConverter: payload: expected int32, got number"),
        (envelope({"type": "int32"}, True), "JsonConverter: payload: expected int32, got boolean"),
        (envelope({"type": "float"}, 1e39), "JsonConverter: payload: 1e+39 is out of range for float32"),
        (envelope({"type": "boolean"}, 1), "JsonConverter: payload: expected boolean, got number"),
        (envelope({"type": "string"}, 5), "JsonConverter: payload: expected string, got number"),
        (envelope({"type": "bytes"}, "not base64!"), "JsonConverter: payload: invalid base64"),
        (envelope({"type": "bytes"}, "AP9mb3g"), "JsonConverter: payload: invalid base64"),
        (envelope({"type": "float32"}, 1.0), "JsonConverter: unknown schema type 'float32'"),
        (envelope({"optional": True}, 1), "JsonConverter: schema must contain a 'type' field"),
        (envelope({"type": "array"}, [1]), "JsonConverter: array schema did not specify 'items'"),
        (envelope({"type": "map", "keys": {"type": "string"}}, {}), "did not specify 'keys' and 'values'"),
        (envelope({"type": "struct", "fields": [{"type": "int32"}]}, {}), "has a field without a name"),
        (envelope({"type": "struct", "fields": {}}, {}), "'fields' is not an array"),
        (
            envelope({"type": "struct", "fields": [{"type": "int32", "field": "a"}]}, {"b": 1}),
            "JsonConverter: null value for required int32 field at a",
        ),
        (
            envelope({"type": "struct", "fields": [{"type": "int32", "field": "a"}]}, [1]),
            "JsonConverter: payload: expected object, got array",
        ),
        (
            envelope({"type": "array", "items": {"type": "int16"}}, [1, "x"]),
            "JsonConverter: [1]: expected int16, got string",
        ),
        (
            envelope({"type": "map", "keys": {"type": "int32"}, "values": {"type": "int32"}}, [[1]]),
            "JsonConverter: payload[0]: invalid map entry, expected [key, value]",
        ),
    ],
)
def test_json_malformed_input_is_a_one_line_converter_error(data: bytes, message: str) -> None:
    with pytest.raises(ConverterError) as e:
        JSON.to_connect(data)
    assert message in str(e.value)
    assert "\n" not in str(e.value)
    assert isinstance(e.value, DataError)


# ------------------------------------------------------------------------------ JSON schemaless

PLAIN = make_converter(JSON_CONVERTER, schemas_enable=False)


def test_json_schemaless_values() -> None:
    assert PLAIN.to_connect(b'{"a": 1, "b": [true, null, 2.5, "x"], "c": {}}') == SchemaAndValue(
        None, {"a": 1, "b": [True, None, 2.5, "x"], "c": {}}
    )
    assert PLAIN.to_connect(b'"text"') == SchemaAndValue(None, "text")
    assert PLAIN.to_connect(b"12") == SchemaAndValue(None, 12)
    assert PLAIN.to_connect(b"1e2") == SchemaAndValue(None, 100.0)
    assert PLAIN.to_connect(b"null") == SchemaAndValue(None, None)
    # an envelope is just an object when schemas are disabled
    assert PLAIN.to_connect(b'{"schema":null,"payload":1}').value == {"schema": None, "payload": 1}


def test_json_schemaless_rejects_numbers_java_cannot_hold() -> None:
    with pytest.raises(ConverterError, match="9223372036854775808 is out of range for int64"):
        PLAIN.to_connect(b"9223372036854775808")
    with pytest.raises(ConverterError, match="number is out of range for double"):
        PLAIN.to_connect(b"[1e999]")


# ------------------------------------------------------------------------------ JSON from Connect


def test_json_from_connect_writes_kafkas_envelope() -> None:
    schema = Schema(
        Type.STRUCT,
        fields=(
            Field("message", BYTES),
            Field("n", Schema(Type.INT64, optional=True)),
            Field("f", FLOAT32),
            Field("m", Schema(Type.MAP, key_schema=STRING, value_schema=STRING)),
        ),
        name="x.Y",
    )
    value = Struct(schema, {"message": b"fox", "n": None, "f": 1e10, "m": {"a": "b"}})
    out = JSON.from_connect(schema, value)
    assert out == (
        b'{"schema":{"type":"struct","fields":['
        b'{"type":"bytes","optional":false,"field":"message"},'
        b'{"type":"int64","optional":true,"field":"n"},'
        b'{"type":"float","optional":false,"field":"f"},'
        b'{"type":"map","keys":{"type":"string","optional":false},'
        b'"values":{"type":"string","optional":false},"optional":false,"field":"m"}'
        b'],"optional":false,"name":"x.Y"},'
        b'"payload":{"message":"Zm94","n":null,"f":1.0E10,"m":{"a":"b"}}}'
    )
    back = JSON.to_connect(out)
    assert back.schema == schema
    assert back.value == value


def test_json_from_connect_schemaless_and_nulls() -> None:
    assert PLAIN.from_connect(None, {"a": [1, 2.5, b"\x00"], "é": True}) == '{"a":[1,2.5,"AA=="],"é":true}'.encode()
    assert JSON.from_connect(None, "x") == b'{"schema":null,"payload":"x"}'
    assert JSON.from_connect(Schema(Type.STRING, optional=True), None) == (
        b'{"schema":{"type":"string","optional":true},"payload":null}'
    )
    with pytest.raises(ConverterError, match="null value for required string"):
        JSON.from_connect(STRING, None)
    with pytest.raises(ConverterError, match="expected int32, got str"):
        JSON.from_connect(INT32, "5")


def test_json_round_trips_map_with_int_keys_as_pairs() -> None:
    schema = Schema(Type.MAP, key_schema=INT32, value_schema=Schema(Type.FLOAT64))
    out = PLAIN.from_connect(schema, {1: 0.001, 2: 1e-4})
    assert out == b"[[1,0.001],[2,1.0E-4]]"
    assert JSON.to_connect(JSON.from_connect(schema, {1: 0.5})).value == {1: 0.5}


def test_schema_to_json_array() -> None:
    assert schema_to_json(Schema(Type.ARRAY, optional=True, value_schema=Schema(Type.INT8))) == (
        '{"type":"array","items":{"type":"int8","optional":false},"optional":true}'
    )


# ------------------------------------------------------------------------------ Java text

DOUBLE_CASES = [
    (1e7, "1.0E7"),
    (0.001, "0.001"),
    (1e-4, "1.0E-4"),
    (9.9e-4, "9.9E-4"),
    (100.0, "100.0"),
    (1.0, "1.0"),
    (0.5, "0.5"),
    (-1.5, "-1.5"),
    (1234567.0, "1234567.0"),
    (9999999.0, "9999999.0"),
    (12345678.0, "1.2345678E7"),
    (123.456, "123.456"),
    (0.1 + 0.2, "0.30000000000000004"),
    (1e23, "1.0E23"),
    (2e-3, "0.002"),
    (5e-324, "4.9E-324"),  # Double.MIN_VALUE: two digits beat the shortest '5E-324'
    (1.7976931348623157e308, "1.7976931348623157E308"),
    (2.2250738585072014e-308, "2.2250738585072014E-308"),
    (0.0, "0.0"),
    (-0.0, "-0.0"),
    (math.nan, "NaN"),
    (math.inf, "Infinity"),
    (-math.inf, "-Infinity"),
]


@pytest.mark.parametrize(("x", "text"), DOUBLE_CASES)
def test_java_double_to_string(x: float, text: str) -> None:
    assert java_double_to_string(x) == text


FLOAT_CASES = [
    (1e7, "1.0E7"),
    (1e10, "1.0E10"),
    (0.1, "0.1"),
    (3.3, "3.3"),
    (8.0, "8.0"),
    (1e-5, "1.0E-5"),
    (0.001, "0.001"),
    (16777216.0, "1.6777216E7"),
    (1.4e-45, "1.4E-45"),  # Float.MIN_VALUE
    (3.4028235e38, "3.4028235E38"),  # Float.MAX_VALUE
    (1.17549435e-38, "1.1754944E-38"),  # Float.MIN_NORMAL (JDK 19+ prints the shortest)
    (-2.5, "-2.5"),
    (1e39, "Infinity"),  # beyond float32
]


@pytest.mark.parametrize(("x", "text"), FLOAT_CASES)
def test_java_float_to_string(x: float, text: str) -> None:
    assert java_float_to_string(x) == text


def test_java_float_digits_are_shortest_and_round_trip() -> None:
    """Cross-check with numpy's float32 shortest repr (Dragon4), where the digit counts are >= 2."""
    np = pytest.importorskip("numpy")
    rng = random.Random(7)
    for _ in range(3000):
        bits = rng.getrandbits(32)
        x = struct.unpack(">f", bits.to_bytes(4, "big"))[0]
        if not math.isfinite(x) or x == 0.0:
            continue
        text = java_float_to_string(x)
        assert struct.unpack(">f", struct.pack(">f", float(text)))[0] == x, text
        mantissa = np.format_float_scientific(np.float32(x), unique=True).split("e")[0]
        digits = mantissa.replace("-", "").replace(".", "").rstrip("0")
        ours = text.replace("-", "").split("E")[0].replace(".", "").lstrip("0").rstrip("0")
        if len(digits) >= 2:
            assert ours == digits, (x, text, mantissa)


def test_java_text_of_connect_values() -> None:
    assert java_text(INT32, 5) == "5"
    assert java_text(None, -12) == "-12"
    assert java_text(BOOLEAN, False) == "false"
    assert java_text(FLOAT32, 0.1) == "0.1"
    assert java_text(Schema(Type.FLOAT64), 0.1) == "0.1"
    assert java_text(Schema(Type.FLOAT64), 3) == "3.0"
    assert java_text(None, 1e7) == "1.0E7"
    assert java_text(BYTES, b"d\xffg") == "d\ufffdg"
    assert java_text(Schema(Type.ARRAY, value_schema=STRING), ["a", "b"]) == '["a","b"]'
    assert java_text(None, {"a": 1.5}) == '{"a":1.5}'


def test_dump_json_escapes_like_jackson() -> None:
    assert dump_json(STRING, 'a"b\\c\n\x01é/') == '"a\\"b\\\\c\\n\\u0001é/"'
    assert dump_json(Schema(Type.FLOAT64), math.nan) == '"NaN"'
    with pytest.raises(ConverterError, match="has no Connect schema type"):
        dump_json(None, object())
