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

The scenarios run in one application (:class:`cluster.runs.Together`): each in a thread of its
own up to its first run, then one ``pubsub-connect run`` of all their connectors, then each
scenario's assertions on that run (and the archive's resume and error runs, applications of
their own). A Spark application on the cluster costs a driver and two executor JVMs, which took
more time than the scenarios' stages; a test still checks its own scenario's outputs and where
its own connectors' work ran.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import e2e.test_archive as archive_e2e
import e2e.test_cps_sink as cps_sink_e2e
import e2e.test_cps_sink_fused as cps_sink_fused_e2e
import e2e.test_cps_source as cps_source_e2e
import e2e.test_lite_sink as lite_sink_e2e
import e2e.test_lite_source as lite_source_e2e
from cluster.evidence import Io, files_written, grpc_call, kafka_produce, placement_problems, summary
from cluster.runs import ClusterRun, ClusterRunner, Together, properties_text
from cluster.standalone import StandaloneCluster
from e2e.harness import scenarios_to_run
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

#: The module fixture runs every scenario (five tests' worth of runs) in the setup of the first test.
pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(1200)]

PUBSUB_PUBLISH = "/google.pubsub.v1.Publisher/Publish"
LITE_PUBLISH = "/google.cloud.pubsublite.v1.PublisherService/Publish"
LITE_SUBSCRIBE = "/google.cloud.pubsublite.v1.SubscriberService/Subscribe"


@dataclass
class Outcome:
    """One scenario's runs on the cluster and how its outputs fared."""

    connectors: list[str]
    runs: list[ClusterRun] = field(default_factory=list)
    failure: BaseException | None = None

    def check(self, spark_stages: Sequence[str], io: Sequence[Io]) -> None:
        """Fail naming every wrong output and every misplaced stage of the scenario's connectors."""
        report = summary(self.runs, self.connectors)
        print("\n".join(report))
        if not self.runs:
            raise AssertionError("the scenario made no run on the cluster") from self.failure
        problems = placement_problems(self.runs, self.connectors, spark_stages, io)
        if self.failure is None and not problems:
            return
        parts = []
        if self.failure is not None:
            parts.append(f"outputs: {type(self.failure).__name__}: {self.failure}")
        if problems:
            parts.append("not in executors:\n  " + "\n  ".join(problems))
        parts.append("runs:\n  " + "\n  ".join(report))
        raise AssertionError("\n".join(parts)) from self.failure


def lite_env(lite: LiteServer) -> dict[str, str]:
    """What the Lite clients need in driver and executors: trust in the server's certificate."""
    return lite.client_env({})


@dataclass
class Setting:
    """What the scenarios share: services, the storage root of the joint run, a directory each."""

    kafka_bootstrap: str
    lite: LiteServer
    root: Path
    base: Path
    monkeypatch: pytest.MonkeyPatch

    def tmp(self, scenario: str) -> Path:
        path = self.base / scenario
        path.mkdir(parents=True, exist_ok=True)
        return path


def cps_sink(runner: ClusterRunner, setting: Setting) -> tuple[list[str], Callable[[], object]]:
    """Kafka → Pub/Sub: bytes values, key, metadata and header attributes (exact messages and
    progress lines). The local test's storage root is the joint run's."""
    name = f"t{uuid.uuid4().hex[:10]}"
    setting.monkeypatch.setattr(cps_sink_e2e, "run_once", runner.run_once)
    return [name], lambda: cps_sink_e2e.test_bytes_values_with_key_metadata_and_headers(
        None, setting.kafka_bootstrap, setting.root, name)


def cps_sink_fused(runner: ClusterRunner, setting: Setting) -> tuple[list[str], Callable[[], object]]:
    """Kafka → Pub/Sub with ``pipeline.mode=fused``: the same messages, one query."""
    name = f"t{uuid.uuid4().hex[:10]}"
    setting.monkeypatch.setattr(cps_sink_fused_e2e, "run_once", runner.run_once)
    return [name], lambda: cps_sink_fused_e2e.publishes_the_staged_modes_messages(
        None, setting.kafka_bootstrap, setting.root, name)


def cps_source(runner: ClusterRunner, setting: Setting) -> tuple[list[str], Callable[[], object]]:
    """Pub/Sub → Kafka: the data model examples (round robin, key and timestamp attributes)."""
    name = f"t{uuid.uuid4().hex[:10]}"
    setting.monkeypatch.setattr(cps_source_e2e, "run_once", runner.run_once)
    return [name], lambda: cps_source_e2e.test_data_model_examples(None, setting.kafka_bootstrap, setting.root, name)


