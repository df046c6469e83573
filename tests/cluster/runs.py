"""``pubsub-connect run`` against the standalone cluster, one Spark application per run.

A connector runs as users run it — the CLI in a subprocess, with ``spark.master=spark://…`` in
its worker file — for two reasons: a SparkContext cannot change its master within a process
(the test session may already hold a local one), and the CLI is the path whose placement is in
question. Each run gets a directory of its own with its worker file, output, Spark event log
and process audit; :class:`ClusterRun` holds what was read from them once the driver (its Python
process and JVM) has exited.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster.evidence import AuditRecord, EventLog, read_audit
from cluster.standalone import StandaloneCluster, loopback_env, session_members
from jvm_options import TEST_JVM_OPTIONS
from pubsub_connect.config import loader as cfg
from pubsub_connect.pipelines.context import ConnectorError

AUDIT_DIR = Path(__file__).resolve().parent / "audit"
#: Executors are small: two of them share this machine with the rest of the test suite.
EXECUTOR_MEMORY = "512m"
DRIVER_MEMORY = "1g"
RUN_TIMEOUT_S = 480.0
#: After its Python process exits, the driver's JVM stops the SparkContext (and finishes the
#: event log) on its own; this long it may take.
DRIVER_EXIT_TIMEOUT_S = 60.0
#: Spark gives a new Python worker a hard-coded 10 s to connect back; on an overloaded machine a
#: run can fail with this, and is then started again, as the local end-to-end tests do.
SPARK_CONNECT_BACK = "Python worker failed to connect back"
ATTEMPTS = 3


@dataclass
class ClusterRun:
    """One finished ``pubsub-connect run`` and the evidence of where its work ran."""

    name: str
    directory: Path
    driver_pid: int
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    events: EventLog | None
    audit: list[AuditRecord]
    executor_dirs: dict[str, Path] = field(default_factory=dict)
    #: The interpreter driver and executors were given (``spark.pyspark.python``).
    python: str = sys.executable

    def tail(self) -> str:
        return f"{self.name} (exit {self.returncode}):\n{self.stdout[-3000:]}\n{self.stderr[-4000:]}"

    def error_line(self) -> str | None:
        """The CLI's one-line error (``error: …``, exit code 2), if it stopped with one."""
        lines = [line for line in self.stderr.splitlines() if line.startswith("error: ")]
        return lines[-1][len("error: "):] if self.returncode == 2 and lines else None


