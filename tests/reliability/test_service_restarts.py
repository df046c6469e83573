"""Kafka broker and Pub/Sub emulator restarts while the Cloud Pub/Sub sink runs continuously.

The connector runs as users run it (``pubsub-connect run``, all stages, own process group).

- Kafka: the test's own broker is stopped mid-stream and, after an outage, started again on
  the same data directory and port (a real broker restart: its log is kept). Every record
  produced before and after reaches Pub/Sub, bronze holds each Kafka record exactly once, the
  process never exits.
- Pub/Sub: the emulator process is killed mid-stream, records keep arriving from Kafka, publish
  fails after ``maxTotalTimeoutMs`` and the stage is restarted from its checkpoint with backoff;
  a new emulator comes up and the connector delivers everything without manual action. When the
  emulator is then gone for good, the connector stops after ``pipeline.restart.timeout.ms`` with
  one line that names the error and the setting.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import create_topic_and_subscription, pull_distinct
from pubsub_connect.cli import EXIT_USER_ERROR
from pubsub_connect.io.services.kafka import start_kafka
from pubsub_connect.io.services.process import RunningService, stop_pid
from pubsub_connect.io.services.pubsub_emulator import start_pubsub_emulator
from reliability.forwarder import Forwarder

pytestmark = pytest.mark.slow

PROJECT = "test-project"


def seq_of(message: object) -> int:
    return int(message.data.decode().removeprefix("seq-"))  # type: ignore[attr-defined]


def records(ids: range) -> list[Rec]:
    return [Rec(f"seq-{i}".encode(), key=f"k{i % 7}".encode()) for i in ids]


class Connector:
    """``pubsub-connect run`` (continuous) in its own process group, output in a log file."""

    def __init__(self, tmp_path: Path, name: str, worker_lines: list[str], connector_lines: list[str],
                 env: dict[str, str]):
        self.log = tmp_path / "connector.log"
        worker = tmp_path / "worker.properties"
        worker.write_text("\n".join([f"storage.root={tmp_path / 'root'}", "pipeline.trigger.interval.ms=200",
                                     "spark.master=local[2]", "spark.sql.shuffle.partitions=2",
                                     *worker_lines]) + "\n")
        connector = tmp_path / "sink.properties"
        connector.write_text("\n".join([f"name={name}", "connector.class=cps-sink", f"topics={name}",
                                        f"cps.project={PROJECT}", f"cps.topic={name}", "cps.useEmulator=true",
                                        *connector_lines]) + "\n")
        self.root = tmp_path / "root"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pubsub_connect.cli", "run", "--worker", str(worker), str(connector)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, marker: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while marker not in self.output():
            assert self.proc.poll() is None, f"connector exited ({self.proc.returncode}):\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"no {marker!r} within {timeout_s} s:\n{self.output()[-3000:]}"
            time.sleep(0.2)

    def assert_running(self) -> None:
        assert self.proc.poll() is None, f"connector exited ({self.proc.returncode}):\n{self.output()[-3000:]}"

    def stop(self) -> int:
        """SIGTERM to the connector process (as ``kill <pid>`` or ``docker stop``): the queries stop,
        then the Spark JVM. Returns the exit code."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture
def own_kafka(tmp_path: Path) -> Iterator[list[RunningService]]:
    """A broker of this test's own (the session's shared one must stay up); the last item of the
    list is the one running, after restarts too."""
    brokers = [start_kafka(tmp_path / "kafka")]
    yield brokers
    stop_pid(brokers[-1].pid)


def restart_kafka(brokers: list[RunningService], down_s: float) -> None:
    """Stop the broker (SIGTERM, as an operator would), leave it down for ``down_s``, then start it
    again on its data directory and port: clients find the same address and every record."""
    previous = brokers[-1]
    stop_pid(previous.pid)
    time.sleep(down_s)  # the outage the connector has to ride out, not a wait for anything
    brokers.append(start_kafka(Path(previous.directory), port=previous.port))


