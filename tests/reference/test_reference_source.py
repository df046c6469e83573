"""Differential test of the Cloud Pub/Sub source: Google's ``CloudPubSubSourceConnector`` and ours on
one corpus, configuration by configuration.

A deterministic corpus of Pub/Sub messages (no/few/many attributes, Unicode, empty and binary
data, ordering keys, the key attribute present or absent, valid and invalid timestamp attributes,
names that look alike) is published once to one topic. Every configuration gets one subscription
per side; all Google connectors run at once in the reference Connect worker, all of ours at once
in one process, each into its own Kafka topic. Per record the test compares key bytes, value bytes,
headers (as a multiset: Google's follow the emulator's attribute map order, which is not stable;
order differences are printed), partition and timestamp.

What differs is asserted as exactly that difference; anything else fails:

* a timestamp attribute of ``0``: Google's record has timestamp 0, ours the produce time
  (librdkafka, our transactional producer, reads 0 as "now");
* ``hash_value``: Google's partition comes from the identity hash of a Java object (random), ours
  from ``Arrays.hashCode`` of the data (checked as that);
* ``StringConverter`` on the data: Google writes ``byte[].toString()`` (``[B@…``), ours the data;
* ``key.converter=ByteArrayConverter``: Google's task fails on the first record, ours writes the
  key's UTF-8;
* a key hashing to -2^31: Google's task fails on partition -2, ours writes partition 0;
* a timestamp below -1: Google's task fails, ours dead-letters the message;
* ``value.converter`` Long / ByteArray with struct values / String with struct values: Google's
  task fails, fails, writes ``Struct{…}`` text; ours refuses the configuration at start-up.

Order is not compared: Google lays out headers and struct fields in the order the attribute map
arrives in (the emulator's differs from message to message), ours sorts them by name; order
differences are printed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import context, source_config
from integration.kafka_helpers import Rec, consume_all, create_topic
from integration.pubsub_helpers import PROJECT, create_subscription, publisher
from integration.pubsub_helpers import create_topic as create_pubsub_topic
from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.io.tables import TableRef
from pubsub_connect.model.cps_source.reference import java_bytes_hash, java_string_hash, partition_for_hash
from pubsub_connect.pipelines import cps_source
from pubsub_connect.pipelines.runner.supervisor import run_stages
from pubsub_connect.pipelines.runtime import stages_for
from reference.conftest import TIMINGS
from reference.connect import SOURCE_CONNECTOR_CLASS, ConnectStandalone

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pubsub_emulator_host")]

BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"
JSON = "org.apache.kafka.connect.json.JsonConverter"
LONG = "org.apache.kafka.connect.converters.LongConverter"

PARTITIONS = 3
KEY_ATTRIBUTE = "id"
TIMESTAMP_ATTRIBUTE = "ts"

Message = tuple[bytes, "dict[str, str] | None", "str | None"]


def build_corpus() -> list[Message]:
    """The messages, in publish order. Every message's data is unique (it identifies the message
    in both outputs). What stops Google's task for good is not here but in cases with a topic of
    their own (a key hashing to -2^31, a timestamp below -1): it would hide everything else. Also
    left out: an attribute named ``message`` in struct mode, on which Google's poll fails and the
    whole batch is redelivered forever without the task failing (ours dead-letters the message;
    unit-tested). Java's ``Long.valueOf`` reads non-ASCII digits (``"١٢٣"`` is 123): in here."""
    out: list[Message] = []
    out.append((b"", {"id": "empty-data"}, None))
    out.append((b"\x00", {"note": "one zero byte, no key"}, None))
    for i in range(8):  # binary data, no attributes
        out.append((bytes([0, 255, 128 + i, i]) + bytes(range(200 + i, 208 + i)), None, None))
    for i in range(10):  # text, only the key attribute (no custom attributes: BYTES value)
        out.append((f"keyed-{i}".encode(), {"id": f"key-{i}"}, None))
    for i in range(10):  # few attributes, key present
        out.append((f"few-{i}".encode(), {"id": f"k{i % 4}", "colour": ["red", "green", "blue"][i % 3]}, None))
    for i in range(8):  # few attributes, key absent
        out.append((f"nokey-{i}".encode(), {"colour": "cyan", "n": str(i)}, None))
    for i in range(4):  # many attributes
        attrs = {f"attr-{j:02d}": f"value {i}.{j} ü" for j in range(40)}
        attrs["id"] = f"many-{i}"
        out.append((f"many-{i}".encode(), attrs, None))
    unicode_attrs = [
        {"ключ": "значение", "id": "кириллица"},
        {"日本語": "値", "emoji": "😀🎉", "id": "😀"},
        {"Ünïcödé": "\u00e9\u0301", "rtl": "עברית"},
        {"id": "ä" * 50, "ctl": "tab\there\nnewline\u0001"},
        {"quo\"te": "back\\slash", "sl/ash": "</script>", "id": "q\"k"},
    ]
    for i, attrs in enumerate(unicode_attrs):
        out.append((f"unicode-{i} ünïcödé ✓".encode(), attrs, None))
    look_alike = [
        {"id": "a", "ID": "b", "Id": "c", "id ": "d"},
        {"colour": "1", "colour\u200b": "2", "Colour": "3"},
        {"Message": "m", "message_": "m2", "MESSAGE": "m3"},
        {"orderingkey": "x", "ordering_key": "y", "OrderingKey": "z"},
        {"ts ": "5", "TS": "6", "id": "look-alike"},
    ]
    for i, attrs in enumerate(look_alike):
        out.append((f"look-alike-{i}".encode(), attrs, None))
    # No timestamp far in the future: the broker rejects records beyond its
    # log.message.timestamp.after.max.ms (1 h by default), which stops both connectors alike.
    timestamps = ["1700000000000", "0", "-1", "+42", "007", "1600000000000", "abc", "12.5", " 1", "", "1e3",
                  "99999999999999999999", "\u0661\u0662\u0663"]
    for i, ts in enumerate(timestamps):  # only the timestamp attribute: BYTES value
        out.append((f"ts-only-{i}".encode(), {"ts": ts}, None))
    for i, ts in enumerate(timestamps[:6]):  # with the key and a custom attribute
        out.append((f"ts-custom-{i}".encode(), {"ts": ts, "id": f"t{i}", "extra": "yes"}, None))
    ordering_keys = ["ok-1", "ok-2", "順序", "ok-1", "a" * 100, "ok-2"]
    for i, ok in enumerate(ordering_keys):  # ordering key, no attributes
        out.append((f"ordered-{i}".encode(), None, ok))
    for i, ok in enumerate(ordering_keys):  # ordering key with attributes
        out.append((f"ordered-attrs-{i}".encode(), {"id": f"o{i}", "shade": "dark"}, ok))
    for i, ok in enumerate(ordering_keys[:4]):  # ordering key and only the key attribute
        out.append((f"ordered-keyed-{i}".encode(), {"id": f"ok{i}"}, ok))
    for i in range(16):  # bulk: alternating shapes
        shape = i % 4
        attrs = [None, {"id": f"bulk-{i}"}, {"id": f"bulk-{i}", "x": str(i)},
                 {"x": str(i), "ts": str(1_600_000_000_000 + i)}][shape]
        out.append((f"bulk-{i}".encode() * (i + 1), attrs, "bulk" if i % 3 == 0 else None))
    return out


