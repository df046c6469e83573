"""What every connector pipeline shares: the run context, the stage declaration and its errors.

Why: a connector is a few streaming queries over Delta, declared as :class:`Stage` functions
``(PipelineContext, ConnectorConfig) -> query``; a connector module only declares its stages and
the stage runner (:mod:`pubsub_connect.pipelines.runner`) decides how to drive them. This module
holds what a stage receives: the :class:`PipelineContext` (Spark, worker config, tables, trigger,
Kafka client settings, checkpoint ids, cleanups) and :class:`ConnectorError`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pubsub_connect.config.loader import ConnectorConfig, WorkerConfig
from pubsub_connect.io import checkpoints
from pubsub_connect.io.batch_marks import stage_app_id
from pubsub_connect.io.kafka.admin import KafkaLoginError, check_brokers
from pubsub_connect.io.kafka.options import connect_client_settings, librdkafka_settings, spark_client_options
from pubsub_connect.io.spark import Capabilities
from pubsub_connect.io.tables import TableRef, TableStore
from pubsub_connect.pipelines.runner.interrupted import stops_cleanly
from pubsub_connect.pipelines.runner.start_gate import StartGate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pubsub_connect.pipelines.runner.query import SupervisedQuery

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
    #: Where :attr:`closers` points on each thread: the list of the owner that is starting a stage
    #: there (see :meth:`cleanups_owned_by`), else the thread's own list. Per thread, since the
    #: connectors of one process start their stages on their own threads over one context.
    _cleanup_owner: threading.local = field(default_factory=threading.local, repr=False)
    #: checkpoint location → its query id, read once per stage start (see :meth:`batch_app_id`).
    _checkpoint_ids: dict[str, str] = field(default_factory=dict)
    #: The stages of all connectors sharing this context start one after the other.
    start_gate: StartGate = field(default_factory=StartGate)

    @property
    def closers(self) -> list[Callable[[], None]]:
        """Where a stage registers its cleanups (e.g. a driver-side client to close when it stops):
        the list of whoever is starting it on this thread (:meth:`cleanups_owned_by`)."""
        items = getattr(self._cleanup_owner, "items", None)
        if items is None:
            items = self._cleanup_owner.items = []
        return items

    @contextmanager
    def cleanups_owned_by(self, owner: list[Callable[[], None]]) -> Iterator[None]:
        """While inside, the cleanups registered on this thread go to ``owner`` (a stage runner's
        own list), so that whoever starts a stage also owns, and runs, what it registered."""
        previous = getattr(self._cleanup_owner, "items", None)
        self._cleanup_owner.items = owner
        try:
            yield
        finally:
            self._cleanup_owner.items = previous

    def close_resources(self) -> None:
        """Run the cleanups registered on this thread outside any owner."""
        run_closers(self.closers)

    def trigger(self) -> dict[str, Any]:
        if self.once:
            return {"availableNow": True}
        return {"processingTime": f"{int(self.worker.get('pipeline.trigger.interval.ms'))} milliseconds"}

    def read_table_stream(self, table: TableRef, starting_version: int | None = None) -> DataFrame:
        """Stream a previous stage's appends, a micro-batch bounded by ``pipeline.max.files.per.trigger``
        and ``pipeline.max.bytes.per.trigger``, so that a stage that was stopped while the one before
        it ran on does not take the whole backlog in one micro-batch when it starts again
        (``starting_version``: see :meth:`TableStore.read_stream`)."""
        return self.store.read_stream(table, int(self.worker.get("pipeline.max.files.per.trigger")) or None,
                                      int(self.worker.get("pipeline.max.bytes.per.trigger")) or None,
                                      starting_version)

    def batch_app_id(self, config: ConnectorConfig, stage: str, part: str = "") -> str:
        """The app id of a stage's micro-batches in its table appends (their marks and Delta
        transaction ids) and its Kafka marker identity: ``<name>/<stage><part>@<query id>``.

        Why the query id: Spark numbers micro-batches from 0 in a new checkpoint, and an append
        is skipped when its batch id is at or below the one recorded for its app id. Were the
        app id only ``<name>/<stage>``, deleting a checkpoint would make every later write a silent
        no-op until the batch ids passed the old maximum. The query id is stored in the
        checkpoint (``metadata``), the same for every restart from it and new with a new one.
        Called from inside ``process``, when the query has written that file."""
        checkpoint = self.store.checkpoint(config.name, stage)
        query_id = self._checkpoint_ids.get(checkpoint)
        if query_id is None:
            query_id = self._checkpoint_ids[checkpoint] = checkpoint_query_id(self.spark, checkpoint)
        return stage_app_id(f"{config.name}/{stage}{part}", query_id)

    def start_batches(self, source: DataFrame, config: ConnectorConfig, stage: str,
                      process: Callable[[DataFrame, int], None], *, checkpoint_of: str | None = None,
                      trigger: dict[str, Any] | None = None) -> StreamingQuery:
        """Start a stage: ``process(batch, batch_id)`` for every micro-batch of ``source``, with
        the stage's checkpoint (its Connect offsets), name and this run's trigger.

        ``checkpoint_of``: the stage whose checkpoint the query continues (a fused query takes over
        its connector's ``ingest`` position); ``trigger``: in place of the run's. A batch that a
        stop cuts short ends as an interruption Spark recognizes (:mod:`.runner.interrupted`)."""
        checkpoint = self.store.checkpoint(config.name, checkpoint_of or stage)
        self._checkpoint_ids.pop(checkpoint, None)  # re-read: the checkpoint may have been replaced
        return (source.writeStream.foreachBatch(stops_cleanly(process))
                .option("checkpointLocation", checkpoint)
                .queryName(query_name(config, stage))
                .trigger(**(trigger or self.trigger()))
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
        return kafka_client_options(self.worker, prefix, shaded_kafka=self.caps.databricks)


def librdkafka_client(worker: WorkerConfig, role: str, config: ConnectorConfig | None = None) -> dict[str, str]:
    """Settings for a librdkafka client acting as the worker's ``consumer`` or ``producer``:
    the bootstrap servers, the worker's ``<role>.*`` keys, then the connector's
    ``<role>.override.*`` keys (Connect's order), translated from the Java client's names."""
    java = connect_client_settings(worker.bootstrap_servers, worker.client_conf(f"{role}."), role,
                                   config.passthrough if config is not None else None)
    return librdkafka_settings(java, shown_prefix=f"{role}.")


def kafka_client_options(worker: WorkerConfig, prefix: str, config: ConnectorConfig | None = None, *,
                         shaded_kafka: bool) -> dict[str, str]:
    """Spark-Kafka style options (``kafka.``-prefixed) from the worker's bootstrap servers, its
    ``consumer.*`` / ``producer.*`` keys (``prefix``) and, given ``config``, the connector's
    ``<role>.override.*`` keys. ``shaded_kafka``: on Databricks (``Capabilities.databricks``),
    whose Java Kafka client is relocated, see :func:`~pubsub_connect.io.kafka.options.spark_client_options`."""
    role = prefix.rstrip(".")
    java = connect_client_settings(worker.bootstrap_servers, worker.client_conf(prefix), role,
                                   config.passthrough if config is not None else None)
    return spark_client_options(java, shaded_kafka=shaded_kafka)


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


#: A stage: start its query (a Spark ``StreamingQuery`` or another :class:`SupervisedQuery`).
StageFn = Callable[[PipelineContext, ConnectorConfig], "SupervisedQuery"]


@dataclass(frozen=True)
class Stage:
    name: str
    start: StageFn
    #: Other stages whose work and checkpoints this one takes over (a fused query does its
    #: connector's ingest, convert and publish): a process running it holds their locks too.
    takes_over: tuple[str, ...] = ()

    @property
    def lock_names(self) -> tuple[str, ...]:
        return (self.name, *self.takes_over)


def lock_names(stages: Sequence[Stage]) -> list[str]:
    """The stage locks a process running ``stages`` must hold."""
    return [name for stage in stages for name in stage.lock_names]


def query_name(config: ConnectorConfig, stage: str) -> str:
    return f"{config.name}.{stage}"


