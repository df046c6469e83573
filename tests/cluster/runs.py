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
import threading
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
        when Spark's Python worker did not connect back in time. Killed after
        :data:`RUN_TIMEOUT_S` per connector."""
        run = self._attempt(worker, connectors, args, env or {}, audit_writes)
        for _ in range(ATTEMPTS - 1):
            if run.returncode == 0 or SPARK_CONNECT_BACK not in run.stderr:
                break
            run = self._attempt(worker, connectors, args, env or {}, audit_writes)
        return run

    def _attempt(self, worker: Mapping[str, str], connectors: Sequence[Path], args: Sequence[str],
                 env: Mapping[str, str], audit_writes: Sequence[Path]) -> ClusterRun:
        timeout_s = RUN_TIMEOUT_S * max(1, len(connectors))
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
                returncode = proc.wait(timeout_s)
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
            run.stderr += f"\n(killed: still running after {timeout_s:.0f} s)"
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


# ----------------------------------------------------------------------------------------------
# Several scenarios, one application
# ----------------------------------------------------------------------------------------------

#: Worker keys whose values scenarios that run together may differ in, and how the run's value is
#: chosen: the smallest bound of a micro-batch (every scenario that runs together moves fewer
#: records per stage than any of them, so the bound splits none of its micro-batches).
MERGED_WORKER_KEYS = {"pipeline.max.records.per.batch": lambda values: str(min(map(int, values)))}
#: How long the scenarios may take to reach their first run (setup: topics, records, messages).
GATHER_TIMEOUT_S = 300.0


@dataclass
class _Request:
    worker: Mapping[str, str]
    connectors: Sequence[Path]
    args: Sequence[str]
    env: Mapping[str, str]
    audit_writes: Sequence[Path]


class Together:
    """The first run of several scenarios as one ``pubsub-connect run`` application.

    A run on the cluster is a Spark application of its own: a driver JVM, an executor JVM per
    worker and their Python workers start for it, which costs more than the small scenarios'
    stages themselves. Each scenario runs in a thread of its own with a :class:`ScenarioRunner`;
    the first :meth:`ClusterRunner.run` of each waits here until every scenario has either asked
    for its run or ended, then one application runs all their connectors (``--once`` runs them
    one after the other, as separate runs would) and each scenario goes on with that run as its
    own: its outputs are checked by the same assertions, its placement in the same event log and
    process audit, where every check names its connector's stages, topics or calls. Later runs of
    a scenario (a resume, a restart) are applications of their own.

    Scenarios that run together share one storage root (connector names differ) and must agree on
    every worker key but :data:`MERGED_WORKER_KEYS`; the run gets every connector, environment
    variable and audited directory they asked for.
    """

    def __init__(self, runner: ClusterRunner, scenarios: Sequence[str]):
        self.runner = runner
        self._pending = set(scenarios)
        self._requests: dict[str, _Request] = {}
        self._run: ClusterRun | None = None
        self._failure: BaseException | None = None
        self._ready = threading.Condition()

    def scenario_runner(self, scenario: str) -> ScenarioRunner:
        directory = self.runner.base_dir / scenario
        return ScenarioRunner(self.runner.cluster, directory, together=self, scenario=scenario)

    def ask(self, scenario: str, request: _Request) -> ClusterRun:
        """A scenario's first run: wait for the others, then the run of all of them."""
        with self._ready:
            self._requests[scenario] = request
            self._pending.discard(scenario)
            self._ready.notify_all()
            self._ready.wait_for(lambda: self._run is not None or self._failure is not None)
            if self._failure is not None:
                raise RuntimeError(f"the joint run of {sorted(self._requests)} did not start") from self._failure
            assert self._run is not None
            return self._run

    def ended(self, scenario: str) -> None:
        """A scenario's thread ended (after its run, or without asking for one)."""
        with self._ready:
            self._pending.discard(scenario)
            self._ready.notify_all()

    def run_when_gathered(self) -> ClusterRun | None:
        """In the main thread: once no scenario is still on its way to its first run, the joint
        run (None when none asked for one)."""
        with self._ready:
            gathered = self._ready.wait_for(lambda: not self._pending, GATHER_TIMEOUT_S)
            requests = dict(self._requests)
        try:
            if not gathered:
                raise AssertionError(f"scenarios {sorted(self._pending)} did not reach their first run in "
                                     f"{GATHER_TIMEOUT_S:.0f} s")
            run = self._joint_run(requests) if requests else None
        except BaseException as exc:
            with self._ready:
                self._failure = exc
                self._ready.notify_all()
            raise
        with self._ready:
            self._run = run
            self._ready.notify_all()
        return run

    def _joint_run(self, requests: Mapping[str, _Request]) -> ClusterRun:
        args = {tuple(r.args) for r in requests.values()}
        if len(args) != 1:
            raise AssertionError(f"scenarios run together need the same arguments, not {sorted(args)}")
        worker: dict[str, str] = {}
        merged: dict[str, list[str]] = {}
        env: dict[str, str] = {}
        for scenario, request in sorted(requests.items()):
            for key, value in request.worker.items():
                if key in MERGED_WORKER_KEYS:
                    merged.setdefault(key, []).append(value)
                elif worker.setdefault(key, value) != value:
                    raise AssertionError(f"{scenario}: worker key {key}={value!r}, another scenario has "
                                         f"{worker[key]!r}")
            for key, value in request.env.items():
                if env.setdefault(key, value) != value:
                    raise AssertionError(f"{scenario}: variable {key}={value!r}, another scenario has {env[key]!r}")
        worker.update({key: MERGED_WORKER_KEYS[key](values) for key, values in merged.items()})
        connectors = [path for _, request in sorted(requests.items()) for path in request.connectors]
        audit_writes = [path for _, request in sorted(requests.items()) for path in request.audit_writes]
        return self.runner.run(worker, connectors, args=next(iter(args)), env=env, audit_writes=audit_writes)


class ScenarioRunner(ClusterRunner):
    """A :class:`ClusterRunner` for one scenario of a :class:`Together`: its first run is the
    joint one; its :attr:`runs` are that run and its own later ones."""

    def __init__(self, cluster: StandaloneCluster, base_dir: Path, *, together: Together, scenario: str):
        super().__init__(cluster, base_dir)
        self.together = together
        self.scenario = scenario

    def run(self, worker: Mapping[str, str], connectors: Sequence[Path], *, args: Sequence[str] = ("--once",),
            env: Mapping[str, str] | None = None, audit_writes: Sequence[Path] = ()) -> ClusterRun:
        if self.runs:
            return super().run(worker, connectors, args=args, env=env, audit_writes=audit_writes)
        run = self.together.ask(self.scenario, _Request(worker, connectors, args, env or {}, audit_writes))
        self.runs.append(run)
        return run
