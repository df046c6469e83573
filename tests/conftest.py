"""Shared test fixtures: real local services on free loopback ports, one local SparkSession.

Every service is session-scoped and started lazily (only when a test asks for it), and stopped
at the end of the session: starting the Pub/Sub emulator JVM costs ~2 s and ~300 MB, Spark ~7 s.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pubsub_connect.io import services as svc

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "fixtures"


@pytest.fixture(scope="session")
def services_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("services")


@pytest.fixture(scope="session")
def kafka_service(services_dir: Path) -> Iterator[svc.RunningService]:
    """A real Apache Kafka broker (single-node KRaft, from Maven Central) on loopback."""
    service = svc.start_kafka(services_dir / "kafka")
    yield service
    svc.stop_pid(service.pid)


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_service: svc.RunningService) -> str:
    return kafka_service.endpoint


@pytest.fixture(scope="session")
def pubsub_service(services_dir: Path) -> Iterator[svc.RunningService]:
    """Google's Pub/Sub emulator on loopback; sets PUBSUB_EMULATOR_HOST for the session."""
    service = svc.start_pubsub_emulator(services_dir / "pubsub")
    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = service.endpoint
    yield service
    if previous is None:
        os.environ.pop("PUBSUB_EMULATOR_HOST", None)
    else:
        os.environ["PUBSUB_EMULATOR_HOST"] = previous
    svc.stop_pid(service.pid)


@pytest.fixture(scope="session")
def pubsub_emulator_host(pubsub_service: svc.RunningService) -> str:
    return pubsub_service.endpoint


@pytest.fixture(scope="session")
def s3_service(services_dir: Path) -> Iterator[svc.RunningService]:
    """A moto S3 server on loopback."""
    service = svc.start_s3(services_dir / "s3")
    yield service
    svc.stop_pid(service.pid)


@pytest.fixture(scope="session")
def s3_endpoint(s3_service: svc.RunningService) -> str:
    return s3_service.endpoint


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession (local[2]) for the whole test session."""
    from pubsub_connect.io.spark import build_session

    session = build_session({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"}, app_name="tests")
    yield session
    session.stop()


@pytest.fixture
def unique_name() -> str:
    """A fresh topic/table name: tests share one broker and never share topics."""
    return f"t{uuid.uuid4().hex[:10]}"
