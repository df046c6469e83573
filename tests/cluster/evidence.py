"""Where a connector's work ran: read from Spark's event log and from the process audit.

Two independent sources, because each sees what the other cannot:

- **Spark's event log** (``spark.eventLog.dir``, one JSON line per listener event) names, for every
  task, the executor that ran it; the job that started the task carries its streaming query's
  description (``<connector>.<stage>`` on its first line). So for each stage that is a streaming
  query: how many tasks ran on which executors, and how many rows they wrote.
- **The process audit** (``audit/sitecustomize.py``) names the process that talked to Pub/Sub,
  Lite or Kafka, wrote archive objects, or received rows from a DataFrame. A stage that pulls,
  publishes, produces or writes in the driver shows up there even though Spark tasks ran too
  (a collect is a task as well).

:func:`placement_problems` turns both into one line per violation, so a failing test names every
stage that is not where it should be, not only the first.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cluster.runs import ClusterRun

#: Columns that carry message content: a driver that receives them receives the data itself.
PAYLOAD_COLUMNS = frozenset({"key", "value", "data", "attributes", "headers"})
#: What ``pubsub-connect run`` prints when Kafka reads and Delta writes are Spark's own (tasks).
NATIVE_ENGINE = "native kafka, native delta"
#: How the banner ``pubsub-connect run`` prints once its engine is chosen starts
#: (``pubsub-connect <version>: <where>: <kafka>, <delta>, storage <root>``).
BANNER_PREFIX = "pubsub-connect "
#: How Delta Lake prefixes the description of the jobs it starts.
DELTA_JOB_PREFIX = "Delta: "
#: Executor id Spark gives the driver (it runs tasks only in local mode).
DRIVER_EXECUTOR_ID = "driver"


# ----------------------------------------------------------------------------------------------
# Spark's event log
# ----------------------------------------------------------------------------------------------


@dataclass
class QueryWork:
    """Successful tasks and rows written, per executor id, of one streaming query."""

    tasks: Counter[str] = field(default_factory=Counter)
    records_written: Counter[str] = field(default_factory=Counter)
    failed_tasks: int = 0
    #: Why tasks failed: the exception's class and the first line of its message, with counts.
    failures: Counter[str] = field(default_factory=Counter)


@dataclass
class EventLog:
    """What one application's event log says about its executors and its queries' tasks."""

    path: Path
    app_id: str
    executors: dict[str, str]
    queries: dict[str, QueryWork]
    complete: bool

    @classmethod
    def read(cls, directory: Path) -> EventLog:
        """The application's log in ``directory`` (one application per run)."""
        logs = sorted(p for p in directory.iterdir() if p.is_file())
        if len(logs) != 1:
            raise AssertionError(f"expected one event log in {directory}, found {[p.name for p in logs]}")
        path = logs[0]
        app_id = ""
        executors: dict[str, str] = {}
        queries: dict[str, QueryWork] = {}
        stage_query: dict[int, str] = {}
        with path.open() as lines:
            for line in lines:
                event = json.loads(line)
                kind = event.get("Event")
                if kind == "SparkListenerApplicationStart":
                    app_id = event.get("App ID", "")
                elif kind == "SparkListenerExecutorAdded":
                    executors[event["Executor ID"]] = event["Executor Info"]["Host"]
                elif kind == "SparkListenerJobStart":
                    query = query_of(event.get("Properties") or {})
                    for stage in event.get("Stage IDs", []):
                        stage_query.setdefault(stage, query)
                elif kind == "SparkListenerTaskEnd":
                    work = queries.setdefault(stage_query.get(event["Stage ID"], ""), QueryWork())
                    executor = event["Task Info"]["Executor ID"]
                    reason = event["Task End Reason"]
                    if reason["Reason"] != "Success":
                        work.failed_tasks += 1
                        work.failures[failure_line(reason)] += 1
                        continue
                    work.tasks[executor] += 1
                    output = (event.get("Task Metrics") or {}).get("Output Metrics") or {}
                    work.records_written[executor] += int(output.get("Records Written", 0))
        return cls(path, app_id, executors, queries, complete=not path.name.endswith(".inprogress"))


