"""The local Apache Kafka broker: a single-node KRaft cluster run from its Maven Central jars on
the machine's Java, with an optional SASL_SSL listener.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pubsub_connect.io import artifacts
from pubsub_connect.io.kafka.admin import admin_client
from pubsub_connect.io.services.process import (
    LOOPBACK,
    ManagedProcess,
    RunningService,
    ServiceError,
    died,
    free_port,
    process_started,
    stop_pid,
    wait_for_port,
)

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------
# Locating binaries
# --------------------------------------------------------------------------------------------

#: Apache Kafka's broker, run as a single-node KRaft cluster (broker and controller in one JVM).
KAFKA_VERSION = "4.3.1"
#: Kafka logs through SLF4J 1.7 but its jars bring no binding; without one the broker's log is
#: lost. Log4j's own binding, at the version of the ``log4j-core`` that Kafka depends on.
LOG4J_VERSION = "2.25.4"
KAFKA_BROKER = artifacts.ArtifactSet(
    "kafka-broker",
    (artifacts.Coordinate("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
     artifacts.Coordinate("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION)),
)
#: The JVM artifacts of the local services, for ``pubsub-connect jars`` to fetch ahead of time.
JVM_ARTIFACTS: tuple[artifacts.ArtifactSet, ...] = (KAFKA_BROKER,)
#: Kafka 4 is built for Java 17.
KAFKA_MIN_JAVA = 17
#: A test broker's heap: Kafka's own scripts default to 1 GB; half of it holds any test here.
KAFKA_JVM_OPTIONS = ("-Xmx512m", "-Xms256m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                     "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")


def java_executable() -> str:
    """``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set (as Kafka's scripts do), else ``java`` on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            raise ServiceError(f"JAVA_HOME={java_home} has no bin/java: point it at Java 17+ or unset it")
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ServiceError("Java is not installed: the local Kafka broker needs Java 17+ "
                           "(apt-get install default-jre-headless, or set JAVA_HOME)")
    return found


@functools.lru_cache(maxsize=8)
def java_major_version(java: str) -> int:
    """The feature release of ``java`` (``1.8.0_402`` → 8, ``17.0.15`` → 17)."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServiceError(f"cannot run {java} -version: {exc}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if match is None:
        raise ServiceError(f"cannot tell the version of {java}: {(done.stderr or done.stdout).strip()[:200]!r}")
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def kafka_java() -> str:
    """The ``java`` to run the broker with, checked to be new enough for it."""
    java = java_executable()
    major = java_major_version(java)
    if major < KAFKA_MIN_JAVA:
        raise ServiceError(f"the local Kafka broker needs Java {KAFKA_MIN_JAVA}+, but {java} is Java {major}: "
                           "install a newer one and point JAVA_HOME at it")
    return java


def kafka_classpath() -> list[Path]:
    """The broker's jars: resolved from Maven Central on first use (~30 s), then from the cache."""
    try:
        return artifacts.resolve(KAFKA_BROKER)
    except artifacts.ArtifactError as exc:
        raise ServiceError(f"cannot get the Kafka broker's jars: {exc}") from None


# --------------------------------------------------------------------------------------------
# Starting services
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SaslSslListener:
    """A second client listener of the local broker: SASL_SSL, SCRAM-SHA-512 over TLS — how
    most production clusters (Confluent, MSK, Aiven) take clients — next to the loopback
    PLAINTEXT one.

    ``keystore_pem`` is the broker's unencrypted private key followed by its certificate chain
    (Kafka's PEM key store); clients trust the CA that signed it. ``users`` (name → password)
    are given SCRAM credentials through the PLAINTEXT listener once the broker is up; their
    passwords go to the broker in an admin request, never on a command line or in a file.
    """

    port: int
    keystore_pem: Path
    users: Mapping[str, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"


SCRAM_MECHANISM = "SCRAM-SHA-512"

#: How long a started broker may take to answer (it needs ~5 s here; a loaded CI machine more).
KAFKA_START_TIMEOUT_S = 90.0


def kafka_server_properties(directory: Path, port: int, controller_port: int,
                            sasl_ssl: SaslSslListener | None = None) -> dict[str, str]:
    """``server.properties`` of a single-node broker whose data lives in ``directory / "data"``.

    One node is the whole cluster: broker and KRaft controller in one process (the controller's
    listener on a second loopback port), and every internal topic with one replica. The quorum
    is static (``controller.quorum.voters``): its one voter is read from this file at every
    start, not from the data, so a restart may give the controller another port. Everything
    else but retention by age keeps Kafka's defaults (e.g. the 1 MB ``message.max.bytes``), so the
    broker rejects what a production one would.
    """
    return {
        **_listener_properties(port, controller_port, sasl_ssl),
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{LOOPBACK}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(directory / "data"),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "auto.create.topics.enable": "true",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        # The internal topics are created on first use, 50 partitions each by default: that
        # first consumer group or transaction would wait for 50 logs to be created for nothing.
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.num.partitions": "5",
        # A consumer group's first member gets its partitions at once instead of after 3 s.
        "group.initial.rebalance.delay.ms": "0",
        # The log cleaner (of compacted topics such as the consumer offsets) allocates 128 MB of
        # heap for its key map by default; test data needs a fraction of it.
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        # Nothing is deleted by age: retention compares record timestamps, and local data (tests,
        # replays of old topics) often carries timestamps years old, which Kafka's 7-day default
        # would delete at the next check while a connector still reads it.
        "log.retention.ms": "-1",
    }


def _listener_properties(port: int, controller_port: int, sasl_ssl: SaslSslListener | None) -> dict[str, str]:
    """Listeners: PLAINTEXT for clients and between the broker and itself, CONTROLLER for the
    KRaft quorum, and optionally SASL_SSL (no authorizer: an authenticated user may do anything)."""
    listeners = [f"PLAINTEXT://{LOOPBACK}:{port}", f"CONTROLLER://{LOOPBACK}:{controller_port}"]
    advertised = [f"PLAINTEXT://{LOOPBACK}:{port}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    extra: dict[str, str] = {}
    if sasl_ssl is not None:
        listeners.append(f"SASL_SSL://{sasl_ssl.bootstrap}")
        advertised.append(f"SASL_SSL://{sasl_ssl.bootstrap}")
        protocols.append("SASL_SSL:SASL_SSL")
        mechanism = SCRAM_MECHANISM.lower()
        extra = {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            f"listener.name.sasl_ssl.{mechanism}.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
            "listener.name.sasl_ssl.ssl.keystore.location": str(sasl_ssl.keystore_pem),
        }
    return {"listeners": ",".join(listeners), "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocols), **extra}


def _escape_property(value: str) -> str:
    """A value as Java's ``Properties`` reads it back (a backslash is its escape character)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def write_java_properties(path: Path, values: Mapping[str, str], comment: str) -> Path:
    """A Java ``.properties`` file (server, worker, logging configurations of the local JVMs)."""
    lines = [f"# {comment}", *(f"{key}={_escape_property(str(value))}" for key, value in values.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def _write_kafka_log4j_config(directory: Path, log_path: Path) -> Path:
    """Log4j 2 configuration: the broker logs to ``log_path`` (rolled at 50 MB), not to its console."""
    return write_java_properties(directory / "log4j2.properties", {
        "status": "warn",
        # Kafka logs its own shutdown from a JVM shutdown hook: Log4j must not stop before it.
        "shutdownHook": "disable",
        "appender.file.type": "RollingFile",
        "appender.file.name": "file",
        "appender.file.fileName": str(log_path),
        "appender.file.filePattern": f"{log_path}.%i",
        "appender.file.layout.type": "PatternLayout",
        "appender.file.layout.pattern": "[%d] %p %m (%c)%n",
        "appender.file.policies.type": "Policies",
        "appender.file.policies.size.type": "SizeBasedTriggeringPolicy",
        "appender.file.policies.size.size": "50MB",
        "appender.file.strategy.type": "DefaultRolloverStrategy",
        "appender.file.strategy.max": "2",
        "rootLogger.level": "INFO",
        "rootLogger.appenderRef.file.ref": "file",
        "logger.request.name": "kafka.request.logger",
        "logger.request.level": "WARN",
    }, "written by pubsub-connect on every start of the local Kafka broker")


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: 16 random bytes in URL-safe base64 without padding.

    One that starts with ``-`` would be read as an option by the storage tool's command line.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _format_kafka_storage(java: str, classpath: str, server_properties: Path, log4j_config: Path,
                          data_dir: Path) -> None:
    """Format the broker's data directory once: a KRaft broker refuses to start on an unformatted
    one, and formatting again would mean a new cluster (a restart must find its data)."""
    if (data_dir / "meta.properties").is_file():
        return
    # A one-shot tool: the JIT's quick tier alone and a simple collector start it faster.
    command = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
               f"-Dlog4j2.configurationFile={log4j_config}", "-cp", classpath,
               "kafka.tools.StorageTool", "format", "--cluster-id", new_cluster_id(),
               "--config", str(server_properties)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise ServiceError(f"formatting the Kafka broker's storage in {data_dir} took longer than 120 s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        raise ServiceError(f"cannot format the Kafka broker's storage in {data_dir}: "
                           f"{lines[-1] if lines else f'exit code {done.returncode}'}")


def start_kafka(directory: Path, port: int | None = None, overrides: Mapping[str, str] | None = None,
                sasl_ssl: SaslSslListener | None = None) -> RunningService:
    """Start Apache Kafka (one KRaft node) on loopback; returns once a client gets metadata from it.

    ``directory`` is the broker's own: ``server.properties``, its log ``kafka.log`` (the JVM's
    console goes to ``console.log``) and its data in ``data/``, formatted on the first start
    only. Starting again on the same directory is a restart: topics, records, committed offsets
    and transactions are kept; pass the previous ``port`` so clients find it where it was.
    ``overrides`` replace or add broker settings; ``sasl_ssl`` adds an authenticated TLS
    listener (its users' credentials are set once the broker is up).

    The first start resolves the broker's jars from Maven Central (~30 s); later ones start
    from the cache, offline.
    """
    directory = Path(directory).resolve()
    java = kafka_java()
    classpath = os.pathsep.join(str(jar) for jar in kafka_classpath())
    port = port or free_port()
    controller_port = free_port()
    while controller_port == port:
        controller_port = free_port()
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "kafka.log"
    console_path = directory / "console.log"
    data_dir = directory / "data"
    server_properties = write_java_properties(
        directory / "server.properties",
        {**kafka_server_properties(directory, port, controller_port, sasl_ssl), **(overrides or {})},
        "written by pubsub-connect on every start of the local Kafka broker")
    log4j_config = _write_kafka_log4j_config(directory, log_path)
    started = time.monotonic()
    _format_kafka_storage(java, classpath, server_properties, log4j_config, data_dir)
    argv = [java, *KAFKA_JVM_OPTIONS, f"-XX:ErrorFile={directory / 'hs_err_pid%p.log'}",
            f"-Dlog4j2.configurationFile={log4j_config}", "-cp", classpath, "kafka.Kafka", str(server_properties)]
    proc = ManagedProcess("kafka", argv, console_path).start()
    bootstrap = f"{LOOPBACK}:{port}"
    try:
        # The broker opens its listener only once it is ready to serve requests.
        wait_for_port(port, proc, "Kafka broker", KAFKA_START_TIMEOUT_S, log_path, console_path)
        _wait_for_kafka_metadata(bootstrap, proc, 30, log_path, console_path)
        if sasl_ssl is not None and sasl_ssl.users:
            _set_scram_credentials(bootstrap, sasl_ssl.users)
    except BaseException:
        stop_pid(proc.pid)
        raise
    log.info("Kafka broker %s ready at %s after %.1f s (%s)", KAFKA_VERSION, bootstrap,
             time.monotonic() - started, directory)
    return RunningService("kafka", proc.pid, port, bootstrap, {"KAFKA_BOOTSTRAP_SERVERS": bootstrap},
                          str(log_path), str(directory), process_started(proc.pid))


def _set_scram_credentials(bootstrap: str, users: Mapping[str, str], timeout_s: float = 30) -> None:
    """Create or replace the SCRAM credentials of ``users`` (idempotent, so a restart may repeat it)."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = admin_client({"bootstrap.servers": bootstrap})
    info = ScramCredentialInfo(getattr(ScramMechanism, SCRAM_MECHANISM.replace("-", "_")), 4096)
    upserts = [UserScramCredentialUpsertion(name, info, password.encode()) for name, password in users.items()]
    for name, future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout_s).items():
        try:
            future.result(timeout_s)
        except Exception as exc:
            raise ServiceError(f"cannot set the SCRAM credentials of Kafka user {name}: {exc}") from None


def _wait_for_kafka_metadata(bootstrap: str, proc: subprocess.Popen[bytes], timeout_s: float,
                             *log_paths: Path) -> None:
    """Block until the broker answers a metadata request listing itself, failing fast when it
    dies (e.g. when something else listens on its port, which is what answered the port check)."""
    # Short reconnect backoffs: librdkafka's grow to 10 s between refused connections.
    admin = admin_client({"bootstrap.servers": bootstrap, "reconnect.backoff.ms": 50,
                          "reconnect.backoff.max.ms": 200})
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise died("Kafka broker", proc, *log_paths)
        try:
            metadata = admin.list_topics(timeout=2)
        except Exception as exc:  # KafkaException while the broker warms up
            last = exc
        else:
            if metadata.brokers:
                return
            last = "no broker in the metadata"
        time.sleep(0.1)
    raise ServiceError(f"Kafka broker at {bootstrap} did not answer metadata requests: {last}")
