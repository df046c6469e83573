"""What every connector pipeline shares: the run context, stages, and the stage runner.

Why: a connector is three streaming queries over Delta (see DESIGN.md). Locally
``pubsub-connect run`` runs them in one process; on Databricks each is a task of one job. Both
call the same stage functions, ``(PipelineContext, ConnectorConfig) -> StreamingQuery``, so a
connector module only declares its stages and the runner decides how to drive them:

- ``--once``: stage after stage with ``trigger(availableNow=True)`` until each has drained its
  input, then exit (like a batch job);
- continuous: all stages at once with a processing-time trigger until stopped.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pubsub_connect.config import ConnectorConfig, WorkerConfig
from pubsub_connect.io.spark import Capabilities
from pubsub_connect.io.tables import TableRef, TableStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


class ConnectorError(RuntimeError):
    """A connector stopped for a reason the user can act on (bad record with
    ``errors.tolerance=none``, unreachable service…). ``str()`` is the one-line message."""


@dataclass
class PipelineContext:
    """Everything a stage needs besides its connector's config."""

    spark: SparkSession
    worker: WorkerConfig
    caps: Capabilities
    store: TableStore
    once: bool = True
    progress: Callable[[str], None] = field(default=print)
    #: Cleanups registered by stages (e.g. a driver-side producer), run when the stage stops.
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close_resources(self) -> None:
        while self.closers:
            closer = self.closers.pop()
            try:
                closer()
            except Exception as exc:  # a failed cleanup must not hide the stage's own outcome
                log.warning("cleanup failed: %s", exc)

    def trigger(self) -> dict[str, Any]:
        if self.once:
            return {"availableNow": True}
        return {"processingTime": f"{int(self.worker.get('pipeline.trigger.interval.ms'))} milliseconds"}

    def read_table_stream(self, table: TableRef) -> DataFrame:
        """Stream a previous stage's appends, bounded by ``pipeline.max.files.per.trigger``."""
        return self.store.read_stream(table, int(self.worker.get("pipeline.max.files.per.trigger")) or None)

    def start_batches(self, source: DataFrame, config: ConnectorConfig, stage: str,
                      process: Callable[[DataFrame, int], None]) -> StreamingQuery:
        """Start a stage: ``process(batch, batch_id)`` for every micro-batch of ``source``, with
        the stage's checkpoint (its Connect offsets), name and this run's trigger."""
        return (source.writeStream.foreachBatch(process)
                .option("checkpointLocation", self.store.checkpoint(config.name, stage))
                .queryName(query_name(config, stage))
                .trigger(**self.trigger())
                .start())

    def kafka_client_options(self, prefix: str) -> dict[str, str]:
        """Spark-Kafka style options (``kafka.``-prefixed) from the worker's bootstrap servers and
        its ``consumer.*`` / ``producer.*`` keys."""
        options = {"kafka.bootstrap.servers": self.worker.bootstrap_servers}
        for key, value in self.worker.client_conf(prefix).items():
            options[f"kafka.{key}"] = value
        return options


StageFn = Callable[[PipelineContext, ConnectorConfig], "StreamingQuery"]


@dataclass(frozen=True)
class Stage:
    name: str
    start: StageFn


def query_name(config: ConnectorConfig, stage: str) -> str:
    return f"{config.name}.{stage}"


def _format_progress(name: str, progress: dict[str, Any]) -> str:
    rows = int(progress.get("numInputRows") or 0)
    rate = float(progress.get("processedRowsPerSecond") or 0.0)
    batch = progress.get("batchId")
    lag = ""
    for source in progress.get("sources") or []:
        metrics = source.get("metrics") or {}
        if "lag" in metrics:
            lag = f" lag={metrics['lag']}"
    return f"[{name}] batch={batch} records={rows} rate={rate:,.0f}/s{lag}"


