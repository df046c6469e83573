"""Dead-letter handling shared by the convert stages, with Kafka Connect's error semantics (the
source connectors' produce stage names, logs and copies its dead letters with the same functions:
:mod:`pubsub_connect.pipelines.produce_rejects`).

``errors.tolerance=none`` (Connect's default): the first record that cannot be converted stops
the connector with one line naming its coordinates — before anything of that micro-batch is
written, so a fixed config (or ``errors.tolerance=all``) reprocesses it. ``all``: such records
land in ``dlq/<name>`` with the reason, optionally also in the Kafka topic
``errors.deadletterqueue.topic.name``, and the rest flows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.kafka.writer import write_kafka
from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext
from pubsub_connect.pipelines.observed_counts import ObservedCounts

log = logging.getLogger(__name__)


def record_coordinates(row: object) -> str:
    """How a dead-letter row's record is named to a user: a Pub/Sub message by its id, a Lite
    message by partition and offset, a Kafka record as ``topic/partition@offset``."""
    if getattr(row, "message_id", None) is not None:
        return f"message_id {row.message_id}"  # type: ignore[attr-defined]
    if getattr(row, "lite_partition", None) is not None:
        return f"Lite partition {row.lite_partition} offset {row.lite_offset}"  # type: ignore[attr-defined]
    return f"{row.topic}/{row.partition}@{row.offset}"  # type: ignore[attr-defined]


def stop_line(row: object, failed: str) -> str:
    """The one line a connector stops with under ``errors.tolerance=none``: which record, what
    could not be done with it (``failed``: "converted", "produced to <topic>"), why, and how to
    dead-letter such records instead."""
    return (f"record {record_coordinates(row)} cannot be {failed}: {row.error_class}: "  # type: ignore[attr-defined]
            f"{row.error_message} (errors.tolerance=none; set errors.tolerance=all to dead-letter such records)")


def dead_letter(ctx: PipelineContext, config: ConnectorConfig, dlq: TableRef, bad: DataFrame, batch_id: int,
                count: int | None = None, stage: str = "convert", app_id: str | None = None) -> int:
    """Apply the tolerance to a micro-batch's bad rows (``KAFKA_DLQ``-shaped); returns their count
    (``count``, when the caller already knows it, saves a Spark job). ``stage``: whose micro-batch
    it is (its checkpoint names the dead-letter appends), unless ``app_id`` names them (a batch
    numbered without a Spark checkpoint: the fused Cloud Pub/Sub source's)."""
    count = bad.count() if count is None else count
    if count == 0:
        return 0
    order = [c for c in ("topic", "partition", "offset", "message_id") if c in bad.columns]
    first = bad.orderBy(*order).first()
    if config.get("errors.tolerance") == "none":
        raise ConnectorError(stop_line(first, "converted"))
    log_dead_letters(config, bad, order)
    # The topic first: a source's conversion looks up the DLQ table for messages dead-lettered
    # before, so once the table holds this batch's rows, ``bad`` computed again is empty. Should
    # the run stop in between, the replayed batch produces them again (a DLQ topic is at least once).
    copy_to_dlq_topic(ctx, config, bad)
    ctx.store.append_batch(dlq, bad, app_id or ctx.batch_app_id(config, stage, "-dlq"), batch_id)
    return count


def stop_at_first_unconvertible(ctx: PipelineContext, config: ConnectorConfig, dlq: TableRef, bad: DataFrame,
                                batch_id: int, stage: str = "convert", app_id: str | None = None) -> None:
    """After a write that :func:`stop_at_unconvertible` may have failed (``errors.tolerance=none``):
    raise the connector's one stop line naming the first record that cannot be converted, when the
    batch has one (:func:`dead_letter`). When it has none, or they cannot be counted, this returns
    and the caller raises its write's own failure."""
    try:
        count = bad.count()
    except Exception:  # the write's own failure is the one to report
        return
    if count:
        dead_letter(ctx, config, dlq, bad, batch_id, count, stage=stage, app_id=app_id)


def log_dead_letters(config: ConnectorConfig, bad: DataFrame, coordinates: Sequence[str]) -> None:
    """``errors.log.enable``: one warning per dead letter, naming it (``coordinates``, its
    columns) and why; the record's bytes are never logged."""
    if config.get("errors.log.enable"):
        for row in bad.select(*coordinates, "error_class", "error_message").collect():
            log.warning("%s: dead-lettered %s: %s: %s", config.name, record_coordinates(row), row.error_class,
                        row.error_message)


def copy_to_dlq_topic(ctx: PipelineContext, config: ConnectorConfig, bad: DataFrame) -> None:
    """``errors.deadletterqueue.topic.name``: the dead letters also go to that Kafka topic (at
    least once), as Connect's DLQ records."""
    topic = config.get("errors.deadletterqueue.topic.name")
    if topic:
        _produce_to_dlq_topic(ctx, config, bad, topic)


#: The message of the job that :func:`stop_at_unconvertible` fails in a convert stage; the user
#: sees :func:`dead_letter`'s line naming the first such record instead.
_UNCONVERTIBLE = "a record of this micro-batch cannot be converted (errors.tolerance=none)"


def stop_at_unconvertible(converted: DataFrame, keep: Column, message: Column | None = None) -> DataFrame:
    """``converted``'s rows where ``keep`` holds, for ``errors.tolerance=none``: the Spark job
    that computes them fails at a row that could not be converted (``raise_error`` with
    ``message``), before the write it feeds commits anything.

    Why: counting the bad rows first costs every micro-batch a Spark job of its own, which reads
    and converts the batch again; folded into the write, that job is paid only when a record
    fails."""
    failed = F.when(F.col("error_class").isNotNull(), F.raise_error(F.lit(_UNCONVERTIBLE) if message is None
                                                                      else message)).cast("boolean")
    return converted.filter(F.coalesce(failed, keep))


class DeadLetterRows:
    """A convert stage's dead-letter rows (:data:`KAFKA_DLQ`'s columns) of its converted rows: the
    records whose ``error_class`` is set, with the record's raw bytes from ``key_column`` and
    ``value_column``. The expressions are built once, since a stage takes them from every
    micro-batch."""

    def __init__(self, key_column: str = "key", value_column: str = "value") -> None:
        self._failed = F.col("error_class").isNotNull()
        self._columns = [F.lit("convert").alias("stage"), "topic", "partition", "offset",
                         F.col(key_column).alias("key"), F.col(value_column).alias("value"),
                         "error_class", "error_message", F.current_timestamp().alias("failed_at")]

    def of(self, converted: DataFrame) -> DataFrame:
        return converted.filter(self._failed).select(*self._columns)


def append_converted(ctx: PipelineContext, config: ConnectorConfig,
                     append: Callable[[DataFrame, str, int], object], dlq: TableRef, converted: DataFrame,
                     bad: DataFrame, batch_id: int, columns: Sequence[str], keep: Column,
                     **counts: Column) -> dict[str, int]:
    """A convert's micro-batch: one Spark job converts, appends ``converted``'s rows where
    ``keep`` holds (``columns`` of them) to the outbox, and counts the records that could not be
    converted (``failed``) and the rows of each of ``counts``; returns those counts.

    ``append(rows, app id, batch id)`` writes the outbox rows, once per batch: the store's
    ``append_batch`` for the outbox (a sink), or an :class:`OutboxRowCount`'s, which also keeps
    the outbox's row count (a source).

    With ``errors.tolerance=none`` a record that could not be converted fails that job, so
    nothing is written, and the connector stops naming the first such record (in Kafka order,
    or by message id; the job may have failed at any of them). With ``all`` the ``bad`` rows are
    dead-lettered after the append; both appends are kept once per batch, so a replay after a
    stop in between completes the batch. ``bad`` is then computed again, so it must not depend
    on what the outbox append added (a source's look-up of converted message ids finds only the
    good rows there)."""
    error = F.col("error_class").isNotNull()
    observed = ObservedCounts(converted, failed=error, **counts)
    stops = config.get("errors.tolerance") == "none"
    rows = (stop_at_unconvertible(observed.observed, keep) if stops
            else observed.observed.filter(~error & keep)).select(*columns)
    try:
        append(rows, ctx.batch_app_id(config, "convert"), batch_id)
    except Exception:
        if stops:
            stop_at_first_unconvertible(ctx, config, dlq, bad, batch_id)
        raise
    found = observed.values()
    dead_letter(ctx, config, dlq, bad, batch_id, found["failed"])
    return found


def _produce_to_dlq_topic(ctx: PipelineContext, config: ConnectorConfig, bad: DataFrame, topic: str) -> None:
    options = {**ctx.kafka_client_options("producer."), "topic": topic}
    write_kafka(dlq_topic_records(bad, config), options, caps=ctx.caps)


def dlq_topic_records(bad: DataFrame, config: ConnectorConfig, bad_columns: Sequence[str] | None = None) -> DataFrame:
    """Dead-letter rows as records of Connect's DLQ topic: the original key/value, plus context
    headers when ``errors.deadletterqueue.context.headers.enable`` (Spark's Kafka sink columns).
    ``bad_columns``: ``bad``'s columns when the caller knows them (a pipeline's query function may
    not ask Spark)."""
    columns = [F.col("key"), F.col("value")]
    if config.get("errors.deadletterqueue.context.headers.enable"):
        def header(name: str, column: F.Column) -> F.Column:
            return F.struct(F.lit(f"__connect.errors.{name}").alias("key"),
                            F.encode(column.cast("string"), "UTF-8").alias("value"))

        present = bad.columns if bad_columns is None else bad_columns
        coordinates = [c for c in ("topic", "partition", "offset", "message_id", "lite_partition", "lite_offset")
                       if c in present]
        columns.append(F.array(
            *[header(c, F.col(c)) for c in coordinates], header("connector.name", F.lit(config.name)),
            header("stage", F.col("stage")), header("exception.class.name", F.col("error_class")),
            header("exception.message", F.col("error_message")),
        ).alias("headers"))
    return bad.select(*columns)
