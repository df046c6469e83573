"""The Cloud Pub/Sub sink, held against Google's: every record of the corpus through both.

Each scenario of :mod:`reference.sink_corpus` has its own Kafka topic; Google's
``CloudPubSubSinkConnector`` (in Kafka Connect) publishes it to one Pub/Sub topic and ours to
another, with the same settings. Every message is compared: data bytes, attributes, ordering key.
The only differences allowed are the deliberate divergences listed in the README, each asserted
here as exactly that difference (``KNOWN_DIVERGENCES``): a change on either side fails the test.

Records on which Google's task stops (``FAILING``) run one per connector: the original's task
must fail with the listed exception and ours must dead-letter the record with the listed reason.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from e2e.harness import run_once, sink_config
from integration.kafka_helpers import create_topic, end_offsets, produce
from integration.pubsub_helpers import PROJECT, Received, create_topic_and_subscription, subscriber, subscription_path
from pubsub_connect.io.services.process import ServiceError
from pubsub_connect.io.tables import TableRef
from reference.connect import SINK_CONNECTOR_CLASS, ConnectStandalone
from reference.sink_corpus import FAILING, LARGE_PRODUCER, LARGE_TOPIC, SCENARIOS, Scenario
from reference.sink_divergences import EXPECTED_DEAD_LETTERS, RULES, attributes_capped_at_100

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pubsub_emulator_host")]

#: A message as a subscriber sees it: data, attributes, ordering key.
View = tuple[bytes, tuple[tuple[str, str], ...], str]


def _view(message: Received) -> View:
    return message.data, tuple(sorted(message.attributes.items())), message.ordering_key


def _identity(message: Received) -> tuple[str, str]:
    """Which record a message came from: its Kafka offset when the scenario publishes metadata,
    else the message itself (compared as a multiset)."""
    offset = message.attributes.get("kafka.offset")
    return (offset, "") if offset is not None else ("", repr(_view(message)))


def _wait_committed(bootstrap: str, group: str, topic: str, check: Callable[[], None], timeout_s: float = 180) -> None:
    """Wait until Connect committed the sink's consumer group up to the end of ``topic``: Connect
    commits only after the task's flush, i.e. after every publish of those records completed."""
    ends = end_offsets(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            check()
            committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
            if all(tp.offset >= ends[tp.partition] for tp in committed):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{group} committed {committed}, not {ends}, within {timeout_s:.0f} s")
            time.sleep(0.2)
    finally:
        consumer.close()


def _drain(subscription: str, batch: int = 100) -> list[Received]:
    """Every message in ``subscription``, acknowledged: pulled until three answers in a row come
    back empty. Only called once the publisher is known to be done (its publishes completed)."""
    client, path = subscriber(), subscription_path(subscription)
    got: list[Received] = []
    empty_answers = 0
    while empty_answers < 3:
        # return_immediately: an empty answer at once when nothing is left (else the emulator
        # holds the pull open until its deadline).
        response = client.pull(request={"subscription": path, "max_messages": batch, "return_immediately": True},
                               timeout=30)
        if not response.received_messages:
            empty_answers += 1
            continue
        empty_answers = 0
        client.acknowledge(request={"subscription": path,
                                    "ack_ids": [r.ack_id for r in response.received_messages]})
        got.extend(Received(r.message.data, dict(r.message.attributes), r.message.ordering_key)
                   for r in response.received_messages)
    return got


_IDENTITY_HASH = re.compile(r"\[B@[0-9a-f]+")


def _normalized(text: str) -> str:
    """Java's ``byte[].toString()`` is an identity hash that changes from run to run."""
    return _IDENTITY_HASH.sub("[B@<identity>", text)


def _normalized_view(view: View) -> View:
    data, attributes, ordering_key = view
    return data, tuple((k, _normalized(v)) for k, v in attributes), _normalized(ordering_key)


def _compare(scenario: Scenario, google: list[Received], ours: list[Received]) -> list[tuple]:
    """``(record, field, Google's, ours, Google's attribute count, ours)`` for every field that
    differs; attributes as the differing keys only (a missing one as None)."""
    def grouped(messages: Iterable[Received]) -> dict[tuple[str, str], list[View]]:
        out: dict[tuple[str, str], list[View]] = {}
        for message in messages:
            out.setdefault(_identity(message), []).append(_normalized_view(_view(message)))
        return out

    theirs, mine = grouped(google), grouped(ours)
    found: list[tuple] = []
    for ident in sorted(set(theirs) | set(mine)):
        a, b = theirs.get(ident, []), mine.get(ident, [])
        if Counter(a) == Counter(b):
            continue
        if len(a) != 1 or len(b) != 1:
            found.append((ident[0] or ident[1], "messages", a, b, 0, 0))
            continue
        for name, x, y in zip(("data", "attributes", "ordering_key"), a[0], b[0], strict=True):
            if x != y:
                counts = (len(x), len(y)) if name == "attributes" else (0, 0)
                if name == "attributes":
                    x, y = dict(x), dict(y)
                    keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                    x, y = {k: x.get(k) for k in keys}, {k: y.get(k) for k in keys}
                found.append((ident[0], name, x, y, *counts))
    return found


def _explain(scenario: Scenario, difference: tuple) -> str | None:
    """The name of the deliberate divergence a difference is, or None."""
    ident, field, google, ours, google_count, ours_count = difference
    if not ident.isdigit():
        return None
    record = scenario.records[int(ident)]
    for name, rule in RULES.items():
        extra = {"google_count": google_count, "ours_count": ours_count} if rule is attributes_capped_at_100 else {}
        if rule(scenario, record, field, google, ours, **extra):
            return name
    return None


def _short(value: Any) -> Any:
    if isinstance(value, bytes) and len(value) > 80:
        return value[:40] + b"..." + value[-10:]
    return value


def test_sink_corpus_matches_google(google_connect: ConnectStandalone, spark, kafka_bootstrap: str, tmp_path: Path,
                                    unique_name: str) -> None:
    topics: dict[str, tuple[str, str, str]] = {}
    for scenario in SCENARIOS:
        kafka_topic = f"{unique_name}-{scenario.name}"
        create_topic(kafka_bootstrap, kafka_topic, config=scenario.topic_config)
        produce(kafka_bootstrap, kafka_topic, scenario.records, config=scenario.producer_config)
        google_topic, google_sub = create_topic_and_subscription(f"{kafka_topic}-google")
        ours_topic, ours_sub = create_topic_and_subscription(f"{kafka_topic}-ours")
        topics[scenario.name] = (kafka_topic, google_sub, ours_sub)
        google_connect.create_connector(f"{kafka_topic}-google", SINK_CONNECTOR_CLASS, {
            **scenario.settings, "topics": kafka_topic, "tasks.max": "1", "cps.project": PROJECT,
            "cps.topic": google_topic.rsplit("/", 1)[1]})
        ours_settings = {**scenario.settings, "errors.tolerance": "all"}
        ctx_store = run_once(spark, kafka_bootstrap, tmp_path, sink_config(
            f"{scenario.name}-ours", kafka_topic, ours_topic.rsplit("/", 1)[1], **ours_settings)).store

    unexplained: list[tuple] = []
    explained: Counter[str] = Counter()
    dead_letters: dict[str, list[tuple[int, str, str]]] = {}
    compared_messages = compared_fields = 0
    for scenario in SCENARIOS:
        kafka_topic, google_sub, ours_sub = topics[scenario.name]
        name = f"{kafka_topic}-google"
        try:
            _wait_committed(kafka_bootstrap, f"connect-{name}", kafka_topic,
                            lambda n=name: google_connect.raise_if_failed(n))
        except ServiceError:
            unexplained.append((scenario.name, "Google's task failed", google_connect.failure(name)))
            continue
        finally:
            google_connect.remove_connector(name)
        batch = 1 if scenario.topic_config else 100  # several 9 MB messages in one answer: too large
        ours = _drain(ours_sub, batch)
        google = _drain(google_sub, batch)
        letters = ctx_store.read(TableRef("dlq", f"{scenario.name}-ours")).collect()
        if letters:
            dead_letters[scenario.name] = sorted((r.offset, r.error_class, r.error_message) for r in letters)
        found = _compare(scenario, google, ours)
        compared_messages += len(google)
        compared_fields += sum(2 + len(m.attributes) for m in google)
        print(f"\n{scenario.name}: {len(scenario.records)} records, Google {len(google)} messages, "
              f"ours {len(ours)}, {len(found)} difference(s)")
        for difference in found:
            reason = _explain(scenario, difference)
            if reason is None:
                unexplained.append((scenario.name, *difference[:4]))
                print("    UNEXPLAINED", tuple(_short(x) for x in difference[:4]))
            else:
                explained[reason] += 1
    print(f"\nsink: {sum(len(s.records) for s in SCENARIOS)} records in {len(SCENARIOS)} scenarios, "
          f"{compared_messages} messages and {compared_fields} fields compared; deliberate divergences: "
          f"{dict(explained)}; unexplained: {len(unexplained)}")
    assert unexplained == []
    assert dead_letters == EXPECTED_DEAD_LETTERS
    assert set(explained) == set(RULES), "a divergence no longer shows: update the README table and the rules"


#: What each ``FAILING`` record does in Google's connector: the root cause its task stops with, or
#: keeps failing its offset commits with, or (where the emulator accepts what Pub/Sub refuses) the
#: message it publishes.
GOOGLE_ON_FAILING: dict[str, object] = {
    "array-value": "stops: java.lang.ClassCastException: class java.util.ArrayList cannot be cast to class "
                   "[Ljava.lang.Object;",
    "nested-struct": "stops: org.apache.kafka.connect.errors.DataException: Struct type does not support nested Map or "
                     "Struct types, present in field inner",
    "map-null-value": 'stops: java.lang.NullPointerException: Cannot invoke "Object.toString()" because the '
                      'return value of "java.util.Map.get(Object)" is null',
    "struct-missing-field": "stops: org.apache.kafka.connect.errors.DataException: Invalid null value for "
                            "required INT32 field",
    "decimal": "stops: org.apache.kafka.connect.errors.DataException: Unexpected value class with BYTES schema type.",
    "timestamp": "stops: java.lang.ClassCastException: class java.util.Date cannot be cast to class java.lang.Long",
    "invalid-json": "stops: com.fasterxml.jackson.core.JsonParseException: Unexpected character ('n' (code 110)): was "
                    "expecting double-quote to start field name",
    "envelope-missing": 'stops: org.apache.kafka.connect.errors.DataException: JsonConverter with schemas.enable '
                        'requires "schema" and "payload" fields and may not contain additional fields. If you are '
                        'trying to deserialize plain JSON data, set schemas.enable=false in your converter '
                        'configuration.',
    "wrong-width-integer": "stops: org.apache.kafka.common.errors.SerializationException: Size of data received by "
                           "IntegerDeserializer is not 4",
    "null-header-value": 'stops: java.lang.NullPointerException: Cannot invoke "Object.toString()" because the return '
                         'value of "org.apache.kafka.connect.header.Header.value()" is null',
    "null-header-text": 'stops: java.lang.NullPointerException: Cannot invoke "Object.toString()" because the return '
                        'value of "org.apache.kafka.connect.header.Header.value()" is null',
    # Pub/Sub refuses more than 100 attributes; the emulator takes them.
    "101-attributes": [(b"v", (*((f"h{i:03d}", "x") for i in range(101)), ("key", "k")), "")],
    # Pub/Sub refuses a message with neither data nor attributes: every offset commit fails.
    "empty-message": "stuck: io.grpc.StatusRuntimeException: INVALID_ARGUMENT: Some messages are empty",
    # Pub/Sub refuses a message over 10 MB; the emulator takes it.
    "over-10-mb": [(b"x" * 10_500_000, (("kafka.offset", "0"), ("kafka.partition", "0"), ("key", "k")), "")],
}

_METADATA = (("kafka.offset", "0"), ("kafka.partition", "0"))

#: What ours does with each: the message it publishes, or the dead-letter row it writes
#: (``errors.tolerance=all``; with ``none`` a dead-letter record stops the connector instead).
OURS_ON_FAILING: dict[str, object] = {
    # The elements' encodings concatenated, as the original intends (it cannot cast the list).
    "array-value": [(b"\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03", (*_METADATA, ("key", "k")), "")],
    "nested-struct": [("UnsupportedValueError",
                       'value: struct field "inner" is a nested STRUCT; Pub/Sub attributes cannot hold it')],
    # A null map value is left out, like a null optional struct field.
    "map-null-value": [(b"", (("a", "1"), *_METADATA, ("key", "k")), "")],
    "struct-missing-field": [("ConverterError", "value: JsonConverter: null value for required int32 field at x")],
    # Logical types: the base type's bytes (a Decimal's unscaled big-endian bytes, a Timestamp's
    # epoch milliseconds as INT64).
    "decimal": [(b"09", (*_METADATA, ("key", "k")), "")],
    "timestamp": [(b"\x00\x00\x01\x8b\xcf\xe5h\x00", (*_METADATA, ("key", "k")), "")],
    "invalid-json": [("ConverterError", "value: JsonConverter: invalid JSON: Expecting property name enclosed in "
                                        "double quotes: line 1 column 2 (char 1)")],
    "envelope-missing": [("ConverterError", 'value: JsonConverter with schemas.enable requires "schema" and '
                                            '"payload" fields and no others (set schemas.enable=false for plain '
                                            'JSON)')],
    "wrong-width-integer": [("ConverterError", "value: IntegerConverter: expected 4 bytes, got 2")],
    # A header without a value is left out (and counted).
    "null-header-value": [(b"v", (("h1", "v1"), *_METADATA, ("key", "k")), "")],
    "null-header-text": [(b"v", (("h1", "v1"), *_METADATA, ("key", "k"), ("null-text", "null")), "")],
    # Headers beyond Pub/Sub's 100 attributes are left out (and counted).
    "101-attributes": [(b"v", (*((f"h{i:03d}", "x") for i in range(99)), ("key", "k")), "")],
    # Not published, with a warning naming the record (like the original's).
    "empty-message": "nothing",
    "over-10-mb": [("PubsubLimitError", "message is 10500094 bytes (data, attribute keys and values, ordering key); "
                                        "Pub/Sub accepts at most 9996000")],
}


def _stable(view: View) -> View:
    """A view without the attributes that differ from run to run."""
    data, attributes, ordering_key = view
    return data, tuple((k, v) for k, v in attributes if k not in ("kafka.topic", "kafka.timestamp")), ordering_key


def _google_outcome(connect: ConnectStandalone, bootstrap: str, name: str, topic: str, timeout_s: float = 180) -> str:
    """What Google's sink task did with its one record: ``stops: <root cause>`` (the task failed),
    ``stuck: <root cause>`` (each offset commit fails on a refused publish and rewinds, forever),
    or ``published`` (Connect committed the record's offset)."""
    ends = end_offsets(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"connect-{name}", "enable.auto.commit": False})
    commit_failure = f"{name}-0}} Commit of offsets threw"
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reason = connect.failure(name)
            if reason is not None:
                # The JVM words a ClassCastException's class-loader details differently from run to run.
                cause = reason.split(" ... Caused by: ")[-1]
                return "stops: " + re.sub(r" \((?:class )?\S+(?: and \S+)? (?:is|are) in (?:module|unnamed).*\)$", "",
                                          cause)
            log = connect.log_path.read_text(errors="replace")
            if commit_failure in log:
                trace = log[log.index(commit_failure):].split("\n[", 1)[0]
                causes = [line for line in trace.splitlines() if line.startswith("Caused by: ")]
                return "stuck: " + (causes[-1] if causes else trace.splitlines()[0]).removeprefix("Caused by: ")
            committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
            if all(tp.offset >= ends[tp.partition] for tp in committed):
                return "published"
            time.sleep(0.2)
        return "no outcome"
    finally:
        consumer.close()


