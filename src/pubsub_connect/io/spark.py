"""SparkSession factory and the capability check that picks native vs. fallback implementations.

Why a capability object: the same pipeline code runs on Databricks (Spark's native ``kafka``
source/sink and Delta are on the JVM) and locally on a pip-installed PySpark, which ships neither.
A local session loads both from Maven Central (:func:`spark_connectors`, resolved once into the
cache of :mod:`pubsub_connect.io.artifacts`, offline afterwards), so locally the engine is the one
Databricks runs. Only where the jars cannot be had (no artifact repository) does the session start
without them, saying so in one line; then the project's Python Kafka source and delta-rs stand
in. Pipelines ask :func:`capabilities` once per session and call the ``io`` functions, which
choose the implementation; nothing else in the code branches on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubsub_connect.io import artifacts, class_data_archive, spark_versions
from pubsub_connect.io.spark_versions import python_stream_admission_control, release_line

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
    # Delta Lake rebuilds a table's state after every commit in a job of this many tasks (50 by
    # default, sized for clusters); each task code-generates the serializer of Delta's actions
    # first. On a local machine that made a small append cost ~4 s instead of ~1 s.
    "spark.databricks.delta.snapshotPartitions": "1",
    # VACUUM lists a table's folders in a Spark job of up to this many tasks (10,000 by default,
    # sized for clusters): on a local machine a table of five files took 15-25 s to vacuum, and
    # 1.5 s with this.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
    # Unchunked base64, as Kafka's JsonConverter writes bytes: the Cloud Pub/Sub source's JSON
    # values then need no CRLF removed. Its conversion is exact either way; with this, a message
    # whose value is plain JSON converts about 1.25 times as fast per core.
    "spark.sql.chunkBase64String.enabled": "false",
    # PySpark's call-site capture for DataFrame error messages sends its own Py4J round trips
    # around every PySpark function call (about a dozen for one F.col instead of two). A stage's
    # micro-batch makes hundreds of such calls; the connector reports a failure in one line of its
    # own, which does not use that context.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}

#: JVM loggers whose output the connector replaces with one line of its own: a failed task or
#: streaming query with its whole stack trace (the Python traceback included), and the Kafka
#: client's reconnect warnings. The stage runner reports every such failure itself in one line, and
#: restarts the stage when it is transient, so on a user's console these traces only bury that
#: line. ``pubsub-connect run`` turns them off unless ``--debug``; nothing else is changed.
QUERY_FAILURE_LOGGERS = (
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",  # Spark 4.1+
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",  # Spark 3.x, 4.0
    # Delta's writer logs "Aborting job" with the whole trace when a stop cancels a table append.
    "org.apache.spark.sql.delta.files.DeltaFileFormatWriter",
    # The Java Kafka client (as Apache ships it and as Databricks shades it): with a broker down
    # it warns on every reconnect, several lines a second; the connector's own check names the
    # broker and the failure in one line before a stage starts.
    "org.apache.kafka",
    "kafkashaded.org.apache.kafka",
)

#: Delta Lake's SQL extension and catalog: what makes ``format("delta")``, ``DESCRIBE HISTORY``
#: and Delta's transaction ids work in a plain Spark session.
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"

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


@contextlib.contextmanager
def console_silenced(spark: SparkSession) -> Iterator[None]:
    """Scala's ``println`` goes nowhere for the block, on this thread's side of the driver JVM.

    Why: some Delta commands print a summary to the JVM's standard output rather than to a logger
    (VACUUM's "Deleted N files and directories in a total of M directories."), which no log level
    quiets, and the product reports that work itself. Scala's ``Console`` keeps its stream per
    thread and PySpark pins each Python thread to a JVM thread of its own, so only the commands
    this thread runs are silenced; the streaming stages' threads print as before. Nothing to do
    on Spark Connect, whose driver's output is not this console."""
    jvm = _driver_jvm(spark)
    if jvm is None:
        yield
        return
    console = getattr(getattr(jvm.scala, "Console$"), "MODULE$")
    previous = console.out()
    console.setOutDirect(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))
    try:
        yield
    finally:
        console.setOutDirect(previous)


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


