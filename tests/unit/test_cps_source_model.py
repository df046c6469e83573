"""Cloud Pub/Sub source data model, per-record reference.

Every literal here is an exact expected value. The Java hash values (and ``Math.abs(h) % 3`` = -2
for ``polygenelubricants``, ``Long.valueOf`` acceptance) were printed by OpenJDK 17 itself.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from pubsub_connect.model.connect import BYTES, STRING, DataError, Type
from pubsub_connect.model.converters import BOOLEAN_CONVERTER, NUMBER_CONVERTER_TYPES
from pubsub_connect.model.cps_source import arrow_hashes
from pubsub_connect.model.cps_source.arrow_hashes import java_bytes_hash_array
from pubsub_connect.model.cps_source.reference import (
    check_value_converter,
    java_bytes_hash,
    java_string_hash,
    message_to_record,
    parse_java_long,
    partition_for_hash,
    reference_outbox,
    select_partition,
    serialize_bytes_value,
    serialize_key,
    uses_round_robin,
    value_struct,
)
from pubsub_connect.model.cps_source.settings import (
    CpsSourceSettings,
    DuplicateFieldError,
    InvalidTimestampError,
    KafkaOutRecord,
    KeyConverterError,
    OutboxRow,
    PubsubReceived,
    StructConverterError,
    UnsupportedConverterError,
)

BYTE_ARRAY = "org.apache.kafka.connect.converters.ByteArrayConverter"
STRING_CONV = "org.apache.kafka.connect.storage.StringConverter"
JSON = "org.apache.kafka.connect.json.JsonConverter"

ISSUE_STRUCT_JSON = (
    b'{"schema":{"type":"struct","fields":['
    b'{"type":"bytes","optional":false,"field":"message"},'
    b'{"type":"string","optional":false,"field":"attribute1"},'
    b'{"type":"string","optional":false,"field":"attribute2"}'
    b'],"optional":false},'
    b'"payload":{"message":"dGhl","attribute1":"a","attribute2":"b"}}'
)


#: b"the" as a BYTES value through the default JsonConverter (with schemas) / without schemas.
THE_JSON = b'{"schema":{"type":"bytes","optional":false},"payload":"dGhl"}'
THE_JSON_PLAIN = b'"dGhl"'


def msg(
    attributes: dict[str, str] | None = None,
    data: bytes = b"the",
    ordering_key: str = "",
    publish_time_ms: int = 1_700_000_000_123,
    message_id: str = "m",
) -> PubsubReceived:
    return PubsubReceived(message_id, data, attributes or {}, ordering_key, publish_time_ms)


# --------------------------------------------------------------------------------------------
# Java hashes and P(h)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("Aa", 2112),
        ("BB", 2112),  # the classic collision: proves the 31*h + unit recurrence
        ("hello", 99162322),
        ("jumped", -1148867251),
        ("my-key", -1061197122),
        ("polygenelubricants", -2147483648),
        ("\u00e9", 233),
        # U+1F600 is the surrogate pair D83D DE00: 0xD83D*31 + 0xDE00, not the code point 128512.
        ("\U0001f600", 0xD83D * 31 + 0xDE00),
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_java_string_hash_counts_surrogates_as_two_units() -> None:
    assert java_string_hash("\U0001f600") == 1772899
    assert java_string_hash("\U0001f600") != 128512
    # A lone surrogate (legal in Java and Python strings) hashes as itself.
    assert java_string_hash("\ud83d") == 0xD83D


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 1),
        (b"\xff", 30),  # 31*1 + (-1)
        (b"the", 144592),  # 31**3 + 116*31**2 + 104*31 + 101
        (bytes([255, 0, 128]), 28702),  # signed bytes -1, 0, -128
        (b"\x80" * 10, 143418049),
    ],
)
def test_java_bytes_hash(data: bytes, expected: int) -> None:
    assert java_bytes_hash(data) == expected


def test_worked_hash_examples() -> None:
    assert partition_for_hash(java_string_hash("jumped"), 3) == 1
    assert partition_for_hash(java_string_hash("my-key"), 3) == 0


def test_partition_for_hash_is_java_abs_mod() -> None:
    assert partition_for_hash(-5, 3) == 2
    assert partition_for_hash(5, 3) == 2
    assert partition_for_hash(2147483647, 10) == 7
    assert partition_for_hash(-2147483647, 10) == 7
    assert partition_for_hash(123, 1) == 0


def test_min_int_hash_diverges_from_java_to_a_valid_partition() -> None:
    # Java: Math.abs(-2147483648) % 3 == -2 (invalid). Here: (h & 0x7fffffff) % 3 == 0.
    assert java_string_hash("polygenelubricants") == -2147483648
    assert partition_for_hash(-2147483648, 3) == 0
    assert partition_for_hash(-2147483648, 7) == 0


def test_partition_for_hash_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="32-bit"):
        partition_for_hash(1 << 31, 3)
    with pytest.raises(ValueError, match="at least 1"):
        partition_for_hash(1, 0)


def test_vectorised_bytes_hash_matches_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(9)
    values: list[bytes | None] = [bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 60))) for _ in range(300)]
    values[7] = None
    values[8] = b""
    values.append(bytes(range(256)) * 3)
    expected = [java_bytes_hash(v or b"") for v in values]
    for arr_type in (pa.binary(), pa.large_binary()):
        arr = pa.array(values, arr_type)
        assert java_bytes_hash_array(arr).tolist() == expected
        assert java_bytes_hash_array(arr.slice(5, 50)).tolist() == expected[5:55]
        assert java_bytes_hash_array(pa.chunked_array([arr.slice(0, 3), arr.slice(3)])).tolist() == expected
    assert java_bytes_hash_array(pa.array([], pa.binary())).tolist() == []
    # Chunk boundaries and segments longer than a chunk (Horner across blocks).
    monkeypatch.setattr(arrow_hashes, "_CHUNK_UNITS", 16)
    assert java_bytes_hash_array(pa.array(values, pa.binary())).tolist() == expected


# --------------------------------------------------------------------------------------------
# Timestamp
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1234567890", 1234567890),
        ("+12", 12),
        ("-12", -12),
        ("007", 7),
        ("9223372036854775807", 9223372036854775807),
        ("-9223372036854775808", -9223372036854775808),
        ("9223372036854775808", None),
        ("", None),
        ("abc", None),
        ("1.5", None),
        ("1e3", None),
        (" 1", None),
        ("1 ", None),
        ("1\n", None),
        ("0x10", None),
        ("\u0661\u0662", 12),  # Arabic-Indic digits: Java's Character.digit reads any Unicode digit
        ("\uff11\uff12", 12),  # fullwidth
        ("-\U0001d7cf\U0001d7d0", -12),  # mathematical bold, outside the BMP
        ("\u0661a", None),
        ("\u00b2", None),  # superscript two is not a decimal digit (category No)
        (None, None),
    ],
)
def test_parse_java_long(text: str | None, expected: int | None) -> None:
    assert parse_java_long(text) == expected


def test_timestamp_attribute_and_fallbacks() -> None:
    settings = CpsSourceSettings(kafka_timestamp_attribute="over")
    # Issue example: value stays the data bytes (timestamp attribute is not "custom").
    record = message_to_record(msg({"over": "1234567890"}), settings)
    assert record == KafkaOutRecord(None, THE_JSON, [], 0, 1234567890)
    for attrs in ({}, {"over": "not-a-number"}, {"over": "12.5"}, {"over": "99999999999999999999"}):
        assert message_to_record(msg(attrs), settings).timestamp_ms == 1_700_000_000_123
    assert message_to_record(msg({"over": "0"}), settings).timestamp_ms == 0
    assert message_to_record(msg({"over": "253402300799999"}), settings).timestamp_ms == 253402300799999


@pytest.mark.parametrize("value", ["-2", "253402300800000", "-9223372036854775808"])
def test_timestamp_out_of_kafka_range_is_a_data_error(value: str) -> None:
    settings = CpsSourceSettings(kafka_timestamp_attribute="over")
    with pytest.raises(InvalidTimestampError) as info:
        message_to_record(msg({"over": value}), settings)
    assert isinstance(info.value, DataError)
    assert str(info.value) == (
        f"kafka.timestamp.attribute 'over' = {int(value)} is outside the Kafka timestamp range 0..253402300799999 ms"
    )


# --------------------------------------------------------------------------------------------
# Key, value, headers: the worked examples of the mapping
# --------------------------------------------------------------------------------------------


def test_no_attributes_round_robin_0_1_2_0() -> None:
    settings = CpsSourceSettings(partition_count=3)
    messages = [(msg(message_id=f"m{i}", publish_time_ms=i), 0) for i in range(4)]
    rows = reference_outbox(messages, settings)
    assert [r.partition for r in rows] == [0, 1, 2, 0]
    assert all(r.key is None and r.value == THE_JSON and r.headers == [] for r in rows)
    assert [message_to_record(m, settings, i).partition for i, (m, _) in enumerate(messages)] == [0, 1, 2, 0]


def test_key_attribute() -> None:
    settings = CpsSourceSettings(kafka_key_attribute="fox")
    record = message_to_record(msg({"fox": "jumped"}), settings)
    assert record == KafkaOutRecord(b"jumped", THE_JSON, [], 0, 1_700_000_000_123)
    assert message_to_record(msg({}), settings).key is None


def test_struct_value_worked_example() -> None:
    settings = CpsSourceSettings(kafka_key_attribute="fox")
    message = msg({"fox": "jumped", "attribute2": "b", "attribute1": "a"})
    struct = value_struct(message, settings)
    assert [f.name for f in struct.schema.fields] == ["message", "attribute1", "attribute2"]
    assert [f.schema for f in struct.schema.fields] == [BYTES, STRING, STRING]
    assert struct.schema.type is Type.STRUCT
    assert struct.values == {"message": b"the", "attribute1": "a", "attribute2": "b"}
    record = message_to_record(message, settings)
    assert record == KafkaOutRecord(b"jumped", ISSUE_STRUCT_JSON, [], 0, 1_700_000_000_123)


def test_struct_value_without_schemas() -> None:
    settings = CpsSourceSettings(kafka_key_attribute="fox", value_schemas_enable=False)
    record = message_to_record(msg({"fox": "jumped", "attribute1": "a", "attribute2": "b"}), settings)
    assert record.value == b'{"message":"dGhl","attribute1":"a","attribute2":"b"}'


def test_headers_worked_example() -> None:
    settings = CpsSourceSettings(kafka_key_attribute="fox", kafka_record_headers=True)
    record = message_to_record(msg({"fox": "jumped", "attribute2": "b", "attribute1": "a"}), settings)
    assert record == KafkaOutRecord(
        b"jumped", THE_JSON, [("attribute1", b"a"), ("attribute2", b"b")], 0, 1_700_000_000_123
    )


def test_timestamp_attribute_is_kept_when_other_custom_attributes_exist() -> None:
    attrs = {"over": "1234567890", "attr": "x"}
    struct_settings = CpsSourceSettings(kafka_timestamp_attribute="over", value_schemas_enable=False)
    record = message_to_record(msg(attrs), struct_settings)
    assert record.value == b'{"message":"dGhl","attr":"x","over":"1234567890"}'
    assert record.timestamp_ms == 1234567890
    header_settings = CpsSourceSettings(kafka_timestamp_attribute="over", kafka_record_headers=True)
    assert message_to_record(msg(attrs), header_settings).headers == [("attr", b"x"), ("over", b"1234567890")]


def test_fields_and_headers_sorted_by_name() -> None:
    attrs = {"\u00e9": "3", "b": "2", "Z": "0", "a": "1"}
    settings = CpsSourceSettings(kafka_record_headers=True)
    names = [k for k, _ in message_to_record(msg(attrs), settings).headers]
    assert names == ["Z", "a", "b", "\u00e9"]
    struct = value_struct(msg(attrs), CpsSourceSettings())
    assert [f.name for f in struct.schema.fields] == ["message", "Z", "a", "b", "\u00e9"]


def test_header_values_are_utf8() -> None:
    settings = CpsSourceSettings(kafka_record_headers=True)
    record = message_to_record(msg({"k": "\u00fc\U0001f600"}), settings)
    assert record.headers == [("k", b"\xc3\xbc\xf0\x9f\x98\x80")]


def test_ordering_key_made_attribute() -> None:
    struct_settings = CpsSourceSettings(make_ordering_key_attribute=True, value_schemas_enable=False)
    record = message_to_record(msg({"a": "1"}, ordering_key="ok-1"), struct_settings)
    assert record.value == b'{"message":"dGhl","a":"1","orderingKey":"ok-1"}'
    # An ordering key alone makes the message "custom".
    assert message_to_record(msg({}, ordering_key="ok-1"), struct_settings).value == (
        b'{"message":"dGhl","orderingKey":"ok-1"}'
    )
    # Empty ordering key: nothing to add, plain bytes.
    assert message_to_record(msg({}, ordering_key=""), struct_settings).value == THE_JSON_PLAIN
    header_settings = CpsSourceSettings(make_ordering_key_attribute=True, kafka_record_headers=True)
    assert message_to_record(msg({"z": "1"}, ordering_key="ok-1"), header_settings).headers == [
        ("z", b"1"),
        ("orderingKey", b"ok-1"),
    ]
    # Without the option the ordering key is not an attribute.
    assert message_to_record(msg({}, ordering_key="ok-1"), CpsSourceSettings()).value == THE_JSON


def test_ordering_key_as_kafka_key() -> None:
    settings = CpsSourceSettings(kafka_key_attribute="orderingKey")
    assert message_to_record(msg({}, ordering_key="my-key"), settings).key == b"my-key"
    # Pub/Sub reports "no ordering key" as "": the original then keys the record with "".
    assert message_to_record(msg({}, ordering_key=""), settings).key == b""
    # An attribute literally named orderingKey is the "key attribute": neither custom nor a field.
    record = message_to_record(msg({"orderingKey": "attr"}, ordering_key="real"), settings)
    assert record.key == b"real"
    assert record.value == THE_JSON


def test_duplicate_field_names_are_data_errors_in_struct_mode() -> None:
    with pytest.raises(DuplicateFieldError) as info:
        message_to_record(msg({"message": "x"}), CpsSourceSettings())
    assert str(info.value) == (
        "attribute 'message' collides with the value struct field 'message'; "
        "rename the attribute or set kafka.record.headers=true"
    )
    made = CpsSourceSettings(make_ordering_key_attribute=True)
    with pytest.raises(DuplicateFieldError, match="'orderingKey'"):
        message_to_record(msg({"orderingKey": "x"}, ordering_key="ok"), made)
    # No clash when the ordering key is empty (no orderingKey field is added) ...
    assert value_struct(msg({"orderingKey": "x"}), made).values["orderingKey"] == "x"
    # ... when the attribute is the key attribute ...
    record = message_to_record(msg({"message": "k"}), CpsSourceSettings(kafka_key_attribute="message"))
    assert (record.key, record.value) == (b"k", THE_JSON)
    # ... and in headers mode (headers may repeat).
    headers = CpsSourceSettings(kafka_record_headers=True, make_ordering_key_attribute=True)
    assert message_to_record(msg({"orderingKey": "x"}, ordering_key="ok"), headers).headers == [
        ("orderingKey", b"x"),
        ("orderingKey", b"ok"),
    ]


# --------------------------------------------------------------------------------------------
# Partition schemes
# --------------------------------------------------------------------------------------------


def test_scheme_round_robin() -> None:
    settings = CpsSourceSettings(partition_scheme="round_robin", partition_count=3)
    assert [select_partition(msg(), None, settings, c) for c in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert uses_round_robin(msg(), settings)


def test_scheme_hash_key() -> None:
    settings = CpsSourceSettings(kafka_key_attribute="fox", partition_scheme="hash_key", partition_count=3)
    assert message_to_record(msg({"fox": "jumped"}), settings, 2).partition == 1
    assert message_to_record(msg({"fox": "polygenelubricants"}), settings).partition == 0
    assert message_to_record(msg({"fox": "hello"}), settings).partition == 99162322 % 3
    assert message_to_record(msg({}), settings, 2).partition == 0  # no key -> 0
    assert not uses_round_robin(msg(), settings)


def test_scheme_hash_value() -> None:
    settings = CpsSourceSettings(partition_scheme="hash_value", partition_count=5)
    assert message_to_record(msg(data=b"the"), settings).partition == 144592 % 5 == 2
    assert message_to_record(msg(data=b"\x80" * 10), settings).partition == 143418049 % 5 == 4
    # Hashes the data even when the value is a struct (deterministic, unlike the original).
    assert message_to_record(msg({"a": "1"}, data=b"the"), settings).partition == 2


def test_scheme_ordering_key() -> None:
    settings = CpsSourceSettings(partition_scheme="ordering_key", partition_count=3)
    assert message_to_record(msg(ordering_key="my-key"), settings, 1).partition == 0
    assert message_to_record(msg(ordering_key="jumped"), settings, 0).partition == 1
    assert message_to_record(msg(ordering_key="polygenelubricants"), settings).partition == 0
    # Empty ordering key -> round robin.
    assert [message_to_record(msg(), settings, c).partition for c in range(4)] == [0, 1, 2, 0]
    assert uses_round_robin(msg(), settings)
    assert not uses_round_robin(msg(ordering_key="k"), settings)


def test_scheme_kafka_partitioner() -> None:
    settings = CpsSourceSettings(kafka_key_attribute="fox", partition_scheme="kafka_partitioner", partition_count=3)
    assert message_to_record(msg({"fox": "jumped"}), settings, 1).partition is None
    assert not uses_round_robin(msg(), settings)


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match=r"kafka\.partition\.scheme='random'"):
        CpsSourceSettings(partition_scheme="random")
    with pytest.raises(ValueError, match="must be at least 1"):
        CpsSourceSettings(partition_count=0)
    with pytest.raises(ValueError, match="not an integer"):
        CpsSourceSettings(partition_count=True)


# --------------------------------------------------------------------------------------------
# Converter check
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("converter", [BYTE_ARRAY, STRING_CONV])
def test_structless_converters_write_messages_without_attributes(converter: str) -> None:
    """As with Google's source: a message without custom attributes is its data, written as is; one
    with attributes would be a STRUCT, which the original's ByteArrayConverter fails on and its
    StringConverter writes as ``Struct{message=[B@…}`` (the data lost): a dead letter here."""
    settings = CpsSourceSettings(kafka_key_attribute="k", value_converter=converter)
    check_value_converter(settings)
    assert message_to_record(msg({"k": "key"}), settings).value == b"the"
    with pytest.raises(StructConverterError) as info:
        message_to_record(msg({"k": "key", "a": "1"}), settings)
    assert str(info.value) == (f"value.converter={converter.rsplit('.', 1)[-1]} cannot write a message with "
                               "attributes (a STRUCT value with kafka.record.headers=false); use JsonConverter "
                               "or set kafka.record.headers=true")
    [row] = reference_outbox([(msg({"a": "1"}), 0)], settings)
    assert (row.error_class, row.value, row.headers) == ("StructConverterError", b"the", [])
    # Headers carry the attributes instead: the value is the data bytes.
    record = message_to_record(msg({"a": "1"}), CpsSourceSettings(value_converter=converter, kafka_record_headers=True))
    assert record.value == b"the"


@pytest.mark.parametrize("converter", [*NUMBER_CONVERTER_TYPES, BOOLEAN_CONVERTER])
@pytest.mark.parametrize("headers", [False, True])
def test_number_and_boolean_value_converters_rejected_at_startup(converter: str, headers: bool) -> None:
    """They can write neither the data (BYTES) nor a STRUCT: the original's task fails on its first record."""
    settings = CpsSourceSettings(value_converter=converter, kafka_record_headers=headers)
    with pytest.raises(UnsupportedConverterError, match="cannot write the values of this connector"):
        check_value_converter(settings)


def test_unknown_converter_rejected() -> None:
    with pytest.raises(UnsupportedConverterError, match=r"value\.converter"):
        check_value_converter(CpsSourceSettings(value_converter="com.example.NoSuchConverter"))
    with pytest.raises(UnsupportedConverterError, match=r"key\.converter"):
        check_value_converter(CpsSourceSettings(key_converter="com.example.NoSuchConverter"))


# --------------------------------------------------------------------------------------------
# Key and BYTES values through the converters (what Connect's worker writes for the original)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("converter", "schemas", "key", "expected"),
    [
        (STRING_CONV, True, "ключ", "ключ".encode()),
        (STRING_CONV, True, None, None),
        (STRING_CONV, True, "", b""),
        # ByteArrayConverter: the original's task fails on any STRING key; UTF-8 here (divergence).
        (BYTE_ARRAY, True, "k\u00fc", b"k\xc3\xbc"),
        (BYTE_ARRAY, True, None, None),
        (JSON, True, 'k"\n\u00fc', b'{"schema":{"type":"string","optional":true},"payload":"k\\"\\n\xc3\xbc"}'),
        (JSON, True, None, b'{"schema":{"type":"string","optional":true},"payload":null}'),
        (JSON, False, "k\x01", b'"k\\u0001"'),
        (JSON, False, None, b"null"),
        (JSON, False, "", b'""'),
        ("org.apache.kafka.connect.converters.LongConverter", True, None, None),
        (BOOLEAN_CONVERTER, True, None, None),
    ],
)
def test_key_through_key_converter(converter: str, schemas: bool, key: str | None, expected: bytes | None) -> None:
    settings = CpsSourceSettings(
        kafka_key_attribute="k", key_converter=converter, key_schemas_enable=schemas, value_converter=BYTE_ARRAY
    )
    assert serialize_key(key, settings) == expected
    attrs = {} if key is None else {"k": key}
    assert message_to_record(msg(attrs), settings).key == expected


