"""Shared test fixtures: real local services on free loopback ports, one local SparkSession.

Every service is session-scoped and started lazily (only when a test asks for it), and stopped
at the end of the session: starting the Pub/Sub emulator JVM costs ~2 s and ~300 MB, Spark ~7 s.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from integration.kafka_tls import KafkaTls, make_kafka_tls
from jvm_options import use_test_jvm_options, without_test_jvm_options
from pubsub_connect.io.services.kafka import SCRAM_MECHANISM, SaslSslListener, start_kafka
from pubsub_connect.io.services.process import RunningService, free_port
from pubsub_connect.io.services.pubsub_emulator import start_pubsub_emulator
from pubsub_connect.io.services.registry import start_registry
from pubsub_connect.io.services.s3 import start_s3
from schedule import longest_files_first
from timings import hand_over, take_over, write_sections

if TYPE_CHECKING:
    from lite_server import LiteServer

# This process both holds gRPC clients (Pub/Sub, Lite) and starts Spark, whose launcher forks with
# a pre-exec hook (a real fork, so gRPC's fork handlers run in the child). Once, the session
# fixture's JVM "exited before sending its port number" while gRPC logged an epoll error from that
# fork, and every test that needs Spark erred. Nothing here uses gRPC in a forked child, so its
# fork handlers are off (read when gRPC loads, which no import above does).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# Every short-lived Spark driver the tests start (a ``pubsub-connect run`` subprocess) compiles with
# C1 only (see the module): those applications are short and small.
use_test_jvm_options()

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "fixtures"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker, after its session fixtures stopped: hand the start-up timings to the
    controller, which writes the terminal summary."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        hand_over(workeroutput)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """In the xdist controller: take over a finished worker's start-up timings."""
    take_over(getattr(node, "workeroutput", {}), node.gateway.id)


#: Test folders that belong to the compatibility subset whole (``-m compat``, run by .ci/compat on
#: every supported Spark); elsewhere a test joins it with ``@pytest.mark.compat``.
COMPAT_FOLDERS = ("unit", "bundle")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(item.path).relative_to(REPO_ROOT / "tests").parts[0] in COMPAT_FOLDERS:
            item.add_marker(pytest.mark.compat)
    longest_files_first(items, REPO_ROOT / "tests")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    write_sections(terminalreporter)


@pytest.fixture(scope="session")
def services_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("services")


@dataclass(frozen=True)
class SecureKafka:
    """The test broker's SASL_SSL listener and what a client needs to log in to it."""

    bootstrap: str
    user: str
    password: str
    tls: KafkaTls

    def java_client_settings(self, prefix: str = "", password: str | None = None) -> dict[str, str]:
        """The keys a Connect user has for such a cluster (Java client names), under ``prefix``."""
        jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="{self.user}" password="{self.password if password is None else password}";')
        return {f"{prefix}{key}": value for key, value in {
            "security.protocol": "SASL_SSL", "sasl.mechanism": SCRAM_MECHANISM, "sasl.jaas.config": jaas,
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.tls.ca_pem)}.items()}


@pytest.fixture(scope="session")
def kafka_tls(services_dir: Path) -> KafkaTls:
    return make_kafka_tls(services_dir / "kafka-tls")


@pytest.fixture(scope="session")
def kafka_sasl_ssl_listener(kafka_tls: KafkaTls) -> SaslSslListener:
    """The SASL_SSL listener every test broker has: SCRAM-SHA-512 over TLS with a CA made here, and
    one user whose password is new for each session (so finding it in an output means a leak)."""
    return SaslSslListener(free_port(), kafka_tls.keystore_pem, {"connect-user": f"pw-{uuid.uuid4().hex}"})


@pytest.fixture(scope="session")
def kafka_service(services_dir: Path, kafka_sasl_ssl_listener: SaslSslListener) -> Iterator[RunningService]:
    """A real Apache Kafka broker (single-node KRaft, from Maven Central) on loopback: PLAINTEXT
    for most tests, SASL_SSL for the security ones."""
    service = start_kafka(services_dir / "kafka", sasl_ssl=kafka_sasl_ssl_listener)
    yield service
    service.stop()


@pytest.fixture(scope="session")
def kafka_sasl_ssl(kafka_service: RunningService, kafka_sasl_ssl_listener: SaslSslListener,
                   kafka_tls: KafkaTls) -> SecureKafka:
    ((user, password),) = kafka_sasl_ssl_listener.users.items()
    return SecureKafka(kafka_sasl_ssl_listener.bootstrap, user, password, kafka_tls)


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_service: RunningService) -> str:
    return kafka_service.endpoint


@pytest.fixture(scope="session")
def pubsub_service(services_dir: Path) -> Iterator[RunningService]:
    """Google's Pub/Sub emulator on loopback; sets PUBSUB_EMULATOR_HOST for the session."""
    service = start_pubsub_emulator(services_dir / "pubsub")
    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = service.endpoint
    yield service
    if previous is None:
        os.environ.pop("PUBSUB_EMULATOR_HOST", None)
    else:
        os.environ["PUBSUB_EMULATOR_HOST"] = previous
    service.stop()


@pytest.fixture(scope="session")
def pubsub_emulator_host(pubsub_service: RunningService) -> str:
    return pubsub_service.endpoint


@pytest.fixture(scope="session")
def registry_service(services_dir: Path) -> Iterator[RunningService]:
    """A real Schema Registry (Apicurio Registry, Confluent's API) on loopback."""
    service = start_registry(services_dir / "registry")
    yield service
    service.stop()


@pytest.fixture(scope="session")
def schema_registry_url(registry_service: RunningService) -> str:
    """What a Confluent converter is given as ``schema.registry.url``."""
    return registry_service.endpoint


@pytest.fixture(scope="session")
def s3_service(services_dir: Path) -> Iterator[RunningService]:
    """A moto S3 server on loopback."""
    service = start_s3(services_dir / "s3")
    yield service
    service.stop()


@pytest.fixture(scope="session")
def s3_endpoint(s3_service: RunningService) -> str:
    return s3_service.endpoint


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession (local[2]) for the whole test session."""
    from pubsub_connect.io.spark import build_session

    with without_test_jvm_options():  # this one serves the whole session
        session = build_session({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"}, app_name="tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def lite() -> Iterator[LiteServer]:
    """The local Pub/Sub Lite server (``tests/lite_server``), in this process, one per test module:
    a module's topics, cursors and call counts are its own."""
    from lite_server import LiteServer

    with LiteServer() as server:
        yield server


@pytest.fixture
def unique_name() -> str:
    """A fresh topic/table name: tests share one broker and never share topics."""
    return f"t{uuid.uuid4().hex[:10]}"