def fallback_engine_available() -> bool:
    """Whether this PySpark can run the fallback engine: its Kafka and Delta sources are Python
    streaming sources with read limits and ``availableNow``, which Spark has from 4.2."""
    return python_stream_admission_control()


def fallback_unavailable() -> str:
    """Why this PySpark cannot run the fallback engine, in words for a one-line error."""
    found = spark_versions.installed_pyspark()
    return f"the fallback engine (python kafka source, delta-rs) needs Spark 4.2 or newer, found {found}"


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
    if (kafka_impl == "python" or table_impl == "delta-rs") and not fallback_engine_available():
        raise RuntimeError(f"pipeline.kafka.implementation=python or pipeline.tables.implementation=delta-rs: "
                           f"{fallback_unavailable()}")
    if kafka_impl == "native" and not native_kafka:
        raise RuntimeError("pipeline.kafka.implementation=native but Spark's Kafka connector is not on the classpath")
    if table_impl == "delta-spark" and not native_delta:
        raise RuntimeError("pipeline.tables.implementation=delta-spark but Delta Lake is not on the classpath")
    if kafka_impl == "python":
        native_kafka = False
    if table_impl == "delta-rs":
        native_delta = False
    return Capabilities(native_kafka, native_delta, detected.databricks)


#: Used when the ``delta-spark`` Python package is absent (the Delta jar alone still works).
DEFAULT_DELTA_VERSION = "4.4.0"


