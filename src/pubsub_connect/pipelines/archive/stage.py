"""The archive stage: start it (:func:`start_archive`) and finish it (:class:`ArchiveQuery`)."""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubsub_connect.io.objectstore.base import ObjectStoreError
from pubsub_connect.io.objectstore.local import LocalStore
from pubsub_connect.io.objectstore.locations import open_store
from pubsub_connect.model.blockgzip.lines import BlockGzipError
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.archive.coordinator import (
    ArchiveCoordinator,
    IdleFlusher,
    archive_frame,
    flush_due_files,
    flush_open_files,
)
from pubsub_connect.pipelines.archive.records import KafkaRecordSource, replay_options
from pubsub_connect.pipelines.archive.resume import resume_offsets
from pubsub_connect.pipelines.archive.settings import ArchiveSettings
from pubsub_connect.pipelines.archive.staging import new_staging_dir
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, Stage, kafka_client_options, query_name
from pubsub_connect.pipelines.kafka_position import starting_offsets, subscribed_partitions
from pubsub_connect.pipelines.runner.interrupted import stops_cleanly
from pubsub_connect.pipelines.runner.query import SupervisedQuery

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from pubsub_connect.config.loader import ConnectorConfig

log = logging.getLogger(__name__)

STAGE = "archive"


class ArchiveQuery(SupervisedQuery):
    """The archive stage's Spark query, plus what happens when it ends.

    Why a wrapper: the last records of each partition are in an open file when the input is
    drained (``--once``) or the query is stopped; only the driver knows that moment. When the
    query has ended cleanly after a complete micro-batch, the open files are written (one more
    job, :func:`flush_open_files`); otherwise they are left (the next run re-reads those
    records). Either way the run's staging directory is removed. The other members of
    :class:`SupervisedQuery`, and ``status`` (the runner watches it for stuck micro-batches), are
    the Spark query's.
    """

    def __init__(self, query: StreamingQuery, coordinator: ArchiveCoordinator, spark: SparkSession,
                 staging_dir: Path, idle_flush: bool = False):
        self._query = query
        self.coordinator = coordinator
        self.spark = spark
        self.staging_dir = staging_dir
        self._finished = False
        self._error: BaseException | None = None
        self._finish_lock = threading.Lock()
        self.flusher: IdleFlusher | None = None
        if idle_flush and coordinator.flush_interval_s is not None:
            self.flusher = IdleFlusher(spark, coordinator, query.stop).start()

    @property
    def name(self) -> str | None:
        return self._query.name

    @property
    def id(self) -> Any:
        return self._query.id

    @property
    def status(self) -> dict[str, Any]:
        return self._query.status

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        return self._query.lastProgress

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        return self._query.recentProgress

    @property
    def isActive(self) -> bool:
        active = bool(self._query.isActive)
        if not active:
            self._finish()
        return active

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        try:
            result = self._query.awaitTermination(timeout)
        finally:
            if not self._query.isActive:
                self._finish()
        return result

    def stop(self) -> None:
        self._query.stop()
        self._finish()

    def exception(self) -> BaseException | None:
        return self._query.exception() or self._error or (self.flusher.error if self.flusher else None)

    def _finish(self) -> None:
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
            try:
                if self.flusher is not None:
                    self.flusher.stop()
                    if self.flusher.error is not None:
                        return
                if self._query.exception() is not None:
                    return
                if self.coordinator.in_flight:
                    log.info("%s: the last micro-batch was cut short; its open files are left to the next run",
                             self.coordinator.connector)
                    return
                with self.coordinator.lock:
                    flush_open_files(self.spark, self.coordinator)
            except Exception as exc:
                self._error = ConnectorError(f"publishing the last files failed: {error_line(exc)}")
                log.error("%s", self._error)
            finally:
                shutil.rmtree(self.staging_dir, ignore_errors=True)


def kafka_options(ctx: PipelineContext, config: ConnectorConfig) -> dict[str, str]:
    """Spark Kafka source options: worker client settings, the connector's
    ``consumer.override.*`` keys, the subscription and the batch size. Never ``minPartitions``
    or ``maxRecordsPerPartition``: without them each topic-partition is one Spark partition,
    which the tasks take as they are (:func:`archive_frame`)."""
    options = kafka_client_options(ctx.worker, "consumer.", config, shaded_kafka=ctx.caps.databricks)
    topics, regex = config.get("topics"), config.get("topics.regex")
    if topics:
        options["subscribe"] = ",".join(topics)
    else:
        options["subscribePattern"] = str(regex)
    options["maxOffsetsPerTrigger"] = str(ctx.worker.get("pipeline.max.records.per.batch"))
    return options


def select_archive_columns(df: DataFrame) -> DataFrame:
    """A Kafka micro-batch as :class:`ArchiveTask` takes it: ``topic, partition, offset, ts`` (epoch
    milliseconds), ``value``; the other columns (key, headers) are never archived."""
    return df.selectExpr("topic", "CAST(partition AS INT) AS partition", "offset",
                         "unix_millis(timestamp) AS ts", "value")


def start_archive(ctx: PipelineContext, config: ConnectorConfig) -> ArchiveQuery:
    """Start the archive stage: resume from the store, stream Kafka into Block-GZIP objects."""
    from pubsub_connect.io.kafka.reader import read_kafka

    ctx.check_kafka("consumer", config)
    settings = ArchiveSettings.from_config(config)
    store = open_store(config)
    try:
        store.check()
        if isinstance(store, LocalStore):
            store.cleanup_temp()
        resume = resume_offsets(store, settings.prefix)
    except (ObjectStoreError, BlockGzipError) as exc:
        raise ConnectorError(f"{config.name}: {exc}") from None
    options = kafka_options(ctx, config)
    subscribed = subscribed_partitions(options)
    options["startingOffsets"] = starting_offsets(resume, subscribed)
    log.info("%s: resuming from %s (startingOffsets=%s)", config.name, store.url(settings.prefix),
             options["startingOffsets"])
    # offset.flush.interval.ms: continuous runs only (a --once run writes its open files when it ends)
    flush_interval = None if ctx.once else int(ctx.worker.get("offset.flush.interval.ms"))
    coordinator = ArchiveCoordinator(store, settings, config.name, KafkaRecordSource(replay_options(options)),
                                     resume, flush_interval)
    staging = new_staging_dir(settings.buffer_dir, config.name)

    def process(batch: DataFrame, batch_id: int) -> None:
        with coordinator.lock:
            reports = archive_frame(select_archive_columns(batch), coordinator)
            reports += flush_due_files(ctx.spark, coordinator)
        files = sum(len(r.files) for r in reports)
        log.info("%s: batch %d: %d file(s) archived; open files: %s", config.name, batch_id, files,
                 coordinator.describe_open())

    try:
        df = read_kafka(ctx.spark, options, streaming=True, caps=ctx.caps)
        query = (
            df.writeStream.foreachBatch(stops_cleanly(process))
            .option("checkpointLocation", str(staging / "checkpoint"))
            .queryName(query_name(config, STAGE))
            .trigger(**ctx.trigger())
            .start()
        )
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ArchiveQuery(query, coordinator, ctx.spark, staging, idle_flush=not ctx.once)


STAGES: list[Stage] = [Stage(STAGE, start_archive)]
