"""SparkSession factory and the capability check that picks native vs. Python implementations.

Why a capability object: the same pipeline code runs on Databricks (Spark's native ``kafka``
source/sink and Delta are on the JVM) and locally on a pip-installed PySpark that has neither
(no Maven access, so no jars). Pipelines ask :func:`capabilities` once per session and call the
``io`` functions, which choose the implementation; nothing else in the code branches on it.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

KAFKA_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
DELTA_CLASSES = (
    "io.delta.tables.DeltaTable",
    "com.databricks.sql.transaction.tahoe.DeltaLog",
)

#: Defaults for a local session. Small shuffle partition count: local micro-batches are small
#: and the default 200 tasks cost more than the work. Loopback binding: nothing listens
#: beyond this machine. UTC: Kafka and Pub/Sub timestamps are epoch based.
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.python.worker.reuse": "true",
}

#: JVM loggers that print a failed task or streaming query with its whole stack trace (the Python
#: traceback included). The stage runner reports every such failure itself in one line, and
#: restarts the stage when it is transient, so on a user's console these traces only bury that
#: line. ``pubsub-connect run`` turns them off unless ``--debug``; nothing else is changed.
QUERY_FAILURE_LOGGERS = (
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",  # Spark 4.1+
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",  # Spark 3.x, 4.0
)

# Worker keys that choose an implementation explicitly (``auto`` = detect).
KAFKA_IMPLEMENTATIONS = ("auto", "native", "python")
TABLE_IMPLEMENTATIONS = ("auto", "delta-spark", "delta-rs")


@dataclass(frozen=True)
class Capabilities:
    """What the running Spark offers. ``databricks`` implies both natives."""

    native_kafka: bool
    native_delta: bool
    databricks: bool = False

    def describe(self) -> str:
        kafka = "native kafka" if self.native_kafka else "python kafka source"
        delta = "native delta" if self.native_delta else "delta-rs"
        where = "databricks" if self.databricks else "local"
        return f"{where}: {kafka}, {delta}"


def running_on_databricks() -> bool:
    return "DATABRICKS_RUNTIME_VERSION" in os.environ


def _driver_jvm(spark: SparkSession) -> Any:
    """The driver JVM's py4j view, or None on Spark Connect (no SparkContext there)."""
    try:
        return spark.sparkContext._jvm  # type: ignore[attr-defined]
    except Exception:  # Spark Connect sessions have no SparkContext
        return None


def _jvm_has_class(spark: SparkSession, class_name: str) -> bool:
    """True when the driver JVM can load ``class_name``. False on Spark Connect (no py4j JVM)."""
    jvm = _driver_jvm(spark)
    if jvm is None:
        return False
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(class_name, False, loader)
        return True
    except Exception:
        return False


_CACHE: dict[int, Capabilities] = {}


def capabilities(spark: SparkSession, kafka_impl: str = "auto", table_impl: str = "auto") -> Capabilities:
    """Detect (once per session) which native connectors the session's JVM has.

    ``kafka_impl``/``table_impl`` force a choice (worker keys ``pipeline.kafka.implementation``
    and ``pipeline.tables.implementation``), e.g. to test the Python source on a cluster.
    """
    if kafka_impl not in KAFKA_IMPLEMENTATIONS:
        raise ValueError(f"kafka implementation must be one of {KAFKA_IMPLEMENTATIONS}, got {kafka_impl!r}")
    if table_impl not in TABLE_IMPLEMENTATIONS:
        raise ValueError(f"table implementation must be one of {TABLE_IMPLEMENTATIONS}, got {table_impl!r}")
    key = id(spark)
    detected = _CACHE.get(key)
    if detected is None:
        databricks = running_on_databricks()
        detected = Capabilities(
            native_kafka=databricks or _jvm_has_class(spark, KAFKA_PROVIDER_CLASS),
            native_delta=databricks or any(_jvm_has_class(spark, c) for c in DELTA_CLASSES),
            databricks=databricks,
        )
        _CACHE[key] = detected
        log.info("spark capabilities: %s", detected.describe())
    return resolve_capabilities(detected, kafka_impl, table_impl)


def resolve_capabilities(detected: Capabilities, kafka_impl: str = "auto", table_impl: str = "auto") -> Capabilities:
    """Apply explicit choices on top of what was detected; asking for a missing native fails."""
    native_kafka = detected.native_kafka
    native_delta = detected.native_delta
    if kafka_impl == "native" and not native_kafka:
        raise RuntimeError("pipeline.kafka.implementation=native but Spark's Kafka connector is not on the classpath")
    if table_impl == "delta-spark" and not native_delta:
        raise RuntimeError("pipeline.tables.implementation=delta-spark but Delta Lake is not on the classpath")
    if kafka_impl == "python":
        native_kafka = False
    if table_impl == "delta-rs":
        native_delta = False
    return Capabilities(native_kafka, native_delta, detected.databricks)


def build_session(spark_conf: dict[str, str] | None = None, app_name: str = "pubsub-connect",
                  master: str | None = None) -> SparkSession:
    """Return the active session on a cluster, or build a local one with :data:`LOCAL_DEFAULTS`.

    Any ``spark.*`` key from the worker config overrides the defaults (and ``spark.master``
    picks the master). On Databricks the existing session is reused and only runtime-settable
    keys are applied.
    """
    from pyspark.sql import SparkSession

    conf = dict(spark_conf or {})
    active = SparkSession.getActiveSession()
    if active is not None or running_on_databricks():
        session = active or SparkSession.builder.getOrCreate()
        for key, value in conf.items():
            try:
                session.conf.set(key, value)
            except Exception:  # static confs cannot change on a running cluster
                log.debug("cannot set %s on the running session", key)
        return session

    # Python workers must run the interpreter that has this package installed (data sources
    # are pickled by reference and imported on the worker side).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master or conf.pop("spark.master", "local[*]"))
    for key, value in {**LOCAL_DEFAULTS, **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(conf.get("spark.log.level", "WARN"))
    return session


def silence_query_failure_logs(spark: SparkSession) -> None:
    """Turn off the JVM loggers of :data:`QUERY_FAILURE_LOGGERS` in this session's driver.

    A no-op without a py4j JVM (Spark Connect). Not used on Databricks, whose driver logs are
    where users look for those traces."""
    jvm = _driver_jvm(spark)
    if jvm is None:
        return
    log4j = jvm.org.apache.logging.log4j
    for name in QUERY_FAILURE_LOGGERS:
        log4j.core.config.Configurator.setLevel(name, log4j.Level.OFF)