@pytest.mark.parametrize("converter", [*NUMBER_CONVERTER_TYPES, BOOLEAN_CONVERTER])
def test_string_key_through_number_or_boolean_converter_is_a_data_error(converter: str) -> None:
    settings = CpsSourceSettings(kafka_key_attribute="k", key_converter=converter, value_converter=BYTE_ARRAY)
    with pytest.raises(KeyConverterError) as info:
        message_to_record(msg({"k": "1"}), settings)
    short = converter.rsplit(".", 1)[-1]
    assert str(info.value) == (
        f"key.converter={short} cannot write the message's key, a string; "
        "use StringConverter or JsonConverter, or unset kafka.key.attribute"
    )
    rows = reference_outbox([(msg({"k": "1"}), 0)], settings)
    assert (rows[0].key, rows[0].value, rows[0].error_class) == (b"1", b"the", "KeyConverterError")


@pytest.mark.parametrize(
    ("converter", "schemas", "data", "expected"),
    [
        (BYTE_ARRAY, True, b"\x00\xff", b"\x00\xff"),
        # StringConverter: the original writes byte[].toString() ("[B@…"); the data here (divergence).
        (STRING_CONV, True, b"\x00\xff", b"\x00\xff"),
        (JSON, True, b"\x00\xff", b'{"schema":{"type":"bytes","optional":false},"payload":"AP8="}'),
        (JSON, True, b"", b'{"schema":{"type":"bytes","optional":false},"payload":""}'),
        (JSON, False, b"\x00\xff", b'"AP8="'),
        (JSON, False, b"", b'""'),
    ],
)
def test_bytes_value_through_value_converter(converter: str, schemas: bool, data: bytes, expected: bytes) -> None:
    settings = CpsSourceSettings(value_converter=converter, value_schemas_enable=schemas, kafka_record_headers=True)
    assert serialize_bytes_value(data, settings) == expected
    assert message_to_record(msg({}, data=data), settings).value == expected
    # Headers mode: the value is the BYTES data too, headers are the attributes' UTF-8.
    record = message_to_record(msg({"a": "\u00fc"}, data=data), settings)
    assert (record.value, record.headers) == (expected, [("a", b"\xc3\xbc")])


