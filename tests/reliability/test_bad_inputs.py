"""Bad-input corpus for the Cloud Pub/Sub sink, end to end (reliability suite).

The corpus is data: ``fixtures/bad_inputs/cases.jsonl`` (one case per line) and ``groups.json``
(the converter settings each case is read with, and the good record interleaved with the cases).
See ``fixtures/bad_inputs/README.md`` for the format and the decisions behind the expectations.

Why a test per *group* rather than per case: every connector run costs Spark micro-batches, so
each group (one converter setting) is produced to one Kafka topic — good record, case, good
record, case, …, good record — and driven through the real broker, Delta and Google's Pub/Sub
emulator, the way a user would meet it:

1. (two groups, see :data:`STOP_GROUPS`) ``errors.tolerance=none`` (Connect's default): the run
   stops with one line naming the first bad record's coordinates, and nothing of that
   micro-batch reaches the outbox, the DLQ or Pub/Sub;
2. (every group; for those of step 1 the same connector on the same storage)
   ``errors.tolerance=all``: a stopped batch is reprocessed, every
   bad case lands in ``dlq/<name>`` with its coordinates, raw bytes and reason, and every good
   record and every "published anyway" case reaches Pub/Sub — exact counts, exact bodies and
   attributes.

A fast test also holds every expectation against the per-record reference mapping, so a wrong
expectation in the corpus shows up without services.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import context, run_once, sink_config
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import assert_no_more_messages, create_topic_and_subscription, pull_all
from pubsub_connect.io.tables import TableRef
from pubsub_connect.model.connect import DataError
from pubsub_connect.model.cps_sink.reference import CpsSinkMapper
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.cps_sink import sink_settings

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "bad_inputs"
OUTCOMES = ("dlq", "published", "nothing")
#: The kinds of bad input named explicitly; the corpus must keep covering each (case names).
REQUIRED_CASES = (
    "json_truncated", "json_payload_type_mismatch", "integer_3_bytes", "value_11_mb", "headers_150",
    "header_key_300_bytes", "key_non_utf8", "null_everything", "json_unknown_field_type", "json_nested_struct",
)
#: The Kafka producer's and the topic's default limits are 1 MB; the corpus goes to 11 MB.
BIG_PRODUCER = {"message.max.bytes": 20_000_000, "linger.ms": 0}
BIG_TOPIC = {"max.message.bytes": "20000000"}
#: Groups that also run with ``errors.tolerance=none`` first: one per convert implementation
#: (JSON goes through ``mapInArrow`` and the reference code, bytes/strings through column
#: expressions; the bytes group's first bad record is the 11 MB value). Each stop costs a
#: failing convert micro-batch and query restarts (20-40 s on a loaded 2-core machine), so the
#: other groups skip it.
STOP_GROUPS = ("json_schemas", "bytes")


# --------------------------------------------------------------------------------------------
# Reading the corpus
# --------------------------------------------------------------------------------------------


def fmt(spec: Any, i: int) -> Any:
    """Fill ``{i}`` in every string of a good-record template (``{{``/``}}`` stay literal)."""
    if isinstance(spec, str):
        return spec.format(i=i)
    if isinstance(spec, list):
        return [fmt(item, i) for item in spec]
    if isinstance(spec, dict):
        return {fmt(k, i): fmt(v, i) for k, v in spec.items()}
    return spec


def to_bytes(spec: Any) -> bytes | None:
    """A byte spec: ``null``, ``{"utf8"}``, ``{"hex"}``, ``{"json"}`` (compact), or ``{"repeat", "size"}``
    (generated here so that large values are never committed)."""
    if spec is None:
        return None
    if "utf8" in spec:
        return spec["utf8"].encode("utf-8")
    if "hex" in spec:
        return bytes.fromhex(spec["hex"])
    if "json" in spec:
        return json.dumps(spec["json"], separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if "repeat" in spec:
        unit = spec["repeat"].encode("utf-8")
        return (unit * (spec["size"] // len(unit) + 1))[: spec["size"]]
    raise ValueError(f"unknown byte spec {spec!r}")


def to_headers(spec: Any) -> list[tuple[str, bytes | None]] | None:
    if spec is None:
        return None
    if isinstance(spec, dict):
        gen = spec["generate"]
        return [(gen["key"].format(n=n), gen["value"].format(n=n).encode()) for n in range(gen["count"])]
    out: list[tuple[str, bytes | None]] = []
    for name, value in spec:
        key = name if isinstance(name, str) else (to_bytes(name) or b"").decode("utf-8")
        out.append((key, to_bytes(value)))
    return out


@dataclass(frozen=True)
class Expected:
    """What must become of a record: dead-lettered (class + reason), published (body +
    attributes), or nothing at all."""

    outcome: str
    error_class: str | None = None
    reason: str | None = None
    data: bytes | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    skipped_headers: int = 0


@dataclass(frozen=True)
class Case:
    name: str
    group: str
    why: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    expect: Expected

    def rec(self) -> Rec:
        return Rec(self.value, key=self.key, headers=self.headers, partition=0)


def _expected(raw: dict[str, Any]) -> Expected:
    return Expected(raw["outcome"], raw.get("error_class"), raw.get("reason"), to_bytes(raw.get("data")),
                    dict(raw.get("attributes") or {}), int(raw.get("skipped_headers", 0)))


def load_groups() -> dict[str, dict[str, Any]]:
    return json.loads((CORPUS / "groups.json").read_text(encoding="utf-8"))


def load_cases() -> list[Case]:
    cases = []
    for line in (CORPUS / "cases.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            raw = json.loads(line)
            cases.append(Case(raw["name"], raw["group"], raw["why"], to_bytes(raw["key"]), to_bytes(raw["value"]),
                              to_headers(raw.get("headers")), _expected(raw["expect"])))
    return cases


def good_record(group: dict[str, Any], i: int) -> tuple[Rec, Expected]:
    spec = fmt(group["good"], i)
    return (Rec(to_bytes(spec["value"]), key=to_bytes(spec["key"]), partition=0),
            Expected("published", data=to_bytes(spec["data"]), attributes=spec["attributes"]))


def group_records(group: dict[str, Any], cases: list[Case]) -> Iterator[tuple[int, Rec, Expected, str]]:
    """``(offset, record, expectation, label)`` in produce order: good, case, good, case, …, good."""
    offset = 0
    for i, case in enumerate(cases):
        rec, exp = good_record(group, i)
        yield offset, rec, exp, f"good-{i}"
        yield offset + 1, case.rec(), case.expect, case.name
        offset += 2
    rec, exp = good_record(group, len(cases))
    yield offset, rec, exp, f"good-{len(cases)}"


def connector_keys(group: dict[str, Any]) -> dict[str, str]:
    return dict(group["connector"])


GROUPS = load_groups()
CASES = load_cases()


def cases_of(group: str) -> list[Case]:
    return [c for c in CASES if c.group == group]


# --------------------------------------------------------------------------------------------
# The corpus itself, and the reference mapping (no services)
# --------------------------------------------------------------------------------------------


def test_corpus_is_complete() -> None:
    names = [c.name for c in CASES]
    assert len(CASES) >= 30
    assert len(set(names)) == len(names), "case names must be unique (they name DLQ rows in failures)"
    assert set(REQUIRED_CASES) <= set(names)
    assert {c.group for c in CASES} == set(GROUPS)
    for case in CASES:
        assert case.expect.outcome in OUTCOMES, case.name
        assert case.why, case.name
        if case.expect.outcome == "dlq":
            assert case.expect.error_class and case.expect.reason, case.name
    assert len(to_bytes({"repeat": "x", "size": 11_000_000}) or b"") == 11_000_000


def _fingerprint(data: bytes, attributes: dict[str, str]) -> tuple[int, bytes, str, tuple[tuple[str, str], ...]]:
    """Comparable and readable in a failure: size, head, digest, sorted attributes."""
    return len(data), data[:24], hashlib.sha256(data).hexdigest()[:16], tuple(sorted(attributes.items()))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reference_mapping_agrees_with_the_corpus(case: Case) -> None:
    """The per-record reference gives each case its documented outcome (a wrong expectation in
    the corpus fails here in milliseconds, not in the end-to-end run)."""
    settings = sink_settings(sink_config("ref", "t", "t", **connector_keys(GROUPS[case.group])))
    mapper = CpsSinkMapper(settings)
    expect = case.expect
    try:
        result = mapper.map_values(case.key, case.value, "t", 0, 1, 0, case.headers)
    except DataError as e:
        assert expect.outcome == "dlq", f"{case.name}: unexpected {e.error_class}: {e}"
        assert (e.error_class, expect.reason in str(e)) == (expect.error_class, True), str(e)
        return
    assert expect.outcome != "dlq", f"{case.name}: expected {expect.error_class}, got a result"
    if expect.outcome == "nothing":
        assert result.message is None
        return
    assert result.message is not None
    assert _fingerprint(result.message.data, result.message.attributes) == _fingerprint(
        expect.data or b"", expect.attributes)
    assert result.skipped_headers == expect.skipped_headers


# --------------------------------------------------------------------------------------------
# End to end: real broker, Delta tables, Pub/Sub emulator
# --------------------------------------------------------------------------------------------


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _dlq_rows(spark: Any, bootstrap: str, root: Path, name: str) -> dict[int, Any]:
    """The DLQ rows by offset; raw bytes as digests (the 11 MB value stays out of failure output)."""
    from pyspark.sql import functions as F

    store = context(spark, bootstrap, root).store
    rows = store.read(TableRef("dlq", name)).select(
        "stage", "topic", "partition", "offset", "error_class", "error_message",
        F.sha2("key", 256).alias("key_sha"), F.sha2("value", 256).alias("value_sha")).collect()
    by_offset = {int(r.offset): r for r in rows}
    assert len(by_offset) == len(rows), "a record was dead-lettered twice"
    return by_offset


def _count(spark: Any, bootstrap: str, root: Path, kind: str, name: str) -> int:
    return context(spark, bootstrap, root).store.count(TableRef(kind, name))


@pytest.mark.usefixtures("pubsub_emulator_host")
@pytest.mark.parametrize("group", list(GROUPS),
                         ids=[f"{g}-none-then-all" if g in STOP_GROUPS else f"{g}-all" for g in GROUPS])
def test_corpus_end_to_end(spark: Any, kafka_bootstrap: str, tmp_path: Path, unique_name: str, group: str) -> None:
    """One group of the corpus through broker → bronze → convert → outbox/DLQ → Pub/Sub."""
    cases = cases_of(group)
    records = list(group_records(GROUPS[group], cases))
    create_topic(kafka_bootstrap, unique_name, config=BIG_TOPIC)
    produce(kafka_bootstrap, unique_name, [rec for _, rec, _, _ in records], config=BIG_PRODUCER)
    _, subscription = create_topic_and_subscription(unique_name)
    keys = connector_keys(GROUPS[group])

    if group in STOP_GROUPS:
        # 1. errors.tolerance=none: one line naming the first bad record, nothing of its batch written.
        first_offset, first = next((off, exp) for off, _, exp, _ in records if exp.outcome == "dlq")
        with pytest.raises(ConnectorError) as err:
            run_once(spark, kafka_bootstrap, tmp_path, sink_config(unique_name, unique_name, unique_name, **keys))
        message = str(err.value)
        assert message.startswith(
            f"{unique_name} convert: record {unique_name}/0@{first_offset} cannot be converted: "
            f"{first.error_class}: "), message
        assert first.reason in message and "errors.tolerance=none" in message
        assert "\n" not in message and len(message) < 600, message
        assert _count(spark, kafka_bootstrap, tmp_path, "outbox", unique_name) == 0
        assert _count(spark, kafka_bootstrap, tmp_path, "dlq", unique_name) == 0
        assert_no_more_messages(subscription, wait=0.5)

    # 2. (The same connector with) errors.tolerance=all: a stopped batch is reprocessed.
    run_once(spark, kafka_bootstrap, tmp_path,
             sink_config(unique_name, unique_name, unique_name, **keys, **{"errors.tolerance": "all"}))

    dead = {off: (label, rec, exp) for off, rec, exp, label in records if exp.outcome == "dlq"}
    assert dead, "the corpus has no dead letter case: the checks below would pass on nothing"
    rows = _dlq_rows(spark, kafka_bootstrap, tmp_path, unique_name)
    assert sorted(rows) == sorted(dead), {o: dead.get(o, ("?",))[0] for o in set(rows) ^ set(dead)}
    for offset, (label, rec, exp) in dead.items():
        row = rows[offset]
        assert (row.stage, row.topic, row.partition, row.error_class) == (
            "convert", unique_name, 0, exp.error_class), label
        assert exp.reason in row.error_message and "\n" not in row.error_message, (label, row.error_message)
        assert (row.key_sha, row.value_sha) == (_sha(rec.key), _sha(rec.value)), f"{label}: raw bytes differ"

    wanted = [(label, exp) for _, _, exp, label in records if exp.outcome == "published"]
    expected = sorted(_fingerprint(exp.data or b"", exp.attributes) for _, exp in wanted)
    # batch_size 100: the corpus publishes a message of 9,996,000 bytes, so one pull answer of
    # many such messages would be very large.
    pulled = pull_all(subscription, len(wanted), timeout=120, batch_size=100)
    got = sorted(_fingerprint(m.data, m.attributes) for m in pulled)
    assert got == expected
    assert_no_more_messages(subscription, wait=1.0)
    assert _count(spark, kafka_bootstrap, tmp_path, "outbox", unique_name) == len(wanted)
    nothing = [label for _, _, exp, label in records if exp.outcome == "nothing"]
    assert len(wanted) + len(dead) + len(nothing) == len(records)
