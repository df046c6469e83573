"""The placement check itself, on made-up evidence (fast: no cluster).

Why: the cluster tests pass only when the check finds nothing, so the check must be shown to
find what it is for — work in the driver, a stage without tasks, message content collected to
the driver — or a passing cluster test would prove nothing.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from cluster.evidence import AuditRecord, EventLog, QueryWork, grpc_call, placement_problems
from cluster.runs import ClusterRun

APP = "app-1"
DRIVER_PID = 100
PYTHON = "/venv/bin/python"
PUBLISH = "/google.pubsub.v1.Publisher/Publish"


def record(event: str, what: str, *, executor: str | None = "0", **detail: object) -> AuditRecord:
    """A line of the audit: from a Python worker of ``executor`` (its JVM pid 500), else from
    the driver."""
    if executor is None:
        return AuditRecord(DRIVER_PID, event, what, (1,), None, {"python": PYTHON, **detail})
    return AuditRecord(900, event, what, (500, 400, 1), {"id": executor, "app": APP, "pid": 500},
                       {"python": PYTHON, **detail})


#: What ``pubsub-connect run`` prints once it chose Spark's own Kafka connector and Delta.
NATIVE_BANNER = "pubsub-connect 0.1.0: local: native kafka, native delta, storage x\n"


def run(*audit: AuditRecord, stages: tuple[str, ...] = ("ingest", "publish"),
        stdout: str = NATIVE_BANNER) -> ClusterRun:
    queries = {f"c.{stage}": QueryWork(tasks=Counter({"0": 2, "1": 1})) for stage in stages}
    events = EventLog(Path("log"), APP, {"0": "127.0.0.1", "1": "127.0.0.1"}, queries, complete=True)
    return ClusterRun(name="run-1", directory=Path("run-1"), driver_pid=DRIVER_PID, returncode=0,
                      stdout=stdout, stderr="",
                      seconds=1.0, events=events, audit=list(audit),
                      executor_dirs={"0": Path("0"), "1": Path("1")}, python=PYTHON)


def problems(the_run: ClusterRun) -> list[str]:
    return placement_problems([the_run], ["c"], ("ingest", "publish"), [grpc_call("publish", PUBLISH)])


def test_work_in_executors_passes() -> None:
    assert problems(run(record("grpc", PUBLISH), record("grpc", PUBLISH, executor="1"),
                        record("driver.collect", "pipelines/x.py:1 f", executor=None, columns=["published"],
                               rows=2))) == []


def test_work_in_the_driver_is_named() -> None:
    (line,) = problems(run(record("grpc", PUBLISH), record("grpc", PUBLISH, executor=None)))
    assert line.startswith("c publish: gRPC Publish in the driver, not in an executor")


def test_missing_work_and_stages_without_tasks_are_named() -> None:
    assert problems(run(stages=("ingest",))) == [
        "c.publish: no Spark task of this stage ran (no job carries the query's name)",
        "c publish: no gRPC Publish recorded in any process"]


def test_message_content_collected_to_the_driver_is_named() -> None:
    collected = [record("grpc", PUBLISH),
                 record("driver.collect", "pipelines/x.py:9 g", executor=None, columns=["key", "value"], rows=5,
                        method="toArrow"),
                 record("driver.collect", "pipelines/x.py:7 first", executor=None, columns=["value"], rows=1)]
    assert problems(run(*collected)) == [
        "c: the driver received 5 rows with ['key', 'value'] from DataFrame.toArrow at pipelines/x.py:9 g"]


def test_an_executor_on_another_interpreter_is_named() -> None:
    other = AuditRecord(900, "grpc", PUBLISH, (500, 1), {"id": "0", "app": APP, "pid": 500}, {"python": "python3"})
    assert problems(run(other)) == ["run-1: executors ran ['python3'], not /venv/bin/python"]


def test_a_run_on_the_python_stand_ins_is_named() -> None:
    stand_ins = "pubsub-connect 0.1.0: local: python kafka source, delta-rs, storage x\n"
    assert problems(run(record("grpc", PUBLISH), stdout=stand_ins)) == [
        "run-1: not Spark's own Kafka connector and Delta: "
        "pubsub-connect 0.1.0: local: python kafka source, delta-rs, storage x"]


def test_a_run_without_an_engine_banner_is_named() -> None:
    """Nothing else in the evidence tells Spark's Kafka connector from the Python stand-in, so a
    run that did not say which engine it chose cannot pass."""
    assert problems(run(record("grpc", PUBLISH), stdout="[c] done\n")) == [
        "run-1: no engine banner (a line starting 'pubsub-connect ') in its output"]