def test_json_converter_accepted() -> None:
    check_value_converter(CpsSourceSettings(value_converter=JSON))
    check_value_converter(CpsSourceSettings(value_converter=JSON, value_schemas_enable=False))


# --------------------------------------------------------------------------------------------
# Reference batch: dedupe, order, counter, dead letters
# --------------------------------------------------------------------------------------------


def test_reference_outbox_dedupes_orders_and_skips_errors_in_round_robin() -> None:
    settings = CpsSourceSettings(kafka_timestamp_attribute="ts", partition_count=3)
    a = msg(message_id="a", publish_time_ms=10)
    b_bad = msg({"ts": "-2"}, message_id="b", publish_time_ms=11)
    c = msg({"x": "1"}, message_id="c", publish_time_ms=12, data=b"c")
    a_late = PubsubReceived("a", b"later copy", {}, "", 10)
    rows = reference_outbox([(c, 3), (a_late, 9), (b_bad, 1), (a, 2)], settings, start_counter=4)
    assert [r.message_id for r in rows] == ["a", "b", "c"]
    assert rows[0] == OutboxRow(None, THE_JSON, [], 1, 10, "a")  # earliest ingest wins; (4+0)%3
    assert rows[1] == OutboxRow(
        None,
        b"the",
        [],
        None,
        None,
        "b",
        "InvalidTimestampError",
        "kafka.timestamp.attribute 'ts' = -2 is outside the Kafka timestamp range 0..253402300799999 ms",
    )
    assert rows[2].partition == 2  # the error row did not take a slot: (4+1)%3
    assert rows[2].value == (
        b'{"schema":{"type":"struct","fields":[{"type":"bytes","optional":false,"field":"message"},'
        b'{"type":"string","optional":false,"field":"x"}],"optional":false},'
        b'"payload":{"message":"Yw==","x":"1"}}'
    )


