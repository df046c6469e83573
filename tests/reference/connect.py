"""Google's Pub/Sub Group Kafka Connector, unmodified, in Kafka Connect standalone: the reference
that differential tests compare this project's connectors with.

What runs: Apache Kafka Connect (``connect-runtime``, the Kafka release the connector is built
on) as one standalone worker JVM, with the connector's shaded jar on its ``plugin.path``. Both
come from Maven Central through :mod:`pubsub_connect.io.artifacts` (resolved on first use into
the project's cache, offline afterwards); the worker is started with
:class:`pubsub_connect.io.services.process.ManagedProcess` and stopped with
:func:`~pubsub_connect.io.services.process.stop_pid`, like the test broker.

Apicurio Registry's Kafka Connect converters (from Maven Central too) are a second plugin on the
same ``plugin.path``: Google's connector with ``value.converter`` (or ``key.converter``)
``io.apicurio.registry.utils.converter.AvroConverter`` reads Schema Registry Avro, the reference
for this project's Avro support (:func:`apicurio_avro_settings`).

How it reaches the emulator: through :class:`reference.fronts.GoogleApiFronts` (TLS front, CONNECT
proxy, token endpoint) and a fake service-account key. The worker is *always* started with the
proxy and the key, so nothing it does can reach Google or a metadata server.

Connectors are added over the worker's REST API (on 127.0.0.1) and each add waits until the
REST API reports the connector and all its tasks ``RUNNING``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pubsub_connect.io import artifacts
from pubsub_connect.io.services.kafka import kafka_java, write_java_properties
from pubsub_connect.io.services.process import LOOPBACK, ManagedProcess, ServiceError, died, free_port, stop_pid
from reference.fronts import GoogleApiFronts

log = logging.getLogger(__name__)

#: The release of Google's connector used as the reference (the newest on Maven Central).
GOOGLE_CONNECTOR_VERSION = "1.3.3"
#: The Kafka release that connector is built on (its POM's ``kafka.version``): its Connect runtime.
CONNECT_VERSION = "3.9.1"
#: Connect 3.9 logs through SLF4J 1.7 and reload4j, but ``connect-runtime`` brings no binding
#: (Kafka's distribution adds it): without it the worker's log is lost.
SLF4J_BINDING_VERSION = "1.7.36"

SINK_CONNECTOR_CLASS = "com.google.pubsub.kafka.sink.CloudPubSubSinkConnector"
SOURCE_CONNECTOR_CLASS = "com.google.pubsub.kafka.source.CloudPubSubSourceConnector"
LITE_SINK_CONNECTOR_CLASS = "com.google.pubsublite.kafka.sink.PubSubLiteSinkConnector"
LITE_SOURCE_CONNECTOR_CLASS = "com.google.pubsublite.kafka.source.PubSubLiteSourceConnector"

CONNECT_RUNTIME = artifacts.ArtifactSet(
    "kafka-connect-reference",
    (artifacts.Coordinate("org.apache.kafka", "connect-runtime", CONNECT_VERSION),
     artifacts.Coordinate("org.slf4j", "slf4j-reload4j", SLF4J_BINDING_VERSION)),
)
#: One shaded jar that needs nothing else (its POM declares only ``connect-api``, provided):
#: fetched as one file.
GOOGLE_CONNECTOR = artifacts.Coordinate("com.google.cloud", "pubsub-group-kafka-connector", GOOGLE_CONNECTOR_VERSION)

#: ServiceLoader manifests for the Cloud Pub/Sub and Pub/Sub Lite connectors. The shaded jar has none, so
#: Connect would have to scan its ~23,000 classes by reflection on every start (several seconds
#: and much heap); a small jar beside it with the manifests lets ``plugin.discovery=service_load``
#: find them without touching the connector's own jar.
SERVICE_MANIFESTS = {
    "META-INF/services/org.apache.kafka.connect.sink.SinkConnector": (SINK_CONNECTOR_CLASS, LITE_SINK_CONNECTOR_CLASS),
    "META-INF/services/org.apache.kafka.connect.source.SourceConnector": (SOURCE_CONNECTOR_CLASS,
                                                                          LITE_SOURCE_CONNECTOR_CLASS),
}

#: Apicurio Registry's Kafka Connect converters (the converter module and the five it needs).
APICURIO_VERSION = "2.6.13.Final"
APICURIO_AVRO_CONVERTER_CLASS = "io.apicurio.registry.utils.converter.AvroConverter"
#: Every io.apicurio module is named at one version: left to Ivy, the converter's POMs bring some
#: of them at 2.6.2.Final, a mix of releases. Kafka's and SLF4J's classes are the worker's own
#: (a plugin's copy would only shadow them); the JSON Schema serde is not needed for Avro.
APICURIO_CONVERTER = artifacts.ArtifactSet(
    "apicurio-converter-reference",
    tuple(artifacts.Coordinate("io.apicurio", module, APICURIO_VERSION) for module in (
        "apicurio-registry-utils-converter", "apicurio-registry-serdes-avro-serde", "apicurio-registry-serde-common",
        "apicurio-registry-schema-resolver", "apicurio-registry-client", "apicurio-registry-common")),
    excludes=(("org.apache.kafka", "*"), ("org.slf4j", "*"),
              ("io.apicurio", "apicurio-registry-serdes-jsonschema-serde")),
)
#: The converter's jar has no ServiceLoader manifest either: ``plugin.discovery=service_load``
#: finds it through this one.
CONVERTER_MANIFESTS = {"META-INF/services/org.apache.kafka.connect.storage.Converter":
                       (APICURIO_AVRO_CONVERTER_CLASS,)}

#: ``user.timezone=UTC``: Google's sink publishes Connect's Date, Time and Timestamp values (Avro
#: logical types, date headers) as ``java.util.Date.toString()``, in the JVM's default time zone;
#: pinned, the reference prints the same text on every machine (ours always prints UTC).
CONNECT_JVM_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError",
                       "-Djava.awt.headless=true", "-Duser.timezone=UTC")
#: A connector the worker creates from its command line, STOPPED (no task, nothing reached), and
#: that :meth:`ConnectStandalone.start` deletes again. Why: Connect 3.9's standalone herder
#: computes task configurations on one thread, created by whichever thread first hands it work
#: and keeping that thread's context class loader. Created for a REST request (a Jetty thread:
#: the application class loader), it resolves a connector's ``*.converter`` class names through
#: that loader, which cannot see a converter on ``plugin.path``: the tasks are never created (the
#: exception is lost in an executor) and the REST call hangs. A connector file given on the
#: command line is created from the main thread, whose context loader is Connect's plugin
#: loader, so the thread is created with it and every later connector's converters resolve.
CLASS_LOADER_PLACEHOLDER = "reference-class-loader-placeholder"

#: How long the worker may take until its REST API answers (~5 s here) and a connector until it
#: and its tasks run (the source connector first checks its subscription: ~3 s).
START_TIMEOUT_S = 120.0
CONNECTOR_TIMEOUT_S = 120.0
#: The source task misses Connect's 5 s graceful stop (its streaming pull takes longer to end),
#: so a worker with a source connector needs ~10 s to stop.
STOP_TIMEOUT_S = 30.0


def resolve_reference_jars() -> tuple[list[Path], Path, list[Path]]:
    """The worker's classpath, the connector's jar and the Apicurio converter's jars, from the
    cache or Maven Central (first use: ~1 min for the runtime, seconds for the connector's one
    jar, ~20 s for the converter)."""
    try:
        return (artifacts.resolve(CONNECT_RUNTIME), artifacts.fetch_jar(GOOGLE_CONNECTOR),
                artifacts.resolve(APICURIO_CONVERTER))
    except artifacts.ArtifactError as exc:
        raise ServiceError(f"cannot get the reference Kafka Connect, Google connector and Apicurio converter "
                           f"jars: {exc}") from None


def _plugin_dir(plugins: Path, name: str, jars: list[Path], manifests: dict[str, tuple[str, ...]]) -> None:
    """One plugin directory (a class loader of its own in the worker): links to the cached jars,
    untouched, and a jar with the ServiceLoader manifests they lack."""
    plugin_dir = plugins / name
    plugin_dir.mkdir(parents=True, exist_ok=True)
    for jar in jars:
        link = plugin_dir / jar.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(jar)
    with zipfile.ZipFile(plugin_dir / "pubsub-connect-service-manifests.jar", "w") as jar:
        for entry, classes in manifests.items():
            jar.writestr(entry, "".join(f"{name}\n" for name in classes))


def prepare_plugin_path(directory: Path, connector_jar: Path, converter_jars: list[Path]) -> Path:
    """A ``plugin.path`` with two plugin directories: Google's connector and Apicurio's converter."""
    plugins = directory / "plugins"
    _plugin_dir(plugins, GOOGLE_CONNECTOR.artifact, [connector_jar], SERVICE_MANIFESTS)
    _plugin_dir(plugins, "apicurio-registry-utils-converter", converter_jars, CONVERTER_MANIFESTS)
    return plugins


def apicurio_avro_settings(side: str, registry_root: str) -> dict[str, str]:
    """Connector settings for Apicurio's AvroConverter as ``side`` (``key`` or ``value``) reading
    what Confluent's serializers write: the 4-byte id after the magic byte (``Legacy4ByteIdHandler``)
    that the registry's Confluent API gives out, which is a content id (``use-id=contentId``),
    in the bytes and not in headers. ``registry_root`` is the registry without its API path:
    this converter speaks Apicurio's own API (v2). ``auto-register`` only matters to a
    serializer; set as a Connect user would."""
    prefix = f"{side}.converter"
    return {prefix: APICURIO_AVRO_CONVERTER_CLASS,
            f"{prefix}.apicurio.registry.url": f"{registry_root.rstrip('/')}/apis/registry/v2",
            f"{prefix}.apicurio.registry.auto-register": "true",
            f"{prefix}.apicurio.registry.id-handler": "io.apicurio.registry.serde.Legacy4ByteIdHandler",
            f"{prefix}.apicurio.registry.use-id": "contentId",
            f"{prefix}.apicurio.registry.headers.enabled": "false"}


def _write_log4j_config(directory: Path, log_path: Path) -> Path:
    """reload4j configuration: the worker logs to ``log_path``; its console keeps only the JVM's own output."""
    return write_java_properties(directory / "log4j.properties", {
        "log4j.rootLogger": "INFO, file",
        "log4j.appender.file": "org.apache.log4j.RollingFileAppender",
        "log4j.appender.file.File": str(log_path),
        "log4j.appender.file.MaxFileSize": "50MB",
        "log4j.appender.file.MaxBackupIndex": "2",
        "log4j.appender.file.layout": "org.apache.log4j.PatternLayout",
        "log4j.appender.file.layout.ConversionPattern": "[%d] %p %m (%c)%n",
        # The consumer and producer configs are logged in full for each task: noise here.
        "log4j.logger.org.apache.kafka.clients": "WARN",
        "log4j.logger.org.apache.kafka.common.config.AbstractConfig": "WARN",
    }, "written by the reference-connector test harness")


