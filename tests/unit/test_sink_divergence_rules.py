"""The sink's divergence rules (``tests/reference/sink_divergences.py``), each held to exactly its
divergence: the right pair of outputs is accepted, and each near miss is refused (a value that
reads the same in Java's text, JSON that is not compact, a header dropped too early, one kept too
many, the wrong side's text).

Why unit tests: the differential test only ever shows a rule the outputs both connectors produce
today, which the rule accepts; a rule that accepts more stays invisible there until ours regresses
in exactly the way the rule lets through. The differences are built by the differential test's
own ``_compare``, so the rules get what they get there (differing attributes only, a missing one
as None, and each side's attribute count).
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from integration.kafka_helpers import Rec
from integration.pubsub_helpers import Received
from reference.sink_corpus import FAILING, SCENARIOS, Scenario, envelope, req, struct_schema
from reference.sink_divergences import (
    RULES,
    attributes_capped_at_100,
    bytes_field_identity_hash,
    bytes_key_identity_hash,
    header_text_reprinted,
    int64_overflow_wrapped,
    java_collection_text,
    java_collection_text_for_json,
    number_body_lost,
)
from reference.test_sink_conformance import _compare

SCENARIO = {scenario.name: scenario for scenario in SCENARIOS}
#: The attributes ``metadata.publish`` adds (values as a run would have them), offset 7.
METADATA = {"kafka.topic": "t", "kafka.partition": "0", "kafka.offset": "7", "kafka.timestamp": "1700000000000"}


def _differences(scenario: Scenario, google: Received, ours: Received) -> list[tuple]:
    """What the differential test hands the rules for one record's message on each side."""
    return _compare(scenario, [google], [ours])


def _explained(rule: Any, scenario: Scenario, record: Rec, difference: tuple) -> bool:
    """``rule`` on one difference, called the way the differential test calls it."""
    _ident, field, google, ours, google_count, ours_count = difference
    extra = {"google_count": google_count, "ours_count": ours_count} if rule is attributes_capped_at_100 else {}
    return rule(scenario, record, field, google, ours, **extra)


# ----------------------------------------------------------------------------------------------
# Schemaless JSON objects and arrays: Java's text against compact JSON
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("keys", "printed"), [
    (["b", "a"], "{a=1, b=1}"),
    (["cps_message_body", "attr"], "{cps_message_body=1, attr=1}"),
    (["zeta", "alpha", "mid", "Ω", "😀"], "{zeta=1, alpha=1, 😀=1, mid=1, Ω=1}"),
    ([f"k{i:02d}" for i in range(1, 15)],
     "{k11=1, k10=1, k02=1, k13=1, k01=1, k12=1, k04=1, k03=1, k14=1, k06=1, k05=1, k08=1, k07=1, k09=1}"),
])
def test_java_collection_text_lists_keys_as_a_java_hash_map_does(keys: list[str], printed: str) -> None:
    """Connect reads a JSON object into a ``HashMap``: ``printed`` is what JDK 17 prints for a
    ``HashMap`` filled with ``keys`` in order (14 keys: the table grew to 32 buckets)."""
    assert java_collection_text(dict.fromkeys(keys, 1)) == printed


def test_java_collection_text_of_a_list() -> None:
    """JDK 17's ``ArrayList.toString`` of the same elements."""
    assert java_collection_text([True, None, 1.5, 1e10, 0.0, -9223372036854775808]) == (
        "[true, null, 1.5, 1.0E10, 0.0, -9223372036854775808]")


#: (record value, Google's data, ours) as each sink publishes the value.
JSON_VALUES = [
    ('{"a": 1, "b": "x"}', "{a=1, b=x}", '{"a":1,"b":"x"}'),
    # Java lists the keys by hash bucket, ours as the record has them.
    ('{"b": 1, "a": 2}', "{a=2, b=1}", '{"b":1,"a":2}'),
    ('{"a":1,"b":"x","c":[true,null,1.5,1e10,-0.0]}', "{a=1, b=x, c=[true, null, 1.5, 1.0E10, 0.0]}",
     '{"a":1,"b":"x","c":[true,null,1.5,1.0E10,0.0]}'),
    ('[{"k":"v"},"\\u00e9\\n\\u001f",-9223372036854775808]', "[{k=v}, é\n\x1f, -9223372036854775808]",
     '[{"k":"v"},"é\\n\\u001F",-9223372036854775808]'),
    ('{"a":1,"a":2}', "{a=2}", '{"a":2}'),
    ('{"y": null}', "{y=null}", '{"y":null}'),
    ('{"nested": {"x": [1, {"y": null}]}}', "{nested={x=[1, {y=null}]}}", '{"nested":{"x":[1,{"y":null}]}}'),
    ('{"e":"😀"}', "{e=😀}", '{"e":"😀"}'),
    ('["a", "b"]', "[a, b]", '["a","b"]'),
]


