"""The fused mode of a sink connector (``pipeline.mode=fused``): one streaming query over Kafka
that lands each micro-batch in bronze while it converts and publishes it.

Why: in the staged mode every record waits for three triggers and pays three Delta appends and
three offset/commit-log pairs (ingest → bronze → convert → outbox → publish); a record's latency
is their sum. Here a micro-batch is two Spark jobs started together from the batch function:

- the bronze append (:class:`~pubsub_connect.pipelines.kafka_ingest.KafkaLanding`, the staged
  ``ingest`` stage's own: once per batch id, on the same checkpoint and marks);
- the connector's data model applied to the same Kafka rows (the convert stage's expressions)
  and the converted messages published by executor tasks (the publish stage's function).

A batch so costs about the longer of the two, not the sum, and it commits (the checkpoint, then
consumer group ``connect-<name>``) only after both: bronze exactly once, the target at least once
(a batch cut short is replayed, its bronze append skipped, its messages published again).

Records that cannot be converted follow Connect's ``errors.tolerance`` as in the staged mode:
with ``none`` the publishing job fails at such a record before anything of the batch is
published — its rows go through a shuffle, and Spark starts no publishing task before the stage
that converts every record has finished (a Spark job of its own that looked for them first cost
each batch 0.7 s of 1.8, measured at 1,000 msg/s) — and the connector stops with the staged
convert's line; with ``all`` they go to ``dlq/<name>``, counted by the publishing job itself.

No outbox is written: what a batch published is its bronze rows through the data model (the
model is a pure function of the record and the connector's settings) and the checkpoint records
which batches completed (``docs/architecture.md`` gives the measurement behind that choice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.tables import DLQ, TableRef
from pubsub_connect.model.error_text import error_line
from pubsub_connect.model.schemas import KAFKA_DLQ
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, StageFn
from pubsub_connect.pipelines.dead_letters import (
    DeadLetterRows,
    dead_letter,
    stop_at_first_unconvertible,
    stop_at_unconvertible,
)
from pubsub_connect.pipelines.fused_batch import fused_trigger, side_by_side
from pubsub_connect.pipelines.kafka_ingest import STAGE as INGEST
from pubsub_connect.pipelines.kafka_ingest import KafkaLanding
from pubsub_connect.pipelines.modes import FUSED, take_over_from_staged
from pubsub_connect.pipelines.observed_counts import ObservedCounts

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

STAGE = FUSED

@dataclass(frozen=True)
class SinkPublishing:
    """What a sink connector gives its fused query: its data model and its publisher.

    ``convert(rows)`` → (converted rows with ``error_class``/``error_message``, a frame worth
    persisting while they are read twice, or None); ``columns``: what ``publish`` reads of them;
    ``publishable``: the converted rows that are messages (the others publish nothing);
    ``publish(rows, shuffled)`` → how many messages the service accepted; with ``shuffled`` its
    rows must go through a shuffle before any is published (a failing row then stops the job
    before it publishes anything); ``target``: names it in errors;
    ``empty`` and ``report_empty``: the records that publish nothing, counted and reported."""

    convert: Callable[[DataFrame], tuple[DataFrame, DataFrame | None]]
    columns: Sequence[str]
    publishable: Column
    publish: Callable[[DataFrame, bool], int]
    target: str
    dead_letters: DeadLetterRows
    empty: Column | None = None
    report_empty: Callable[[DataFrame], None] | None = None


def start_fused_sink(ctx: PipelineContext, config: ConnectorConfig, sink: SinkPublishing,
                     drain: Sequence[StageFn]) -> StreamingQuery:
    """Start the fused query of a sink connector; ``drain``: its staged convert and publish, run
    to the end first when the staged mode owned the position (:mod:`.modes`)."""
    take_over_from_staged(ctx, config, drain)  # before the landing creates bronze: a new connector has none
    landing = KafkaLanding(ctx, config, shown_as=STAGE)
    dlq = TableRef(DLQ, config.name)
    ctx.store.ensure(dlq, KAFKA_DLQ)
    stops = config.get("errors.tolerance") == "none"
    failed = F.col("error_class").isNotNull()
    counts: dict[str, Column] = {"failed": failed}
    if sink.empty is not None:
        counts["empty"] = sink.empty

    def publish(converted: DataFrame, batch_id: int) -> None:
        # the dead-letter rows are planned only when a batch has some (each plan is Py4J calls)
        observed = ObservedCounts(converted, **counts)
        rows = (stop_at_unconvertible(observed.observed, sink.publishable) if stops
                else observed.observed.filter(~failed & sink.publishable)).select(*sink.columns)
        try:
            published = sink.publish(rows, stops)
        except Exception as exc:
            if stops:  # a record that cannot be converted: the staged convert's one line names it
                stop_at_first_unconvertible(ctx, config, dlq, sink.dead_letters.of(converted), batch_id, stage=INGEST)
            raise ConnectorError(f"publish of batch {batch_id} to {sink.target} failed: {error_line(exc)}") from exc
        found = observed.values()
        if not stops and found["failed"]:
            dead_letter(ctx, config, dlq, sink.dead_letters.of(converted), batch_id, found["failed"], stage=INGEST)
        if found.get("empty") and sink.report_empty is not None:
            sink.report_empty(converted)
        log.info("%s fused batch %d: %d messages", config.name, batch_id, published)

    def process(batch: DataFrame, batch_id: int) -> None:
        # Read from Kafka once: both jobs read the cached rows, and Spark's progress counts each
        # record once, not once per job that scanned the source.
        batch.persist()
        try:
            run_batch(batch, batch_id)
        finally:
            batch.unpersist()

    def convert_and_publish(batch: DataFrame, batch_id: int) -> None:
        converted, cached = sink.convert(batch)
        if cached is not None:
            cached.persist()
        try:
            publish(converted, batch_id)
        finally:
            if cached is not None:
                cached.unpersist()

    def run_batch(batch: DataFrame, batch_id: int) -> None:
        side_by_side(lambda: landing.append(batch, batch_id), lambda: convert_and_publish(batch, batch_id),
                     f"{config.name} fused batch {batch_id}")
        landing.commit_group(batch_id)

    return ctx.start_batches(landing.rows, config, STAGE, process, checkpoint_of=INGEST, trigger=fused_trigger(ctx))
