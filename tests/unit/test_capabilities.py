"""Selection of native vs. Python implementations."""

from __future__ import annotations

import pytest

from pubsub_connect.io.spark import Capabilities, fallback_engine_available, resolve_capabilities

LOCAL = Capabilities(native_kafka=False, native_delta=False)
CLUSTER = Capabilities(native_kafka=True, native_delta=True, databricks=True)


def test_auto_keeps_what_was_detected() -> None:
    assert resolve_capabilities(LOCAL) == LOCAL
    assert resolve_capabilities(CLUSTER) == CLUSTER
    assert LOCAL.describe() == "local: python kafka source, delta-rs"
    assert CLUSTER.describe() == "databricks: native kafka, native delta"


def test_forcing_python_implementations_on_a_cluster() -> None:
    if not fallback_engine_available():  # Spark before 4.2: refused in one line
        with pytest.raises(RuntimeError, match=r"^pipeline.kafka.implementation=python or "
                           r"pipeline.tables.implementation=delta-rs: the fallback engine \(python kafka source, "
                           r"delta-rs\) needs Spark 4.2 or newer, found 4\.[01]\.\d+$"):
            resolve_capabilities(CLUSTER, "python", "delta-rs")
        return
    forced = resolve_capabilities(CLUSTER, "python", "delta-rs")
    assert (forced.native_kafka, forced.native_delta, forced.databricks) == (False, False, True)


@pytest.mark.parametrize(
    ("kafka", "table", "message"),
    [
        ("native", "auto", "Kafka connector is not on the classpath"),
        ("auto", "delta-spark", "Delta Lake is not on the classpath"),
    ],
)
def test_asking_for_a_missing_native_fails(kafka: str, table: str, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        resolve_capabilities(LOCAL, kafka, table)


def test_run_turns_off_the_jvm_loggers_that_print_query_failure_traces(spark) -> None:
    from pubsub_connect.io.spark import QUERY_FAILURE_LOGGERS, silence_query_failure_logs

    log4j = spark.sparkContext._jvm.org.apache.logging.log4j

    def levels() -> list[str]:
        return [log4j.LogManager.getLogger(name).getLevel().toString() for name in QUERY_FAILURE_LOGGERS]

    before = levels()
    assert "OFF" not in before
    try:
        silence_query_failure_logs(spark)
        assert levels() == ["OFF"] * len(QUERY_FAILURE_LOGGERS)
        # a level set on the root afterwards (sc.setLogLevel) does not bring them back
        spark.sparkContext.setLogLevel("WARN")
        assert levels() == ["OFF"] * len(QUERY_FAILURE_LOGGERS)
        assert log4j.LogManager.getLogger("org.apache.spark.scheduler.DAGScheduler").getLevel().toString() == "WARN"
    finally:
        for name, level in zip(QUERY_FAILURE_LOGGERS, before, strict=True):
            log4j.core.config.Configurator.setLevel(name, log4j.Level.getLevel(level))


@pytest.mark.parametrize("debug", [False, True])
def test_run_turns_the_schedulers_cancel_warnings_down_unless_debug(
        spark, monkeypatch: pytest.MonkeyPatch, debug: bool) -> None:
    """A stage's restart, or the other stages stopped when one gives up, makes Spark's scheduler
    warn that a finished job group could not be cancelled, after the connector's last line."""
    import argparse
    from types import SimpleNamespace

    from pubsub_connect import cli
    from pubsub_connect.io.spark import QUERY_FAILURE_LOGGERS
    from pubsub_connect.pipelines import runtime

    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    scheduler = log4j.LogManager.getLogger("org.apache.spark.scheduler.DAGScheduler")
    saved = {name: log4j.LogManager.getLogger(name).getLevel()
             for name in ("org.apache.spark.scheduler.DAGScheduler", *QUERY_FAILURE_LOGGERS)}
    context = SimpleNamespace(spark=spark, caps=SimpleNamespace(describe=lambda: "test session"),
                              store=SimpleNamespace(root="/nowhere"))
    monkeypatch.setattr(runtime, "build_context", lambda *_args, **_kwargs: context)
    monkeypatch.setattr(runtime, "apply_tasks_max", lambda _run_config: None)
    try:
        assert scheduler.getLevel().toString() == "WARN"
        args = argparse.Namespace(debug=debug, once=True)
        assert cli._run_plans(args, SimpleNamespace(worker=None), []) == 0
        assert scheduler.getLevel().toString() == ("WARN" if debug else "ERROR")
    finally:
        for name, level in saved.items():
            log4j.core.config.Configurator.setLevel(name, level)