def _json_value_difference(value: str, google: str, ours: str) -> tuple[Scenario, Rec, tuple]:
    scenario = SCENARIO["json-schemaless-value"]
    record = Rec(value.encode(), key=b"k")
    attributes = {"key": "k", **METADATA}
    (difference,) = _differences(scenario, Received(google.encode(), attributes), Received(ours.encode(), attributes))
    return scenario, record, difference


@pytest.mark.parametrize(("value", "google", "ours"), JSON_VALUES)
def test_java_text_rule_accepts_compact_json_against_java_text(value: str, google: str, ours: str) -> None:
    scenario, record, difference = _json_value_difference(value, google, ours)
    assert difference == ("7", "data", google.encode(), ours.encode(), 0, 0)
    assert _explained(java_collection_text_for_json, scenario, record, difference)


@pytest.mark.parametrize(("value", "google", "ours"), [
    ('{"a": 1}', "{a=1}", '{"a":"1"}'),  # a string for the number: the same Java text
    ('{"y": null}', "{y=null}", '{"y":"null"}'),  # a string for null: the same Java text
    ("[null]", "[null]", '["null"]'),
    ('{"a": 1, "b": "x"}', "{a=1, b=x}", '{"a": 1, "b": "x"}'),  # not compact
    ('{"a": 1, "b": "x"}', "{a=1, b=x}", '{"b":"x","a":1}'),  # not the record's key order
    ("[1.5, 1e10]", "[1.5, 1.0E10]", "[1.5,1e10]"),  # not Java's number text
    ("[-0.0]", "[0.0]", "[-0.0]"),  # Connect has no negative zero
    ('["\\u001f"]', "[\x1f]", '["\\u001f"]'),  # Jackson's escapes are upper-case
    ('{"a": 1, "a": 2}', "{a=2}", '{"a":1,"a":2}'),  # a repeated key keeps its last value
    ('{"a": 1}', "{a=1}", '{"a":2}'),  # another value
])
def test_java_text_rule_refuses_ours_that_is_not_the_records_compact_json(value: str, google: str,
                                                                           ours: str) -> None:
    scenario, record, difference = _json_value_difference(value, google, ours)
    assert not _explained(java_collection_text_for_json, scenario, record, difference)


@pytest.mark.parametrize(("value", "google", "ours"), [
    ('{"b": 1, "a": 2}', "{b=1, a=2}", '{"b":1,"a":2}'),  # the record's order: not a HashMap's
    ('{"a": 1, "b": "x"}', "{a=1, b=y}", '{"a":1,"b":"x"}'),
    ('{"a": 1}', '{"a": 1}', '{"a":1}'),  # Google's is Java's text, not JSON
    ('["a", "b"]', '["a", "b"]', '["a","b"]'),
])
def test_java_text_rule_refuses_google_that_is_not_the_records_java_text(value: str, google: str,
                                                                         ours: str) -> None:
    scenario, record, difference = _json_value_difference(value, google, ours)
    assert not _explained(java_collection_text_for_json, scenario, record, difference)


def test_java_text_rule_refuses_a_converter_that_does_not_parse_json() -> None:
    """A StringConverter publishes the text as it is (Google's too): no collection to print."""
    record = Rec(b'{"a": 1}', key=b"k")
    for name in ("string", "json-schemas"):
        assert not java_collection_text_for_json(SCENARIO[name], record, "data", b"{a=1}", b'{"a":1}')


def _json_key_differences(ours_key: str) -> tuple[Scenario, Rec, list[tuple]]:
    """A schemaless JSON key ``{"k": 1}`` (``key`` attribute and ordering key), Google's right."""
    scenario = SCENARIO["json-schemaless"]
    record = Rec(b'"v"', key=b'{"k": 1}')
    google = Received(b"v", {"key": "{k=1}", **METADATA}, "{k=1}")
    ours = Received(b"v", {"key": ours_key, **METADATA}, ours_key)
    return scenario, record, _differences(scenario, google, ours)


def test_java_text_rule_accepts_a_json_key_as_attribute_and_ordering_key() -> None:
    scenario, record, differences = _json_key_differences('{"k":1}')
    assert differences == [("7", "attributes", {"key": "{k=1}"}, {"key": '{"k":1}'}, 5, 5),
                           ("7", "ordering_key", "{k=1}", '{"k":1}', 0, 0)]
    assert all(_explained(java_collection_text_for_json, scenario, record, d) for d in differences)


def test_java_text_rule_refuses_a_json_key_that_is_not_the_records() -> None:
    scenario, record, differences = _json_key_differences('{"k":"1"}')
    assert [d[1] for d in differences] == ["attributes", "ordering_key"]
    assert not any(_explained(java_collection_text_for_json, scenario, record, d) for d in differences)


