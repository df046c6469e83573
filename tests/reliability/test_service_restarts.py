"""Kafka broker and Pub/Sub emulator restarts while the Cloud Pub/Sub sink works through a backlog.

The connector runs as users run it (``pubsub-connect run``, all stages, own process group), over a
backlog of many micro-batches. Each outage starts while a stage has a micro-batch in flight (its
checkpoint holds ``offsets/N`` without ``commits/N``) and lasts until the connector has said it
saw it (its restart line): the outage is timed by the connector's own state, not by a clock.

- Kafka: the test's own broker is stopped with ingest's batch in flight and started again on
  the same data directory and port (a real broker restart: its log is kept). Every record
  produced before and after reaches Pub/Sub exactly once (publish never failed), bronze holds
  each Kafka record exactly once, the process never exits. The same for a connector in
  ``pipeline.mode=fused``, whose one query reads Kafka and publishes: there only the records of
  the batch in flight at the stop may arrive twice.
- Pub/Sub: with publish's batch in flight the emulator becomes unreachable, then is killed and
  replaced by a new one; publish fails after ``maxTotalTimeoutMs`` and the stage is restarted
  from its checkpoint with backoff, then delivers the rest without manual action. Every id
  arrives; only ids of the batch in flight at the cut may arrive twice (at least once). When the
  emulator is then gone for good, the connector stops after ``pipeline.restart.timeout.ms`` with
  one line that names the error and the setting. The same for a connector in
  ``pipeline.mode=fused``, whose one query publishes what it reads: only the records of the batch
  in flight at the cut may arrive twice, and it stops with the same line.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration.kafka_helpers import Rec, consume_all, create_topic, produce
from integration.pubsub_helpers import create_topic_and_subscription, pull_distinct, subscriber, subscription_path
from pubsub_connect.cli import EXIT_USER_ERROR
from pubsub_connect.io.services.kafka import start_kafka
from pubsub_connect.io.services.process import RunningService
from pubsub_connect.io.services.pubsub_emulator import start_pubsub_emulator
from reliability.forwarder import Forwarder
from reliability.kill_loop import batch_ids, batch_in_flight, pending_batch
from reliability.scenarios import (
    at_least_once,
    batch_rows,
    coordinates,
    each_once,
    kafka_batch_records,
    seq_of,
    topic_coordinates,
)

pytestmark = pytest.mark.slow

PROJECT = "test-project"
#: Records waiting in Kafka when the connector starts, and how many each micro-batch takes: a
#: backlog of many batches, so every outage meets work in flight and work still to come.
BACKLOG, PER_BATCH = 1200, 100


def seq_of_message(message: object) -> int:
    return seq_of(message.data)  # type: ignore[attr-defined]


def records(ids: range) -> list[Rec]:
    return [Rec(f"seq-{i}".encode(), key=f"k{i % 7}".encode()) for i in ids]


class Connector:
    """``pubsub-connect run`` (continuous) in its own process group, output in a log file."""

    def __init__(self, tmp_path: Path, name: str, worker_lines: list[str], connector_lines: list[str],
                 env: dict[str, str]):
        self.log = tmp_path / "connector.log"
        worker = tmp_path / "worker.properties"
        # one upstream table file per micro-batch: every stage, publish too, works through the
        # backlog in many batches instead of taking it whole in its first
        worker.write_text("\n".join([f"storage.root={tmp_path / 'root'}", "pipeline.trigger.interval.ms=200",
                                     "pipeline.max.files.per.trigger=1",
                                     "spark.master=local[2]", "spark.sql.shuffle.partitions=2",
                                     *worker_lines]) + "\n")
        connector = tmp_path / "sink.properties"
        connector.write_text("\n".join([f"name={name}", "connector.class=cps-sink", f"topics={name}",
                                        f"cps.project={PROJECT}", f"cps.topic={name}", "cps.useEmulator=true",
                                        *connector_lines]) + "\n")
        self.root = tmp_path / "root"
        self.name = name
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pubsub_connect.cli", "run", "--worker", str(worker), str(connector)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, marker: str, timeout_s: float = 180) -> str:
        """Wait for a line of output that contains ``marker`` (a regular expression); returns it."""
        deadline = time.monotonic() + timeout_s
        pattern = re.compile(marker)
        while True:
            found = next((line for line in self.output().splitlines() if pattern.search(line)), None)
            if found is not None:
                return found
            assert self.proc.poll() is None, f"connector exited ({self.proc.returncode}):\n{self.output()[-3000:]}"
            assert time.monotonic() < deadline, f"no {marker!r} within {timeout_s} s:\n{self.output()[-3000:]}"
            time.sleep(0.2)

    def checkpoint(self, stage: str) -> Path:
        return self.root / "checkpoints" / self.name / stage

    def await_batch_in_flight(self, stage: str, committed: int, timeout_s: float = 240) -> int:
        """Wait until ``stage`` has committed ``committed`` micro-batches and planned the next (an
        ``offsets/N`` without ``commits/N``); returns N, the batch in flight."""
        checkpoint = self.checkpoint(stage)
        deadline = time.monotonic() + timeout_s
        while True:
            batch = batch_in_flight(checkpoint, committed)
            if batch is not None:
                return batch
            self.assert_running()
            assert time.monotonic() < deadline, (f"{stage} had no batch in flight after {committed} within "
                                                 f"{timeout_s} s:\n{self.output()[-3000:]}")
            time.sleep(0.02)

    def restart_line(self, stage: str, timeout_s: float = 180) -> str:
        return self.wait_for(rf"^\[{re.escape(self.name)}\.{stage}\] .*; restarting from the checkpoint in ", timeout_s)

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
    brokers[-1].stop()


@pytest.mark.parametrize("mode", ["staged", "fused"])
def test_kafka_broker_restart_with_a_backlog_in_flight_recovers_without_loss(
        own_kafka: list[RunningService], pubsub_emulator_host: str, tmp_path: Path, unique_name: str,
        mode: str) -> None:
    # the fused query keeps its position in the ingest checkpoint and reads Kafka as ingest does
    stage = "ingest" if mode == "staged" else "fused"
    bootstrap = own_kafka[-1].endpoint
    create_topic(bootstrap, unique_name, partitions=3)
    _, subscription = create_topic_and_subscription(unique_name, ack_deadline_seconds=60)
    produce(bootstrap, unique_name, records(range(BACKLOG)))
    connector = Connector(tmp_path, unique_name,
                          [f"bootstrap.servers={bootstrap}", f"pipeline.max.records.per.batch={PER_BATCH}",
                           "pipeline.restart.timeout.ms=180000", "pipeline.restart.backoff.max.ms=4000",
                           # Spark's offset look-up tries three times, each up to the admin call's
                           # time-out (60 s by default): an operator shortens it to hear sooner
                           "consumer.default.api.timeout.ms=5000", "consumer.request.timeout.ms=4000"],
                          [f"pipeline.mode={mode}"], {"PUBSUB_EMULATOR_HOST": pubsub_emulator_host})
    try:
        in_flight = connector.await_batch_in_flight("ingest", committed=2)
        broker = own_kafka[-1]
        broker.stop()  # SIGTERM, as an operator stops a broker
        seen = connector.restart_line(stage)
        own_kafka.append(start_kafka(Path(broker.directory), port=broker.port))
        assert own_kafka[-1].endpoint == bootstrap
        produce(bootstrap, unique_name, records(range(BACKLOG, BACKLOG + 300)))
        received = pull_distinct(subscription, set(range(BACKLOG + 300)), seq_of_message, timeout=300)
        connector.wait_for(rf"^\[{unique_name}\.{stage}\] recovered after ", timeout_s=60)
        connector.assert_running()
        assert connector.stop() == 0, connector.output()[-3000:]
    finally:
        connector.kill()

    print(f"{stage} batch {in_flight} in flight when the broker stopped; the connector said: {seen}")
    assert len(batch_ids(connector.checkpoint("ingest") / "commits")) > in_flight + 1, "the backlog was in flight"
    from deltalake import DeltaTable

    bronze = DeltaTable(str(connector.root / "bronze" / unique_name)).to_pyarrow_table(
        columns=["partition", "offset", "value"])
    topic = topic_coordinates(consume_all(bootstrap, unique_name))
    assert sorted(seq_of(v) for _, _, v in topic) == list(range(BACKLOG + 300)), "the test's own input"
    each_once(coordinates(bronze), topic, "bronze")
    delivered = Counter(map(seq_of_message, received))
    if mode == "staged":  # publish never failed, so nothing was published twice
        each_once(delivered, range(BACKLOG + 300), "Pub/Sub")
    else:
        in_flight_ids = {seq_of(v) for v in kafka_batch_records(connector.checkpoint("ingest"), in_flight, topic)}
        at_least_once(delivered, range(BACKLOG + 300), in_flight_ids, "Pub/Sub")


def drain_subscription(endpoint: str, subscription: str, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Pull (and ack) from the emulator at ``endpoint`` until a pull finds nothing. Called while
    the connector cannot reach it, so nothing more can arrive: empty means all there."""
    with monkeypatch.context() as patch:
        patch.setenv("PUBSUB_EMULATOR_HOST", endpoint)
        client, path = subscriber(), subscription_path(subscription)
        got: list[object] = []
        while True:
            response = client.pull(request={"subscription": path, "max_messages": 1000}, timeout=30)
            if not response.received_messages:
                return got
            client.acknowledge(request={"subscription": path,
                                        "ack_ids": [r.ack_id for r in response.received_messages]})
            got.extend(r.message for r in response.received_messages)