def _delta_version() -> str:
    """The Delta Lake release that pairs with the installed ``delta-spark`` Python package (the jar
    and the Python API must be the same release, as ``configure_spark_with_delta_pip`` assumes)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("delta-spark")
    except PackageNotFoundError:
        return DEFAULT_DELTA_VERSION


def delta_coordinate(spark_line: str, delta_version: str) -> artifacts.Coordinate:
    """Delta Lake's jar for a Spark line: from Delta 4.1 on, one release is built for several Spark
    lines and the artifact names the line (``delta-spark_4.2_2.13``); before, one artifact per
    release (``delta-spark_2.13``, Delta 4.0 for Spark 4.0)."""
    if release_line(delta_version) >= (4, 1):
        return artifacts.Coordinate("io.delta", f"delta-spark_{spark_line}_2.13", delta_version)
    return artifacts.Coordinate("io.delta", "delta-spark_2.13", delta_version)


def spark_connectors(kafka: bool = True, delta: bool = True) -> artifacts.ArtifactSet:
    """Spark's Kafka connector, Delta Lake and Spark's Avro functions (``from_avro``, which the
    Schema Registry converters decode with) for the installed PySpark: the same coordinates as
    ``--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark>,io.delta:delta-spark_<x.y>_2.13:<delta>,
    org.apache.spark:spark-avro_2.13:<spark>`` (see :func:`delta_coordinate`). Databricks
    runtimes ship all three.
    """
    spark_version = spark_versions.installed_pyspark()
    major_minor = ".".join(spark_version.split(".")[:2])
    coordinates = []
    if kafka:
        coordinates.append(artifacts.Coordinate("org.apache.spark", "spark-sql-kafka-0-10_2.13", spark_version))
    if delta:
        coordinates.append(delta_coordinate(major_minor, _delta_version()))
    coordinates.append(artifacts.Coordinate("org.apache.spark", "spark-avro_2.13", spark_version))
    name = "spark-" + "-".join(part for part, on in (("kafka", kafka), ("delta", delta), ("avro", True)) if on)
    return artifacts.ArtifactSet(name, tuple(coordinates), provided_dirs=(artifacts.pyspark_jars_dir(),))


def _merge_list(conf: dict[str, str], key: str, values: list[str], sep: str = ",") -> None:
    existing = [v for v in conf.get(key, "").split(sep) if v]
    conf[key] = sep.join([*values, *[v for v in existing if v not in values]])


def local_connector_conf(conf: dict[str, str], kafka_impl: str = "auto", table_impl: str = "auto",
                         report: Any = None) -> dict[str, str]:
    """``conf`` plus the jars and Delta settings of the native engine, when they can be had.

    ``kafka_impl``/``table_impl`` (``pipeline.kafka.implementation`` and
    ``pipeline.tables.implementation``) say which are wanted; ``auto`` falls back to the stand-ins
    with one line through ``report`` (default: a warning) when resolution fails, while an explicit
    ``native``/``delta-spark`` raises :class:`~pubsub_connect.io.artifacts.ArtifactError`.
    """
    want_kafka = kafka_impl != "python"
    want_delta = table_impl != "delta-rs"
    out = dict(conf)
    if not (want_kafka or want_delta) or out.get("spark.jars.packages"):
        return out  # nothing to add, or the user resolves packages the Spark way themselves
    repositories = [r for r in out.get("spark.jars.repositories", "").split(",") if r]
    try:
        jars = artifacts.resolve(spark_connectors(want_kafka, want_delta), repositories)
    except artifacts.ArtifactError as exc:
        if kafka_impl == "native" or table_impl == "delta-spark":
            raise
        if not fallback_engine_available():
            raise artifacts.ArtifactError(f"{exc}; {fallback_unavailable()}") from None
        message = (f"Spark's Kafka connector and Delta Lake are not available ({exc}); "
                   "using the fallback: python kafka source, delta-rs")
        (report or log.warning)(message)
        return out
    _merge_list(out, "spark.jars", [str(j) for j in jars])
    if want_delta:
        _merge_list(out, "spark.sql.extensions", [DELTA_EXTENSION])
        out.setdefault("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
    return out


#: The local driver's logging: warnings on stderr without the start-up chatter (see the file).
LOCAL_LOG4J2 = Path(__file__).with_name("log4j2-local.properties")


def _add_java_option(conf: dict[str, str], key: str, option: str) -> None:
    """Append ``option`` to a JVM options setting unless the user set that property already."""
    existing = conf.get(key, "")
    name = option.split("=", 1)[0]
    if name not in existing:
        conf[key] = f"{existing} {option}".strip()


def build_session(spark_conf: dict[str, str] | None = None, app_name: str = "pubsub-connect",
                  master: str | None = None, kafka_impl: str = "auto", table_impl: str = "auto") -> SparkSession:
    """Return the active session on a cluster, or build a local one with :data:`LOCAL_DEFAULTS`
    and the native engine's jars (:func:`local_connector_conf`).

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
    # Loopback, as spark.driver.host says; also spares the "hostname resolves to a loopback
    # address" warning of every start.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = local_connector_conf({**LOCAL_DEFAULTS, **conf}, kafka_impl, table_impl)
    _add_java_option(conf, "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOCAL_LOG4J2}")
    class_data_archive.add_driver_options(conf)  # once `pubsub-connect jars` has built it
    builder = SparkSession.builder.appName(app_name).master(master or conf.pop("spark.master", "local[*]"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(conf.get("spark.log.level", "WARN"))
    return session


def _set_driver_log_level(spark: SparkSession, loggers: tuple[str, ...], level: str) -> None:
    """Set JVM loggers of this session's driver (a no-op without a py4j JVM: Spark Connect)."""
    jvm = _driver_jvm(spark)
    if jvm is None:
        return
    log4j = jvm.org.apache.logging.log4j
    for name in loggers:
        log4j.core.config.Configurator.setLevel(name, log4j.Level.getLevel(level))


def silence_query_failure_logs(spark: SparkSession) -> None:
    """Turn off the JVM loggers of :data:`QUERY_FAILURE_LOGGERS` in this session's driver.
    Not used on Databricks, whose driver logs are where users look for those traces."""
    _set_driver_log_level(spark, QUERY_FAILURE_LOGGERS, "OFF")


def quiet_routine_stops(spark: SparkSession) -> None:
    """Turn the DAG scheduler's warnings down to errors in this session's driver. The connector
    stops queries routinely (a stage restarted after a failure, the other stages stopped when one
    gives up, a worker's pause or config change), and each stop can make the scheduler warn that a
    finished job group could not be cancelled; printed after the connector's last line, that
    warning would bury it."""
    _set_driver_log_level(spark, ("org.apache.spark.scheduler.DAGScheduler",), "ERROR")
