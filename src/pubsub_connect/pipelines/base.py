"""What every connector pipeline shares: the run context, stages, and the stage runner.

Why: a connector is three streaming queries over Delta. Locally
``pubsub-connect run`` runs them in one process; on Databricks each is a task of one job. Both
call the same stage functions, ``(PipelineContext, ConnectorConfig) -> StreamingQuery``, so a
connector module only declares its stages and the runner decides how to drive them:

- ``--once``: stage after stage with ``trigger(availableNow=True)`` until each has drained its
  input, then exit (like a batch job);
- continuous: all stages at once with a processing-time trigger until stopped.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pubsub_connect.config import ConnectorConfig, WorkerConfig
from pubsub_connect.io import checkpoints
from pubsub_connect.io.librdkafka import KafkaLoginError, check_brokers, librdkafka_settings
from pubsub_connect.io.spark import Capabilities
from pubsub_connect.io.tables import TableRef, TableStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


class ConnectorError(RuntimeError):
    """A connector stopped for a reason the user can act on (bad record with
    ``errors.tolerance=none``, unreachable service…). ``str()`` is the one-line message."""


def run_closers(closers: list[Callable[[], None]]) -> None:
    """Run and forget cleanups, newest first; a failed one is logged, the rest still run."""
    while closers:
        closer = closers.pop()
        try:
            closer()
        except Exception as exc:  # a failed cleanup must not hide the stage's own outcome
            log.warning("cleanup failed: %s", exc)


@dataclass
class PipelineContext:
    """Everything a stage needs besides its connector's config."""

    spark: SparkSession
    worker: WorkerConfig
    caps: Capabilities
    store: TableStore
    once: bool = True
    progress: Callable[[str], None] = field(default=print)
    #: Cleanups registered by stages (e.g. a driver-side client), run when the stage stops: one
    #: list per thread, since the connectors of one process start their stages on their own threads
    #: and each runner takes the cleanups its own stage registered.
    _closers: threading.local = field(default_factory=threading.local, repr=False)
    #: checkpoint location → its query id, read once per stage start (see :meth:`batch_app_id`).
    _checkpoint_ids: dict[str, str] = field(default_factory=dict)

    @property
    def closers(self) -> list[Callable[[], None]]:
        items = getattr(self._closers, "items", None)
        if items is None:
            items = self._closers.items = []
        return items

    def close_resources(self) -> None:
        run_closers(self.closers)

    def trigger(self) -> dict[str, Any]:
        if self.once:
            return {"availableNow": True}
        return {"processingTime": f"{int(self.worker.get('pipeline.trigger.interval.ms'))} milliseconds"}

    def read_table_stream(self, table: TableRef) -> DataFrame:
        """Stream a previous stage's appends, bounded by ``pipeline.max.files.per.trigger``."""
        return self.store.read_stream(table, int(self.worker.get("pipeline.max.files.per.trigger")) or None)

    def batch_app_id(self, config: ConnectorConfig, stage: str, part: str = "") -> str:
        """The Delta transaction app id (and Kafka marker identity) of a stage's micro-batches:
        ``<name>/<stage><part>@<query id>``.

        Why the query id: Spark numbers micro-batches from 0 in a new checkpoint, and Delta skips
        every write whose ``txnVersion`` is at or below the one stored for its app id. Were the
        app id only ``<name>/<stage>``, deleting a checkpoint would make every later write a silent
        no-op until the batch ids passed the old maximum. The query id is stored in the
        checkpoint (``metadata``), the same for every restart from it and new with a new one.
        Called from inside ``process``, when the query has written that file."""
        checkpoint = self.store.checkpoint(config.name, stage)
        query_id = self._checkpoint_ids.get(checkpoint)
        if query_id is None:
            query_id = self._checkpoint_ids[checkpoint] = checkpoint_query_id(self.spark, checkpoint)
        return f"{config.name}/{stage}{part}@{query_id}"

    def start_batches(self, source: DataFrame, config: ConnectorConfig, stage: str,
                      process: Callable[[DataFrame, int], None]) -> StreamingQuery:
        """Start a stage: ``process(batch, batch_id)`` for every micro-batch of ``source``, with
        the stage's checkpoint (its Connect offsets), name and this run's trigger."""
        checkpoint = self.store.checkpoint(config.name, stage)
        self._checkpoint_ids.pop(checkpoint, None)  # re-read: the checkpoint may have been replaced
        return (source.writeStream.foreachBatch(process)
                .option("checkpointLocation", checkpoint)
                .queryName(query_name(config, stage))
                .trigger(**self.trigger())
                .start())

    def librdkafka_client(self, role: str, config: ConnectorConfig | None = None) -> dict[str, str]:
        return librdkafka_client(self.worker, role, config)

    def check_kafka(self, role: str, config: ConnectorConfig) -> None:
        """Before a stage talks to Kafka: can its ``role`` client reach and log in to the brokers?

        An unreachable broker raises a transient error (the stage runner prints it in one line
        and restarts the stage); a refused login or TLS handshake stops the connector, since
        retrying the same credentials cannot help.
        """
        try:
            check_brokers(self.librdkafka_client(role, config))
        except KafkaLoginError as exc:
            raise ConnectorError(f"{config.name}: {exc}") from None

    def kafka_client_options(self, prefix: str) -> dict[str, str]:
        return kafka_client_options(self.worker, prefix)