def test_java_text_rule_refuses_an_ordering_key_not_taken_from_the_key() -> None:
    scenario = SCENARIO["json-schemaless-value"]  # no orderingKeySource
    settings = {**scenario.settings, "key.converter": scenario.settings["value.converter"],
                "key.converter.schemas.enable": "false"}
    keyed = Scenario("json-key-no-ordering", settings, [])
    assert not java_collection_text_for_json(keyed, Rec(b'"v"', key=b'{"k": 1}'), "ordering_key", "{k=1}", '{"k":1}')


# ----------------------------------------------------------------------------------------------
# More than 100 attributes: ours leaves out the headers past the 100th attribute
# ----------------------------------------------------------------------------------------------

#: The corpus' record with 120 headers, under ``key`` and the four metadata attributes.
MANY = [(f"h{i:03d}", str(i).encode()) for i in range(120)]


def _headers(count: int, skip: tuple[int, ...] = ()) -> dict[str, str]:
    return {f"h{i:03d}": str(i) for i in range(count) if i not in skip}


def _capped_difference(google: dict[str, str], ours: dict[str, str],
                       headers: list[tuple[str, bytes | None]] = MANY) -> tuple[Scenario, Rec, tuple]:
    """The attribute difference of the record with ``headers`` (and key ``k``) in the
    ``headers.publish`` + ``metadata.publish`` scenario, for those header attributes on each side."""
    scenario = SCENARIO["bytes-all-attributes"]
    record = Rec(b"too many headers", key=b"k", headers=headers)
    own = {"key": "k", **METADATA}
    (difference,) = _differences(scenario, Received(record.value, {**own, **google}, "k"),
                                 Received(record.value, {**own, **ours}, "k"))
    return scenario, record, difference


def test_cap_rule_accepts_ours_with_the_headers_past_the_100th_attribute_left_out() -> None:
    """5 attributes of the record's own, so ours keeps 95 headers; Google takes 101."""
    scenario, record, difference = _capped_difference(_headers(101), _headers(95))
    assert difference == ("7", "attributes", {f"h{i:03d}": str(i) for i in range(95, 101)},
                          dict.fromkeys((f"h{i:03d}" for i in range(95, 101)), None), 106, 100)
    assert _explained(attributes_capped_at_100, scenario, record, difference)


@pytest.mark.parametrize(("google", "ours"), [
    (_headers(101), _headers(96, skip=(50,))),  # a header before the 100th attribute dropped
    (_headers(101), _headers(96)),  # one header too many kept (101 attributes)
    (_headers(101), _headers(94)),  # one header too few kept (99 attributes)
    (_headers(101), {}),  # every header dropped
    (_headers(101), {**_headers(95), "h010": "ten"}),  # a kept header with another value
    (_headers(102), _headers(95)),  # Google's takes one header past its 101st
    (_headers(100), _headers(95)),  # Google's stops one header early
    ({**_headers(101), "h010": "ten"}, _headers(95)),  # Google's with another value
])
def test_cap_rule_refuses_any_other_choice_of_headers(google: dict[str, str], ours: dict[str, str]) -> None:
    scenario, record, difference = _capped_difference(google, ours)
    assert difference[1] == "attributes"
    assert not _explained(attributes_capped_at_100, scenario, record, difference)


def test_cap_rule_refuses_counts_that_are_not_the_records() -> None:
    """Counts off by one elsewhere (an attribute both sides share added or lost)."""
    scenario, record, (_ident, field, google, ours, google_count, ours_count) = _capped_difference(
        _headers(101), _headers(95))
    assert attributes_capped_at_100(scenario, record, field, google, ours, google_count, ours_count)
    assert not attributes_capped_at_100(scenario, record, field, google, ours, google_count + 1, ours_count)
    assert not attributes_capped_at_100(scenario, record, field, google, ours, google_count, ours_count - 1)


def test_cap_rule_follows_a_repeated_header_past_googles_last() -> None:
    """A header repeating a name after Google's 101st: Google never reads it, ours replaces the
    attribute of that name (no new attribute, so the cap does not stop it)."""
    headers = [*MANY, ("h000", b"late")]
    scenario, record, difference = _capped_difference(_headers(101), {**_headers(95), "h000": "late"}, headers)
    assert difference[2]["h000"] == "0" and difference[3]["h000"] == "late"
    assert _explained(attributes_capped_at_100, scenario, record, difference)
    scenario, record, difference = _capped_difference(_headers(101), _headers(95), headers)
    assert not _explained(attributes_capped_at_100, scenario, record, difference)


