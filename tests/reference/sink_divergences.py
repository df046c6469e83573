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


def _java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as an unsigned 32-bit number."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h


def java_hash_map_order(keys: list[str]) -> list[str]:
    """The order in which a ``java.util.HashMap`` filled with ``keys`` (in this order) iterates them.

    Why: Connect's JsonConverter reads a schemaless JSON object into a ``HashMap``, so Google's
    ``toString`` lists the keys by hash bucket, not as the record has them. A bucket is the
    spread hash (``h ^ h >>> 16``) masked by the table size (16, doubled while the map is more
    than three quarters full); within a bucket, keys keep their insertion order (a resize keeps
    it too). Bins of eight or more colliding keys (tree bins) are not modelled.
    """
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = _java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)


def _java_scalar_text(value: Any) -> str | None:
    """A JSON null, boolean or number as both Java's ``toString`` and Jackson write it (integers as
    ``Long``, other numbers as ``Double``); None for strings and collections."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return java_double_to_string(value)
    return None


def java_collection_text(value: Any) -> str:
    """Java's ``toString`` of what Connect's JsonConverter makes of schemaless JSON: an object is
    a ``HashMap`` (``{k=v, ...}`` in :func:`java_hash_map_order`), an array an ``ArrayList``
    (``[a, b]``), numbers ``Long``/``Double``, strings unquoted."""
    if (scalar := _java_scalar_text(value)) is not None:
        return scalar
    if isinstance(value, list):
        return "[" + ", ".join(java_collection_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={java_collection_text(value[k])}" for k in java_hash_map_order(list(value))) + "}"
    return str(value)


#: How Kafka's JsonConverter (Jackson) escapes characters in a JSON string; other control
#: characters are ``\u00XX`` with upper-case hex, everything else (non-ASCII too) is written as is.
_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _compact_json_string(text: str) -> str:
    return '"' + "".join(_JSON_ESCAPES.get(c) or (f"\\u{ord(c):04X}" if c < " " else c) for c in text) + '"'


def compact_json(value: Any) -> str:
    """The compact JSON ours publishes for a schemaless JSON value (the README's divergence
    table): no spaces (``,`` and ``:`` only), keys in the record's order (a repeated key at its
    first place, with its last value), strings with their characters as they are (control
    characters escaped as Jackson does), integers in decimal, other numbers in Java's
    ``Double.toString`` text (``1.0E10``, ``0.0`` for ``-0.0``).

    Written here from the JSON value, not with the product's serializer: the rule must hold ours
    to the promised bytes, not to whatever ours happens to write."""
    if (scalar := _java_scalar_text(value)) is not None:
        return scalar
    if isinstance(value, str):
        return _compact_json_string(value)
    if isinstance(value, list):
        return "[" + ",".join(compact_json(v) for v in value) + "]"
    return "{" + ",".join(f"{_compact_json_string(k)}:{compact_json(v)}" for k, v in value.items()) + "}"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _as_connect(value: Any) -> Any:
    """A parsed JSON value as Connect holds it: Connect reads JSON numbers through BigDecimal, so
    ``-0.0`` is ``0.0``."""
    if isinstance(value, float):
        return 0.0 if value == 0 else value
    if isinstance(value, list):
        return [_as_connect(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_connect(v) for k, v in value.items()}
    return value


def schemaless_json_container(scenario: Scenario, record: Rec, side: str) -> dict[str, Any] | list[Any] | None:
    """The record's ``side`` (``key`` or ``value``) as the scenario's schemaless JsonConverter
    reads it, when that is an object or an array; None for any other converter, a null, a scalar
    or bytes that are not JSON (no collection text to diverge on)."""
    settings = scenario.settings
    if settings.get(f"{side}.converter") != JSON or settings.get(f"{side}.converter.schemas.enable") != "false":
        return None
    raw = record.key if side == "key" else record.value
    if raw is None:
        return None
    try:
        parsed = json.loads(raw, parse_constant=_no_constant)
    except ValueError:
        return None
    return _as_connect(parsed) if isinstance(parsed, (dict, list)) else None


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


#: Pub/Sub's limit on attributes per message: ours leaves out the headers that would pass it.
MAX_ATTRIBUTES = 100
#: Google's sink stops taking headers once it took more than this many.
GOOGLE_HEADER_LIMIT = 100
#: Attribute names and values over these sizes (UTF-8 bytes) are left out by both sinks.
MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTE_VALUE_BYTES = 256, 1024


def _has_key(scenario: Scenario, record: Rec) -> bool:
    """Whether the key converter gives the record a non-null key (and so a ``key`` attribute)."""
    if record.key is None:
        return False
    if scenario.settings.get("key.converter") != JSON:
        return True
    try:
        document = json.loads(record.key, parse_constant=_no_constant)
    except ValueError:
        return False
    if scenario.settings.get("key.converter.schemas.enable") == "false":
        return document is not None
    return isinstance(document, dict) and document.get("payload") is not None


def _own_attribute_names(scenario: Scenario, record: Rec) -> set[str] | None:
    """The attributes both sinks set before any header: ``key`` and the ``metadata.publish``
    ones (``kafka.timestamp`` unless the record has none). None when a struct or map value adds
    attributes of its own, which this rule does not recompute (it then explains nothing)."""
    settings = scenario.settings
    if (settings.get("value.converter") == JSON and settings.get("value.converter.schemas.enable") != "false"
            and (_envelope(record).get("schema") or {}).get("type") in ("struct", "map")):
        return None
    names = {"key"} if _has_key(scenario, record) else set()
    if settings.get("metadata.publish") == "true":
        names |= {"kafka.topic", "kafka.partition", "kafka.offset"}
        # A produced record without an explicit timestamp gets the producer's clock.
        if record.timestamp_ms is None or record.timestamp_ms >= 0:
            names.add("kafka.timestamp")
    return names


def _fits(name: str, text: str, limit_key: int, limit_value: int) -> bool:
    return len(name.encode()) <= limit_key and len(text.encode()) <= limit_value


def headers_as_ours(own: set[str], headers: list[tuple[str, bytes | None]]) -> dict[str, str]:
    """The header attributes ours publishes besides the ``own`` attributes: in record order, each
    header's UTF-8 text (a later one of a name replacing the earlier), leaving out a header
    without a value, one over Pub/Sub's name or value size, and one with a new name once the
    message has 100 attributes (a name already there is still replaced)."""
    kept: dict[str, str] = {}
    for name, raw in headers:
        if raw is None:
            continue
        text = raw.decode("utf-8", errors="replace")
        if not _fits(name, text, MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTE_VALUE_BYTES):
            continue
        if name not in own and name not in kept and len(own) + len(kept) >= MAX_ATTRIBUTES:
            continue
        kept[name] = text
    return kept


def headers_as_google(headers: list[tuple[str, bytes | None]]) -> dict[str, str] | None:
    """The header attributes Google's sink publishes: the headers whose name is under 257 bytes
    and text under 1025, in record order, up to and including the 101st of those, each put over
    the attributes (a later one of a name replacing the earlier). None when one of them has no
    value or the text ``null`` (Google's task stops on it). The text is as written: a header
    Connect reprints is another divergence, so it makes this rule's expectation differ."""
    kept: dict[str, str] = {}
    taken = 0
    for name, raw in headers:
        if raw is None or raw == b"null":
            return None
        text = raw.decode("utf-8", errors="replace")
        if _fits(name, text, MAX_ATTRIBUTE_KEY_BYTES, MAX_ATTRIBUTE_VALUE_BYTES):
            kept[name] = text
            taken += 1
        if taken > GOOGLE_HEADER_LIMIT:
            break
    return kept


def attributes_capped_at_100(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any,
                             google_count: int = 0, ours_count: int = 0) -> bool:
    """More than 100 attributes: Google publishes every header up to the 101st (Pub/Sub refuses
    the message, the emulator takes it); ours leaves out the headers past 100 attributes.

    ``google``/``ours`` are the attributes that differ (a missing one as None), the counts each
    side's whole number of attributes. Both sides are recomputed from the record's headers: the
    differing attributes must be exactly those of :func:`headers_as_google` against
    :func:`headers_as_ours`, ours must have exactly 100 attributes and Google's exactly its own
    rule's number, over 100."""
    if field != "attributes" or scenario.settings.get("headers.publish") != "true" or not record.headers:
        return False
    own = _own_attribute_names(scenario, record)
    theirs = headers_as_google(record.headers)
    if own is None or theirs is None:
        return False
    mine = headers_as_ours(own, record.headers)
    expected_google: dict[str, str | None] = {}
    expected_ours: dict[str, str | None] = {}
    for name in set(theirs) | set(mine):
        if theirs.get(name) == mine.get(name):
            continue
        if name in own:  # one side's header replaced an attribute whose value the record does not give
            return False
        expected_google[name], expected_ours[name] = theirs.get(name), mine.get(name)
    return (bool(expected_google) and google == expected_google and ours == expected_ours
            and ours_count == len(own | set(mine)) == MAX_ATTRIBUTES
            and google_count == len(own | set(theirs)) > MAX_ATTRIBUTES)


def java_collection_text_for_json(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any) -> bool:
    """Schemaless JSON objects and arrays: Google publishes Java's ``{a=1}`` / ``[a, b]`` text (no
    JSON parser reads it back), ours compact JSON of the same value.

    Both texts are recomputed from the record (its value for ``data``, its key for the ``key``
    attribute and, with ``orderingKeySource=key``, the ordering key): ours must be exactly
    :func:`compact_json` of that value and Google's exactly :func:`java_collection_text` of it."""
    side = "value" if field == "data" else "key"
    value = schemaless_json_container(scenario, record, side)
    if value is None:
        return False
    theirs, mine = java_collection_text(value), compact_json(value)
    if field == "data":
        return google == theirs.encode() and ours == mine.encode()
    if field == "attributes":
        return google == {"key": theirs} and ours == {"key": mine}
    return (field == "ordering_key" and scenario.settings.get("orderingKeySource") == "key"
            and google == theirs and ours == mine)


def int64_overflow_wrapped(scenario: Scenario, record: Rec, field: str, google: Any, ours: Any) -> bool:
    """A schemaless JSON integer beyond int64: Google publishes it wrapped around (Jackson's
    ``longValue``), a different number; ours dead-letters the record (see ``EXPECTED_DEAD_LETTERS``)."""
    settings = scenario.settings
    if (field != "messages" or ours != [] or len(google) != 1 or record.value is None
            or settings.get("value.converter") != JSON or settings.get("value.converter.schemas.enable") != "false"):
        return False
    try:
        number = json.loads(record.value, parse_constant=_no_constant)
    except ValueError:
        return False
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