def test_reference_outbox_null_ingest_time_loses() -> None:
    first = msg(message_id="a", data=b"kept")
    second = PubsubReceived("a", b"dropped", {}, "", first.publish_time_ms)
    assert (
        reference_outbox([(second, None), (first, 7)], CpsSourceSettings(value_converter=BYTE_ARRAY))[0].value
        == b"kept"
    )


def test_json_writes_characters_outside_the_bmp_as_escaped_surrogates() -> None:
    """As Kafka's JsonConverter (Jackson's UTF-8 generator) does: upper-case hex, per UTF-16 half."""
    settings = CpsSourceSettings(kafka_key_attribute="k", key_converter=JSON, key_schemas_enable=False)
    record = message_to_record(msg({"k": "\U0001f600", "a": "\U0001f389\u00fc"}), settings)
    assert record.key == b'"\\uD83D\\uDE00"'
    assert record.value.endswith(b'"payload":{"message":"dGhl","a":"\\uD83C\\uDF89\xc3\xbc"}}')


def test_timestamp_minus_one_is_kafkas_no_timestamp() -> None:
    """Connect turns -1 (RecordBatch.NO_TIMESTAMP) into a null timestamp: the producer's clock."""
    settings = CpsSourceSettings(kafka_timestamp_attribute="ts", value_converter=BYTE_ARRAY)
    assert message_to_record(msg({"ts": "-1"}), settings).timestamp_ms is None
    assert message_to_record(msg({"ts": "-\u0661"}), settings).timestamp_ms is None
    rows = reference_outbox([(msg({"ts": "-1"}), 0)], settings)
    assert (rows[0].timestamp_ms, rows[0].error_class) == (None, None)
