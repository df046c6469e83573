"""Cloud Pub/Sub source connector: Pub/Sub → bronze → outbox → Kafka.

1. ``pull`` — subscription → ``bronze/<name>``. Pub/Sub cannot replay a range, so this stage is
   not a Spark streaming source: ``tasks.max`` puller threads each pull a batch, keep its leases
   extended while it is written, append it to Delta, and only then ack. A crash before the commit
   means redelivery, never loss; a crash after the commit but before the ack means a redelivered
   duplicate in bronze, removed by the next stage. That is also why the appends carry no Delta
   transaction id: it could not prevent more duplicates than that, and costs a rebuild of the
   table's transaction state per append.
2. ``convert`` — bronze → ``outbox/<name>``: Google's message → record model
   (``model.cps_source``), one row per ``message_id`` (within the batch and against what the
   outbox already holds); bad messages → ``dlq/<name>``.
3. ``produce`` — outbox → ``kafka.topic`` in one Kafka transaction per micro-batch, with a
   marker that makes a replayed batch a no-op: no duplicates in Kafka for ``read_committed``
   consumers (:mod:`pubsub_connect.pipelines.kafka_produce`). A record Kafka refuses for good (a
   timestamp too far off, a record too large) is a ``dlq/<name>`` row with ``stage`` ``produce``
   under ``errors.tolerance=all``, and stops the connector naming its message under ``none``.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.pubsub.leases import LeaseExtender, ack
from pubsub_connect.io.pubsub.subscriber import PulledMessage, StreamingPuller, pull_batch, subscriber_client
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, TableRef
from pubsub_connect.model.cps_source.batch import KafkaOutboxConversion
from pubsub_connect.model.cps_source.reference import check_value_converter
from pubsub_connect.model.cps_source.settings import CpsSourceSettings, UnsupportedConverterError
from pubsub_connect.model.schemas import KAFKA_OUTBOX, PUBSUB_BRONZE, PUBSUB_DLQ
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, Stage, query_name
from pubsub_connect.pipelines.dead_letters import append_converted
from pubsub_connect.pipelines.kafka_produce import produce_stage
from pubsub_connect.pipelines.outbox_count import OutboxRowCount
from pubsub_connect.pipelines.produce_rejects import ProduceDeadLetters
from pubsub_connect.pipelines.pubsub_settings import cps_subscriber_config
from pubsub_connect.pipelines.redeliveries import BatchDeliveries, RedeliveryWatch
from pubsub_connect.pipelines.runner.query import SupervisedQuery

log = logging.getLogger(__name__)

#: How long one pull batch may collect messages before it is written (continuous mode).
BATCH_WINDOW_S = 1.0
#: In ``--once`` mode a pull that brings nothing for this long means the backlog is drained.
DRAINED_AFTER_S = 3.0
#: Lease (ack deadline) kept on messages while their batch is written, renewed every third of it.
#: Short enough that messages of a crashed puller come back soon, long enough to ride out a
#: slow commit between renewals.
LEASE_S = 20


def ensure_bronze(ctx: PipelineContext, config: ConnectorConfig) -> TableRef:
    """The pulled bronze table, created by whichever stage starts first. Its puller appends a
    small batch per flow-control window: a log checkpoint every 10 commits would stall it every
    tenth append, hence the store's ``delta.checkpointInterval`` of 100 (``STAGE_TABLE_PROPERTIES``)."""
    bronze = TableRef(BRONZE, config.name)
    ctx.store.ensure(bronze, PUBSUB_BRONZE)
    return bronze


