"""Schemaless JSON values through the column expressions: every record must come out exactly as the
per-record reference maps it, and the records Spark's JSON text may not match must be the ones
handed to the reference."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from pubsub_connect.model.compact_json import same_as_reference
from pubsub_connect.model.converters import BYTE_ARRAY_CONVERTER, JSON_CONVERTER, STRING_CONVERTER
from pubsub_connect.model.cps_sink.batch import classify, to_outbox, uses_column_path, uses_compact_json_path
from pubsub_connect.model.cps_sink.settings import CpsSinkSettings, KafkaRecord
from unit.test_cps_sink_batch import batch_rows, bronze, reference_rows

SETTINGS = CpsSinkSettings(
    key_converter=STRING_CONVERTER,
    value_converter=JSON_CONVERTER,
    value_schemas_enable=False,
    metadata_publish=True,
    headers_publish=True,
    ordering_key_source="key",
)

#: (value, taken by the column expressions): the cases where Jackson and the reference may part,
#: and their neighbours that must stay in the column expressions.
ROUTES: list[tuple[bytes | None, bool]] = [
    (b'{"a":"x","n":7,"b":true,"z":null,"l":[1,2,{"c":[]}]}', True),
    (b' {"a" : 1 ,\n\t"b":[1, 2]}\r\n', True),  # whitespace around tokens: compacted
    ('{"a":"é","b":"\x7f"}'.encode(), True),
    (b'{"a":"\\u00e9\\/\\u001f\\n\\"\\\\"}', True),  # escapes Jackson rewrites as the reference does
    (b'{"a":"}]"}', True),  # brackets inside a string
    (b'{"a":1.5,"b":1.50,"c":1e7,"d":100.0,"e":0.001,"f":1.0E-4,"g":1e-400,"h":-0}', True),
    (b"[1e22,123456789012345,1234567890123456,-123456789012345678]", True),
    (b"7", True),
    (b" 7 \n", True),  # a number with whitespace around it
    (b"[1] \t", True),  # whitespace after the closing bracket
    (b"1.5", True),
    (b"true", True),
    (None, True),
    (b'{"a":"\xff"}', False),  # invalid UTF-8: the reference refuses it
    ('{"a":"😀"}'.encode(), False),  # outside the BMP: Jackson escapes it
    (b'{"a":"\\ud83d\\ude00"}', False),
    (b'{"a":"\\ud800"}', False),
    (b'{"a":-0.0}', False),  # Connect reads 0.0
    (b'{"a":-1e-400}', False),
    (b'{"a":9.999999999999999E22}', False),  # 16 digits: JDK 17 and 19+ print 1e23 differently
    (b'{"a":0.30000000000000004}', False),
    (b'{"a":4.9E-324}', False),  # subnormal
    (b'{"a":1e400}', False),  # overflows: the reference refuses it
    (b'{"a":9223372036854775807,"b":-9223372036854775808}', True),  # int64's ends
    (b'{"a":9223372036854775808}', False),  # outside int64: the reference refuses it
    (b'{"a":1,"a":2}', False),  # duplicate keys: the reference keeps the last
    (b'{"a":{"b":1,"b":2}}', False),
    (b'{"a":1}x', False),  # text after the value: the reference refuses it
    (b'{"a":1},{"b":2}', False),
    (b'{"a":"\\u007D"}}', False),
    (b"[1,2]]", False),
    (b"1 1", False),
    (b"-0", False),
    (b'"text"', False),  # a top-level string: its body is the text without quotes
    (b"null", False),
    (b"", False),
    (b"{", False),
    (b'{"a":NaN}', False),
    (b'\xef\xbb\xbf{"a":1}', False),  # a byte-order mark
]


def records_of(values: list[bytes | None]) -> list[KafkaRecord]:
    return [
        KafkaRecord(b"dog", value, "brown", i % 3, 1000 + i, 50000, [("h", b"v")]) for i, value in enumerate(values)
    ]


def assert_equals_reference(spark: Any, records: list[KafkaRecord], settings: CpsSinkSettings) -> None:
    expected = reference_rows(records, settings)
    outbox = to_outbox(bronze(spark, records), settings, with_skipped_headers=True)
    assert outbox.count() == len(records)  # one row per record: each goes down one of the two paths
    actual = batch_rows(outbox)
    assert sorted(actual) == sorted(expected)
    for offset, row in expected.items():
        assert actual[offset] == row, f"offset {offset}: value {records[offset - 1000].value!r}"


def taken_by_columns(spark: Any, records: list[KafkaRecord]) -> list[bool]:
    """Per record, in offset order: does the convert stage's classification keep it in columns."""
    rows = classify(bronze(spark, records), SETTINGS).orderBy("offset").collect()
    return [row["_json_exact"] for row in rows]


