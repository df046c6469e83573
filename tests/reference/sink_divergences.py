"""The deliberate differences between Google's sink and ours, each a rule that recognises exactly
that difference (and nothing looser): the README's divergence table, in executable form.

A rule gets the scenario, the Kafka record, the field that differs and both sides' values, and
says whether the difference is that divergence. The differential test fails on any difference no
rule explains.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from typing import Any

from integration.kafka_helpers import Rec
from pubsub_connect.model.javatext import java_double_to_string
from reference.sink_corpus import BYTES, DOUBLE, FLOAT, INTEGER, JSON, LONG, SHORT, Scenario

#: Header text that Connect's SimpleHeaderConverter parses, and what Google's sink then publishes
#: (Java's ``toString`` of the parsed value; the date in the Connect JVM's time zone, UTC here).
HEADER_REPRINTS = {"1.50": "1.5", "1e3": "1000", '{"a": 1}': "{a=1}", "2024-02-29": "Thu Feb 29 00:00:00 UTC 2024",
                   "007": "7"}

_NUMBER_FORMATS = {SHORT: ">h", INTEGER: ">i", LONG: ">q", FLOAT: ">f", DOUBLE: ">d"}
_JSON_NUMBER_FORMATS = {"int16": ">h", "int32": ">i", "int64": ">q", "float": ">f", "double": ">d"}


def java_collection_text(value: Any) -> str:
    """Java's ``toString`` of what Connect's JsonConverter makes of schemaless JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double_to_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(java_collection_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={java_collection_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _key_text(record: Rec) -> str:
    return (record.key or b"").decode("utf-8", errors="replace")


def bytes_key_identity_hash(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any) -> bool:
    """ByteArrayConverter key: Google's ``key`` attribute and ordering key are Java's
    ``byte[].toString()``, an identity hash; ours are the key's UTF-8 text."""
    if scenario.settings.get("key.converter") != BYTES or record.key is None:
        return False
    if field == "attributes":
        return google == {"key": "[B@<identity>"} and ours == {"key": _key_text(record)}
    return field == "ordering_key" and google == "[B@<identity>" and ours == _key_text(record)


def number_body_lost(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any) -> bool:
    """INT16/INT32/INT64/FLOAT32/FLOAT64 values: Google's sink publishes empty data (it copies
    each number's ``ByteBuffer`` without flipping it); ours the big-endian bytes."""
    if field != "data" or google != b"" or record.value is None:
        return False
    converter = scenario.settings.get("value.converter")
    if converter in _NUMBER_FORMATS:
        return ours == record.value
    if converter == JSON:
        schema, payload = _body(scenario, record)
        if schema.get("type") in _JSON_NUMBER_FORMATS and payload is not None:
            # Connect reads JSON numbers through BigDecimal: no negative zero.
            number = 0 if payload == 0 else payload
            return ours == struct.pack(_JSON_NUMBER_FORMATS[schema["type"]], number)
    return False


def _envelope(record: Rec) -> dict[str, Any]:
    """The record's value as a JSON envelope, or ``{}`` (schemaless JSON, or not JSON)."""
    try:
        envelope = json.loads(record.value or b"null")
    except ValueError:
        return {}
    return envelope if isinstance(envelope, dict) and "schema" in envelope else {}


def _body(scenario: Scenario, record: Rec) -> tuple[dict[str, Any], Any]:
    """The schema and payload that make a JSON envelope's message body: the envelope's own, or
    for a struct the ``messageBodyName`` field's."""
    envelope = _envelope(record)
    schema, payload = envelope.get("schema") or {}, envelope.get("payload")
    if schema.get("type") == "struct" and isinstance(payload, dict):
        body_name = scenario.settings.get("messageBodyName", "cps_message_body")
        for field_schema in schema.get("fields", []):
            if field_schema["field"] == body_name:
                return field_schema, payload.get(body_name)
        return {}, None
    return schema, payload


def bytes_field_identity_hash(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any) -> bool:
    """A struct's BYTES field published as an attribute: Google's value is Java's
    ``byte[].toString()``, ours the bytes' UTF-8 text."""
    if field != "attributes" or scenario.settings.get("value.converter") != JSON or not google:
        return False
    envelope = _envelope(record)
    fields = {f["field"]: f for f in (envelope.get("schema") or {}).get("fields", [])}
    for name, value in google.items():
        if value != "[B@<identity>" or fields.get(name, {}).get("type") != "bytes":
            return False
        raw = base64.b64decode(envelope["payload"][name])
        if ours.get(name) != raw.decode("utf-8", errors="replace"):
            return False
    return True


def header_text_reprinted(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any) -> bool:
    """Header values that SimpleHeaderConverter parses: Google publishes the parsed value's Java
    text, ours the text as written."""
    if field != "attributes" or not record.headers:
        return False
    written = {name: value.decode(errors="replace") for name, value in record.headers if value is not None}
    return bool(google) and all(ours.get(k) == written.get(k) and google[k] == HEADER_REPRINTS.get(written.get(k))
                                for k in google)


def attributes_capped_at_100(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any,
                             google_count: int = 0, ours_count: int = 0) -> bool:
    """More than 100 attributes: Google publishes every header up to the 101st (Pub/Sub refuses
    the message, the emulator takes it); ours leaves out the headers past 100 attributes."""
    names = {name for name, _ in record.headers or []}
    return (field == "attributes" and ours_count == 100 and google_count > 100
            and all(v is None for v in ours.values()) and set(google) <= names)


def java_collection_text_for_json(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any) -> bool:
    """Schemaless JSON objects and arrays: Google publishes Java's ``{a=1}`` / ``[a, b]`` text (no
    JSON parser reads it back), ours compact JSON of the same value."""
    def same(theirs: Any, mine: Any) -> bool:
        try:
            parsed = json.loads(mine)
        except (TypeError, ValueError):
            return False
        return isinstance(parsed, (dict, list)) and theirs == java_collection_text(parsed)

    if field == "data":
        return same(google.decode(), ours.decode())
    if field == "attributes":
        return bool(google) and all(same(google[k], ours.get(k)) for k in google)
    return field == "ordering_key" and same(google, ours)


def int64_overflow_wrapped(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any) -> bool:
    """A schemaless JSON integer beyond int64: Google publishes it wrapped around (Jackson's
    ``longValue``), a different number; ours dead-letters the record (see ``EXPECTED_DEAD_LETTERS``)."""
    if field != "messages" or ours != [] or len(google) != 1 or record.value is None:
        return False
    number = json.loads(record.value)
    if not isinstance(number, int) or -2**63 <= number < 2**63:
        return False
    wrapped = (number + 2**63) % 2**64 - 2**63
    return google[0][0] == str(wrapped).encode()


RULES: dict[str, Callable[..., bool]] = {
    "bytes key: identity hash": bytes_key_identity_hash,
    "bytes struct field: identity hash": bytes_field_identity_hash,
    "number value: empty data": number_body_lost,
    "header text: reprinted": header_text_reprinted,
    "more than 100 attributes": attributes_capped_at_100,
    "JSON objects/arrays: Java text": java_collection_text_for_json,
    "JSON integer beyond int64: wrapped": int64_overflow_wrapped,
}

#: Records ours dead-letters in the scenarios (``errors.tolerance=all``), by scenario and offset.
EXPECTED_DEAD_LETTERS: dict[str, list[tuple[int, str, str]]] = {
    "json-schemaless": [(19, "ConverterError", "value: JsonConverter: value: 12345678901234567890 is out of range "
                                                "for int64")],
    "json-schemaless-value": [(19, "ConverterError", "value: JsonConverter: value: 12345678901234567890 is out of "
                                                      "range for int64")],
}