CORPUS = build_corpus()


def _check_corpus() -> None:
    datas = [data for data, _, _ in CORPUS]
    assert len(CORPUS) >= 100 and len(set(datas)) == len(datas)
    for _, attrs, ordering_key in CORPUS:
        for text in ((attrs or {}).get(KEY_ATTRIBUTE), ordering_key):
            assert text is None or java_string_hash(text) != -(1 << 31)
        assert "message" not in (attrs or {}) and "orderingKey" not in (attrs or {})


_check_corpus()


@dataclass(frozen=True)
class Case:
    """One configuration, run through both connectors."""

    name: str
    settings: dict[str, str]
    #: None: Google's connector writes all expected records; else its task fails with this (regex).
    google_fails: str | None = None
    #: Fields not compared record by record (see ``SPECIAL_CHECKS``).
    skip_fields: tuple[str, ...] = ()
    #: Messages that reach Kafka (on both sides); None = all.
    delivered: Callable[[Message], bool] | None = None
    #: The messages of this case's own Pub/Sub topic; None = the shared corpus.
    messages: tuple[Message, ...] | None = None

    @property
    def corpus(self) -> list[Message]:
        return CORPUS if self.messages is None else list(self.messages)

    def expected(self) -> list[Message]:
        return [m for m in self.corpus if self.delivered is None or self.delivered(m)]


