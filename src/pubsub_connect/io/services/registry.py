"""A Schema Registry on loopback: Apicurio Registry, whose ``ccompat`` API is Confluent's.

Why this one: Kafka Connect users configure Confluent's converters with a
``schema.registry.url``; the tests and a local try-out need a real registry behind that URL, one
that runs from Maven Central like the broker does (Confluent's own is not served there). Apicurio
Registry 3.0.9 ships as one self-contained distribution (``apicurio-registry-app:3.0.9:tar.gz:all``,
~110 MB, fetched and unpacked once into the artifact cache), runs on the Java 17 the broker and
Spark use (later 3.x need Java 21), keeps its schemas in memory, and serves:

- ``/apis/ccompat/v7``: Confluent's REST API (subjects, versions, ``/schemas/ids/{id}``), the URL
  users put in ``*.converter.schema.registry.url``; its ids are content ids, as Confluent's are
  (the same schema under two subjects has one id);
- ``/apis/registry/v2``: Apicurio's own API, which Apicurio's Kafka Connect converter uses.

Its schemas live as long as the process: a restart starts empty, like Confluent's registry with
a fresh ``_schemas`` topic.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
import time
from pathlib import Path
from urllib.request import urlopen

from pubsub_connect.io import artifacts
from pubsub_connect.io.services.kafka import kafka_java
from pubsub_connect.io.services.process import (
    LOOPBACK,
    RunningService,
    ServiceError,
    free_port,
    process_started,
    start_listening,
    stop_pid,
)

REGISTRY_APP = artifacts.Coordinate("io.apicurio", "apicurio-registry-app", "3.0.9")
#: Confluent's REST API under the registry's root.
CONFLUENT_API = "/apis/ccompat/v7"
#: Small heap, serial GC and the client compiler: it serves a handful of schemas, and starts in
#: ~3 s at ~200 MB instead of ~7 s at ~300 MB with the JVM's defaults.
REGISTRY_JVM_OPTIONS = ("-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError")
#: Quarkus' start-up banner, access log and INFO lines off: the console stays quiet.
REGISTRY_QUIET = ("-Dquarkus.banner.enabled=false", "-Dquarkus.http.access-log.enabled=false",
                  "-Dquarkus.log.level=WARN", '-Dquarkus.log.category."io.apicurio".level=WARN')
START_TIMEOUT_S = 120


def registry_app_dir(offline: bool = False) -> Path:
    """The unpacked distribution, fetched from Maven Central on first use."""
    archive = artifacts.fetch_file(REGISTRY_APP, classifier="all", extension="tar.gz", offline=offline)
    target = archive.parent / f"{REGISTRY_APP.artifact}-{REGISTRY_APP.version}"
    if (target / _runner_name()).is_file():
        return target
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data")
        if not (partial / _runner_name()).is_file():
            raise ServiceError(f"{archive} has no {_runner_name()}: delete it to fetch it again")
        with contextlib.suppress(OSError):  # another process unpacked it first: keep theirs
            partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def _runner_name() -> str:
    return f"{REGISTRY_APP.artifact}-{REGISTRY_APP.version}-runner.jar"


def registry_url(port: int) -> str:
    """What a Confluent client is given as ``schema.registry.url``."""
    return f"http://{LOOPBACK}:{port}{CONFLUENT_API}"


def start_registry(workdir: Path, port: int | None = None) -> RunningService:
    """Start Apicurio Registry (in-memory storage, no authentication) on loopback and wait until
    it reports ready."""
    try:
        app = registry_app_dir()
    except artifacts.ArtifactError as exc:
        raise ServiceError(f"the local Schema Registry cannot be fetched: {exc}") from None
    port = port or free_port()
    log_path = workdir / "registry.log"
    argv = [kafka_java(), *REGISTRY_JVM_OPTIONS, *REGISTRY_QUIET,
            f"-Dquarkus.http.host={LOOPBACK}", f"-Dquarkus.http.port={port}",
            "-jar", str(app / _runner_name())]
    proc = start_listening("registry", argv, log_path, port, "Schema Registry (Apicurio)", START_TIMEOUT_S)
    try:
        _wait_ready(port, START_TIMEOUT_S)
    except BaseException:
        stop_pid(proc.pid)
        raise
    return RunningService("registry", proc.pid, port, registry_url(port), {}, str(log_path), str(workdir),
                          process_started(proc.pid))


def _wait_ready(port: int, timeout_s: float) -> None:
    """Quarkus accepts connections before its storage is ready; ``/health/ready`` says when."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urlopen(f"http://{LOOPBACK}:{port}/health/ready", timeout=2) as answer:
            if answer.status == 200:
                return
        time.sleep(0.1)
    raise ServiceError(f"Schema Registry on {LOOPBACK}:{port} was not ready within {timeout_s:.0f} s")