def test_cap_rule_counts_the_key_attribute_without_metadata() -> None:
    """101 headers and a key, no metadata: ours keeps 99 headers, Google all 101."""
    settings, record = FAILING["101-attributes"]
    scenario = Scenario("101-attributes", settings, [record])
    google = {"h099": "x", "h100": "x"}
    ours = {"h099": None, "h100": None}
    assert attributes_capped_at_100(scenario, record, "attributes", google, ours, google_count=102, ours_count=100)
    assert not attributes_capped_at_100(scenario, record, "attributes", google, ours, google_count=102,
                                        ours_count=101)
    assert not attributes_capped_at_100(scenario, record, "attributes", {"h100": "x"}, {"h100": None},
                                        google_count=101, ours_count=100)


def test_cap_rule_needs_headers_published() -> None:
    scenario, record, difference = _capped_difference(_headers(101), _headers(95))
    assert _explained(attributes_capped_at_100, scenario, record, difference)
    assert not _explained(attributes_capped_at_100, SCENARIO["bytes-plain"], record, difference)


# ----------------------------------------------------------------------------------------------
# The other rules
# ----------------------------------------------------------------------------------------------


def test_bytes_key_rule() -> None:
    scenario, record = SCENARIO["string-bytes-key"], Rec(b"v", key=b"k1")
    assert bytes_key_identity_hash(scenario, record, "attributes", {"key": "[B@<identity>"}, {"key": "k1"})
    assert bytes_key_identity_hash(scenario, record, "ordering_key", "[B@<identity>", "k1")
    assert not bytes_key_identity_hash(scenario, record, "attributes", {"key": "[B@<identity>"}, {"key": "k2"})
    assert not bytes_key_identity_hash(scenario, record, "ordering_key", "[B@<identity>", "")
    assert not bytes_key_identity_hash(SCENARIO["string"], record, "ordering_key", "[B@<identity>", "k1")


def test_number_body_rule() -> None:
    scenario, record = SCENARIO["numbers-short-integer"], Rec(struct.pack(">i", 258), key=b"\x00\x01")
    assert number_body_lost(scenario, record, "data", b"", b"\x00\x00\x01\x02")
    assert not number_body_lost(scenario, record, "data", b"", b"\x00\x00\x01\x03")
    assert not number_body_lost(scenario, record, "data", b"\x00", b"\x00\x00\x01\x02")
    scenario, record = SCENARIO["json-schemas"], Rec(envelope("float", -0.0))
    assert number_body_lost(scenario, record, "data", b"", struct.pack(">f", 0.0))
    assert not number_body_lost(scenario, record, "data", b"", struct.pack(">f", -0.0))


def test_bytes_struct_field_rule() -> None:
    schema = struct_schema(("cps_message_body", req("bytes")), ("n", req("int32")))
    record = Rec(envelope(schema, {"cps_message_body": base64.b64encode(b"\x00raw\xff").decode(), "n": 9}))
    scenario = SCENARIO["json-schemas-body-name"]  # the bytes field is an attribute there
    google = {"cps_message_body": "[B@<identity>"}
    assert bytes_field_identity_hash(scenario, record, "attributes", google, {"cps_message_body": "\x00raw\ufffd"})
    assert not bytes_field_identity_hash(scenario, record, "attributes", google, {"cps_message_body": "AHJhd/8="})


def test_header_reprint_rule() -> None:
    scenario, record = SCENARIO["bytes-all-attributes"], Rec(b"v", key=b"k", headers=[("decimal", b"1.50")])
    assert header_text_reprinted(scenario, record, "attributes", {"decimal": "1.5"}, {"decimal": "1.50"})
    assert not header_text_reprinted(scenario, record, "attributes", {"decimal": "1.5"}, {"decimal": "1.5 "})
    assert not header_text_reprinted(scenario, record, "attributes", {"decimal": "1.500"}, {"decimal": "1.50"})


def test_int64_overflow_rule() -> None:
    record = Rec(b"12345678901234567890", key=b"k")
    wrapped = [(b"-6101065172474983726", (("kafka.offset", "19"),), "")]
    scenario = SCENARIO["json-schemaless-value"]
    assert int64_overflow_wrapped(scenario, record, "messages", wrapped, [])
    assert not int64_overflow_wrapped(scenario, record, "messages", [(b"12345678901234567890", (), "")], [])
    assert not int64_overflow_wrapped(scenario, record, "messages", wrapped, wrapped)
    # A StringConverter does not parse the number: nothing wraps it.
    assert not int64_overflow_wrapped(SCENARIO["string"], record, "messages", wrapped, [])
    assert not int64_overflow_wrapped(scenario, Rec(b"not json"), "messages", wrapped, [])


def test_every_rule_has_a_test_here() -> None:
    tested = {bytes_key_identity_hash, bytes_field_identity_hash, number_body_lost, header_text_reprinted,
              attributes_capped_at_100, java_collection_text_for_json, int64_overflow_wrapped}
    assert set(RULES.values()) == tested