def failure_line(reason: dict[str, Any]) -> str:
    """``Class: first line of the message`` of a failed task (a Python error's own last line)."""
    description = (reason.get("Description") or reason.get("Reason") or "").strip()
    python_errors = [line for line in description.splitlines() if line[:1].isalpha() and "Error: " in line]
    first = python_errors[-1] if python_errors else (description.splitlines() or [""])[0]
    return f"{reason.get('Class Name', reason.get('Reason'))}: {first[:300]}"


def query_of(properties: dict[str, str]) -> str:
    """A streaming query's name from its job's properties: the micro-batch thread's job
    description starts with it (``<connector>.<stage>\\nid = …\\nrunId = …\\nbatch = N``), after
    ``Delta: `` for the jobs Delta runs within the batch (its commit's statistics, say).
    Jobs outside a streaming query map to ``""``."""
    if "sql.streaming.queryId" not in properties:
        return ""
    return (properties.get("spark.job.description") or "").split("\n", 1)[0].removeprefix(DELTA_JOB_PREFIX)


# ----------------------------------------------------------------------------------------------
# The process audit
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditRecord:
    """One line of the audit file (see ``audit/sitecustomize.py``)."""

    pid: int
    event: str
    what: str
    chain: tuple[int, ...]
    executor: dict[str, Any] | None
    detail: dict[str, Any]

    @classmethod
    def parse(cls, line: str) -> AuditRecord:
        data = json.loads(line)
        return cls(pid=data.pop("pid"), event=data.pop("event"), what=data.pop("what"),
                   chain=tuple(data.pop("chain")), executor=data.pop("executor"), detail=data)


