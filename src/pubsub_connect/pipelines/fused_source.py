"""The fused mode of the Cloud Pub/Sub source (``pipeline.mode=fused``): each pulled window goes
to bronze and, at the same time, through the data model into one Kafka transaction.

Why: in the staged mode a message is appended to bronze by ``pull``, waits for ``convert``'s
trigger, which reads bronze and appends it to the outbox, then for ``produce``'s trigger, which
reads the outbox and writes a transaction: two triggers and three Delta commits per message.
Here a window costs the longer of its bronze append and its produce, not their sum:

- every pulled message is appended to ``bronze/<name>`` (the staged pull's own append: bronze
  keeps what was received, redeliveries included, as in the staged mode), on a Spark-aware thread
  beside the caller's;
- the window's fresh messages (not produced before: :mod:`.produced_ids`) are converted by the
  convert stage's expressions and produced by an executor task in one Kafka transaction with its
  marker (the produce stage's writer: exactly once for ``read_committed`` consumers), in one
  Spark job that also counts the records that cannot be converted; those are dead-lettered
  after the transaction, before the window counts as done (under ``errors.tolerance=none`` the
  job fails at such a record before anything of the window is produced, and the connector
  stops with the staged convert's line); records Kafka refuses are handled as there;
- the window is acked only after both. A crash before means redelivery: bronze may hold the
  messages twice (as after a staged pull's crash), Kafka holds them once, because the journal
  knows whether the window's transaction committed.

One puller: its windows are one sequence of transactions and of journal files. Several pullers
would each need their own, and a message whose lease ran out while one of them had it in a
transaction could be produced by another too; ``tasks.max`` sets the pullers of the staged mode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io import checkpoints
from pubsub_connect.io.kafka.transactions import TransactionalBatchWriter
from pubsub_connect.io.tables import DLQ, OUTBOX, TableRef
from pubsub_connect.model.cps_source.batch import KafkaOutboxConversion
from pubsub_connect.model.error_text import error_line
from pubsub_connect.model.schemas import PUBSUB_BRONZE, PUBSUB_DLQ
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, StageFn
from pubsub_connect.pipelines.cps_pull import Puller, PullLoop, check_settings, ensure_bronze
from pubsub_connect.pipelines.dead_letters import dead_letter, stop_at_first_unconvertible, stop_at_unconvertible
from pubsub_connect.pipelines.fused_batch import fused_linger_s, side_by_side
from pubsub_connect.pipelines.kafka_produce import indexed_rows, produce_batch, producer_config, transactional_id
from pubsub_connect.pipelines.modes import FUSED, take_over_from_staged
from pubsub_connect.pipelines.observed_counts import ObservedCounts
from pubsub_connect.pipelines.produce_rejects import ProduceDeadLetters, apply_tolerance
from pubsub_connect.pipelines.produced_ids import REMEMBERED_IDS, ProducedIds, Window
from pubsub_connect.pipelines.writer_schemas import message_schema_definitions, written_schema_ids

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class SourceProducing:
    """What the source connector gives its fused mode: the outbox's ``columns`` (the records to
    produce), their produce ``order``, the dead-letter rows of converted rows that failed
    (``dead_letters``) and of records Kafka refused (``rejects``)."""

    columns: Sequence[str]
    order: Sequence[str]
    dead_letters: Callable[[DataFrame], DataFrame]
    rejects: ProduceDeadLetters


class FusedPuller(Puller):
    """A puller whose window is written to bronze and produced to Kafka at once."""

    stage = FUSED

    def __init__(self, ctx: PipelineContext, config: ConnectorConfig, journal: ProducedIds,
                 producing: SourceProducing, conversion: KafkaOutboxConversion):
        super().__init__(ctx, config)
        self.journal = journal
        self.producing = producing
        self.conversion = conversion
        self.linger_s = fused_linger_s(ctx)
        self.dlq = TableRef(DLQ, config.name)
        self.stops = config.get("errors.tolerance") == "none"
        self._failed = F.col("error_class").isNotNull()

    def write(self, table: pa.Table) -> None:
        side_by_side(partial(self.ctx.store.append_rows, self.bronze, table, PUBSUB_BRONZE),
                     partial(self._produce, table), f"{self.config.name} fused window")

    def _produce(self, table: pa.Table) -> None:
        ids = table.column("message_id").to_pylist()
        fresh = self.journal.fresh(ids)
        if not any(fresh):
            return  # redeliveries of produced messages only: bronze and the ack are all they need
        window = self.journal.begin(message_id for message_id, new in zip(ids, fresh, strict=True) if new)
        rows = self.ctx.spark.createDataFrame(table if all(fresh) else table.filter(pa.array(fresh)), PUBSUB_BRONZE)
        converted = self.conversion.apply(rows, window.counter)
        keep = F.lit(True)
        rechecked = self.journal.recheck.intersection(window.message_ids)
        if rechecked:  # produced before a crash: only their dead letters may be missing
            keep = ~F.col("message_id").isin(sorted(rechecked))
        # One job converts, counts the records that cannot be converted and produces the others;
        # under errors.tolerance=none it fails at such a record before any is produced (the
        # writer's task runs after a shuffle, once every record is converted).
        observed = ObservedCounts(converted, failed=self._failed)
        good = (stop_at_unconvertible(observed.observed, keep) if self.stops
                else observed.observed.filter(~self._failed & keep)).select(*self.producing.columns)
        try:
            outcome = produce_batch(self.ctx, self.config, good, window.batch_id, self.producing.order,
                                    identity=(transactional_id(self.config, FUSED), self.journal.sequence))
        except Exception as exc:
            if self.stops:  # a record that cannot be converted: the staged convert's one line names it
                stop_at_first_unconvertible(self.ctx, self.config, self.dlq, self.producing.dead_letters(converted),
                                            window.batch_id, stage=FUSED, app_id=self.journal.app_id("-dlq"))
            raise ConnectorError(f"produce of window {window.batch_id} to {self.config.get('kafka.topic')} "
                                 f"failed: {error_line(exc)}") from exc
        failed = observed.values()["failed"]
        if failed:  # errors.tolerance=all: written before the window counts as done
            self._dead_letter(converted, window, failed)
        apply_tolerance(self.ctx, self.config, self.dlq, self.producing.rejects, outcome,
                        lambda: indexed_rows(converted.filter(~self._failed & keep).select(*self.producing.columns),
                                             self.producing.order),
                        window.batch_id, app_id=self.journal.app_id("-produce-dlq"))
        self.journal.committed(window, max(outcome.written, 0) + len(outcome.rejected))

    def _dead_letter(self, converted: DataFrame, window: Window, count: int) -> None:
        """The window's ``count`` records that could not be converted, to ``dlq/<name>``
        (``errors.tolerance=all``)."""
        dead_letter(self.ctx, self.config, self.dlq, self.producing.dead_letters(converted), window.batch_id, count,
                    stage=FUSED, app_id=self.journal.app_id("-dlq"))


def _carry_over(ctx: PipelineContext, config: ConnectorConfig, journal: ProducedIds) -> None:
    """Staged → fused: the outbox's newest message ids become the fused mode's first known
    produced ids (a redelivery of a message the staged mode produced is then not produced again),
    and its row count the round-robin counter (the partitions keep turning where they were)."""
    outbox = TableRef(OUTBOX, config.name)
    if not ctx.store.exists(outbox):
        return
    newest = (ctx.store.read(outbox).orderBy(F.col("publish_time").desc(), F.col("message_id").desc())
              .limit(REMEMBERED_IDS).select("message_id").collect())
    journal.seed([row.message_id for row in reversed(newest)], ctx.store.row_count(outbox))


def _last_committed(ctx: PipelineContext, config: ConnectorConfig, journal: ProducedIds) -> int | None:
    """The newest window whose transaction committed, from the marker topic. Its producer fences
    any transaction a crashed run left open, so the answer is final."""
    reader = TransactionalBatchWriter(producer_config(ctx, config), transactional_id(config, FUSED),
                                      str(config.get("kafka.topic")), str(ctx.worker.get("pipeline.offsets.topic")))
    try:
        return reader.last_committed_batch(journal.sequence)
    finally:
        reader.close()


def start_fused_source(ctx: PipelineContext, config: ConnectorConfig, producing: SourceProducing,
                       drain: Sequence[StageFn]) -> PullLoop:
    """Start the fused mode of a Cloud Pub/Sub source; ``drain``: its staged convert and produce,
    run to the end first when the staged mode owned the position (:mod:`.modes`)."""
    settings = check_settings(config)
    ctx.check_kafka("producer", config)
    take_over_from_staged(ctx, config, drain, drained="convert and produce",
                          then=lambda: _carry_over(ctx, config, _journal(ctx, config)))
    ensure_bronze(ctx, config)
    ctx.store.ensure(TableRef(DLQ, config.name), PUBSUB_DLQ)
    journal = _journal(ctx, config)
    journal.recover(_last_committed(ctx, config, journal))
    conversion = KafkaOutboxConversion(settings, with_message=True, schema_ids=written_schema_ids(config),
                                       message_schemas=message_schema_definitions(config))
    pullers = int(config.get("tasks.max"))
    if pullers > 1:
        ctx.progress(f"[{config.name}.{FUSED}] pipeline.mode=fused pulls with one puller (tasks.max={pullers} "
                     "sets the pullers of pipeline.mode=staged)")
    return PullLoop(ctx, config, FUSED, lambda: FusedPuller(ctx, config, journal, producing, conversion),
                    pullers=1).start()


def _journal(ctx: PipelineContext, config: ConnectorConfig) -> ProducedIds:
    return ProducedIds(checkpoints.beside(ctx.store.checkpoint(config.name, FUSED), FUSED), config.name)