def source_settings(config: ConnectorConfig) -> CpsSourceSettings:
    return CpsSourceSettings(
        kafka_key_attribute=config.get("kafka.key.attribute"),
        kafka_timestamp_attribute=config.get("kafka.timestamp.attribute"),
        make_ordering_key_attribute=bool(config.get("cps.makeOrderingKeyAttribute")),
        kafka_record_headers=bool(config.get("kafka.record.headers")),
        partition_scheme=str(config.get("kafka.partition.scheme")),
        partition_count=int(config.get("kafka.partition.count")),
        value_converter=str(config.get("value.converter")),
        value_schemas_enable=bool(config.get("value.converter.schemas.enable")),
        key_converter=str(config.get("key.converter")),
        key_schemas_enable=bool(config.get("key.converter.schemas.enable")),
    )


def check_settings(config: ConnectorConfig) -> CpsSourceSettings:
    """Start-up check: the converters must be able to write this connector's keys and values."""
    settings = source_settings(config)
    try:
        check_value_converter(settings)
    except UnsupportedConverterError as exc:
        raise ConfigError(f"{config.source}: {exc}") from None
    return settings


# --------------------------------------------------------------------------------------------
# Stage 1: pull
# --------------------------------------------------------------------------------------------


def messages_to_arrow(messages: list[PulledMessage], subscription: str) -> pa.Table:
    """Pulled messages as a bronze Arrow table (column order and types of ``PUBSUB_BRONZE``)."""
    from pubsub_connect.model.schemas import to_arrow

    now = datetime.now(timezone.utc)
    schema = to_arrow(PUBSUB_BRONZE)
    return pa.Table.from_pydict({
        "message_id": [m.message_id for m in messages],
        "data": [m.data for m in messages],
        "attributes": [list(m.attributes.items()) for m in messages],
        "ordering_key": [m.ordering_key for m in messages],
        "publish_time": [m.publish_time for m in messages],
        "delivery_attempt": [m.delivery_attempt for m in messages],
        "subscription": [subscription] * len(messages),
        "ingest_time": [now] * len(messages),
    }, schema=schema)


class Puller:
    """One puller (one of ``tasks.max``): pull → commit to bronze → ack, batch after batch."""

    def __init__(self, ctx: PipelineContext, config: ConnectorConfig):
        self.ctx = ctx
        self.config = config
        self.bronze = TableRef(BRONZE, config.name)
        self.sub_config = cps_subscriber_config(config)
        self.max_records = int(ctx.worker.get("pipeline.max.records.per.batch"))
        self.streaming = bool(config.get("cps.streamingPull.enabled"))
        self._subscriber: Any = None
        self._streamer: StreamingPuller | None = None
        self.redeliveries = RedeliveryWatch()

    def _collect(self, window_s: float) -> list[PulledMessage]:
        path = self.sub_config.subscription_path
        if self.streaming:
            if self._streamer is None:
                self._streamer = StreamingPuller(self.sub_config).start()
            return self._streamer.collect(self.max_records, window_s, idle_timeout=0.5)
        if self._subscriber is None:
            self._subscriber = subscriber_client(self.sub_config)
        per_request = int(self.config.get("cps.maxBatchSize"))
        out: list[PulledMessage] = []
        deadline = time.monotonic() + window_s
        while len(out) < self.max_records:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            got = pull_batch(self._subscriber, path, min(per_request, self.max_records - len(out)),
                                    timeout=max(remaining, 0.5) if not out else min(remaining, 1.0))
            if not got:
                break
            out.extend(got)
        return out

    def _ack(self, messages: list[PulledMessage]) -> None:
        if self._streamer is not None:
            self._streamer.ack(messages)
        else:
            ack(self._subscriber, self.sub_config.subscription_path, [m.ack_id for m in messages])

    def run_batch(self, window_s: float) -> BatchDeliveries:
        """Pull one batch, commit it, ack it. Returns its counts (0 delivered: nothing came).

        When the pull stopped making progress (:class:`RedeliveryWatch`) it says so in one line:
        printed while the connector runs on (the leases may recover), raised under ``--once``,
        whose drain would otherwise never end."""
        messages = self._collect(window_s)
        if not messages:
            return BatchDeliveries(0, 0)
        table = messages_to_arrow(messages, self.sub_config.subscription_path)
        if self._streamer is None:
            with LeaseExtender(self._subscriber, self.sub_config.subscription_path,
                                      [m.ack_id for m in messages], deadline_s=LEASE_S):
                self.ctx.store.append_rows(self.bronze, table, PUBSUB_BRONZE)
        else:  # the streaming client keeps extending leases of messages it holds
            self.ctx.store.append_rows(self.bronze, table, PUBSUB_BRONZE)
        self._ack(messages)
        batch = self.redeliveries.committed(m.message_id for m in messages)
        verdict = self.redeliveries.verdict(self.sub_config.subscription_path)
        if verdict is not None:
            if self.ctx.once:
                raise ConnectorError(verdict)
            self.ctx.progress(f"[{self.config.name}.pull] {verdict}")
        return batch

    def close(self) -> None:
        if self._streamer is not None:
            self._streamer.close()
            self._streamer = None