def test_kafka_broker_restart_mid_stream_recovers_without_loss(
        own_kafka: list[RunningService], pubsub_emulator_host: str, tmp_path: Path, unique_name: str) -> None:
    bootstrap = own_kafka[-1].endpoint
    create_topic(bootstrap, unique_name, partitions=3)
    _, subscription = create_topic_and_subscription(unique_name, ack_deadline_seconds=60)
    produce(bootstrap, unique_name, records(range(300)))
    connector = Connector(tmp_path, unique_name,
                          [f"bootstrap.servers={bootstrap}", "pipeline.max.records.per.batch=100",
                           "pipeline.restart.timeout.ms=180000", "pipeline.restart.backoff.max.ms=4000"],
                          [], {"PUBSUB_EMULATOR_HOST": pubsub_emulator_host})
    try:
        before = pull_distinct(subscription, set(range(300)), seq_of, timeout=240)
        restart_kafka(own_kafka, down_s=5)
        assert own_kafka[-1].endpoint == bootstrap
        produce(bootstrap, unique_name, records(range(300, 600)))
        after = pull_distinct(subscription, set(range(300, 600)), seq_of, timeout=240)
        connector.assert_running()
        assert connector.stop() == 0, connector.output()[-3000:]
    finally:
        connector.kill()

    assert {seq_of(m) for m in before + after} == set(range(600))
    from deltalake import DeltaTable

    bronze = DeltaTable(str(connector.root / "bronze" / unique_name)).to_pyarrow_table(columns=["partition", "offset"])
    coordinates = list(zip(bronze.column("partition").to_pylist(), bronze.column("offset").to_pylist(), strict=True))
    assert len(coordinates) == 600 and len(set(coordinates)) == 600
    assert sorted(coordinates) == sorted((p, o) for p in range(3) for o in range(_count(coordinates, p)))


def _count(coordinates: list[tuple[int, int]], partition: int) -> int:
    return sum(1 for p, _ in coordinates if p == partition)


def test_pubsub_emulator_restart_mid_stream_recovers_then_gives_up_after_restart_timeout(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    forwarder = Forwarder()
    emulators: list[RunningService] = []

    def start_emulator() -> RunningService:
        workdir = tmp_path / f"emulator-{len(emulators)}"
        workdir.mkdir()
        emulators.append(start_pubsub_emulator(workdir))
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulators[-1].endpoint)  # prepare it directly
        create_topic_and_subscription(unique_name, ack_deadline_seconds=60)
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", forwarder.address)  # tests read through the forwarder
        forwarder.route_to(emulators[-1].endpoint)
        return emulators[-1]

    create_topic(kafka_bootstrap, unique_name, partitions=3)
    produce(kafka_bootstrap, unique_name, records(range(200)))
    first = start_emulator()
    subscription = f"projects/{PROJECT}/subscriptions/{unique_name}-sub"
    connector = Connector(tmp_path, unique_name,
                          [f"bootstrap.servers={kafka_bootstrap}", "pipeline.restart.timeout.ms=40000",
                           "pipeline.restart.backoff.max.ms=4000"],
                          ["maxRequestTimeoutMs=2000", "maxTotalTimeoutMs=6000"],
                          {"PUBSUB_EMULATOR_HOST": forwarder.address})
    try:
        before = pull_distinct(subscription, set(range(200)), seq_of, timeout=240)

        # the emulator dies; records keep coming; publishing fails and the stage is restarted
        os.kill(first.pid, signal.SIGKILL)
        forwarder.route_to(None)
        produce(kafka_bootstrap, unique_name, records(range(200, 400)))
        connector.wait_for("restarting from the checkpoint in", timeout_s=180)

        start_emulator()
        after = pull_distinct(subscription, set(range(200, 400)), seq_of, timeout=180)
        connector.wait_for(f"[{unique_name}.publish] recovered after ", timeout_s=60)
        connector.assert_running()

        # gone for good: the connector stops on its own after pipeline.restart.timeout.ms
        stop_pid(emulators[-1].pid)
        forwarder.route_to(None)
        produce(kafka_bootstrap, unique_name, records(range(400, 410)))
        connector.proc.wait(180)
    finally:
        connector.kill()
        forwarder.close()
        for emulator in emulators:
            stop_pid(emulator.pid)

    assert {seq_of(m) for m in before + after} == set(range(400))
    assert connector.proc.returncode == EXIT_USER_ERROR
    last = connector.output().strip().splitlines()[-1]
    # the ten records may reach the stage in more than one micro-batch (ingest reads what each
    # partition holds when it plans a batch), so the failing batch holds all or some of them
    failed = re.match(rf"error: {unique_name} publish: PublishError: publish to projects/{PROJECT}/topics/"
                      rf"{unique_name} failed: (\d+) of (\d+) message\(s\) not published; first error: ", last)
    assert failed is not None, last
    assert failed[1] == failed[2] and 1 <= int(failed[1]) <= 10, last
    assert "pipeline.restart.timeout.ms=40000)" in last and "still failing after" in last, last
    assert "Traceback" not in connector.output()