def _settings(**extra: str) -> dict[str, str]:
    return {"kafka.partition.count": str(PARTITIONS), "kafka.timestamp.attribute": TIMESTAMP_ATTRIBUTE, **extra}


def _keyed(message: Message) -> bool:
    return KEY_ATTRIBUTE in (message[1] or {})


CASES = [
    Case("hash-key-headers", _settings(**{
        "kafka.key.attribute": KEY_ATTRIBUTE, "kafka.record.headers": "true", "kafka.partition.scheme": "hash_key",
        "key.converter": STRING, "value.converter": BYTES})),
    Case("round-robin-struct-json-ok", _settings(**{
        "kafka.key.attribute": KEY_ATTRIBUTE, "kafka.partition.scheme": "round_robin",
        "cps.makeOrderingKeyAttribute": "true", "key.converter": JSON, "value.converter": JSON})),
    Case("hash-value-headers-ok", _settings(**{
        "kafka.key.attribute": "orderingKey", "kafka.record.headers": "true", "kafka.partition.scheme": "hash_value",
        "cps.makeOrderingKeyAttribute": "true", "key.converter": STRING, "value.converter": BYTES}),
        skip_fields=("partition",)),
    Case("kafka-partitioner-struct-plain-json", _settings(**{
        "kafka.key.attribute": KEY_ATTRIBUTE, "kafka.partition.scheme": "kafka_partitioner",
        "key.converter": JSON, "key.converter.schemas.enable": "false",
        "value.converter": JSON, "value.converter.schemas.enable": "false"})),
    Case("ordering-key-headers-json", _settings(**{
        "kafka.key.attribute": KEY_ATTRIBUTE, "kafka.record.headers": "true", "kafka.partition.scheme": "ordering_key",
        "cps.makeOrderingKeyAttribute": "true", "key.converter": STRING, "value.converter": JSON})),
    Case("round-robin-struct-no-key-plain-json", _settings(**{
        "kafka.partition.scheme": "round_robin", "key.converter": STRING,
        "value.converter": JSON, "value.converter.schemas.enable": "false"})),
    Case("string-value-headers", _settings(**{
        "kafka.key.attribute": KEY_ATTRIBUTE, "kafka.record.headers": "true", "kafka.partition.scheme": "hash_key",
        "key.converter": STRING, "value.converter": STRING}),
        skip_fields=("value",)),
    Case("long-key-tolerant", _settings(**{
        "kafka.key.attribute": KEY_ATTRIBUTE, "kafka.record.headers": "true", "kafka.partition.scheme": "hash_key",
        "key.converter": LONG, "value.converter": BYTES, "errors.tolerance": "all"}),
        delivered=lambda m: not _keyed(m)),
    Case("byte-array-key", _settings(**{
        "kafka.key.attribute": KEY_ATTRIBUTE, "kafka.record.headers": "true", "kafka.partition.scheme": "hash_key",
        "key.converter": BYTES, "value.converter": BYTES}),
        google_fails=r"DataException: Invalid schema type for ByteArrayConverter: STRING"),
    # A key whose String.hashCode is -2^31: Java's Math.abs keeps it negative, partition -2.
    Case("min-int-hash", _settings(**{
        "kafka.key.attribute": KEY_ATTRIBUTE, "kafka.record.headers": "true", "kafka.partition.scheme": "hash_key",
        "key.converter": STRING, "value.converter": BYTES}),
        google_fails=r"IllegalArgumentException: Invalid partition: -2\. Partition number should always be",
        messages=((b"min-int", {"id": "polygenelubricants"}, None),)),
    # A negative timestamp other than -1: Connect refuses it outside its error handling.
    Case("timestamp-minus-2", _settings(**{
        "kafka.record.headers": "true", "key.converter": STRING, "value.converter": BYTES,
        "errors.tolerance": "all"}),
        google_fails=r"InvalidRecordException: Invalid record timestamp -2",
        delivered=lambda m: False, messages=((b"minus-2", {"ts": "-2"}, None),)),
]