def properties_text(settings: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def connector_properties(connector: cfg.ConnectorConfig) -> dict[str, str]:
    """The keys a validated connector config was given (defaults left out), as file text values."""
    effective = connector.effective(mask_secrets=False)
    return {key: value for key, value in effective.items()
            if key in connector.passthrough or connector.settings[key].origin != "default"}


@dataclass
class ClusterRunner:
    """Runs connectors on ``cluster``; keeps every run it made, in order, in :attr:`runs`."""

    cluster: StandaloneCluster
    base_dir: Path
    runs: list[ClusterRun] = field(default_factory=list)

    def cluster_settings(self, directory: Path) -> dict[str, str]:
        """The worker keys that point a run at the cluster and keep its Spark event log."""
        events = directory / "events"
        events.mkdir(parents=True, exist_ok=True)
        return {
            "spark.master": self.cluster.url,
            "spark.cores.max": str(self.cluster.workers * self.cluster.cores),
            "spark.executor.cores": str(self.cluster.cores),
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.driver.memory": DRIVER_MEMORY,
            "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
            # the venv's interpreter, which has pubsub_connect installed, in driver and executors
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            # one plain JSON-lines file per application (Spark 4 rolls and compresses by default)
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.rolling.enabled": "false",
            "spark.eventLog.compress": "false",
        }

    @staticmethod
    def audit_env(directory: Path, audit_writes: Sequence[Path]) -> dict[str, str]:
        """What loads the process audit (``audit/sitecustomize.py``) into a Python process."""
        env = {"PYTHONPATH": str(AUDIT_DIR), "PUBSUB_CONNECT_AUDIT": str(directory / "audit.jsonl"),
               "PYSPARK_PYTHON": sys.executable}
        if audit_writes:
            env["PUBSUB_CONNECT_AUDIT_WRITES"] = os.pathsep.join(map(str, audit_writes))
        return env

    def run(self, worker: Mapping[str, str], connectors: Sequence[Path], *, args: Sequence[str] = ("--once",),
            env: Mapping[str, str] | None = None, audit_writes: Sequence[Path] = ()) -> ClusterRun:
        """``pubsub-connect run ARGS --worker W CONNECTORS`` on the cluster.

        ``worker``: the run's worker keys (the cluster's keys win over ``spark.master`` and the
        others of :meth:`cluster_settings`). ``env``: variables the connector's clients need,
        given to the driver and, as ``spark.executorEnv.*``, to the executors. ``audit_writes``:
        directories whose file writes are recorded. Started again (up to :data:`ATTEMPTS`) only
        when Spark's Python worker did not connect back in time."""
        run = self._attempt(worker, connectors, args, env or {}, audit_writes)
        for _ in range(ATTEMPTS - 1):
            if run.returncode == 0 or SPARK_CONNECT_BACK not in run.stderr:
                break
            run = self._attempt(worker, connectors, args, env or {}, audit_writes)
        return run

    def _attempt(self, worker: Mapping[str, str], connectors: Sequence[Path], args: Sequence[str],
                 env: Mapping[str, str], audit_writes: Sequence[Path]) -> ClusterRun:
        name = f"run-{len(self.runs) + 1}"
        directory = self.base_dir / name
        directory.mkdir(parents=True)
        # the same variables in the driver and (spark.executorEnv.*) in the executors
        process_env = {**env, **self.audit_env(directory, audit_writes)}
        settings = {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", **worker,
                    **self.cluster_settings(directory),
                    **{f"spark.executorEnv.{key}": value for key, value in process_env.items()}}
        worker_file = directory / "worker.properties"
        worker_file.write_text(properties_text(settings))
        driver_env = {**loopback_env(), **process_env}
        driver_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(AUDIT_DIR), os.environ.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "pubsub_connect.cli", "run", *args, "--worker", str(worker_file),
                   *map(str, connectors)]
        started = time.monotonic()
        with open(directory / "stdout.txt", "wb") as out, open(directory / "stderr.txt", "wb") as err:
            proc = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=driver_env,
                                    cwd=directory, start_new_session=True)
            try:
                returncode = proc.wait(RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                returncode = -1
            finally:
                _stop_session(proc)
        seconds = time.monotonic() - started
        events = EventLog.read(directory / "events") if any((directory / "events").iterdir()) else None
        run = ClusterRun(name=name, directory=directory, driver_pid=proc.pid, returncode=returncode,
                         stdout=(directory / "stdout.txt").read_text(errors="replace"),
                         stderr=(directory / "stderr.txt").read_text(errors="replace"), seconds=seconds,
                         events=events, audit=read_audit(directory / "audit.jsonl"),
                         executor_dirs=self.cluster.executor_dirs(events.app_id) if events else {})
        if returncode == -1:
            run.stderr += f"\n(killed: still running after {RUN_TIMEOUT_S:.0f} s)"
        self.runs.append(run)
        return run

    def run_once(self, spark: object, bootstrap: str, root: Path, connector: cfg.ConnectorConfig,
                 lines: list[str] | None = None, **worker: str) -> None:
        """``e2e.harness.run_once`` on the cluster, to stand in for it in the local end-to-end
        tests: same arguments (``spark`` is not used: the run has an application of its own),
        same outcome for the caller — progress lines appended to ``lines``, a
        :class:`ConnectorError` when the connector stops with one (the CLI's ``error:`` line)."""
        directory = self.base_dir / "connectors"
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{connector.name}-{len(self.runs) + 1}.properties"
        path.write_text(properties_text(connector_properties(connector)))
        self.run_properties(bootstrap, root, path, lines, **worker)

    def run_properties(self, bootstrap: str, root: Path, connector_file: Path, lines: list[str] | None = None,
                       audit_writes: Sequence[Path] = (), **worker: str) -> ClusterRun:
        """One connector file with the usual worker keys; raises as :meth:`run_once` does."""
        run = self.run({"bootstrap.servers": bootstrap, "storage.root": str(root), **worker}, [connector_file],
                       audit_writes=audit_writes)
        if lines is not None:
            lines.extend(run.stdout.splitlines())
        error = run.error_line()
        if error is not None:
            raise ConnectorError(error)
        assert run.returncode == 0, run.tail()
        return run


def _stop_session(proc: subprocess.Popen[bytes]) -> None:
    """Wait until the driver's whole session is gone (its JVM stops the SparkContext, and so
    finishes the event log, after the Python process exited); kill it when it does not go in
    time, or when the run itself timed out."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    deadline = time.monotonic() + DRIVER_EXIT_TIMEOUT_S
    while session_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in session_members(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