def librdkafka_client(worker: WorkerConfig, role: str, config: ConnectorConfig | None = None) -> dict[str, str]:
    """Settings for a librdkafka client acting as the worker's ``consumer`` or ``producer``:
    the bootstrap servers, the worker's ``<role>.*`` keys, then the connector's
    ``<role>.override.*`` keys (Connect's order), translated from the Java client's names."""
    java = {"bootstrap.servers": worker.bootstrap_servers, **worker.client_conf(f"{role}.")}
    if config is not None:
        override = f"{role}.override."
        java.update({k[len(override):]: v for k, v in config.passthrough.items() if k.startswith(override)})
    return librdkafka_settings(java, shown_prefix=f"{role}.")


def kafka_client_options(worker: WorkerConfig, prefix: str) -> dict[str, str]:
    """Spark-Kafka style options (``kafka.``-prefixed) from the worker's bootstrap servers and
    its ``consumer.*`` / ``producer.*`` keys."""
    options = {"kafka.bootstrap.servers": worker.bootstrap_servers}
    for key, value in worker.client_conf(prefix).items():
        options[f"kafka.{key}"] = value
    return options


def spark_text_reader(spark: SparkSession) -> checkpoints.TextReader:
    """Reads a small text file at any location Spark reaches (a remote checkpoint's files)."""
    return lambda path: "\n".join(row[0] for row in spark.read.text(path).collect())


def checkpoint_query_id(spark: SparkSession, checkpoint: str) -> str:
    """The streaming query id a checkpoint was created with (its ``metadata`` file, JSON
    ``{"id": …}``), read directly for a local path and through Spark for any other."""
    try:
        return str(json.loads(checkpoints.read_text(checkpoint, "metadata", spark_text_reader(spark)))["id"])
    except Exception as exc:
        raise ConnectorError(f"cannot read the query id of checkpoint {checkpoint}: {exc}") from exc


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
                         "KafkaUnreachableError",
                         "KafkaProduceError", "KafkaDataLossError", "KafkaOptionsError", "ConfigError"})


def _await(query: StreamingQuery, seconds: float) -> BaseException | None:
    """Wait on a query; a failed query's exception is returned, not raised."""
    try:
        query.awaitTermination(seconds)
    except Exception as exc:  # StreamingQueryException
        return exc
    return None


#: Signs, in an error's text, that a service was unreachable or slow rather than that the data
#: or the configuration is wrong: gRPC UNAVAILABLE / DEADLINE_EXCEEDED (Pub/Sub, Lite), librdkafka
#: transport errors and timeouts, refused connections. Such a failure is worth a restart.
_TRANSIENT_MARKERS = (
    "UNAVAILABLE", "ServiceUnavailable", "DeadlineExceeded", "DEADLINE_EXCEEDED", "RetryError",
    "failed to connect to all addresses", "Connection refused", "Connection reset", "Socket closed",
    "_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "Timed out", "BrokerTransportFailure",
    "is the broker reachable", "KafkaUnreachableError", "TimeoutError", "No leaders found",
    "LEADER_NOT_AVAILABLE", "NOT_LEADER",
    # Spark gives a new Python worker a hard-coded 10 s to connect back: an overloaded machine
    "Python worker failed to connect back",
)
#: Failures a restart cannot fix even when a timeout shows up in the same text: bad records,
#: bad configuration, missing resources, refused permissions, lost Kafka data.
_PERMANENT_MARKERS = (
    "DataError", "ConfigError", "KafkaOptionsError", "KafkaDataLossError", "NotFound", "NOT_FOUND",
    "PermissionDenied", "PERMISSION_DENIED", "InvalidArgument", "INVALID_ARGUMENT", "Unauthenticated",
    "UNAUTHENTICATED", "AUTHORIZATION_FAILED", "SASL_AUTHENTICATION",
)