def lite_sink(runner: ClusterRunner, setting: Setting) -> tuple[list[str], Callable[[], object]]:
    """Kafka → Lite: the data model with default routing and the DLQ, and ordering mode KAFKA."""
    unique_name = f"t{uuid.uuid4().hex[:10]}"
    names = {"model": f"{unique_name}-m", "kafka_mode": f"{unique_name}-k"}
    lite, kafka_bootstrap, tmp_path = setting.lite, setting.kafka_bootstrap, setting.tmp("lite_sink")

    def scenario() -> None:
        for scenario, lite_partitions in (("model", 3), ("kafka_mode", 4)):
            lite.create_topic(lite_path("topics", names[scenario]), lite_partitions)
            create_topic(kafka_bootstrap, names[scenario], partitions=3)
        produce_records(kafka_bootstrap, names["model"], MODEL_RECORDS)
        produce_records(kafka_bootstrap, names["kafka_mode"], KAFKA_MODE_RECORDS)
        worker, _ = write_worker(tmp_path, kafka_bootstrap, **{"storage.root": str(setting.root)})
        base = {"connector.class": "com.google.pubsublite.kafka.sink.PubSubLiteSinkConnector", "tasks.max": "2"}
        files = [
            write_connector(tmp_path, names["model"], lite, **base, topics=names["model"], **{
                "pubsublite.topic": names["model"], "key.converter": STRING, "value.converter": JSON,
                "errors.tolerance": "all"}),
            write_connector(tmp_path, names["kafka_mode"], lite, **base, topics=names["kafka_mode"], **{
                "pubsublite.topic": names["kafka_mode"], "pubsublite.ordering.mode": "kafka"}),
        ]
        run = runner.run(read_properties(worker), files, env=lite_env(lite))
        assert run.returncode == 0, run.tail()
        result: dict[str, Any] = {"names": names, "root": setting.root, "result": run}
        lite_sink_e2e.test_data_model_and_default_routing(lite, result)
        lite_sink_e2e.test_kafka_ordering_mode(lite, result)

    return list(names.values()), scenario


def lite_source(runner: ClusterRunner, setting: Setting) -> tuple[list[str], Callable[[], object]]:
    """Lite → Kafka: message → record mapping, key routing, per-partition flow control of each
    pull batch and committed cursors."""
    name = f"t{uuid.uuid4().hex[:10]}"
    lite, kafka_bootstrap, tmp_path = setting.lite, setting.kafka_bootstrap, setting.tmp("lite_source")

    def scenario() -> None:
        topic = lite_path("topics", name)
        lite.create_topic(topic, 3)
        lite.create_subscription(lite_path("subscriptions", name), topic)
        create_topic(kafka_bootstrap, name, partitions=4)
        for partition, batch in model_messages().items():
            lite.publish(topic, partition, batch)
        worker, _ = write_worker(tmp_path, kafka_bootstrap, **{
            "pipeline.max.records.per.batch": "100", "pipeline.trigger.interval.ms": "100",
            "storage.root": str(setting.root)})
        connector = source_connector(tmp_path, name, lite, name, **{
            "pubsublite.partition_flow_control.messages": "3", "pubsublite.partition_flow_control.bytes": "250"})
        run = runner.run(read_properties(worker), [connector], env=lite_env(lite))
        assert run.returncode == 0, run.tail()
        result = {"names": {"model": name}, "root": setting.root}
        lite_source_e2e.test_message_to_record_mapping(lite, kafka_bootstrap, result)
        lite_source_e2e.test_same_key_same_partition_null_keys_round_robin(lite, kafka_bootstrap, result)
        lite_source_e2e.test_partition_flow_control_bounds_each_pull_batch(lite, result)
        lite_source_e2e.test_cursors_are_committed_after_bronze(lite, result)

    return [name], scenario