#: Configurations that cannot write some or all messages, with what Google's connector does:
#: ("fails", reason pattern) or ("writes", value pattern). Ours refuses those in
#: :data:`OURS_REFUSES` at start-up (ConfigError, before any message is pulled); with the struct
#: converters it writes the messages without attributes and dead-letters the others
#: (``tests/e2e/test_cps_source.py``).
OURS_REFUSES = frozenset({"long-value"})
REFUSED = {
    "long-value": (_settings(**{"kafka.record.headers": "true", "key.converter": STRING, "value.converter": LONG}),
                   ("fails", r"ClassCastException: class \[B cannot be cast to class java.lang.Number")),
    "byte-array-struct": (_settings(**{"key.converter": STRING, "value.converter": BYTES}),
                          ("fails", r"DataException: Invalid schema type for ByteArrayConverter: STRUCT")),
    "string-struct": (_settings(**{"kafka.key.attribute": KEY_ATTRIBUTE, "key.converter": STRING,
                                   "value.converter": STRING}),
                      ("writes", rb"(?s)Struct\{message=\[B@[0-9a-f]+(,[^=]*=.*)*\}")),
}


# ---------------------------------------------------------------------------------------------
# Reading records back
# ---------------------------------------------------------------------------------------------


def data_of(value: bytes | None, settings: dict[str, str]) -> bytes:
    """The message data inside a record value, under the case's value converter."""
    assert value is not None
    if settings.get("value.converter") != JSON:
        return value
    doc = json.loads(value)
    if settings.get("value.converter.schemas.enable", "true") == "true":
        assert set(doc) == {"schema", "payload"}
        doc = doc["payload"]
    return base64.b64decode(doc["message"] if isinstance(doc, dict) else doc)


FIELDS = ("key", "value", "headers", "partition", "timestamp")


def view(record: Rec) -> tuple:
    return (record.key, record.value, tuple(sorted(record.headers or [])), record.partition, record.timestamp_ms)


def _wait(bootstrap: str, topic: str, count: int, check: Callable[[], None], timeout_s: float = 120) -> list[Rec]:
    deadline = time.monotonic() + timeout_s
    while True:
        check()
        records = consume_all(bootstrap, topic)
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def publish_in_order(topic: str, messages: list[Message]) -> None:
    """One Publish call per message, so publish order (and publish time order) is the list's.
    The raw API call: the client's ``publish(**attributes)`` cannot send an attribute named
    ``ordering_key``."""
    with warnings.catch_warnings():  # "api" is deprecated but is the one way to the raw call
        warnings.simplefilter("ignore", DeprecationWarning)
        api = publisher().api
    for data, attributes, ordering_key in messages:
        api.publish(request={"topic": topic, "messages": [
            {"data": data, "attributes": attributes or {}, "ordering_key": ordering_key or ""}]})


