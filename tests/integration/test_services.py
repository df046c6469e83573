"""The embedded services start on loopback, answer, and stop (tests use the same code)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from pubsub_connect.cli import main
from pubsub_connect.io import services as svc


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_services_up_status_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(tmp_path)
    try:
        assert main(["services", "up", "--storage-root", root]) == 0
        out = capsys.readouterr().out
        running = svc.read_services(tmp_path)
        assert sorted(running) == ["kafka", "pubsub", "s3"]
        assert f"bootstrap.servers={running['kafka'].endpoint}" in out
        assert f"PUBSUB_EMULATOR_HOST={running['pubsub'].endpoint}" in out
        assert all(s.endpoint.replace("http://", "").startswith("127.0.0.1:") for s in running.values())
        # the Kafka broker really answers on the advertised loopback address
        metadata = AdminClient({"bootstrap.servers": running["kafka"].endpoint}).list_topics(timeout=5)
        assert metadata.brokers and all(b.host == "127.0.0.1" for b in metadata.brokers.values())
        # a second `up` reuses what runs
        assert main(["services", "up", "--storage-root", root]) == 0
        assert {k: v.pid for k, v in svc.read_services(tmp_path).items()} == {k: v.pid for k, v in running.items()}
    finally:
        assert main(["services", "down", "--storage-root", root]) == 0
    assert "stopped: kafka, pubsub, s3" in capsys.readouterr().out
    assert not any(_alive(s.pid) for s in running.values())
    assert svc.read_services(tmp_path) == {}


def test_failed_start_stops_what_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    real_start_kafka = svc.start_kafka

    def start_kafka(workdir: Path) -> svc.RunningService:
        service = real_start_kafka(workdir)
        started.append(service.pid)
        return service

    monkeypatch.setitem(svc.STARTERS, "kafka", start_kafka)
    monkeypatch.setenv("PUBSUB_EMULATOR_LAUNCHER", "/nonexistent/emulator")
    monkeypatch.setattr(svc, "pubsub_emulator_command",
                        lambda: (_ for _ in ()).throw(svc.ServiceError("Google's Pub/Sub emulator is not installed")))
    with pytest.raises(svc.ServiceError, match="emulator is not installed"):
        svc.LocalServices(tmp_path, ("kafka", "pubsub")).start()
    assert started and not _alive(started[0])


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(svc.shutil, "which", lambda name: None)
    with pytest.raises(svc.ServiceError, match="Java is not installed"):
        svc.pubsub_emulator_command()
