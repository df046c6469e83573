"""A Spark standalone cluster on loopback, started from the pip-installed PySpark.

Why a real cluster and not ``local[N]``: in local mode the executors are threads of the driver's
JVM and the Python workers are children of it, so a stage that does its work in the driver
cannot be told apart from one that does it in tasks. Here the master and each worker are JVMs of
their own, and every application's executors are processes the workers launch
(``CoarseGrainedExecutorBackend``), with their own Python workers.

Readiness is read from the master's JSON status (``/json/`` on its web UI port): the master is
up when it reports ``ALIVE``, the cluster when it lists the expected number of ``ALIVE``
workers. Every process started here runs in its own session; :meth:`StandaloneCluster.stop`
kills the JVMs and everything below them (executors, their Python daemons and workers) and
checks that none is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jvm_options import with_test_jvm_options
from pubsub_connect.io.services.process import LOOPBACK, free_port

#: Environment variables that would send the cluster's loopback traffic through a proxy.
PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "grpc_proxy", "all_proxy", "ALL_PROXY")
#: Heap of the master and worker daemons: they only schedule, 256 MB is plenty.
DAEMON_MEMORY = "256m"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0


class ClusterError(RuntimeError):
    """The cluster did not start, or did not stop cleanly; ``str()`` names the process and its log."""


def spark_home() -> Path:
    """The PySpark installation, which ships ``bin/spark-class`` and the JVM jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def loopback_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) without proxies, bound to loopback."""
    env = dict(os.environ if base is None else base)
    for name in PROXY_VARIABLES:
        env.pop(name, None)
    env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1"
    env["SPARK_LOCAL_IP"] = LOOPBACK
    return env


# ----------------------------------------------------------------------------------------------
# Process tree
# ----------------------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, or None when it is gone. ``comm`` may hold spaces and
    parentheses, so the fields are taken after the last ``)``."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return fields[0].decode(), int(fields[1])


def alive(pid: int) -> bool:
    """Running (a zombie has finished: only its exit status is left to collect)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def descendants(roots: Iterable[int]) -> set[int]:
    """Every living process below ``roots`` (from one snapshot of ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] != "Z":
                children.setdefault(stat[1], []).append(int(entry.name))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def session_members(sid: int) -> set[int]:
    """The running processes of session ``sid`` (a process started with ``start_new_session``)."""
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and alive(int(entry.name)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getsid(int(entry.name)) == sid:
                    members.add(int(entry.name))
    return members


def kill_tree(root: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> set[int]:
    """Stop ``root`` (started in a session of its own) and everything below it.

    SIGTERM first, so that a Spark worker's shutdown hook kills its executors as it would on a
    real cluster; then SIGKILL for whatever is still running after ``timeout_s``: the session,
    and the descendants seen before, which may have left it. Returns the pids that survived
    (empty when everything stopped)."""
    tree = {root.pid} | descendants([root.pid])
    with contextlib.suppress(ProcessLookupError):
        os.killpg(root.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        root.wait(timeout_s)
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in tree - {root.pid}) and time.monotonic() < deadline:
        time.sleep(0.1)  # the executors' own shutdown is in progress; polled, not slept through
    tree |= descendants(tree)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(root.pid, signal.SIGKILL)
    for pid in tree:
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    root.wait(timeout_s)
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {pid for pid in tree if alive(pid)}


# ----------------------------------------------------------------------------------------------
# The cluster
# ----------------------------------------------------------------------------------------------


@dataclass
class Daemon:
    """A master or worker JVM: ``spark-class`` execs Java, so the process is the JVM itself."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    work_dir: Path | None = None

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@dataclass
class StandaloneCluster:
    """One master and ``workers`` workers of ``cores`` cores each, all on 127.0.0.1.

    ``env`` is the daemons' environment; the workers pass it on to the executors they launch
    (with each application's ``spark.executorEnv.*`` on top)."""

    base_dir: Path
    workers: int = 2
    cores: int = 1
    worker_memory: str = "1g"
    env: dict[str, str] = field(default_factory=loopback_env)
    master_port: int = 0
    ui_port: int = 0
    master: Daemon | None = None
    worker_daemons: list[Daemon] = field(default_factory=list)
    started_in_s: float = 0.0

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def status_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ui_port}/json/"

    def _spawn(self, name: str, main_class: str, args: list[str], work_dir: Path | None = None) -> Daemon:
        log = self.base_dir / f"{name}.log"
        command = [str(spark_home() / "bin" / "spark-class"), main_class, *args]
        with open(log, "ab") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self.env, cwd=self.base_dir, start_new_session=True)
        return Daemon(name, proc, log, work_dir)

    def start(self) -> StandaloneCluster:
        """Start the master, then the workers side by side; return when all are registered."""
        started = time.monotonic()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        conf_dir = self.base_dir / "conf"  # empty: no spark-defaults or log4j files from elsewhere
        conf_dir.mkdir(exist_ok=True)
        self.env = {**self.env, "SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(conf_dir),
                    "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
                    # no REST submission server: applications come from drivers only
                    "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                    "SPARK_DAEMON_JAVA_OPTS": with_test_jvm_options(self.env.get("SPARK_DAEMON_JAVA_OPTS"))}
        self.master_port, self.ui_port = free_port(), free_port()
        try:
            self.master = self._spawn("master", "org.apache.spark.deploy.master.Master", [
                "--host", LOOPBACK, "--port", str(self.master_port), "--webui-port", str(self.ui_port)])
            self.wait_for(lambda status: status.get("status") == "ALIVE", "the master to be ALIVE")
            for index in range(1, self.workers + 1):
                work_dir = self.base_dir / f"worker-{index}"
                work_dir.mkdir(exist_ok=True)
                self.worker_daemons.append(self._spawn(
                    f"worker-{index}", "org.apache.spark.deploy.worker.Worker",
                    [self.url, "--host", LOOPBACK, "--cores", str(self.cores), "--memory", self.worker_memory,
                     "--webui-port", "0", "--work-dir", str(work_dir)], work_dir))
            self.wait_for(lambda status: len(alive_workers(status)) == self.workers,
                          f"{self.workers} ALIVE workers")
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started
        return self

    def status(self) -> dict[str, Any] | None:
        """The master's JSON status, or None while its web UI does not answer yet."""
        try:
            with urllib.request.urlopen(self.status_url, timeout=5) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def wait_for(self, condition: Callable[[dict[str, Any]], bool], what: str,
                 timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """Poll the master's status until ``condition(status)`` holds; fail at once when a
        daemon exits."""
        deadline = time.monotonic() + timeout_s
        while True:
            for daemon in self.daemons():
                if daemon.proc.poll() is not None:
                    raise ClusterError(f"{daemon.name} exited ({daemon.proc.returncode}) while waiting for {what}; "
                                       f"log {daemon.log}:\n{daemon.tail()}")
            status = self.status()
            if status is not None and condition(status):
                return status
            if time.monotonic() > deadline:
                raise ClusterError(f"no {what} within {timeout_s:.0f} s; last status: {status}")
            time.sleep(0.2)

    def daemons(self) -> list[Daemon]:
        return [d for d in (self.master, *self.worker_daemons) if d is not None]

    def pids(self) -> set[int]:
        return {d.proc.pid for d in self.daemons()}

    def executor_dirs(self, app_id: str) -> dict[str, Path]:
        """``{executor id: its directory}``: a worker creates ``<work dir>/<app id>/<executor id>``
        for every executor process it launches (the process's cwd, stdout and stderr)."""
        found: dict[str, Path] = {}
        for daemon in self.worker_daemons:
            assert daemon.work_dir is not None
            for directory in sorted((daemon.work_dir / app_id).glob("*")):
                if directory.is_dir():
                    found[directory.name] = directory
        return found

    def stop(self) -> None:
        """Kill the workers (and through them their executors), then the master, each with
        everything below it; raise when any process survived."""
        survivors: dict[str, set[int]] = {}
        for daemon in [*reversed(self.worker_daemons), *([self.master] if self.master else [])]:
            left = kill_tree(daemon.proc)
            if left:
                survivors[daemon.name] = left
        self.worker_daemons, self.master = [], None
        if survivors:
            raise ClusterError(f"processes survived the cluster's stop: {survivors}")


def alive_workers(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]
