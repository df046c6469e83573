"""Every connector end to end on a Spark standalone cluster, with proof that its stages ran in
executors — processes of their own, launched by the workers — and not in the driver.

Each test is a scenario of the local end-to-end tests (``tests/e2e``) run again with
``spark.master=spark://…``, checked by the very same assertions: the e2e test functions
themselves are called — for the Cloud Pub/Sub connectors and the archive with their in-process
run swapped for a ``pubsub-connect run`` on the cluster (:mod:`cluster.runs`); for the Lite
connectors, whose local tests already run the CLI, on a scenario prepared with their helpers.
So the outputs must be exactly the local ones. Then the placement is
checked (:func:`cluster.evidence.placement_problems`): every stage that is a streaming query ran
its tasks on executors, each data-path call (Pub/Sub pull and publish, Lite subscribe and
publish, Kafka produce, archive object writes) happened in an executor's Python worker, and the
driver never received message content from a DataFrame.

Outputs and placement are independent findings: a test reports both when both fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import e2e.test_archive as archive_e2e
import e2e.test_cps_sink as cps_sink_e2e
import e2e.test_cps_source as cps_source_e2e
import e2e.test_lite_sink as lite_sink_e2e
import e2e.test_lite_source as lite_source_e2e
from cluster.evidence import Io, files_written, grpc_call, kafka_produce, placement_problems, summary
from cluster.runs import ClusterRunner, properties_text
from e2e.test_lite_sink import (
    JSON,
    KAFKA_MODE_RECORDS,
    MODEL_RECORDS,
    STRING,
    lite_path,
    produce_records,
    write_connector,
    write_worker,
)
from e2e.test_lite_source import model_messages, source_connector
from integration.kafka_helpers import create_topic
from lite_server import LiteServer
from pubsub_connect.config.properties import read_properties

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

PUBSUB_PUBLISH = "/google.pubsub.v1.Publisher/Publish"
LITE_PUBLISH = "/google.cloud.pubsublite.v1.PublisherService/Publish"
LITE_SUBSCRIBE = "/google.cloud.pubsublite.v1.SubscriberService/Subscribe"


def check_on_cluster(runner: ClusterRunner, connectors: Sequence[str], scenario: Callable[[], object],
                     spark_stages: Sequence[str], io: Sequence[Io]) -> None:
    """Run ``scenario`` (setup, runs on the cluster, the local test's assertions), then check
    where the work of ``connectors`` ran; fail naming every wrong output and every misplaced
    stage."""
    failure: Exception | None = None
    try:
        scenario()
    except Exception as exc:  # an output assertion or a failed run: reported with the placement
        failure = exc
    report = summary(runner.runs, connectors)
    print("\n".join(report))
    if not runner.runs:
        raise AssertionError("the scenario made no run on the cluster") from failure
    problems = placement_problems(runner.runs, connectors, spark_stages, io)
    if failure is None and not problems:
        return
    parts = []
    if failure is not None:
        parts.append(f"outputs: {type(failure).__name__}: {failure}")
    if problems:
        parts.append("not in executors:\n  " + "\n  ".join(problems))
    parts.append("runs:\n  " + "\n  ".join(report))
    raise AssertionError("\n".join(parts)) from failure


def lite_env(lite: LiteServer) -> dict[str, str]:
    """What the Lite clients need in driver and executors: trust in the server's certificate."""
    return lite.client_env({})


def test_cps_sink(cluster_runner: ClusterRunner, kafka_bootstrap: str, pubsub_emulator_host: str, tmp_path: Path,
                  unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka → Pub/Sub: bytes values, key, metadata and header attributes (exact messages and
    progress lines); ingest, convert and publish in executors."""
    monkeypatch.setattr(cps_sink_e2e, "run_once", cluster_runner.run_once)
    check_on_cluster(
        cluster_runner, [unique_name],
        lambda: cps_sink_e2e.test_bytes_values_with_key_metadata_and_headers(
            None, kafka_bootstrap, tmp_path, unique_name),
        spark_stages=("ingest", "convert", "publish"),
        io=[grpc_call("publish", PUBSUB_PUBLISH)])


def test_cps_source(cluster_runner: ClusterRunner, kafka_bootstrap: str, pubsub_emulator_host: str, tmp_path: Path,
                    unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pub/Sub → Kafka: the data model examples (round robin, key and timestamp attributes);
    convert and produce in executors. The pull stage's pullers are Pub/Sub clients in the driver
    by design (Pub/Sub cannot be replayed by offset, so they are not a Spark source)."""
    monkeypatch.setattr(cps_source_e2e, "run_once", cluster_runner.run_once)
    check_on_cluster(
        cluster_runner, [unique_name],
        lambda: cps_source_e2e.test_data_model_examples(None, kafka_bootstrap, tmp_path, unique_name),
        spark_stages=("convert", "produce"),
        io=[kafka_produce("produce", unique_name)])


def test_lite_sink(cluster_runner: ClusterRunner, lite: LiteServer, kafka_bootstrap: str, tmp_path: Path,
                   unique_name: str) -> None:
    """Kafka → Lite: the data model with default routing and the DLQ, and ordering mode KAFKA,
    as one run of two connectors; ingest, convert and publish in executors."""
    names = {"model": f"{unique_name}-m", "kafka_mode": f"{unique_name}-k"}

    def scenario() -> None:
        for scenario, lite_partitions in (("model", 3), ("kafka_mode", 4)):
            lite.create_topic(lite_path("topics", names[scenario]), lite_partitions)
            create_topic(kafka_bootstrap, names[scenario], partitions=3)
        produce_records(kafka_bootstrap, names["model"], MODEL_RECORDS)
        produce_records(kafka_bootstrap, names["kafka_mode"], KAFKA_MODE_RECORDS)
        worker, root = write_worker(tmp_path, kafka_bootstrap)
        base = {"connector.class": "com.google.pubsublite.kafka.sink.PubSubLiteSinkConnector", "tasks.max": "2"}
        files = [
            write_connector(tmp_path, names["model"], lite, **base, topics=names["model"], **{
                "pubsublite.topic": names["model"], "key.converter": STRING, "value.converter": JSON,
                "errors.tolerance": "all"}),
            write_connector(tmp_path, names["kafka_mode"], lite, **base, topics=names["kafka_mode"], **{
                "pubsublite.topic": names["kafka_mode"], "pubsublite.ordering.mode": "kafka"}),
        ]
        run = cluster_runner.run(read_properties(worker), files, env=lite_env(lite))
        assert run.returncode == 0, run.tail()
        result: dict[str, Any] = {"names": names, "root": root, "result": run}
        lite_sink_e2e.test_data_model_and_default_routing(lite, result)
        lite_sink_e2e.test_kafka_ordering_mode(lite, result)

    check_on_cluster(cluster_runner, list(names.values()), scenario, spark_stages=("ingest", "convert", "publish"),
                     io=[grpc_call("publish", LITE_PUBLISH)])


def test_lite_source(cluster_runner: ClusterRunner, lite: LiteServer, kafka_bootstrap: str, tmp_path: Path,
                     unique_name: str) -> None:
    """Lite → Kafka: message → record mapping, key routing, per-partition flow control of each
    pull batch and committed cursors; pull, convert and produce in executors."""
    name = unique_name

    def scenario() -> None:
        topic = lite_path("topics", name)
        lite.create_topic(topic, 3)
        lite.create_subscription(lite_path("subscriptions", name), topic)
        create_topic(kafka_bootstrap, name, partitions=4)
        for partition, batch in model_messages().items():
            lite.publish(topic, partition, batch)
        worker, root = write_worker(tmp_path, kafka_bootstrap, **{
            "pipeline.max.records.per.batch": "100", "pipeline.trigger.interval.ms": "100"})
        connector = source_connector(tmp_path, name, lite, name, **{
            "pubsublite.partition_flow_control.messages": "3", "pubsublite.partition_flow_control.bytes": "250"})
        run = cluster_runner.run(read_properties(worker), [connector], env=lite_env(lite))
        assert run.returncode == 0, run.tail()
        result = {"names": {"model": name}, "root": root}
        lite_source_e2e.test_message_to_record_mapping(lite, kafka_bootstrap, result)
        lite_source_e2e.test_same_key_same_partition_null_keys_round_robin(lite, kafka_bootstrap, result)
        lite_source_e2e.test_partition_flow_control_bounds_each_pull_batch(lite, result)
        lite_source_e2e.test_cursors_are_committed_after_bronze(lite, result)

    check_on_cluster(cluster_runner, [name], scenario, spark_stages=("pull", "convert", "produce"),
                     io=[grpc_call("pull", LITE_SUBSCRIBE), kafka_produce("produce", name)])


def test_archive(cluster_runner: ClusterRunner, kafka_bootstrap: str, tmp_path: Path, unique_name: str,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka → Block-GZIP files in a local directory: record-time date folders and rotation,
    resume after the last file, the missing buffer directory error; the archive stage (reading
    Kafka and writing the objects) in executors."""

    def run_archive(tmp: Path, bootstrap: str, properties: dict[str, str], max_records: int = 100_000) -> None:
        connector_file = tmp / f"archive-{len(cluster_runner.runs) + 1}.properties"
        connector_file.write_text(properties_text(properties))
        cluster_runner.run_properties(bootstrap, tmp / "storage", connector_file,
                                      audit_writes=[Path(properties["output.path"])],
                                      **{"pipeline.max.records.per.batch": str(max_records)})

    monkeypatch.setattr(archive_e2e, "_run_in_process", run_archive)
    check_on_cluster(
        cluster_runner, ["archive-local"],
        lambda: archive_e2e.test_local_target_record_time_folders_and_resume(
            tmp_path, kafka_bootstrap, unique_name, None),
        spark_stages=("archive",),
        io=[files_written("archive", (".gz", ".index.json"))])