@pytest.mark.parametrize("mode", ["staged", "fused"])
def test_pubsub_emulator_restart_with_a_backlog_in_flight_recovers_then_gives_up_after_restart_timeout(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    # the fused query publishes each batch it reads (on the ingest checkpoint) itself
    stage, batches = ("publish", "publish") if mode == "staged" else ("fused", "ingest")
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
    produce(kafka_bootstrap, unique_name, records(range(BACKLOG)))
    first = start_emulator()
    subscription = f"{unique_name}-sub"
    connector = Connector(tmp_path, unique_name,
                          [f"bootstrap.servers={kafka_bootstrap}", f"pipeline.max.records.per.batch={PER_BATCH}",
                           "pipeline.restart.timeout.ms=40000", "pipeline.restart.backoff.max.ms=4000"],
                          ["maxRequestTimeoutMs=2000", "maxTotalTimeoutMs=6000", f"pipeline.mode={mode}"],
                          {"PUBSUB_EMULATOR_HOST": forwarder.address})
    try:
        # a batch is being published and more are to come: cut the emulator off, take what it
        # received, kill it, and let the connector find a new one
        in_flight = connector.await_batch_in_flight(batches, committed=1)
        forwarder.route_to(None)
        # the batch may have ended between the two calls: then the next one was in flight
        at_cut = pending_batch(connector.checkpoint(batches))
        before = drain_subscription(first.endpoint, subscription, monkeypatch)
        os.kill(first.pid, signal.SIGKILL)
        seen = connector.restart_line(stage)

        start_emulator()
        after = pull_distinct(f"projects/{PROJECT}/subscriptions/{subscription}",
                              set(range(BACKLOG)) - {seq_of_message(m) for m in before}, seq_of_message,
                              timeout=300)
        connector.wait_for(rf"^\[{unique_name}\.{stage}\] recovered after ", timeout_s=60)
        connector.assert_running()

        # gone for good: the connector stops on its own after pipeline.restart.timeout.ms
        emulators[-1].stop()
        forwarder.route_to(None)
        produce(kafka_bootstrap, unique_name, records(range(BACKLOG, BACKLOG + 10)))
        connector.proc.wait(180)
    finally:
        connector.kill()
        forwarder.close()
        for emulator in emulators:
            emulator.stop()

    print(f"{stage} batch {in_flight} in flight when the emulator was cut off ({len(before)} message(s) had "
          f"reached it); the connector said: {seen}")
    # only a batch that was being published when the emulator was cut off can reach both emulators
    may_repeat: set[object] = set()
    if mode == "staged":
        outbox = connector.root / "outbox" / unique_name
        for batch in {in_flight, at_cut} - {None}:
            rows = batch_rows(outbox, connector.checkpoint("publish"), batch)
            may_repeat.update(seq_of(data) for data in (rows.column("data").to_pylist() if rows.num_rows else []))
    else:
        topic = topic_coordinates(consume_all(kafka_bootstrap, unique_name))
        for batch in {in_flight, at_cut} - {None}:
            may_repeat.update(seq_of(v) for v in kafka_batch_records(connector.checkpoint("ingest"), batch, topic))
    at_least_once(Counter(map(seq_of_message, before + after)), range(BACKLOG), may_repeat, "Pub/Sub")
    assert connector.proc.returncode == EXIT_USER_ERROR
    last = connector.output().strip().splitlines()[-1]
    # the ten records may reach the stage in more than one micro-batch (ingest reads what each
    # partition holds when it plans a batch), so the failing batch holds all or some of them
    failed = re.match(rf"error: {unique_name} {stage}: PublishError: publish to projects/{PROJECT}/topics/"
                      rf"{unique_name} failed: (\d+) of (\d+) message\(s\) not published; first error: ", last)
    assert failed is not None, last
    assert failed[1] == failed[2] and 1 <= int(failed[1]) <= 10, last
    assert "pipeline.restart.timeout.ms=40000)" in last and "still failing after" in last, last
    assert "Traceback" not in connector.output()
