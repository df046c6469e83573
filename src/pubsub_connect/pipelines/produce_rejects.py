"""Records Kafka refused for good in a source connector's produce stage, with Kafka Connect's
error semantics.

Why: a Pub/Sub message whose ``kafka.timestamp.attribute`` lies days ahead, or whose record
outgrows the topic's ``max.message.bytes``, is refused by Kafka however often it is sent. The
transactional writer (:mod:`pubsub_connect.io.kafka.transactions`) leaves such records out of
the batch's transaction and reports each by its row index in the batch's produce order, with
its librdkafka error code (:mod:`pubsub_connect.io.kafka.record_rejects`); indices and codes are
all that reach the driver. This module turns them into what the convert stages do with records
they cannot convert (:mod:`pubsub_connect.pipelines.dead_letters`):

- ``errors.tolerance=none`` (Connect's default): the writer committed nothing of the batch, and
  the connector stops with one line naming the first refused record (a Pub/Sub message by its
  id, a Lite message by partition and offset) and the reason;
- ``all``: the rest of the batch is in Kafka, and the refused records become ``dlq/<name>`` rows
  with ``stage`` ``produce`` (also logged with ``errors.log.enable`` and copied to
  ``errors.deadletterqueue.topic.name``). The rows are built by Spark from the batch itself,
  joined with the small set of (index, code), and appended once per batch (app id
  ``<name>/produce-dlq``): a batch replayed after a crash between the Kafka commit and the
  checkpoint is skipped by the writer, which still returns the refused records its marker
  lists, so the dead letters are written then if they were not before.

The table is created when the first dead letter comes: the Lite source had none before, and in
a declarative pipeline's shape ``dlq_<name>`` is a table the pipeline defines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.kafka.record_rejects import RECORD_REJECTS, reject_reason
from pubsub_connect.io.tables import TableRef
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext
from pubsub_connect.pipelines.dead_letters import copy_to_dlq_topic, log_dead_letters, stop_line

#: The column of a batch's rows that holds their index in the produce order.
ROW_INDEX = "row_index"

_REJECTS = StructType([StructField(ROW_INDEX, LongType()), StructField("code", StringType())])


@dataclass(frozen=True)
class ProduceDeadLetters:
    """A source connector's dead letters of its produce stage: its ``dlq/<name>`` schema, the
    columns of a dead-letter row other than ``stage`` and the error (expressions over the
    outbox rows, given the connector's config), and the columns that name a record to a user."""

    schema: StructType
    record_columns: Callable[[ConnectorConfig], Sequence[Column]]
    coordinates: tuple[str, ...]


@dataclass(frozen=True)
class ProduceOutcome:
    """A produce micro-batch's result as the driver sees it (:data:`OUTCOME_SCHEMA`'s row)."""

    written: int
    committed: bool
    rejected: tuple[tuple[int, str], ...] = ()


def _error_message() -> Column:
    """The dead letter's reason: what the code means, plus what about the record it concerns
    (its timestamp, its size), computed from the row so a replay tells it the same way."""
    reason = F.col("code")
    for code in RECORD_REJECTS:
        reason = F.when(F.col("code") == F.lit(code), F.lit(reject_reason(code))).otherwise(reason)
    detail = (F.when(F.col("code") == F.lit("INVALID_TIMESTAMP"),
                     F.concat(F.lit("; the record's timestamp: "), F.unix_millis("timestamp").cast("string"),
                              F.lit(" ms")))
              .when(F.col("code").isin("MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE"),
                    F.concat(F.lit("; the record's key and value: "),
                             (F.coalesce(F.octet_length("key"), F.lit(0))
                              + F.coalesce(F.octet_length("value"), F.lit(0))).cast("string"),
                             F.lit(" bytes")))
              .otherwise(F.lit("")))
    return F.concat(reason, detail)


def _error_class() -> Column:
    """The dead letter's ``error_class``: the exception Kafka's Java producer raises for the code,
    the name Kafka Connect users know the refusal by (the code itself is in the reason)."""
    java = F.col("code")
    for code, kind in RECORD_REJECTS.items():
        java = F.when(F.col("code") == F.lit(code), F.lit(kind.java_class)).otherwise(java)
    return java


def dead_letter_rows(config: ConnectorConfig, indexed: DataFrame, rejected: Sequence[tuple[int, str]],
                     shape: ProduceDeadLetters) -> DataFrame:
    """The dead-letter rows of ``rejected`` ((row index, code) pairs), ``shape.schema``'s
    columns plus :data:`ROW_INDEX`: the batch's ``indexed`` rows joined with the refused ones
    (made in the batch's own session, as ``foreachBatch`` hands it out)."""
    refused = indexed.sparkSession.createDataFrame(list(rejected), _REJECTS)
    joined = indexed.join(F.broadcast(refused), ROW_INDEX)
    return joined.select(F.lit("produce").alias("stage"), *shape.record_columns(config),
                         _error_class().alias("error_class"), _error_message().alias("error_message"),
                         F.current_timestamp().alias("failed_at"), ROW_INDEX)


def apply_tolerance(ctx: PipelineContext, config: ConnectorConfig, dlq: TableRef, shape: ProduceDeadLetters,
                    outcome: ProduceOutcome, indexed: Callable[[], DataFrame], batch_id: int,
                    app_id: str | None = None) -> int:
    """Deal with a batch's refused records: stop (the batch was not committed, under
    ``errors.tolerance=none``) or dead-letter them (``all``, or a replayed batch that had
    committed with them). ``indexed()`` gives the batch's rows with :data:`ROW_INDEX`, read only
    when there is something to do. Returns the records dead-lettered. ``app_id``: what names the
    dead-letter appends when the batch is not the produce stage's (the fused source's)."""
    if not outcome.rejected:
        return 0
    rows = dead_letter_rows(config, indexed(), outcome.rejected, shape)
    if not outcome.committed:
        first = rows.orderBy(ROW_INDEX).select(*shape.coordinates, "error_class", "error_message").first()
        if first is None:  # the batch's rows changed under it: nothing to name, fail the batch
            raise ConnectorError(f"batch {batch_id}: Kafka refused record {outcome.rejected[0][0]}, "
                                 "which the batch no longer holds")
        raise ConnectorError(stop_line(first, f"produced to {config.get('kafka.topic')}"))
    rows = rows.persist()  # logged, copied to a topic and appended: the batch is read once
    try:
        log_dead_letters(config, rows.orderBy(ROW_INDEX), shape.coordinates)
        copy_to_dlq_topic(ctx, config, rows)
        ctx.store.ensure(dlq, shape.schema)
        ctx.store.append_batch(dlq, rows.select(*shape.schema.fieldNames()),
                               app_id or ctx.batch_app_id(config, "produce", "-dlq"), batch_id)
    finally:
        rows.unpersist()
    return len(outcome.rejected)