def is_transient(exc: BaseException | str) -> bool:
    """Whether a stage failure looks like an unreachable service (restart it) rather than bad
    data or configuration (stop and say why). Errors reach the driver as text wrapped by Spark,
    so the decision is made on the text: permanent signs win over transient ones."""
    text = exc if isinstance(exc, str) else "\n".join(traceback.format_exception(exc))
    if any(marker in text for marker in _PERMANENT_MARKERS):
        return False
    return any(marker in text for marker in _TRANSIENT_MARKERS)


@dataclass(frozen=True)
class RestartPolicy:
    """How long a stage that failed on an unreachable service is restarted from its checkpoint.

    Why here and not only in the clients: the Kafka and Pub/Sub clients retry single requests,
    but Spark fails the whole micro-batch (or the offset planning) once they give up. Kafka
    Connect restarts such a task; Databricks restarts the job task. Locally, ``pubsub-connect
    run`` does the same, and since every stage resumes from its checkpoint, a restart loses and
    duplicates nothing that the stage's own guarantees did not already cover.
    """

    timeout_s: float | None = 300.0  # None: forever
    backoff_max_s: float = 30.0
    backoff_first_s: float = 1.0
    #: A micro-batch running longer is stuck: stop the query, restart it (None: never).
    batch_timeout_s: float | None = None

    @classmethod
    def from_worker(cls, worker: WorkerConfig) -> RestartPolicy:
        timeout_ms = int(worker.get("pipeline.restart.timeout.ms"))
        batch_timeout_ms = int(worker.get("pipeline.batch.timeout.ms"))
        return cls(timeout_s=None if timeout_ms < 0 else timeout_ms / 1000.0,
                   backoff_max_s=int(worker.get("pipeline.restart.backoff.max.ms")) / 1000.0,
                   batch_timeout_s=batch_timeout_ms / 1000.0 if batch_timeout_ms > 0 else None)

    def delay(self, attempt: int) -> float:
        """Wait before restart number ``attempt`` (1, 2, …): 1 s, 2 s, 4 s … capped."""
        return min(self.backoff_max_s, self.backoff_first_s * 2 ** (attempt - 1))


class StuckBatchError(RuntimeError):
    """A micro-batch ran longer than ``pipeline.batch.timeout.ms``."""


