"""Bad input in the source direction: records Kafka refuses for good, end to end (reliability suite).

The corpus is ``fixtures/bad_inputs/produce_cases.jsonl`` (see ``fixtures/bad_inputs/README.md``):
Pub/Sub messages that convert fine but make records the broker or the producer refuses however
often they are sent — a ``kafka.timestamp.attribute`` hours or decades ahead, or days back, a
record over the topic's ``max.message.bytes`` or the producer's ``message.max.bytes``, a record
without a key on a compacted topic — beside cases just within the limits. They are published
between good messages to Google's Pub/Sub emulator, and the Cloud Pub/Sub source runs against the
real broker, once per tolerance on the same storage:

1. ``errors.tolerance=none``: the connector stops with one line naming the first refused message
   (by id) and its reason, and nothing of the micro-batch reaches Kafka or the DLQ;
2. ``errors.tolerance=all``: the stopped batch is produced again; every good message and every
   case within the limits is in Kafka exactly once (``read_committed``, compared by key and
   value), and every refused one is exactly one ``dlq/<name>`` row with ``stage`` ``produce``,
   its Java exception name and its reason, word for word.

The Lite source shares the produce stage; its test runs that stage alone on an outbox written by
the test, and also checks the replay the dead letters rely on: a driver that dies after the Kafka
commit and before the dead letters are written leaves a batch whose replay is skipped by the
writer, yet writes them from the refused records its marker lists.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import context, run_once, source_config
from integration.kafka_helpers import consume_all, create_topic
from integration.pubsub_helpers import create_topic_and_subscription, publish, subscription_path
from pubsub_connect.config import loader as cfg
from pubsub_connect.io.tables import TableRef
from pubsub_connect.model.schemas import LITE_KAFKA_OUTBOX
from pubsub_connect.pipelines import lite_source, produce_rejects
from pubsub_connect.pipelines.context import ConnectorError, Stage
from pubsub_connect.pipelines.runner.supervisor import run_stages

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "bad_inputs" / "produce_cases.jsonl"
HOUR_MS = 3_600_000
#: The test topic's limits: compacted (so records need keys), 100 kB records, timestamps at most a
#: day old; ahead of the clock, the broker's default (Kafka 4: one hour) applies.
TOPIC_CONFIG = {"cleanup.policy": "compact", "max.message.bytes": "100000",
                "message.timestamp.before.max.ms": str(24 * HOUR_MS)}
#: What each refusal is reported as, written out here (not taken from the code under test).
REASONS = {
    "INVALID_TIMESTAMP": "Kafka refused the record (INVALID_TIMESTAMP): the record's timestamp is further from the "
                         "broker's clock than the topic accepts (message.timestamp.after.max.ms, "
                         "message.timestamp.before.max.ms)",
    "MSG_SIZE_TOO_LARGE": "Kafka refused the record (MSG_SIZE_TOO_LARGE): the record is larger than the topic's "
                          "max.message.bytes or the producer's message.max.bytes",
    "INVALID_RECORD": "Kafka refused the record (INVALID_RECORD): the broker refused the record (a record without "
                      "a key on a compacted topic, for one)",
}
STOP_ADVICE = "(errors.tolerance=none; set errors.tolerance=all to dead-letter such records)"

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")


def load_cases() -> list[dict[str, Any]]:
    cases = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    assert len({c["name"] for c in cases}) == len(cases), "case names must be unique"
    return cases


def to_bytes(spec: dict[str, Any]) -> bytes:
    if "utf8" in spec:
        return spec["utf8"].encode()
    return (spec["repeat"] * spec["size"]).encode()


def timestamp_ms(spec: dict[str, Any] | None, now_ms: int) -> int | None:
    if spec is None:
        return None
    return int(spec["ms"]) if "ms" in spec else now_ms + int(float(spec["hours_from_now"]) * HOUR_MS)


def detail(code: str, key: bytes | None, value: bytes, stamp: int | None) -> str:
    """The part of a reason about the record itself."""
    if code == "INVALID_TIMESTAMP":
        return f"; the record's timestamp: {stamp} ms"
    if code == "MSG_SIZE_TOO_LARGE":
        return f"; the record's key and value: {len(key or b'') + len(value)} bytes"
    return ""


def digest(value: bytes | None) -> str | None:
    return None if value is None else hashlib.sha256(value).hexdigest()[:16]


def test_cps_source_dead_letters_what_kafka_refuses(spark, kafka_bootstrap: str, tmp_path: Path,
                                                    unique_name: str) -> None:
    cases = load_cases()
    create_topic(kafka_bootstrap, unique_name, config=TOPIC_CONFIG)
    _, subscription = create_topic_and_subscription(unique_name)
    now_ms = int(time.time() * 1000)
    inputs: list[tuple[bytes, dict[str, str], None]] = []
    for i, case in enumerate([*cases, None]):
        inputs.append((f"good-{i}".encode(), {"k": f"good-{i}"}, None))
        if case is not None:
            attributes = {} if "key" in case else {"k": f"case-{i}"}
            stamp = timestamp_ms(case.get("timestamp"), now_ms)
            if stamp is not None:
                attributes["ts"] = str(stamp)
            inputs.append((to_bytes(case["data"]), attributes, None))
    ids = [publish(unique_name, [message])[0] for message in inputs]  # one at a time: publish order
    case_ids = {ids[2 * i + 1]: (case, inputs[2 * i + 1]) for i, case in enumerate(cases)}
    keys = {"kafka.key.attribute": "k", "kafka.timestamp.attribute": "ts", "kafka.record.headers": "true"}

    # errors.tolerance=none: one line naming the first refused message in produce order
    with pytest.raises(ConnectorError) as err:
        run_once(spark, kafka_bootstrap, tmp_path, source_config(unique_name, subscription, unique_name, **keys))
    store = context(spark, kafka_bootstrap, tmp_path).store
    order = {r.message_id: (r.publish_time, r.message_id)
             for r in store.read(TableRef("outbox", unique_name)).select("message_id", "publish_time").collect()}
    refused = {mid: (case, message) for mid, (case, message) in case_ids.items()
               if case["expect"]["outcome"] == "dlq"}
    first = min(refused, key=order.__getitem__)
    case, (data, attributes, _) = refused[first]
    code = case["expect"]["code"]
    key = attributes.get("k", "").encode() or None
    reason = REASONS[code] + detail(code, key, data, timestamp_ms(case.get("timestamp"), now_ms))
    assert str(err.value) == (f"{unique_name} produce: record message_id {first} cannot be produced to "
                              f"{unique_name}: {case['expect']['error_class']}: {reason} {STOP_ADVICE}")
    assert consume_all(kafka_bootstrap, unique_name) == []
    assert store.count(TableRef("dlq", unique_name)) == 0

    # errors.tolerance=all: the same batch again; the good ones once in Kafka, the refused ones in the DLQ
    tolerant = source_config(unique_name, subscription, unique_name, **keys, **{"errors.tolerance": "all"})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, tolerant)
    produced = [(data, attributes) for mid, (data, attributes, _) in zip(ids, inputs, strict=True)
                if mid not in refused]
    got = sorted((r.key, digest(r.value)) for r in consume_all(kafka_bootstrap, unique_name))
    assert got == sorted((a["k"].encode(), digest(d)) for d, a in produced)
    dead = {r.message_id: (r.stage, r.subscription, r.key, digest(r.value), r.attributes, r.error_class,
                           r.error_message) for r in ctx.store.read(TableRef("dlq", unique_name)).collect()}
    expected = {}
    for mid, (case, (data, attributes, _)) in refused.items():
        code = case["expect"]["code"]
        key = attributes.get("k", "").encode() or None
        stamp = timestamp_ms(case.get("timestamp"), now_ms)
        # the record's headers: the attributes but the key's and the timestamp's
        headers = {name: text for name, text in attributes.items() if name not in ("k", "ts")}
        expected[mid] = ("produce", subscription_path(subscription), key, digest(data), headers,
                         case["expect"]["error_class"], REASONS[code] + detail(code, key, data, stamp))
    assert dead == expected
    dead_lettered = {c["name"] for c in cases if c["expect"]["outcome"] == "dlq"}
    assert {case["name"] for case, _ in refused.values()} == dead_lettered


# --------------------------------------------------------------------------------------------
# The Lite source: its produce stage alone, on an outbox written here
# --------------------------------------------------------------------------------------------


def lite_connector(name: str, topic: str, **keys: str) -> cfg.ConnectorConfig:
    return cfg.validate_connector({
        "name": name, "connector.class": "com.google.pubsublite.kafka.source.PubSubLiteSourceConnector",
        "pubsublite.project": "test-project", "pubsublite.location": "us-central1-a",
        "pubsublite.subscription": name, "kafka.topic": topic, **keys}, f"<{name}>")


def lite_outbox_rows(now_ms: int) -> tuple[list[tuple[Any, ...]], dict[int, tuple[str, int | None]]]:
    """Outbox rows of Lite partition 0, offsets 0-6 (Kafka partition = offset % 2); offsets 2, 4
    and 5 are refused: an event time two hours ahead, a value over the topic's 100 kB, one a
    week back. Returns the rows and ``{offset: (code, timestamp ms)}`` of the refused ones."""
    def at(ms: int) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)

    bad = {2: ("INVALID_TIMESTAMP", now_ms + 2 * HOUR_MS), 4: ("MSG_SIZE_TOO_LARGE", now_ms),
           5: ("INVALID_TIMESTAMP", now_ms - 7 * 24 * HOUR_MS)}
    rows = []
    for offset in range(7):
        value = b"v" * 150_000 if offset == 4 else f"lite-{offset}".encode()
        stamp = bad.get(offset, ("", now_ms))[1]
        rows.append((f"k{offset}".encode(), value, [("seq", str(offset).encode())], offset % 2, at(stamp), 0, offset))
    return rows, bad


@pytest.fixture
def no_dead_letters_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The driver 'dies' after the batch's Kafka commit, before its dead letters are written:
    the first call of the dead-letter step raises. Yields the calls seen."""
    calls: list[int] = []
    original = produce_rejects.log_dead_letters

    def dies_once(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the driver died after the Kafka commit")
        original(*args, **kwargs)

    monkeypatch.setattr(produce_rejects, "log_dead_letters", dies_once)
    yield calls


def test_lite_source_dead_letters_survive_a_replay(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str,
                                                   no_dead_letters_once: list[int]) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=2, config={
        "max.message.bytes": "100000", "message.timestamp.before.max.ms": str(24 * HOUR_MS)})
    create_topic(kafka_bootstrap, f"{unique_name}-dlq")
    now_ms = int(time.time() * 1000)
    rows, bad = lite_outbox_rows(now_ms)
    ctx = context(spark, kafka_bootstrap, tmp_path)
    outbox = TableRef("outbox", unique_name)
    ctx.store.ensure(outbox, LITE_KAFKA_OUTBOX)
    ctx.store.append_batch(outbox, spark.createDataFrame(rows, LITE_KAFKA_OUTBOX).coalesce(1), "test", 0)
    produce_only = [Stage("produce", lite_source.produce)]

    # errors.tolerance=none: the first refused record by Lite partition and offset, nothing written
    with pytest.raises(ConnectorError) as err:
        run_stages(context(spark, kafka_bootstrap, tmp_path), lite_connector(unique_name, unique_name), produce_only)
    assert str(err.value) == (
        f"{unique_name} produce: record Lite partition 0 offset 2 cannot be produced to {unique_name}: "
        f"InvalidTimestampException: {REASONS['INVALID_TIMESTAMP']}; the record's timestamp: {now_ms + 2 * HOUR_MS} ms "
        f"{STOP_ADVICE}")
    assert consume_all(kafka_bootstrap, unique_name) == []
    assert no_dead_letters_once == []

    # errors.tolerance=all, and the driver dies after the commit: the good records are in Kafka
    tolerant = lite_connector(unique_name, unique_name, **{
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{unique_name}-dlq"})
    with pytest.raises(ConnectorError, match="the driver died after the Kafka commit"):
        run_stages(context(spark, kafka_bootstrap, tmp_path), tolerant, produce_only)
    good = sorted(offset for offset in range(7) if offset not in bad)

    def in_kafka() -> list[tuple[int, int, bytes]]:
        return sorted((int(dict(r.headers)["seq"]), r.partition, r.key)
                      for r in consume_all(kafka_bootstrap, unique_name))

    assert in_kafka() == [(o, o % 2, f"k{o}".encode()) for o in good]
    dlq = TableRef("dlq", unique_name)
    assert ctx.store.count(dlq) == 0

    # the restart replays the batch: the writer skips it, and its marker's refused records are dead-lettered
    ctx = context(spark, kafka_bootstrap, tmp_path)
    run_stages(ctx, tolerant, produce_only)
    assert in_kafka() == [(o, o % 2, f"k{o}".encode()) for o in good]  # still once each
    dead = sorted((r.stage, r.lite_partition, r.lite_offset, r.key, digest(r.value), [tuple(h) for h in r.headers],
                   r.error_class, r.error_message) for r in ctx.store.read(dlq).collect())
    value = {4: b"v" * 150_000}
    assert dead == [
        ("produce", 0, offset, f"k{offset}".encode(), digest(value.get(offset, f"lite-{offset}".encode())),
         [("seq", str(offset).encode())],
         "InvalidTimestampException" if code == "INVALID_TIMESTAMP" else "RecordTooLargeException",
         REASONS[code] + detail(code, f"k{offset}".encode(), value.get(offset, f"lite-{offset}".encode()), stamp))
        for offset, (code, stamp) in sorted(bad.items())]
    dlq_topic = sorted((r.key, digest(r.value)) for r in consume_all(kafka_bootstrap, f"{unique_name}-dlq"))
    assert dlq_topic == sorted((f"k{o}".encode(), digest(value.get(o, f"lite-{o}".encode()))) for o in bad)
    assert len(no_dead_letters_once) == 2