def worker_properties(directory: Path, bootstrap: str, rest_port: int, plugin_path: Path) -> dict[str, str]:
    """A standalone worker on loopback. Converters default to bytes as they are; each connector
    names its own, so the comparison never depends on a worker default."""
    return {
        "bootstrap.servers": bootstrap,
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "offset.storage.file.filename": str(directory / "source-offsets"),
        # Google's source task acknowledges Pub/Sub messages when Connect commits offsets: often
        # enough to stay far inside the subscription's ack deadline.
        "offset.flush.interval.ms": "1000",
        "plugin.path": str(plugin_path),
        "plugin.discovery": "service_load",
        "listeners": f"http://{LOOPBACK}:{rest_port}",
        "rest.advertised.host.name": LOOPBACK,
        "rest.advertised.port": str(rest_port),
    }


class ConnectStandalone:
    """One Kafka Connect standalone worker with Google's connector, reaching Pub/Sub through ``fronts``.

    ``credentials_file`` is put into every connector's ``gcp.credentials.file.path`` (and the
    worker's ``GOOGLE_APPLICATION_CREDENTIALS``): the connector must never look for other
    credentials.
    """

    def __init__(self, directory: Path, bootstrap: str, fronts: GoogleApiFronts, credentials_file: Path):
        self.directory = Path(directory).resolve()
        self.bootstrap = bootstrap
        self.fronts = fronts
        self.credentials_file = credentials_file
        self.rest_port = 0
        self.pid = 0
        self.log_path = self.directory / "connect.log"
        self.console_path = self.directory / "console.log"
        self.started_in_s = 0.0
        self._proc: Any = None

    @property
    def rest_url(self) -> str:
        return f"http://{LOOPBACK}:{self.rest_port}"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ConnectStandalone:
        """Start the worker; returns once its REST API answers (``GET /`` reports the version) and
        :data:`CLASS_LOADER_PLACEHOLDER` has come and gone."""
        if not (self.fronts.proxy_port and self.credentials_file.is_file()):
            raise ServiceError("the reference worker needs the running fronts and a credentials file")
        classpath, connector_jar, converter_jars = resolve_reference_jars()
        java = kafka_java()
        self.directory.mkdir(parents=True, exist_ok=True)
        plugin_path = prepare_plugin_path(self.directory, connector_jar, converter_jars)
        self.rest_port = free_port()
        worker = write_java_properties(self.directory / "worker.properties",
                                   worker_properties(self.directory, self.bootstrap, self.rest_port, plugin_path),
                                   "written by the reference-connector test harness")
        log4j = _write_log4j_config(self.directory, self.log_path)
        placeholder = self.directory / "class-loader-placeholder.json"
        placeholder.write_text(json.dumps({
            "name": CLASS_LOADER_PLACEHOLDER, "initial_state": "STOPPED",
            "config": self.connector_config(CLASS_LOADER_PLACEHOLDER, SINK_CONNECTOR_CLASS, {
                "topics": CLASS_LOADER_PLACEHOLDER, "cps.project": "unused", "cps.topic": "unused"})}))
        argv = [java, *CONNECT_JVM_OPTIONS, f"-XX:ErrorFile={self.directory / 'hs_err_pid%p.log'}",
                f"-Dlog4j.configuration={log4j.as_uri()}", *self.fronts.jvm_options(),
                "-cp", os.pathsep.join(str(jar) for jar in classpath),
                "org.apache.kafka.connect.cli.ConnectStandalone", str(worker), str(placeholder)]
        # NO_GCE_CHECK: google-auth must not probe for a metadata server, whatever happens.
        env = {"GOOGLE_APPLICATION_CREDENTIALS": str(self.credentials_file), "NO_GCE_CHECK": "true"}
        started = time.monotonic()
        self._proc = ManagedProcess("kafka-connect-reference", argv, self.console_path, env).start()
        self.pid = self._proc.pid
        try:
            self._wait_for_rest(timeout_s)
            self._remove_placeholder(started + timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started
        log.info("Kafka Connect %s with Google's connector %s: REST API at %s after %.1f s", CONNECT_VERSION,
                 GOOGLE_CONNECTOR_VERSION, self.rest_url, self.started_in_s)
        return self

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        if self.pid:
            stop_pid(self.pid, timeout_s)
            self.pid = 0

    def __enter__(self) -> ConnectStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- REST ----------------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: object = None, timeout_s: float = 10.0) -> tuple[int, Any]:
        """One REST call; ``(status, parsed JSON or None)``. No proxy: ``http_proxy`` in the
        environment must not divert a loopback call."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.rest_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=timeout_s) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except OSError:
            # refused: a worker that has exited says why (its exit code and log), not just "refused"
            self._check_alive()
            raise
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw.decode(errors="replace")

    def _check_alive(self) -> None:
        if self._proc is None or self._proc.poll() is None:
            return
        if not self.started_in_s:
            raise died("Kafka Connect (reference)", self._proc, self.log_path, self.console_path)
        # after start-up: its last words say whether it was stopped (SIGTERM: code 143) or failed
        last = [line for path in (self.log_path, self.console_path) if path.is_file()
                for line in path.read_text(errors="replace").splitlines()[-3:]]
        raise ServiceError(f"the reference Kafka Connect exited with code {self._proc.returncode} while in use; "
                           f"its logs end: {' | '.join(last) or 'nothing'} (see {self.log_path})")

    def _wait_for_rest(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                status, body = self._request("GET", "/", timeout_s=2)
            except OSError as exc:  # refused until the REST server listens
                last = exc
            else:
                if status == 200:
                    return
                last = f"HTTP {status}: {body}"
            time.sleep(0.1)
        raise ServiceError(f"the reference Kafka Connect REST API at {self.rest_url} did not answer within "
                               f"{timeout_s:.0f} s: {last} (see {self.log_path})")

    def _remove_placeholder(self, deadline: float) -> None:
        """Delete :data:`CLASS_LOADER_PLACEHOLDER` once the worker has finished creating it.

        Why the log and not ``GET /connectors``: the REST API lists the connector as soon as its
        configuration is stored, while the command line's creation is still starting it. A delete
        in that window fails the creation, and the standalone worker exits (code 3, "Stopping after
        connector error"). The worker logs "Created connector <name>" only when it is done."""
        created = f"Created connector {CLASS_LOADER_PLACEHOLDER} "
        while time.monotonic() < deadline:
            self._check_alive()
            if self.log_path.is_file() and created in self.log_path.read_text(errors="replace"):
                self.remove_connector(CLASS_LOADER_PLACEHOLDER)
                return
            time.sleep(0.1)
        raise ServiceError(f"the reference Kafka Connect did not create {CLASS_LOADER_PLACEHOLDER} in time "
                           f"(see {self.log_path})")

    def connector_config(self, name: str, connector_class: str, settings: Mapping[str, str]) -> dict[str, str]:
        """``settings`` plus what every reference connector must have: its name, class and the
        fake credentials (which override any others, so nothing looks for real ones)."""
        return {**settings, "name": name, "connector.class": connector_class,
                "gcp.credentials.file.path": str(self.credentials_file)}

    def add_connector(self, name: str, connector_class: str, settings: Mapping[str, str],
                      timeout_s: float = CONNECTOR_TIMEOUT_S) -> dict[str, Any]:
        """Create a connector and wait until it and all its tasks are ``RUNNING``; returns its status.

        Fails fast (with the first line of Connect's trace) when the connector or a task fails.
        """
        self.create_connector(name, connector_class, settings)
        return self.wait_running(name, timeout_s)

    def create_connector(self, name: str, connector_class: str, settings: Mapping[str, str]) -> None:
        config = self.connector_config(name, connector_class, settings)
        status, body = self._request("POST", "/connectors", {"name": name, "config": config})
        if status not in (200, 201):
            raise ServiceError(f"cannot create reference connector {name}: HTTP {status}: {body}")

    def status(self, name: str) -> dict[str, Any] | None:
        """The connector's status (``connector`` and ``tasks``, each with its ``state``), or None
        while the worker does not know it yet."""
        self._check_alive()
        status, body = self._request("GET", f"/connectors/{name}/status")
        return body if status == 200 and isinstance(body, dict) else None

    def failure(self, name: str) -> str | None:
        """Why the connector or a task of it failed, in one line: the trace's first line and its
        root cause (Connect wraps a task's exception in its own). None while nothing failed."""
        body = self.status(name)
        for state in [body["connector"], *body.get("tasks", [])] if body else []:
            if state.get("state") == "FAILED":
                lines = (state.get("trace") or "").strip().splitlines()
                causes = [line.strip() for line in lines if line.startswith("Caused by:")]
                return " ... ".join([lines[0], causes[-1]] if causes else lines[:1]) or "FAILED without a trace"
        return None

    def raise_if_failed(self, name: str) -> None:
        """Raise when the connector or a task of it has failed: waiting for its output is then pointless."""
        reason = self.failure(name)
        if reason is not None:
            raise ServiceError(f"reference connector {name} failed: {reason} (see {self.log_path})")

    def wait_running(self, name: str, timeout_s: float = CONNECTOR_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            self.raise_if_failed(name)
            body = self.status(name)
            if body and body.get("tasks") and all(
                    s.get("state") == "RUNNING" for s in [body["connector"], *body["tasks"]]):
                return body
            last = body
            time.sleep(0.1)
        raise ServiceError(f"reference connector {name} was not RUNNING within {timeout_s:.0f} s: {last}")

    def wait_failed(self, name: str, timeout_s: float = CONNECTOR_TIMEOUT_S) -> str:
        """Wait until the connector or one of its tasks has failed; returns the trace's first line."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reason = self.failure(name)
            if reason is not None:
                return reason
            time.sleep(0.1)
        raise ServiceError(f"reference connector {name} did not fail within {timeout_s:.0f} s: {self.status(name)}")

    def remove_connector(self, name: str) -> None:
        status, body = self._request("DELETE", f"/connectors/{name}", timeout_s=STOP_TIMEOUT_S)
        if status not in (200, 204, 404):
            raise ServiceError(f"cannot delete reference connector {name}: HTTP {status}: {body}")

    @contextlib.contextmanager
    def running(self, name: str, connector_class: str, settings: Mapping[str, str],
                wait: bool = True) -> Iterator[dict[str, Any] | None]:
        """A connector for the duration of a ``with`` block; deleted afterwards (also on failure).

        ``wait=False`` does not wait for ``RUNNING``: for a connector expected to fail.
        """
        try:
            if wait:
                yield self.add_connector(name, connector_class, settings)
            else:
                self.create_connector(name, connector_class, settings)
                yield None
        finally:
            self.remove_connector(name)