class StageRunner:
    """Runs one stage's query and restarts it after transient failures, per :class:`RestartPolicy`.

    A failure streak starts at the first failure and ends when a restarted query completes a
    micro-batch (the service answered again). The connector stops with a
    :class:`ConnectorError` when the failure is not transient, or when the streak would outlast
    ``pipeline.restart.timeout.ms``.

    A micro-batch that runs longer than ``pipeline.batch.timeout.ms`` counts as such a failure:
    Spark has no time limit of its own, and a batch can wedge for good (measured here: Spark
    4.2's Python runner and a ``mapInArrow`` worker each waiting for the other, every process
    idle), which would stall the connector without a word. Stopping the query cancels the
    batch; the restart replays it from the checkpoint.
    """

    def __init__(self, ctx: PipelineContext, config: ConnectorConfig, stage: Stage, policy: RestartPolicy,
                 clock: Callable[[], float] = time.monotonic):
        self.ctx = ctx
        self.config = config
        self.stage = stage
        self.policy = policy
        self.clock = clock
        self.query: StreamingQuery | None = None
        self.closers: list[Callable[[], None]] = []
        self.attempt = 0
        self.streak_started: float | None = None
        self.restart_at: float | None = None
        self.finished = False
        #: (last completed batch id, when a batch after it was first seen running)
        self._running: tuple[int | None, float] | None = None

    @property
    def name(self) -> str:
        return query_name(self.config, self.stage.name)

    def start(self) -> None:
        """Start the stage's query; its cleanups are kept apart so a restart can run them."""
        mark = len(self.ctx.closers)
        try:
            self.query = self.stage.start(self.ctx, self.config)
        except Exception as exc:
            self._take_closers(mark)
            if not is_transient(exc):  # e.g. a ConfigError: raised as it is, for its own message and exit code
                self.close()
                raise
            self._failed(exc)
            return
        self._take_closers(mark)
        self.restart_at = None

    def _take_closers(self, mark: int) -> None:
        self.closers.extend(self.ctx.closers[mark:])
        del self.ctx.closers[mark:]

    def close(self) -> None:
        run_closers(self.closers)

    def stop(self) -> None:
        """Stop the query (a batch cut short is not committed and runs again on restart)."""
        try:
            if self.query is not None and self.query.isActive:
                self.query.stop()
        except Exception as exc:  # e.g. InterruptedException from a batch interrupted mid-write
            log.warning("%s: stopping interrupted a running batch (%s); it runs again on restart",
                        self.name, error_line(exc))
        finally:
            self.close()

    def check(self, failure: BaseException | None = None) -> None:
        """Advance the state machine: restart when due, notice progress, failure or the end."""
        now = self.clock()
        if self.query is None:
            if self.restart_at is not None and now >= self.restart_at:
                self.start()
            return
        if self.streak_started is not None and self.query.lastProgress is not None:
            log.info("%s recovered after %d restart(s)", self.name, self.attempt)
            self.ctx.progress(f"[{self.name}] recovered after {self.attempt} restart(s)")
            self.attempt, self.streak_started = 0, None
        if failure is None and self.query.isActive and self._stuck(now):
            self.stop()
            self.query = None
            self._failed(StuckBatchError(f"a micro-batch ran longer than pipeline.batch.timeout.ms="
                                         f"{int(self.policy.batch_timeout_s * 1000)}; stopped"), transient=True)
            return
        if self.query.isActive and failure is None:
            return
        failure = failure or self.query.exception()
        if failure is None:
            self.finished = True
            return
        self.query = None
        self._failed(failure)

    def _stuck(self, now: float) -> bool:
        """Whether the query's current micro-batch has been running for longer than allowed.
        Only Spark queries are watched: the Pub/Sub pull loop is not one, and every call it makes
        has a deadline of its own."""
        status = getattr(self.query, "status", None) if self.policy.batch_timeout_s is not None else None
        if status is None:
            return False
        if not status.get("isTriggerActive"):
            self._running = None
            return False
        last = (self.query.lastProgress or {}).get("batchId")
        if self._running is None or self._running[0] != last:
            self._running = (last, now)
            return False
        return now - self._running[1] > self.policy.batch_timeout_s

    def _failed(self, exc: BaseException, transient: bool | None = None) -> None:
        line = error_line(exc)
        now = self.clock()
        self._running = None
        if not (is_transient(exc) if transient is None else transient) or self.policy.timeout_s == 0:
            self.close()
            raise ConnectorError(f"{self.config.name} {self.stage.name}: {line}") from None
        self.close()
        self.attempt += 1
        if self.streak_started is None:
            self.streak_started = now
        delay = self.policy.delay(self.attempt)
        elapsed = now - self.streak_started
        if self.policy.timeout_s is not None and elapsed + delay > self.policy.timeout_s:
            raise ConnectorError(
                f"{self.config.name} {self.stage.name}: {line} (still failing after {self.attempt - 1} restart(s) "
                f"in {elapsed:.0f} s; pipeline.restart.timeout.ms={int(self.policy.timeout_s * 1000)})") from None
        self.ctx.progress(f"[{self.name}] {line}; restarting from the checkpoint in {delay:.0f} s "
                          f"(restart {self.attempt})")
        self.restart_at = now + delay


def run_stages(ctx: PipelineContext, config: ConnectorConfig, stages: Sequence[Stage],
               stop_event: threading.Event | None = None) -> None:
    """Drive a connector's stages, once (sequentially, each to completion) or continuously.

    Either way a stage that fails because a service is unreachable is restarted from its
    checkpoint (:class:`StageRunner`)."""
    printer = ProgressPrinter(ctx.progress)
    policy = RestartPolicy.from_worker(ctx.worker)
    if ctx.once:
        for stage in stages:
            started = time.monotonic()
            runner = StageRunner(ctx, config, stage, policy)
            try:
                runner.start()
                while not runner.finished:
                    if runner.query is None:
                        time.sleep(0.2)
                        runner.check()
                        continue
                    failure = _await(runner.query, 0.5)
                    printer.poll([runner.query])
                    runner.check(failure)
            finally:
                runner.stop()
            log.info("%s %s done in %.1f s", config.name, stage.name, time.monotonic() - started)
        return

    stop_event = stop_event or threading.Event()
    runners = [StageRunner(ctx, config, stage, policy) for stage in stages]
    try:
        for runner in runners:
            runner.start()
        while not stop_event.is_set():
            for runner in runners:
                runner.check()
                if runner.finished:
                    raise ConnectorError(f"{config.name} {runner.stage.name}: stopped unexpectedly")
            printer.poll([runner.query for runner in runners if runner.query is not None])
            stop_event.wait(0.5)
    finally:
        for runner in runners:
            runner.stop()
        printer.poll([runner.query for runner in runners if runner.query is not None])
        ctx.close_resources()


def install_stop_signals(stop_event: threading.Event) -> None:
    """Ctrl-C / SIGTERM stop the continuous run cleanly (queries stop at a batch boundary)."""

    def handler(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        stop_event.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