class PullLoop(SupervisedQuery):
    """The pull stage as a :class:`SupervisedQuery`, so the runner drives it like the Spark
    stages (progress lines, stop, failure)."""

    def __init__(self, ctx: PipelineContext, config: ConnectorConfig):
        self.ctx = ctx
        self.config = config
        self._name = query_name(config, "pull")
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._batches = 0
        self._progress: list[dict[str, Any]] = []
        pullers = int(config.get("tasks.max"))
        self._threads = [threading.Thread(target=self._run, name=f"{self.name}-{i}", daemon=True)
                         for i in range(pullers)]

    def start(self) -> PullLoop:
        ensure_bronze(self.ctx, self.config)
        for thread in self._threads:
            thread.start()
        return self

    def _run(self) -> None:
        puller = Puller(self.ctx, self.config)
        idle_since = time.monotonic()
        try:
            while not self._stop.is_set() and self._error is None:
                started = time.monotonic()
                batch = puller.run_batch(DRAINED_AFTER_S if self.ctx.once else BATCH_WINDOW_S)
                count = batch.delivered
                if count == 0:
                    if self.ctx.once and time.monotonic() - idle_since >= DRAINED_AFTER_S:
                        return
                    continue
                idle_since = time.monotonic()
                elapsed = max(time.monotonic() - started, 1e-6)
                with self._lock:
                    self._progress.append({"batchId": self._batches, "numInputRows": count,
                                           "numRedeliveredRows": batch.repeated,
                                           "processedRowsPerSecond": count / elapsed})
                    self._progress = self._progress[-100:]
                    self._batches += 1
        except BaseException as exc:  # surfaced through exception()/awaitTermination
            self._error = exc
        finally:
            puller.close()

    @property
    def name(self) -> str:
        return self._name

    @property
    def id(self) -> str:
        return self._name

    @property
    def isActive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    @property
    def recentProgress(self) -> list[dict[str, Any]]:
        """The last 100 batches' progress, oldest first."""
        with self._lock:
            return list(self._progress)

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        """The newest batch's progress (the runner ends a restart streak on it)."""
        with self._lock:
            return self._progress[-1] if self._progress else None

    def awaitTermination(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if self._error is not None:
            raise self._error
        return not self.isActive

    def exception(self) -> BaseException | None:
        return self._error

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)


def pull(ctx: PipelineContext, config: ConnectorConfig) -> PullLoop:
    check_settings(config)
    return PullLoop(ctx, config).start()


# --------------------------------------------------------------------------------------------
# Stage 2: convert
# --------------------------------------------------------------------------------------------


#: The outbox's columns, in its schema's order.
OUTBOX_COLUMNS = tuple(field.name for field in KAFKA_OUTBOX.fields)


