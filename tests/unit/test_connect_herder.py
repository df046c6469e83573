"""The worker's herder on fake stages (no Spark): Connect's states and transitions, persistence
across a restart, one failing connector beside a running one, secrets hidden, offsets only when
STOPPED."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pubsub_connect.config import loader as cfg
from pubsub_connect.connect.config_store import ConfigStore
from pubsub_connect.connect.herder import Herder, HerderError
from pubsub_connect.connect.locks import ConnectorBusyError, ConnectorLock
from pubsub_connect.pipelines.context import PipelineContext, Stage


@dataclass
class FakeQuery:
    name: str
    failure: str | None = None
    stopped: threading.Event = field(default_factory=threading.Event)
    #: As Spark reports after a query's first trigger, data or not (the next stage's start waits for it).
    lastProgress: dict[str, Any] | None = field(default_factory=lambda: {"batchId": 0, "numInputRows": 0})
    recentProgress: list[dict[str, Any]] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=lambda: {"isTriggerActive": False})
    id: str = "q"

    @property
    def isActive(self) -> bool:
        return self.failure is None and not self.stopped.is_set()

    def exception(self) -> Exception | None:
        return RuntimeError(self.failure) if self.failure else None

    def stop(self) -> None:
        self.stopped.set()


@dataclass
class Stages:
    """Stage functions that record every query they start; ``fail`` makes the named connector's
    first stage fail at once with a permanent error."""

    fail: set[str] = field(default_factory=set)
    started: dict[str, list[FakeQuery]] = field(default_factory=dict)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, connector: cfg.ConnectorConfig) -> tuple[Stage, ...]:
        def start(stage: str):
            def begin(ctx: Any, config: cfg.ConnectorConfig) -> FakeQuery:
                failure = ("pubsub_connect.model.connect.DataError: t-0@5: value is not valid JSON"
                           if config.name in self.fail and stage == "ingest" else None)
                query = FakeQuery(f"{config.name}.{stage}", failure)
                with self.changed:
                    self.started.setdefault(config.name, []).append(query)
                    self.changed.notify_all()
                return query
            return begin
        return tuple(Stage(name, start(name)) for name in ("ingest", "convert", "publish"))

    def wait_started(self, name: str, count: int) -> list[FakeQuery]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.started.get(name, [])) >= count, timeout=30), \
                f"{name}: {len(self.started.get(name, []))} queries started, expected {count}"
            return self.started[name][:count]


def sink(name: str, **extra: str) -> dict[str, str]:
    return {"name": name, "connector.class": "CloudPubSubSinkConnector", "topics": "in", "cps.project": "p",
            "cps.topic": "t", **extra}


@pytest.fixture
def worker(tmp_path: Path) -> cfg.WorkerConfig:
    return cfg.validate_worker({"storage.root": str(tmp_path / "root"), "pipeline.trigger.interval.ms": "10"})


def make_herder(worker: cfg.WorkerConfig, stages: Stages) -> Herder:
    def context() -> PipelineContext:
        return PipelineContext(spark=None, worker=worker, caps=None, store=None, once=False,  # type: ignore[arg-type]
                               progress=lambda line: None)
    return Herder(worker, "127.0.0.1:8083", context, progress=lambda line: None, stages_for=stages)


def wait_state(herder: Herder, name: str, state: str) -> dict[str, Any]:
    done = threading.Event()
    for _ in range(600):
        status = herder.status(name)
        if status["connector"]["state"] == state:
            return status
        done.wait(0.05)
    raise AssertionError(f"{name} is {herder.status(name)['connector']['state']}, expected {state}")


def test_create_pause_resume_stop_and_delete(worker: cfg.WorkerConfig) -> None:
    stages = Stages()
    herder = make_herder(worker, stages)
    herder.start()
    info = herder.create("a", sink("a"))
    assert info == {"name": "a", "config": sink("a"), "type": "sink",
                    "tasks": [{"connector": "a", "task": 0}, {"connector": "a", "task": 1},
                              {"connector": "a", "task": 2}]}
    first = stages.wait_started("a", 3)
    status = wait_state(herder, "a", "RUNNING")
    assert status == {"name": "a", "type": "sink", "connector": {"state": "RUNNING", "worker_id": "127.0.0.1:8083"},
                      "tasks": [{"id": i, "state": "RUNNING", "worker_id": "127.0.0.1:8083"} for i in range(3)]}
    assert [t["config"]["task.stage"] for t in herder.tasks("a")] == ["ingest", "convert", "publish"]
    with pytest.raises(HerderError) as exists:
        herder.create("a", sink("a"))
    assert exists.value.status == 409

    herder.set_target("a", "PAUSED")
    assert all(q.stopped.is_set() for q in first)
    assert herder.status("a")["connector"]["state"] == "PAUSED"
    assert ConfigStore(worker.storage_root).get("a").target_state == "PAUSED"
    with pytest.raises(HerderError) as running:
        herder.alter_offsets("a", {"offsets": []})
    assert running.value.status == 400 and "must be STOPPED" in str(running.value)

    herder.set_target("a", "STARTED")
    assert len(stages.wait_started("a", 6)) == 6
    wait_state(herder, "a", "RUNNING")
    with pytest.raises(ConnectorBusyError):  # the worker owns it: no other process may run it
        ConnectorLock(worker.storage_root, "a", ["ingest"]).acquire()

    herder.set_target("a", "STOPPED")
    assert herder.status("a")["tasks"] == [] and herder.info("a")["tasks"] == []
    ConnectorLock(worker.storage_root, "a", ["ingest"]).acquire().release()  # stopped: free for the offsets tools

    herder.delete("a")
    with pytest.raises(HerderError) as gone:
        herder.status("a")
    assert gone.value.status == 404 and str(gone.value) == "Connector a not found"
    assert herder.names() == [] and ConfigStore(worker.storage_root).get("a") is None
    herder.shutdown()


def test_a_restarted_worker_brings_connectors_back_in_their_states(worker: cfg.WorkerConfig) -> None:
    stages = Stages()
    herder = make_herder(worker, stages)
    herder.start()
    herder.create("run", sink("run"))
    herder.create("pause", sink("pause"), "PAUSED")
    herder.create("stop", sink("stop"), "STOPPED")
    stages.wait_started("run", 3)
    herder.shutdown()

    again = Stages()
    restarted = make_herder(worker, again)
    restarted.start()
    again.wait_started("run", 3)
    assert {n: restarted.status(n)["connector"]["state"] for n in restarted.names()} == \
        {"run": "RUNNING", "pause": "PAUSED", "stop": "STOPPED"}
    assert "pause" not in again.started and "stop" not in again.started
    restarted.shutdown()


def test_one_failing_connector_does_not_stop_the_others(worker: cfg.WorkerConfig) -> None:
    stages = Stages(fail={"bad"})
    herder = make_herder(worker, stages)
    herder.start()
    herder.create("good", sink("good"))
    herder.create("bad", sink("bad"))
    failed = wait_state(herder, "bad", "FAILED")
    assert failed["connector"]["trace"].splitlines()[0] == \
        "bad ingest: DataError: t-0@5: value is not valid JSON"
    assert [t["state"] for t in failed["tasks"]] == ["FAILED"] * 3
    assert wait_state(herder, "good", "RUNNING")
    assert not any(q.stopped.is_set() for q in stages.started["good"])

    stages.fail.clear()
    herder.restart("bad", only_failed=True)
    wait_state(herder, "bad", "RUNNING")
    assert "trace" not in herder.status("bad")["connector"]
    herder.shutdown()


def test_secrets_are_hidden_and_a_hidden_value_sent_back_keeps_the_secret(
        worker: cfg.WorkerConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_JAAS", "org.apache.kafka.common.security.plain.PlainLoginModule required;")
    herder = make_herder(worker, Stages())
    herder.start()
    secret = '{"type": "service_account"}'
    herder.create("a", sink("a", **{"gcp.credentials.json": secret,
                                    "consumer.override.sasl.jaas.config": "${env:KAFKA_JAAS}"}), "STOPPED")
    shown = herder.config("a")
    assert shown["gcp.credentials.json"] == "[hidden]"
    assert shown["consumer.override.sasl.jaas.config"] == "${env:KAFKA_JAAS}"  # a reference, not a secret
    assert herder.info("a")["config"] == shown
    created, _ = herder.put_config("a", {**shown, "cps.topic": "t2"})
    assert not created
    stored = ConfigStore(worker.storage_root).get("a")
    assert stored.config["gcp.credentials.json"] == secret and stored.config["cps.topic"] == "t2"
    herder.shutdown()


def test_invalid_configs_are_refused_with_the_loaders_message(worker: cfg.WorkerConfig) -> None:
    herder = make_herder(worker, Stages())
    herder.start()
    with pytest.raises(HerderError) as bad:
        herder.create("a", sink("a", **{"tasks.max": "0"}))
    assert bad.value.status == 400
    assert str(bad.value) == "Connector configuration is invalid: tasks.max='0' is below the minimum 1 (allowed: [1..])"
    with pytest.raises(HerderError) as mismatch:
        herder.put_config("a", sink("b"))
    assert mismatch.value.status == 400
    assert herder.names() == []
    herder.shutdown()