def test_settings_take_the_compact_json_path() -> None:
    assert uses_compact_json_path(SETTINGS) and not uses_column_path(SETTINGS)
    assert not uses_compact_json_path(CpsSinkSettings(key_converter=STRING_CONVERTER, value_converter=JSON_CONVERTER))
    assert not uses_compact_json_path(
        CpsSinkSettings(key_converter=JSON_CONVERTER, key_schemas_enable=False, value_converter=JSON_CONVERTER,
                        value_schemas_enable=False))


def test_routes(spark: Any) -> None:
    records = records_of([value for value, _ in ROUTES])
    routes = dict(zip([value for value, _ in ROUTES], taken_by_columns(spark, records), strict=True))
    assert routes == {value: in_columns for value, in_columns in ROUTES}


def test_routed_records_equal_the_reference(spark: Any) -> None:
    assert_equals_reference(spark, records_of([value for value, _ in ROUTES]), SETTINGS)


def test_the_exactness_check_trims_with_no_deprecated_signature(spark: Any) -> None:
    """Spark 4.2 prints a deprecation warning on the console for a plan that calls ``trim``,
    ``ltrim`` or ``rtrim`` with the characters to trim; the check trims with ``btrim`` instead."""
    from pyspark.sql import functions as F

    check = str(same_as_reference(F.col("text"), F.col("compact")))
    assert check.count("btrim(text, ") == 2
    assert not re.search(r"(?<![\w])[lr]?trim\(", check)


@pytest.mark.parametrize(
    "settings",
    [
        SETTINGS,
        CpsSinkSettings(key_converter=BYTE_ARRAY_CONVERTER, value_converter=JSON_CONVERTER, value_schemas_enable=False),
    ],
    ids=["string-key-metadata-headers-order-key", "bytes-key"],
)
def test_generated_documents_equal_the_reference(spark: Any, settings: CpsSinkSettings) -> None:
    rng = random.Random(20261127)
    documents = [_document(rng, depth=0) for _ in range(1500)]
    values = [_text(rng, doc) for doc in documents]
    records = records_of(values)
    assert_equals_reference(spark, records, settings)
    # The column expressions take the plain documents (compact or not, ASCII or not): the test
    # would pass with everything sent to the reference otherwise.
    routes = taken_by_columns(spark, records)
    plain = [i for i, doc in enumerate(documents) if _plain(doc)]
    assert len(plain) > 500
    assert [i for i in plain if not routes[i]] == []


_STRINGS = ["", "a", "fox", "é", "日本", "tab\there", 'quote"s', "back\\slash", "ctl\x01\x1f", "}]{[", "😀", "\u2028"]
_NUMBERS: list[Any] = [0, 7, -3, 2**53 + 1, -(2**62), 10**18 - 1, 1.5, -2.25, 1e7, 1e-5, 0.1, 123.456, 1e22, 1e23,
                       0.30000000000000004, 5e-324, -0.0, 0.0, 1e300]


def _document(rng: random.Random, depth: int) -> Any:
    kind = rng.random()
    if depth >= 3 or kind < 0.4:
        return rng.choice([rng.choice(_STRINGS), rng.choice(_NUMBERS), True, False, None])
    if kind < 0.8:
        return {rng.choice(["a", "b", "name", "日", "k\"q", ""]) + str(i): _document(rng, depth + 1)
                for i in range(rng.randint(0, 4))}
    return [_document(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def _plain(doc: Any) -> bool:
    """Documents the column expressions must take: no characters outside the BMP, no numbers that
    JDKs print differently, no -0.0, at the top an object or an array."""
    def ok(value: Any) -> bool:
        if isinstance(value, dict):
            return all(ok(k) and ok(v) for k, v in value.items())
        if isinstance(value, list):
            return all(ok(v) for v in value)
        if isinstance(value, str):
            return "😀" not in value
        if isinstance(value, float):
            return value in (1.5, -2.25, 1e7, 1e-5, 0.1, 123.456, 1e22, 0.0) and str(value) != "-0.0"
        return True

    return isinstance(doc, (dict, list)) and ok(doc)


def _text(rng: random.Random, doc: Any) -> bytes:
    """The document as a producer may have written it: compact, spaced, or with ASCII escapes."""
    style = rng.choice(["compact", "spaced", "ascii"])
    if style == "compact":
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    elif style == "spaced":
        text = " " + json.dumps(doc, indent=rng.choice([None, 2]), ensure_ascii=False) + "\n"
    else:
        text = json.dumps(doc, separators=(",", ":"))
    return text.encode("utf-8", "surrogatepass")