def archive(runner: ClusterRunner, setting: Setting) -> tuple[list[str], Callable[[], object]]:
    """Kafka → Block-GZIP files in a local directory: record-time date folders and rotation,
    resume after the last file, the missing buffer directory error (three runs: the first joint,
    the resume and the error runs of their own, on the joint run's storage root)."""
    name = f"t{uuid.uuid4().hex[:10]}"
    tmp_path = setting.tmp("archive")

    def run_archive(tmp: Path, bootstrap: str, properties: dict[str, str], max_records: int = 100_000) -> None:
        connector_file = tmp / f"archive-{len(runner.runs) + 1}.properties"
        connector_file.write_text(properties_text(properties))
        runner.run_properties(bootstrap, setting.root, connector_file,
                              audit_writes=[Path(properties["output.path"])],
                              **{"pipeline.max.records.per.batch": str(max_records)})

    setting.monkeypatch.setattr(archive_e2e, "_run_in_process", run_archive)
    return ["archive-local"], lambda: archive_e2e.test_local_target_record_time_folders_and_resume(
        tmp_path, setting.kafka_bootstrap, name, None)


SCENARIOS: dict[str, Callable[[ClusterRunner, Setting], tuple[list[str], Callable[[], object]]]] = {
    "cps_sink": cps_sink, "cps_sink_fused": cps_sink_fused, "cps_source": cps_source, "lite_sink": lite_sink,
    "lite_source": lite_source,
    "archive": archive,
}
#: The scenario each test checks (the module fixture runs only those of the selected tests).
SCENARIOS_OF_TEST = {f"test_{scenario}": {scenario} for scenario in SCENARIOS}


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest, spark_cluster: StandaloneCluster, lite: LiteServer,
             kafka_bootstrap: str, pubsub_emulator_host: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every selected scenario, its first run joint with the others' (see the module docstring)."""
    base = tmp_path_factory.mktemp("cluster-scenarios")
    selected = sorted(scenarios_to_run(request, SCENARIOS_OF_TEST))
    together = Together(ClusterRunner(spark_cluster, base / "joint"), selected)
    results: dict[str, Outcome] = {}
    threads = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        setting = Setting(kafka_bootstrap, lite, base / "storage", base, monkeypatch)
        for scenario in selected:
            runner = together.scenario_runner(scenario)
            connectors, body = SCENARIOS[scenario](runner, setting)
            outcome = results[scenario] = Outcome(connectors, runner.runs)

            def play(body: Callable[[], object] = body, outcome: Outcome = outcome, scenario: str = scenario) -> None:
                try:
                    body()
                except BaseException as exc:  # an output assertion or a failed run: reported with the placement
                    outcome.failure = exc
                finally:
                    together.ended(scenario)

            threads.append(threading.Thread(target=play, name=f"scenario-{scenario}", daemon=True))
        for thread in threads:
            thread.start()
        try:
            together.run_when_gathered()
        finally:
            for thread in threads:
                thread.join()
    yield results


def test_cps_sink(outcomes: dict[str, Outcome]) -> None:
    """Kafka → Pub/Sub: ingest, convert and publish in executors."""
    outcomes["cps_sink"].check(spark_stages=("ingest", "convert", "publish"), io=[grpc_call("publish", PUBSUB_PUBLISH)])


def test_cps_sink_fused(outcomes: dict[str, Outcome]) -> None:
    """Kafka → Pub/Sub in pipeline.mode=fused: the one query (its bronze append, conversion and
    publish) in executors."""
    outcomes["cps_sink_fused"].check(spark_stages=("fused",), io=[grpc_call("fused", PUBSUB_PUBLISH)])


def test_cps_source(outcomes: dict[str, Outcome]) -> None:
    """Pub/Sub → Kafka: convert and produce in executors. The pull stage's pullers are Pub/Sub
    clients in the driver by design (Pub/Sub cannot be replayed by offset, so they are not a Spark
    source)."""
    outcome = outcomes["cps_source"]
    outcome.check(spark_stages=("convert", "produce"), io=[kafka_produce("produce", outcome.connectors[0])])


def test_lite_sink(outcomes: dict[str, Outcome]) -> None:
    """Kafka → Lite, two connectors: ingest, convert and publish in executors."""
    outcomes["lite_sink"].check(spark_stages=("ingest", "convert", "publish"), io=[grpc_call("publish", LITE_PUBLISH)])


def test_lite_source(outcomes: dict[str, Outcome]) -> None:
    """Lite → Kafka: pull, convert and produce in executors."""
    outcome = outcomes["lite_source"]
    outcome.check(spark_stages=("pull", "convert", "produce"),
                  io=[grpc_call("pull", LITE_SUBSCRIBE), kafka_produce("produce", outcome.connectors[0])])


def test_archive(outcomes: dict[str, Outcome]) -> None:
    """Kafka → files: the archive stage (reading Kafka and writing the objects) in executors."""
    outcomes["archive"].check(spark_stages=("archive",), io=[files_written("archive", (".gz", ".index.json"))])