def test_records_that_stop_googles_task(google_connect: ConnectStandalone, spark, kafka_bootstrap: str,
                                        tmp_path: Path, unique_name: str) -> None:
    """Each record of ``FAILING`` in a Google connector of its own (after such a record the
    original publishes nothing more); ours gets the same records, grouped by settings."""
    groups: dict[str, list[str]] = {}
    google_subscriptions: dict[str, str] = {}
    for case, (settings, record) in FAILING.items():
        kafka_topic = f"{unique_name}-{case}"
        large = record.value is not None and len(record.value) > 1_000_000
        create_topic(kafka_bootstrap, kafka_topic, config=LARGE_TOPIC if large else None)
        produce(kafka_bootstrap, kafka_topic, [record], config=LARGE_PRODUCER if large else None)
        google_topic, google_subscriptions[case] = create_topic_and_subscription(f"{kafka_topic}-google")
        google_connect.create_connector(f"{kafka_topic}-google", SINK_CONNECTOR_CLASS, {
            **settings, "topics": kafka_topic, "tasks.max": "1", "cps.project": PROJECT,
            "cps.topic": google_topic.rsplit("/", 1)[1]})
        groups.setdefault(repr(sorted(settings.items())), []).append(case)

    ours: dict[str, object] = {}
    for number, cases in enumerate(groups.values()):
        settings = FAILING[cases[0]][0]
        topic, subscription = create_topic_and_subscription(f"{unique_name}-ours-{number}")
        name = f"failing-{number}"
        ctx = run_once(spark, kafka_bootstrap, tmp_path, sink_config(
            name, ",".join(f"{unique_name}-{case}" for case in cases), topic.rsplit("/", 1)[1],
            **{**settings, "errors.tolerance": "all"}))
        published = _drain(subscription, batch=1)
        dead = ctx.store.read(TableRef("dlq", name)).collect()
        for case in cases:
            kafka_topic = f"{unique_name}-{case}"
            messages = [m for m in published if m.attributes.get("kafka.topic", kafka_topic) == kafka_topic]
            letters = [(r.error_class, r.error_message) for r in dead if r.topic == kafka_topic]
            ours[case] = [_stable(_view(m)) for m in messages] or letters or "nothing"

    google: dict[str, object] = {}
    for case in FAILING:
        name = f"{unique_name}-{case}-google"
        outcome = _google_outcome(google_connect, kafka_bootstrap, name, f"{unique_name}-{case}")
        google[case] = ([_stable(_view(m)) for m in _drain(google_subscriptions[case], batch=1)]
                        if outcome == "published" else outcome)
        google_connect.remove_connector(name)
    for case in FAILING:
        print(f"\n{case}:\n    Google: {str(google[case])[:300]}\n    ours:   {str(ours[case])[:300]}")
    print(f"\nsink: {len(FAILING)} records that stop Google's task compared")
    assert google == GOOGLE_ON_FAILING
    assert ours == OURS_ON_FAILING