def read_audit(path: Path) -> list[AuditRecord]:
    if not path.exists():
        return []
    return [AuditRecord.parse(line) for line in path.read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Io:
    """Calls that are a stage's work on its data (``event`` and a test on ``what``)."""

    stage: str
    label: str
    event: str
    matches: Callable[[str], bool]


def grpc_call(stage: str, *methods: str) -> Io:
    """One of the gRPC ``methods`` (full paths): how a stage reads or writes Pub/Sub or Lite."""
    return Io(stage, "gRPC " + " or ".join(m.rsplit("/", 1)[-1] for m in methods), "grpc", lambda what: what in methods)


def kafka_produce(stage: str, topic: str) -> Io:
    return Io(stage, f"Kafka produce to {topic}", "kafka.produce", lambda what: what == topic)


def files_written(stage: str, suffixes: Sequence[str]) -> Io:
    return Io(stage, f"writes of {'/'.join(suffixes)} files", "file.write",
              lambda what: what.endswith(tuple(suffixes)))


def on_executor(run: ClusterRun, record: AuditRecord) -> bool:
    """Whether the process descends from an executor JVM of the run's own application."""
    return (record.executor is not None and run.events is not None
            and record.executor.get("app") == run.events.app_id)


def where(run: ClusterRun, record: AuditRecord) -> str:
    """``executor <id>`` (of this run's application), ``driver``, or what else it was."""
    executor = record.executor
    if executor is not None and on_executor(run, record):
        return f"executor {executor.get('id')}"
    if record.pid == run.driver_pid or run.driver_pid in record.chain:
        return "driver"
    if executor is not None:
        return f"executor {executor.get('id')} of another application {executor.get('app')}"
    return f"a process outside the run (pid {record.pid})"


def engine_banner(stdout: str) -> str | None:
    """The first engine banner in a run's output, or None when the run printed none (it failed
    before choosing its engine, or the banner's wording changed)."""
    return next((line for line in stdout.splitlines() if line.startswith(BANNER_PREFIX)), None)


def placement_problems(runs: Iterable[ClusterRun], connectors: Sequence[str], spark_stages: Sequence[str],
                       io: Sequence[Io]) -> list[str]:
    """Every way in which the stages of ``connectors`` (which ran together) did not run in
    executors, one line each:

    - a run without Spark's own Kafka connector and Delta (:data:`NATIVE_ENGINE`), or whose output
      has no engine banner at all;
    - a stage in ``spark_stages`` (a streaming query) has no successful task, a task on the
      driver, or a task on an executor no worker launched as a process for this application;
    - an :class:`Io` that never happened, or happened in a process that is not one of this
      application's executors (the driver, typically);
    - an executor's Python worker ran another interpreter than the run's (the venv's);
    - the driver received rows with message content (:data:`PAYLOAD_COLUMNS`) from a DataFrame —
      more than the one row an error message may quote.
    """
    runs = list(runs)
    problems: list[str] = []
    for run in runs:  # the Python stand-ins would read Kafka / write Delta outside Spark's tasks
        engine = engine_banner(run.stdout)
        if engine is None:  # without it nothing shows which engine ran, so the run proves nothing
            problems.append(f"{run.name}: no engine banner (a line starting {BANNER_PREFIX!r}) in its output")
        elif NATIVE_ENGINE not in engine:
            problems.append(f"{run.name}: not Spark's own Kafka connector and Delta: {engine}")
    for query in [f"{connector}.{stage}" for connector in connectors for stage in spark_stages]:
        tasks: Counter[str] = Counter()
        for run in runs:
            if run.events is None:
                continue
            work = run.events.queries.get(query)
            if work is None:
                continue
            tasks.update(work.tasks)
            launched = run.executor_dirs
            for executor in work.tasks:
                if executor == DRIVER_EXECUTOR_ID:
                    problems.append(f"{query}: {work.tasks[executor]} task(s) ran in the driver")
                elif executor not in launched:
                    problems.append(f"{query}: executor {executor} of {run.events.app_id} was not launched by a "
                                    f"worker (no executor directory; launched: {sorted(launched)})")
        if not tasks:
            problems.append(f"{query}: no Spark task of this stage ran (no job carries the query's name)")
    label = "/".join(connectors)
    for expected in io:
        records = [(run, r) for run in runs for r in run.audit
                   if r.event == expected.event and expected.matches(r.what)]
        if not records:
            problems.append(f"{label} {expected.stage}: no {expected.label} recorded in any process")
        elsewhere: dict[str, list[str]] = {}
        for run, record in records:
            if not on_executor(run, record):
                elsewhere.setdefault(where(run, record), []).append(record.what)
        for place, whats in sorted(elsewhere.items()):
            shown = ", ".join(sorted(set(whats))[:3]) + (", …" if len(set(whats)) > 3 else "")
            problems.append(f"{label} {expected.stage}: {expected.label} in the {place}, not in an executor "
                            f"({len(whats)} record(s): {shown})")
    for run in runs:
        wrong_python = {record.detail.get("python") for record in run.audit
                        if on_executor(run, record) and record.detail.get("python") != run.python}
        if wrong_python:
            problems.append(f"{run.name}: executors ran {sorted(map(str, wrong_python))}, not {run.python}")
        for record in run.audit:
            if record.event != "driver.collect":
                continue
            payload = sorted(PAYLOAD_COLUMNS & set(record.detail.get("columns", [])))
            rows = record.detail.get("rows")
            if payload and (rows is None or rows > 1):
                problems.append(f"{label}: the driver received {rows if rows is not None else 'streamed'} rows "
                                f"with {payload} from DataFrame.{record.detail.get('method')} at {record.what}")
    return problems


def summary(runs: Iterable[ClusterRun], connectors: Sequence[str]) -> list[str]:
    """Per run: the application, its executors, each query's tasks and rows written per
    executor, and where each kind of audited call happened — for the test's output."""
    lines = []
    for run in runs:
        events = run.events
        if events is None:
            lines.append(f"{run.name}: no event log")
            continue
        lines.append(f"{run.name}: {events.app_id} in {run.seconds:.1f} s, exit {run.returncode}, "
                     f"executors {sorted(events.executors)} (launched by workers: {sorted(run.executor_dirs)})")
        for query, work in sorted(events.queries.items()):
            if query.startswith(tuple(f"{connector}." for connector in connectors)):
                lines.append(f"  {query}: tasks {dict(sorted(work.tasks.items()))}, rows written "
                             f"{dict(sorted(work.records_written.items()))}, failed tasks {work.failed_tasks}")
                lines.extend(f"    task failure x{count}: {line}" for line, count in sorted(work.failures.items()))
        places = Counter((r.event, r.what if r.event != "file.write" else "*", where(run, r)) for r in run.audit)
        for (event, what, place), count in sorted(places.items()):
            lines.append(f"  {event} {what}: {place} x{count}")
    return lines