def run_ours_concurrently(spark: Any, bootstrap: str, root: Path, connectors: list[cfg.ConnectorConfig]) -> Any:
    """Every connector's stages once, the connectors side by side in one process (as ``run``
    does in continuous mode): the pull stages' drain waits overlap."""
    ctx = context(spark, bootstrap, root)
    errors: dict[str, BaseException] = {}

    def target(connector: cfg.ConnectorConfig) -> None:
        try:
            run_stages(ctx, connector, stages_for(connector.kind))
        except BaseException as exc:  # reported below
            errors[connector.name] = exc

    threads = [threading.Thread(target=target, args=(c,), name=c.name) for c in connectors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return ctx


# ---------------------------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------------------------


def test_source_conformance(google_connect: ConnectStandalone, spark, kafka_bootstrap: str, tmp_path: Path,
                            unique_name: str) -> None:
    started = time.monotonic()
    pubsub_topic = create_pubsub_topic(unique_name)
    subscriptions: dict[tuple[str, str], str] = {}
    own_topics: dict[str, str] = {}
    for case_name in [c.name for c in CASES] + list(REFUSED):
        case = next((c for c in CASES if c.name == case_name), None)
        topic = pubsub_topic
        if case is not None and case.messages is not None:
            topic = own_topics[case_name] = create_pubsub_topic(f"{unique_name}-{case_name}")
        for side in ("google", "ours"):
            subscriptions[case_name, side] = create_subscription(
                topic, f"{unique_name}-{case_name}-{side}").rsplit("/", 1)[1]
            create_topic(kafka_bootstrap, f"{unique_name}-{case_name}-{side}", partitions=PARTITIONS)
    publish_in_order(pubsub_topic, CORPUS)
    for case in CASES:
        if case.messages is not None:
            publish_in_order(own_topics[case.name], case.corpus)
    # Every record stamped with a producer's clock (either side) has a time after this.
    published_ms = time.time_ns() // 1_000_000 + 1

    def google_settings(case_name: str, settings: dict[str, str]) -> dict[str, str]:
        return {**settings, "tasks.max": "1", "cps.project": PROJECT,
                "cps.subscription": subscriptions[case_name, "google"],
                "kafka.topic": f"{unique_name}-{case_name}-google"}

    # Google: every configuration at once in the one worker.
    google: dict[str, list[Rec]] = {}
    google_failures: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        for case in CASES:
            stack.enter_context(google_connect.running(f"{unique_name}-{case.name}", SOURCE_CONNECTOR_CLASS,
                                                       google_settings(case.name, case.settings), wait=False))
        for name, (settings, _) in REFUSED.items():
            stack.enter_context(google_connect.running(f"{unique_name}-{name}", SOURCE_CONNECTOR_CLASS,
                                                       google_settings(name, settings), wait=False))
        # Ours meanwhile: the refused configurations fail at start-up, the others run side by side.
        ours_refused = {}
        for name, (settings, _) in REFUSED.items():
            if name not in OURS_REFUSES:
                continue
            connector = source_config(f"{unique_name}-{name}", subscriptions[name, "ours"],
                                      f"{unique_name}-{name}-ours", **settings)
            with pytest.raises(ConfigError) as info:
                cps_source.check_settings(connector)
            ours_refused[name] = str(info.value)
        ours_started = time.monotonic()
        ours_ctx = run_ours_concurrently(spark, kafka_bootstrap, tmp_path, [
            source_config(f"{unique_name}-{case.name}", subscriptions[case.name, "ours"],
                          f"{unique_name}-{case.name}-ours", **case.settings) for case in CASES])
        TIMINGS[f"ours: {len(CASES)} source connectors, once, side by side"] = time.monotonic() - ours_started
        for case in CASES:
            name = f"{unique_name}-{case.name}"
            if case.google_fails is not None:
                google_failures[case.name] = google_connect.wait_failed(name)
            else:
                google[case.name] = _wait(kafka_bootstrap, f"{name}-google", len(case.expected()),
                                          lambda name=name: google_connect.raise_if_failed(name))
        for name, (_, (outcome, _)) in REFUSED.items():
            if outcome == "fails":
                google_failures[name] = google_connect.wait_failed(f"{unique_name}-{name}")
            else:
                google[name] = _wait(kafka_bootstrap, f"{unique_name}-{name}-google", len(CORPUS),
                                     lambda n=f"{unique_name}-{name}": google_connect.raise_if_failed(n))
    produce_window = (published_ms, time.time_ns() // 1_000_000)
    ours = {case.name: consume_all(kafka_bootstrap, f"{unique_name}-{case.name}-ours") for case in CASES}

    compared_records = compared_fields = 0
    report: list[str] = []
    found: dict[str, list[tuple]] = {}
    for case in CASES:
        differences, records, fields, notes = compare_case(case, google.get(case.name), ours[case.name],
                                                           produce_window)
        compared_records += records
        compared_fields += fields
        report += notes
        if differences:
            found[case.name] = differences
    print(f"\nsource conformance: differences by configuration: {len(found)}")
    for name, differences in found.items():
        for difference in differences:
            print(f"    {name}: {difference}")

    # Divergences asserted exactly.
    (dead,) = ours_ctx.store.read(TableRef("dlq", f"{unique_name}-timestamp-minus-2")).collect()
    assert (dead.value, dead.error_class) == (b"minus-2", "InvalidTimestampError")
    for case in CASES:
        if case.google_fails is not None:
            assert re.search(case.google_fails, google_failures[case.name]), (case.name, google_failures[case.name])
    # ours writes the key's UTF-8, like StringConverter (timestamps: compared in hash-key-headers)
    byte_array_key = {data_of(r.value, {}): view(r)[:4] for r in ours["byte-array-key"]}
    string_key = {data_of(r.value, {}): view(r)[:4] for r in google["hash-key-headers"]}
    assert byte_array_key == string_key
    for name, (_, (outcome, pattern)) in REFUSED.items():
        if outcome == "fails":
            assert re.search(pattern, google_failures[name]), (name, google_failures[name])
        else:
            values = [r.value for r in google[name]]
            # a STRUCT as Struct.toString(), a BYTES value as byte[].toString(): the data is lost
            assert all(re.fullmatch(pattern, v) or re.fullmatch(rb"\[B@[0-9a-f]+", v) for v in values), values[:3]
            assert any(re.fullmatch(pattern, v) for v in values)
        if name in OURS_REFUSES:
            assert "cannot write" in ours_refused[name], ours_refused[name]

    print(f"\nsource conformance: {len(CORPUS)} messages, {len(CASES)} + {len(REFUSED)} configurations, "
          f"{compared_records} record pairs and {compared_fields} fields compared in "
          f"{time.monotonic() - started:.0f} s")
    for name, reason in sorted(google_failures.items()):
        print(f"    Google's task failed for {name}: {reason}")
    for name, reason in sorted(ours_refused.items()):
        print(f"    ours refused {name}: {reason}")
    for line in report:
        print("   ", line)
    assert found == {case.name: expected_differences(case) for case in CASES if expected_differences(case)}
    assert "pubsub.googleapis.com:443" in google_connect.fronts.activity.tunnels


#: What ours writes for a record whose timestamp attribute is 0: the producer's clock (librdkafka
#: reads timestamp 0 as "now"), shown as this instead of the run-specific time.
PRODUCE_TIME = "produce time"
TIMESTAMP_ZERO = "records with timestamp 0 written with the produce time"


#: One JSON string token as written (escapes kept, so escaping differences stay visible).
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def canonical_value(value: bytes | None, settings: dict[str, str]) -> Any:
    """A JSON struct value with its attribute fields in name order, compared as written (no
    parsing: an escaping difference is still a difference). Google's connector lays fields out in
    the order the attribute map arrives in, which Pub/Sub does not define; ours sorts them by name.

    The form: the text with every string token blanked (the structure, the same whatever the field
    order), the schema's tokens sorted, the payload's first pair (``message``) and its other
    ``(name, value)`` pairs sorted."""
    if settings.get("value.converter") != JSON or value is None:
        return value
    text = value.decode("utf-8")
    tokens = _JSON_STRING.findall(text)
    schema_tokens, payload = [], tokens
    if settings.get("value.converter.schemas.enable", "true") == "true":
        cut = tokens.index('"payload"')
        schema_tokens, payload = tokens[:cut], tokens[cut + 1:]
    if len(payload) == 1:  # a BYTES value: one base64 string
        return value
    pairs = list(zip(payload[0::2], payload[1::2], strict=True))
    return _JSON_STRING.sub('""', text), sorted(schema_tokens), pairs[:1], sorted(pairs[1:])


def compare_case(case: Case, theirs: list[Rec] | None, mine: list[Rec],
                 produce_window: tuple[int, int]) -> tuple[list[tuple], int, int, list[str]]:
    """``(differences, record pairs compared, fields compared, notes)`` of one case.

    A difference is ``(data, field, Google's, ours)`` for a record pair, or ``(what, Google's,
    ours)`` for the case as a whole. Notes are the order differences (headers, struct fields):
    printed, not asserted."""
    expected = sorted(m[0] for m in case.expected())
    differences: list[tuple] = []
    mine_data = sorted(data_of(r.value, case.settings) for r in mine)
    if mine_data != expected:
        differences.append(("ours: messages", len(expected), len(mine_data)))
    if theirs is None:
        check = SPECIAL_CHECKS.get(case.name)
        if check is not None:
            try:
                check(case, [], mine)
            except AssertionError as exc:
                differences.append(("special check", str(exc)[:500], None))
        return differences, 0, 0, []
    if len(theirs) != len(expected):
        differences.append(("Google: messages", len(expected), len(theirs)))
    compare = [i for i, f in enumerate(FIELDS) if f not in case.skip_fields]
    lo, hi = produce_window
    notes: list[str] = []

    def stamped(record: Rec, zero_too: bool = False) -> tuple:
        """The view with a producer-clock timestamp (after publishing) shown as PRODUCE_TIME."""
        *rest, timestamp = view(record)
        by_producer = lo <= (timestamp or -1) <= hi or (zero_too and timestamp == 0)
        return (*rest, PRODUCE_TIME if by_producer else timestamp)

    if "value" in case.skip_fields:  # pair by everything else (multiset)
        left = Counter(tuple(stamped(r, zero_too=True)[i] for i in compare) for r in theirs)
        right = Counter(tuple(stamped(r)[i] for i in compare) for r in mine)
        if left != right:
            only_google, only_ours = sorted(left - right, key=repr), sorted(right - left, key=repr)
            differences.append(("records without value", only_google, only_ours))
        zeros = sum(1 for r in theirs if r.timestamp_ms == 0)
        if zeros:
            differences.append((TIMESTAMP_ZERO, zeros, None))
    else:
        by_data_google = {data_of(r.value, case.settings): r for r in theirs}
        by_data_ours = {data_of(r.value, case.settings): r for r in mine}
        for data in sorted(set(by_data_google) | set(by_data_ours)):
            if data not in by_data_google or data not in by_data_ours:
                differences.append((data, "present", data in by_data_google, data in by_data_ours))
                continue
            a, b = stamped(by_data_google[data]), stamped(by_data_ours[data])
            for i in compare:
                if a[i] == b[i]:
                    continue
                if FIELDS[i] == "value" and canonical_value(a[i], case.settings) == canonical_value(
                        b[i], case.settings):
                    notes.append(f"{case.name}: struct field order differs for {data!r}")
                    continue
                differences.append((data, FIELDS[i], a[i], b[i]))
            if by_data_google[data].headers != by_data_ours[data].headers:
                notes.append(f"{case.name}: header order differs for {data!r}")
    check = SPECIAL_CHECKS.get(case.name)
    if check is not None:
        try:
            check(case, theirs, mine)
        except AssertionError as exc:
            differences.append(("special check", str(exc)[:500], None))
    return differences, len(theirs), len(theirs) * len(compare), notes


def expected_differences(case: Case) -> list[tuple]:
    """The differences that must remain: a timestamp attribute of 0 (1970-01-01T00:00:00Z) is
    written by Google's connector as timestamp 0 and by ours with the produce time."""
    zeros = sorted(m[0] for m in case.expected() if (m[1] or {}).get(TIMESTAMP_ATTRIBUTE) == "0")
    if case.google_fails is not None or not zeros:
        return []
    if "value" in case.skip_fields:
        return [(TIMESTAMP_ZERO, len(zeros), None)]
    return [(data, "timestamp", 0, PRODUCE_TIME) for data in zeros]


def _check_hash_value(case: Case, theirs: list[Rec], mine: list[Rec]) -> None:
    """hash_value: Google's hashes the identity of a ``byte[]`` (random per run); ours the data."""
    assert all(0 <= r.partition < PARTITIONS for r in theirs)
    for record in mine:
        assert record.partition == partition_for_hash(java_bytes_hash(record.value), PARTITIONS)


def _check_string_value(case: Case, theirs: list[Rec], mine: list[Rec]) -> None:
    """StringConverter on a BYTES value: Google writes ``byte[].toString()``, ours the data."""
    assert all(re.fullmatch(rb"\[B@[0-9a-f]+", r.value) for r in theirs), [r.value for r in theirs[:3]]
    assert sorted(r.value for r in mine) == sorted(m[0] for m in CORPUS)


def _check_min_int_hash(case: Case, theirs: list[Rec], mine: list[Rec]) -> None:
    """Google's task fails on partition -2; ours writes partition (h & 0x7fffffff) % 3 = 0."""
    assert [(r.key, r.value, r.partition) for r in mine] == [(b"polygenelubricants", b"min-int", 0)]


SPECIAL_CHECKS: dict[str, Callable[[Case, list[Rec], list[Rec]], None]] = {
    "min-int-hash": _check_min_int_hash,
    "hash-value-headers-ok": _check_hash_value,
    "string-value-headers": _check_string_value,
}
