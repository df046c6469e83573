"""The Lite connectors as Lakeflow Declarative Pipelines, through the CLI as a user runs them
(``pubsub-connect pipeline run --once``), against the job variant (``pubsub-connect run --once``)
on the same input: the local Lite server and a real Apache Kafka broker.

Prepared once (one job run of both connectors, one pipeline run of each), then compared: the
same Lite messages per partition from the sink, the same Kafka records from the source except
where the pipeline spreads keyless records by a hash of their Lite position (a streaming table
has no round-robin counter).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from e2e.test_lite_sink import JSON, STRING, cli, lite_path, produce_records, write_connector, write_worker
from e2e.test_lite_source import message
from integration.kafka_helpers import consume_all, create_topic
from lite_server import LiteServer

pytestmark = pytest.mark.slow

SINK_RECORDS = [
    {"key": b"dog", "value": b'{"schema": {"type": "string"}, "payload": "fox"}', "partition": 0, "timestamp": 50001,
     "headers": [("h", b"1"), ("other", b"x"), ("h", b"2")]},
    {"key": b"cat", "value": b'{"schema": {"type": "int64"}, "payload": 5}', "partition": 1, "timestamp": 50002},
    {"key": None, "value": b'{"schema": {"type": "boolean"}, "payload": true}', "partition": 1, "timestamp": 50003},
    {"key": b"cat", "value": b"not json", "partition": 0, "timestamp": 50004},  # dead letter
]
SOURCE_MESSAGES = {
    0: [message(b"", b"keyless-0", {"b": [b"2"], "a": [b"1", b"x"]}, event_ms=50_001), message(b"fox", b"fox-0")],
    1: [message(b"dog", b"dog-1"), message(b"", b"keyless-1"), message(b"", b"keyless-2")],
}


@pytest.fixture(scope="module")
def runs(lite: LiteServer, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp_path: Path = tmp_path_factory.mktemp("lite-pipelines")
    tag = f"t{uuid.uuid4().hex[:8]}"
    names = {(kind, shape): f"{tag}-{kind}-{shape}" for kind in ("sink", "source") for shape in ("job", "pipe")}
    create_topic(kafka_bootstrap, f"{tag}-in", partitions=2)
    produce_records(kafka_bootstrap, f"{tag}-in", SINK_RECORDS)
    lite_topic = lite_path("topics", f"{tag}-lite")
    lite.create_topic(lite_topic, 2)
    for partition, batch in SOURCE_MESSAGES.items():
        lite.publish(lite_topic, partition, batch)
    files = {}
    for shape in ("job", "pipe"):
        sink, source = names["sink", shape], names["source", shape]
        lite.create_topic(lite_path("topics", sink), 2)
        lite.create_subscription(lite_path("subscriptions", source), lite_topic)
        create_topic(kafka_bootstrap, source, partitions=3)
        files["sink", shape] = write_connector(tmp_path, sink, lite, **{
            "connector.class": "PubSubLiteSinkConnector", "topics": f"{tag}-in", "pubsublite.topic": sink,
            "key.converter": STRING, "value.converter": JSON, "errors.tolerance": "all"})
        files["source", shape] = write_connector(tmp_path, source, lite, **{
            "connector.class": "PubSubLiteSourceConnector", "pubsublite.subscription": source,
            "kafka.topic": source})
    worker, root = write_worker(tmp_path, kafka_bootstrap)
    outputs = {}
    result = cli(["run", "--once", "--worker", str(worker), str(files["sink", "job"]), str(files["source", "job"])],
                 lite)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    for kind in ("sink", "source"):
        result = cli(["pipeline", "run", "--once", "--worker", str(worker), str(files[kind, "pipe"])], lite)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
        outputs[kind] = result.stdout
    return {"names": names, "root": root, "stdout": outputs}


def _published(lite: LiteServer, topic: str) -> dict[int, list[tuple]]:
    out = {}
    for partition in range(2):
        out[partition] = [(m.message.key, m.message.data, {k: list(v.values) for k, v in m.message.attributes.items()},
                           m.message.event_time.ToMilliseconds()) for m in lite.messages(lite_path("topics", topic),
                                                                                           partition)]
    return out


def test_lite_sink_pipeline_publishes_what_the_job_publishes(runs: dict[str, Any], lite: LiteServer) -> None:
    names = runs["names"]
    from_job, from_pipeline = _published(lite, names["sink", "job"]), _published(lite, names["sink", "pipe"])

    def without_own_name(published: dict[int, list[tuple]]) -> tuple[dict[int, list[tuple]], list[tuple]]:
        """Keyed messages per Lite partition (SHA-256 of the key: the same in every run); keyless
        ones without their partition: Lite's routing starts their round-robin at a random one."""
        def shown(k, d, attrs, t) -> tuple:
            return k, d, {a: v for a, v in attrs.items() if a != "x-goog-pubsublite-source-kafka-topic"}, t
        keyed = {p: sorted(shown(*m) for m in messages if m[0]) for p, messages in published.items()}
        keyless = sorted((shown(*m) for messages in published.values() for m in messages if not m[0]),
                         key=lambda m: (m[1], m[3]))
        return keyed, keyless

    assert without_own_name(from_pipeline) == without_own_name(from_job)
    # the three records that are JSON, each once (by their Kafka timestamps); the fourth is a dead letter
    assert sorted(m[3] for messages in from_pipeline.values() for m in messages) == [50001, 50002, 50003]
    stdout = runs["stdout"]["sink"]
    pipe = names["sink", "pipe"].replace("-", "_")
    assert f"[{names['sink', 'pipe']}.pipeline] update completed" in stdout
    assert f"[{names['sink', 'pipe']}.pipeline] dlq_{pipe} completed" in stdout
    assert f"[{names['sink', 'pipe']}.publish] batch=0 records=3" in stdout


def test_lite_source_pipeline_produces_what_the_job_produces(runs: dict[str, Any], spark,
                                                            kafka_bootstrap: str) -> None:
    from pyspark.sql import functions as F

    names = runs["names"]

    def records(topic: str) -> dict[bytes, tuple]:
        got = consume_all(kafka_bootstrap, topic)
        # every Lite message became one record: its data, each once
        assert sorted(r.value for r in got) == sorted(m.data for ms in SOURCE_MESSAGES.values() for m in ms)
        return {r.value: (r.key, r.headers or [], r.timestamp_ms, r.partition) for r in got}

    from_job, from_pipeline = records(names["source", "job"]), records(names["source", "pipe"])
    assert {v: r[:3] for v, r in from_pipeline.items()} == {v: r[:3] for v, r in from_job.items()}
    keyed = (b"fox-0", b"dog-1")
    assert {v: from_pipeline[v][3] for v in keyed} == {v: from_job[v][3] for v in keyed}
    # keyless records: the pipeline's spread, pmod(xxhash64(lite partition, lite offset), partitions)
    positions = {b"keyless-0": (0, 0), b"keyless-1": (1, 1), b"keyless-2": (1, 2)}
    expected = spark.createDataFrame([(v, p, o) for v, (p, o) in positions.items()], "v binary, p long, o long") \
        .select("v", F.pmod(F.xxhash64("p", "o"), F.lit(3)).cast("int").alias("partition")).collect()
    assert {v: from_pipeline[v][3] for v in positions} == {bytes(r.v): r.partition for r in expected}
    assert from_pipeline[b"keyless-0"][:3] == (None, [("a", b"MQ=="), ("a", b"eA=="), ("b", b"Mg==")], 50_001)