def kafka_dead_letters(converted: DataFrame) -> DataFrame:
    """The dead-letter rows of a ``KafkaOutboxConversion(..., with_message=True)``'s rows (the outbox
    rows are the others, :data:`OUTBOX_COLUMNS` of them)."""
    return (converted.filter(F.col("error_class").isNotNull())
            .select(F.lit("convert").alias("stage"), "message_id", "subscription",
                    F.lit(None).cast("binary").alias("key"),
                    F.col("data").alias("value"), "attributes", "error_class", "error_message",
                    F.current_timestamp().alias("failed_at")))


def _seen_ids(ctx: PipelineContext, outbox: TableRef, dlq: TableRef, batch: DataFrame) -> DataFrame:
    """Message ids already converted, looked up only around the batch's publish times (a
    redelivered message keeps its publish time, so the range bounds the look-up)."""
    bounds = batch.agg(F.min("publish_time").alias("lo"), F.max("publish_time").alias("hi")).first()
    ids = []
    for table in (outbox, dlq):
        rows = ctx.store.read(table)
        time_column = "publish_time" if "publish_time" in rows.columns else None
        if time_column and bounds is not None and bounds.lo is not None:
            rows = rows.filter(F.col(time_column).between(bounds.lo, bounds.hi))
        ids.append(rows.select("message_id"))
    return ids[0].unionByName(ids[1]).distinct()


def convert(ctx: PipelineContext, config: ConnectorConfig) -> Any:
    settings = check_settings(config)
    bronze = ensure_bronze(ctx, config)
    outbox, dlq = (TableRef(kind, config.name) for kind in (OUTBOX, DLQ))
    ctx.store.ensure(outbox, KAFKA_OUTBOX)
    ctx.store.ensure(dlq, PUBSUB_DLQ)
    outbox_rows = OutboxRowCount(ctx.store, outbox)
    conversion = KafkaOutboxConversion(settings, with_message=True)

    def process(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()  # read by the look-up's time bounds, then by the conversion
        try:
            seen = _seen_ids(ctx, outbox, dlq, batch)
            fresh = batch.join(seen, "message_id", "left_anti")
            # the rows carry what the outbox and the dead letters need of the message, so
            # nothing joins back to the input; one job converts, appends and counts
            converted = conversion.apply(fresh, outbox_rows.current())
            append_converted(ctx, config, outbox_rows.append_batch, dlq, converted, kafka_dead_letters(converted),
                             batch_id, OUTBOX_COLUMNS, F.lit(True))
        finally:
            batch.unpersist()

    return ctx.start_batches(ctx.read_table_stream(bronze), config, "convert", process)


# --------------------------------------------------------------------------------------------
# Stage 3: produce
# --------------------------------------------------------------------------------------------


def _produce_dead_letter_columns(config: ConnectorConfig) -> list[Any]:
    """A refused record's ``PUBSUB_DLQ`` columns: its message id, the connector's subscription,
    the record's key and value as they were to be produced, and its headers (the message's
    attributes, UTF-8, when ``kafka.record.headers`` put them there) as attributes."""
    attributes = F.map_from_entries(F.transform(
        "headers", lambda h: F.struct(h["key"].alias("key"), F.decode(h["value"], "UTF-8").alias("value"))))
    return ["message_id", F.lit(cps_subscriber_config(config).subscription_path).alias("subscription"),
            "key", "value", attributes.alias("attributes")]


#: The Cloud Pub/Sub source's dead letters of records Kafka refuses.
PRODUCE_DEAD_LETTERS = ProduceDeadLetters(PUBSUB_DLQ, _produce_dead_letter_columns, ("message_id",))


def produce(ctx: PipelineContext, config: ConnectorConfig) -> Any:
    """Outbox rows in publish order, then message id (deterministic on replay: one row per
    message id)."""
    return produce_stage(ctx, config, KAFKA_OUTBOX, ("publish_time", "message_id"), PRODUCE_DEAD_LETTERS)


STAGES = [Stage("pull", pull), Stage("convert", convert), Stage("produce", produce)]