class ProgressPrinter:
    """Prints one line per completed micro-batch of each query (polling ``recentProgress``:
    listeners would need the JVM callback server, which Spark Connect does not offer)."""

    def __init__(self, emit: Callable[[str], None]):
        self.emit = emit
        self.seen: dict[str, int] = {}

    def poll(self, queries: Sequence[StreamingQuery]) -> None:
        for query in queries:
            name = query.name or str(query.id)
            for progress in query.recentProgress:
                batch = int(progress["batchId"])
                if batch <= self.seen.get(name, -1):
                    continue
                self.seen[name] = batch
                if int(progress.get("numInputRows") or 0) > 0:
                    self.emit(_format_progress(name, progress))


_PY_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")
_WRAPPER_PREFIXES = ("org.", "java.", "py4j.", "pyspark.", "scala.")


def error_line(exc: BaseException | str) -> str:
    """The one line worth showing from an error that crossed Spark (Python worker → JVM →
    foreachBatch → query): our own exception's message when present, else the innermost
    Python error line, else the first line."""
    text = str(exc).strip()
    ours: list[str] = []
    others: list[str] = []
    for line in text.splitlines():
        match = _PY_ERROR_LINE.match(line.strip())
        if not match or match.group(1).startswith(_WRAPPER_PREFIXES):
            continue
        (ours if match.group(1).startswith("pubsub_connect.") or match.group(1) in _OUR_ERRORS else others).append(
            f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2)}")
    if ours:
        # the innermost of ours: ConnectorError wraps the worker's PublishError etc.
        return ours[0].split(": ", 1)[1] if ours[0].startswith("ConnectorError: ") else ours[0]
    if others:
        return others[-1]
    return text.splitlines()[0] if text else type(exc).__name__


_OUR_ERRORS = frozenset({"ConnectorError", "DataError", "PublishError", "PubSubIOError", "AckError",
                         "KafkaProduceError", "KafkaDataLossError", "KafkaOptionsError", "ConfigError"})


def _raise_if_failed(query: StreamingQuery, stage: str, config: ConnectorConfig,
                     exc: BaseException | None = None) -> None:
    exc = exc or query.exception()
    if exc is None:
        return
    raise ConnectorError(f"{config.name} {stage}: {error_line(exc)}")


def _await(query: StreamingQuery, seconds: float) -> BaseException | None:
    """Wait on a query; a failed query's exception is returned, not raised."""
    try:
        query.awaitTermination(seconds)
    except Exception as exc:  # StreamingQueryException
        return exc
    return None


def run_stages(ctx: PipelineContext, config: ConnectorConfig, stages: Sequence[Stage],
               stop_event: threading.Event | None = None) -> None:
    """Drive a connector's stages, once (sequentially, each to completion) or continuously."""
    printer = ProgressPrinter(ctx.progress)
    if ctx.once:
        for stage in stages:
            started = time.monotonic()
            query = stage.start(ctx, config)
            failure: BaseException | None = None
            try:
                while query.isActive and failure is None:
                    failure = _await(query, 0.5)
                    printer.poll([query])
                printer.poll([query])
            finally:
                ctx.close_resources()
            _raise_if_failed(query, stage.name, config, failure)
            log.info("%s %s done in %.1f s", config.name, stage.name, time.monotonic() - started)
        return

    stop_event = stop_event or threading.Event()
    queries: list[StreamingQuery] = []
    try:
        for stage in stages:
            queries.append(stage.start(ctx, config))
        while not stop_event.is_set():
            for query, stage in zip(queries, stages, strict=True):
                if not query.isActive:
                    _raise_if_failed(query, stage.name, config)
                    raise ConnectorError(f"{config.name} {stage.name}: stopped unexpectedly")
            printer.poll(queries)
            stop_event.wait(0.5)
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
        printer.poll(queries)
        ctx.close_resources()


def install_stop_signals(stop_event: threading.Event) -> None:
    """Ctrl-C / SIGTERM stop the continuous run cleanly (queries stop at a batch boundary)."""

    def handler(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        stop_event.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
