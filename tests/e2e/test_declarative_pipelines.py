"""The connectors as Lakeflow Declarative Pipelines, run locally (``pubsub-connect pipeline run``):
the same records through the job variant and the pipeline variant must reach Pub/Sub / Kafka
with the same bytes, and fail the same way.

Each pipeline update runs in a child process with its own Spark (native Kafka and Delta Lake), so
these tests take about a minute per update.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.harness import PROJECT, run_once, sink_config, source_config
from integration.kafka_helpers import Rec, consume_all, create_topic, produce
from integration.pubsub_helpers import (
    assert_no_more_messages,
    create_subscription,
    create_topic_and_subscription,
    publish,
    pull_all,
)
from pubsub_connect.config import loader as cfg
from pubsub_connect.explore import checkpoints, context, tables
from pubsub_connect.io.services.kafka import write_java_properties
from pubsub_connect.io.spark_versions import has_declarative_pipelines
from pubsub_connect.io.tables import DLQ, OUTBOX, TableRef
from pubsub_connect.lakeflow.local import run_pipeline
from pubsub_connect.pipelines.context import PipelineContext

pytestmark = [
    pytest.mark.slow, pytest.mark.usefixtures("pubsub_emulator_host"),
    # On Spark 4.0, `pipeline run` stops with one line instead (tests/unit/test_spark_versions.py).
    pytest.mark.skipif(not has_declarative_pipelines(), reason="declarative pipelines need Spark 4.1 or newer"),
]

SINK_KEYS = {
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
    "headers.publish": "true",
    "metadata.publish": "true",
    "errors.tolerance": "all",
}


def _pipeline(tmp_path: Path, bootstrap: str, connector: dict[str, str],
              lines: list[str] | None = None) -> PipelineContext:
    """``pubsub-connect pipeline run --once`` for ``connector`` (its keys), in this process."""
    connector_file = write_java_properties(tmp_path / f"{connector['name']}.properties", connector, "connector")
    worker_file = write_java_properties(tmp_path / "worker.properties", {
        "bootstrap.servers": bootstrap, "storage.root": str(tmp_path / "storage")}, "worker")
    run_config = cfg.load([connector_file], worker_file)
    sink = lines.append if lines is not None else (lambda _line: None)
    return run_pipeline(run_config, str(connector_file), str(worker_file), [], True, sink)


def _sink_keys(name: str, kafka_topic: str, pubsub_topic: str, **extra: str) -> dict[str, str]:
    return {"name": name, "connector.class": "com.google.pubsub.kafka.sink.CloudPubSubSinkConnector",
            "topics": kafka_topic, "cps.project": PROJECT, "cps.topic": pubsub_topic, "tasks.max": "2",
            **SINK_KEYS, **extra}


def _hash_partition(key: str) -> int:
    from pubsub_connect.model.cps_source.reference import java_string_hash, partition_for_hash

    return partition_for_hash(java_string_hash(key), 3)


def _by_coordinates(messages: list) -> dict[tuple[str, str], tuple[bytes, dict[str, str]]]:
    """Messages by their Kafka partition and offset (metadata attributes), timestamp left out."""
    out = {}
    for m in messages:
        attributes = dict(m.attributes)
        assert int(attributes.pop("kafka.timestamp")) > 1_600_000_000_000
        out[(attributes["kafka.partition"], attributes["kafka.offset"])] = (m.data, attributes)
    return out


@pytest.mark.compat
def test_cps_sink_pipeline_publishes_what_the_job_publishes(spark, kafka_bootstrap: str, tmp_path: Path,
                                                           unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    produce(kafka_bootstrap, unique_name, [
        Rec(b'{"a": 1}', key=b"k1", headers=[("h", b"v")], partition=0),
        Rec(b"not json", key=b"bad", partition=1),
        Rec(b"[1, 2]", key=None, partition=1),
        Rec(None, key=b"tomb", partition=0),
        Rec(b'"text"', key=b"k2", headers=[("x", b"\xff")], partition=0),
    ])
    _, job_subscription = create_topic_and_subscription(f"{unique_name}-job")
    _, pipe_subscription = create_topic_and_subscription(f"{unique_name}-pipe")
    for shape in ("job", "pipe"):
        create_topic(kafka_bootstrap, f"{unique_name}-dlq-{shape}")

    def dlq_topic(shape: str) -> dict[str, str]:
        return {"errors.deadletterqueue.topic.name": f"{unique_name}-dlq-{shape}",
                "errors.deadletterqueue.context.headers.enable": "true"}

    job_config = sink_config(f"{unique_name}-job", unique_name, f"{unique_name}-job", **SINK_KEYS, **dlq_topic("job"))
    job = run_once(spark, kafka_bootstrap, tmp_path / "job", job_config)
    lines: list[str] = []
    pipe = _pipeline(tmp_path, kafka_bootstrap, _sink_keys(f"{unique_name}-pipe", unique_name, f"{unique_name}-pipe",
                                                           **dlq_topic("pipe")), lines)

    from_job = _by_coordinates(pull_all(job_subscription, 4, timeout=60))
    from_pipeline = _by_coordinates(pull_all(pipe_subscription, 4, timeout=60))
    assert from_pipeline == from_job
    common = {"kafka.topic": unique_name}
    assert from_pipeline == {
        ("0", "0"): (b'{"a":1}', {**common, "key": "k1", "h": "v", "kafka.partition": "0", "kafka.offset": "0"}),
        ("1", "1"): (b"[1,2]", {**common, "kafka.partition": "1", "kafka.offset": "1"}),
        ("0", "1"): (b"", {**common, "key": "tomb", "kafka.partition": "0", "kafka.offset": "1"}),
        ("0", "2"): (b"text", {**common, "key": "k2", "x": "\ufffd", "kafka.partition": "0", "kafka.offset": "2"}),
    }
    assert_no_more_messages(pipe_subscription, wait=1.0)

    columns = ["stage", "topic", "partition", "offset", "key", "value", "error_class", "error_message"]
    job_dlq = [tuple(r) for r in job.store.read(TableRef(DLQ, f"{unique_name}-job")).select(*columns).collect()]
    pipe_dlq = [tuple(r) for r in pipe.store.read(TableRef(DLQ, f"{unique_name}-pipe")).select(*columns).collect()]
    assert pipe_dlq == job_dlq
    assert [row[:6] for row in pipe_dlq] == [("convert", unique_name, 1, 0, b"bad", b"not json")]
    assert pipe_dlq[0][6] == "ConverterError"
    # Connect's dead-letter topic: the same record, the same context headers but for the connector's name
    (job_letter,), (pipe_letter,) = (consume_all(kafka_bootstrap, f"{unique_name}-dlq-{s}") for s in ("job", "pipe"))
    assert (pipe_letter.key, pipe_letter.value) == (job_letter.key, job_letter.value) == (b"bad", b"not json")
    name_header = "__connect.errors.connector.name"
    assert [(k, v) for k, v in pipe_letter.headers if k != name_header] == [
        (k, v) for k, v in job_letter.headers if k != name_header]
    assert dict(pipe_letter.headers)[name_header] == f"{unique_name}-pipe".encode()
    assert dict(pipe_letter.headers)["__connect.errors.offset"] == b"0"

    progress = [line for line in lines if line.startswith(f"[{unique_name}-pipe.pipeline]")]
    assert (progress[0], progress[-1]) == (f"[{unique_name}-pipe.pipeline] update started",
                                           f"[{unique_name}-pipe.pipeline] update completed")
    assert sorted(progress[1:-1]) == sorted(  # flows finish in any order
        [f"[{unique_name}-pipe.pipeline] {kind}_{unique_name}_pipe completed" for kind in ("bronze", "dlq", "outbox")]
        + [f"[{unique_name}-pipe.pipeline] dlq_topic_dlq_{unique_name}_pipe_flow completed"])

    # a second update (the tables exist now) takes only the new records
    produce(kafka_bootstrap, unique_name, [Rec(b"3", key=b"k3", partition=1)])
    _pipeline(tmp_path, kafka_bootstrap, _sink_keys(f"{unique_name}-pipe", unique_name, f"{unique_name}-pipe",
                                                    **dlq_topic("pipe")))
    (latest,) = pull_all(pipe_subscription, 1, timeout=60)
    assert (latest.data, latest.attributes["kafka.offset"], latest.attributes["key"]) == (b"3", "2", "k3")
    assert_no_more_messages(pipe_subscription, wait=1.0)
    outbox = pipe.store.read(TableRef(OUTBOX, f"{unique_name}-pipe")).select("partition", "offset").collect()
    # the Kafka coordinates of every record published, each once (the dead letter 1/0 is not one)
    assert sorted(tuple(row) for row in outbox) == [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2)]
    # what the explore notebook shows for the pipeline's tables
    ref = context.connector_ref(str(tmp_path / f"{unique_name}-pipe.properties"))
    store = context.open_store(str(tmp_path / "storage"), spark=spark, shape="pipeline", connector=ref)
    assert tables.table_counts(store, ref.name) == {"bronze": 6, "outbox": 5, "dlq": 1}
    assert [s.stage for s in checkpoints.connector_checkpoints(store, ref)] == ["publish"]


def test_cps_source_pipeline_produces_what_the_job_produces(spark, kafka_bootstrap: str, tmp_path: Path,
                                                          unique_name: str) -> None:
    topic, job_subscription = create_topic_and_subscription(unique_name)
    pipe_subscription = create_subscription(topic, f"{unique_name}-pipe")
    for kafka_topic in (f"{unique_name}-job", f"{unique_name}-pipe"):
        create_topic(kafka_bootstrap, kafka_topic, partitions=3)
    ids = publish(unique_name, [
        (b"one", {"k": "jumped", "ts": "1234567890", "colour": "red"}, None),
        (b"two", {"k": "dog"}, None),
        (b"three", {"k": "polygenelubricants", "shape": "round"}, None),
        (b"bad time", {"k": "x", "ts": "-2"}, None),
        (b"no key", {}, None),
    ])
    keys = {"kafka.key.attribute": "k", "kafka.timestamp.attribute": "ts", "kafka.partition.scheme": "hash_key",
            "kafka.partition.count": "3", "kafka.record.headers": "true", "errors.tolerance": "all"}

    job = run_once(spark, kafka_bootstrap, tmp_path / "job",
                   source_config(f"{unique_name}-job", job_subscription, f"{unique_name}-job", **keys))
    pipe = _pipeline(tmp_path, kafka_bootstrap, {
        "name": f"{unique_name}-pipe", "connector.class": "com.google.pubsub.kafka.source.CloudPubSubSourceConnector",
        "cps.project": PROJECT, "cps.subscription": pipe_subscription, "kafka.topic": f"{unique_name}-pipe",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter", **keys})

    def records(kafka_topic: str) -> dict[bytes, tuple]:
        got = consume_all(kafka_bootstrap, kafka_topic)
        assert len(got) == 4
        return {r.value: (r.key, sorted(r.headers or []), r.partition, r.timestamp_ms) for r in got}

    from_job, from_pipeline = records(f"{unique_name}-job"), records(f"{unique_name}-pipe")
    assert from_pipeline == from_job
    assert from_pipeline == {
        b"one": (b"jumped", [("colour", b"red"), ("ts", b"1234567890")], _hash_partition("jumped"), 1234567890),
        b"two": (b"dog", [], _hash_partition("dog"), from_pipeline[b"two"][3]),
        b"three": (b"polygenelubricants", [("shape", b"round")], 0, from_pipeline[b"three"][3]),
        b"no key": (None, [], 0, from_pipeline[b"no key"][3]),  # hash_key without a key: partition 0
    }

    columns = ["stage", "message_id", "key", "value", "attributes", "error_class", "error_message"]
    job_dlq = [r.asDict() for r in job.store.read(TableRef(DLQ, f"{unique_name}-job")).select(*columns).collect()]
    pipe_dlq = [r.asDict() for r in pipe.store.read(TableRef(DLQ, f"{unique_name}-pipe")).select(*columns).collect()]
    assert pipe_dlq == job_dlq
    assert [(r["message_id"], r["value"], r["error_class"]) for r in pipe_dlq] == [
        (ids[3], b"bad time", "InvalidTimestampError")]
