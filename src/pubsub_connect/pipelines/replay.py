"""Replay and backfill from bronze: ``pubsub-connect replay NAME``.

Why: Pub/Sub delivers to a subscription only what was published after it existed, and Kafka's
retention may have dropped the records long ago; a sink's bronze table still holds every record
as ingested. Replay takes a range of it — per-partition Kafka offsets, or a time range on the
record's timestamp or its ingest time — and publishes it again through the connector's *current*
data model and publisher settings, to its topic or to another (``--to-topic``: backfilling the
topic of a new subscription).

It is a bounded batch job, not a stage: no checkpoint, no outbox. The range is read in chunks of
at most ``batch_size`` offsets per partition, each converted, its dead letters handled by the
connector's ``errors.tolerance`` (``dlq/<name>`` with stage ``replay``, or a stop naming the
first record before anything of that chunk is published), then published; a progress line
follows each chunk. Like the publish stage it is at least once: a replay cut short is run again
from the chunk its last line names. ``--dry-run`` converts and counts without publishing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SINK, LITE_SINK
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.tables import BRONZE, DLQ, TableRef
from pubsub_connect.model.schemas import KAFKA_DLQ
from pubsub_connect.pipelines.context import PipelineContext
from pubsub_connect.pipelines.dead_letters import dead_letter

#: Offsets per partition per chunk, by default.
BATCH_SIZE = 100_000
#: The columns a time range may be on: the record's own timestamp, or when bronze took it in.
TIME_COLUMNS = ("timestamp", "ingest_time")


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``first``..``last`` (both included) of one Kafka partition."""

    topic: str
    partition: int
    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> OffsetRange:
        """``topic:partition:first-last`` (``last`` may be left out: to the end of bronze)."""
        topic, _, rest = text.rpartition(":")
        topic, _, partition = topic.rpartition(":")
        first, _, last = rest.partition("-")
        try:
            return cls(topic, int(partition), int(first), int(last) if last else 2**63 - 1)
        except ValueError:
            raise ConfigError(f"--offsets {text!r}: give topic:partition:first-last, e.g. orders:0:1000-1999") from None

    def condition(self) -> Column:
        return ((F.col("topic") == self.topic) & (F.col("partition") == self.partition)
                & F.col("offset").between(self.first, self.last))


@dataclass(frozen=True)
class ReplayRange:
    """What to replay: offset ranges, or a time range ``[since, until)`` on ``time_column``."""

    offsets: tuple[OffsetRange, ...] = ()
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    time_column: str = "timestamp"

    def __post_init__(self) -> None:
        if not self.offsets and self.since is None and self.until is None:
            raise ConfigError("replay: give --offsets topic:partition:first-last, or --since/--until")
        if self.offsets and (self.since is not None or self.until is not None):
            raise ConfigError("replay: give offsets or a time range, not both")
        if self.time_column not in TIME_COLUMNS:
            raise ConfigError(f"replay: --time-column must be one of {', '.join(TIME_COLUMNS)}")

    def condition(self) -> Column:
        if self.offsets:
            chosen = self.offsets[0].condition()
            for more in self.offsets[1:]:
                chosen = chosen | more.condition()
            return chosen
        column = F.col(self.time_column)
        chosen = F.lit(True)
        if self.since is not None:
            chosen = chosen & (column >= F.lit(self.since))
        if self.until is not None:
            chosen = chosen & (column < F.lit(self.until))
        return chosen


@dataclass(frozen=True)
class SinkReplay:
    """A sink connector's three steps for replay: its data model, the split into messages and dead
    letters (``KAFKA_DLQ``-shaped), and its publisher, aimed at ``target``."""

    convert: Callable[[DataFrame], DataFrame]
    split: Callable[[DataFrame], tuple[DataFrame, DataFrame]]
    publish: Callable[[DataFrame], int]
    target: str


@dataclass
class ReplayReport:
    records: int = 0
    published: int = 0
    dead_letters: int = 0
    chunks: int = 0
    seconds: float = 0.0

    def line(self, name: str, dry_run: bool) -> str:
        verb = "would publish" if dry_run else "published"
        rate = f", {self.records / self.seconds:,.0f} records/s" if self.seconds and not dry_run else ""
        return (f"[{name}.replay] {self.records:,} records: {verb} {self.published:,}, "
                f"{self.dead_letters:,} dead letters{rate}")


def sink_replay(config: ConnectorConfig, to_topic: str | None = None) -> SinkReplay:
    """The connector's replay steps with its current settings; ``to_topic`` aims them elsewhere.
    Its conversion is built of column expressions, so a Spark session must be running."""
    tasks = int(config.get("tasks.max"))
    if config.kind == CPS_SINK:
        from pubsub_connect.model.cps_sink.batch import CpsSinkConversion
        from pubsub_connect.pipelines.cps_sink import publish_to_pubsub, sink_settings, split_pubsub_outbox
        from pubsub_connect.pipelines.pubsub_settings import cps_publisher_config
        from pubsub_connect.pipelines.writer_schemas import body_schema_check, writer_schema_lookup

        publisher = cps_publisher_config(config)
        if to_topic:
            publisher = dataclasses.replace(publisher, topic=to_topic)
        conversion = CpsSinkConversion(sink_settings(config), schemas=writer_schema_lookup(config),
                                       body_schemas=body_schema_check(config))
        return SinkReplay(conversion.to_outbox, split_pubsub_outbox,
                          lambda rows: publish_to_pubsub(rows, publisher, tasks), publisher.topic_path)
    if config.kind == LITE_SINK:
        from pubsub_connect.io.pubsublite.admin import topic_partition_count
        from pubsub_connect.pipelines.lite_sink import (
            LiteSinkSettings,
            lite_conversion,
            publish_to_lite,
            split_lite_outbox,
        )

        settings = LiteSinkSettings.from_connector(config)
        if to_topic:
            settings = dataclasses.replace(settings, topic_path=settings.connection.topic_path(to_topic))

        def publish(rows: DataFrame) -> int:
            return publish_to_lite(rows, settings, topic_partition_count(settings.connection, settings.topic_path),
                                   tasks)

        return SinkReplay(lite_conversion(config), split_lite_outbox, publish, settings.topic_path)
    raise ConfigError(f"{config.name}: replay publishes a sink connector's bronze again (Cloud Pub/Sub or Lite), "
                      f"not a {config.kind}'s")


def _chunks(selected: DataFrame, batch_size: int) -> list[Column]:
    """Conditions that cut the selection into chunks of at most ``batch_size`` offsets per
    partition (one small aggregate job: each partition's first and last selected offset)."""
    bounds = (selected.groupBy("topic", "partition").agg(F.min("offset").alias("lo"), F.max("offset").alias("hi"))
              .orderBy("topic", "partition").collect())
    if not bounds:
        return []
    steps = max((row.hi - row.lo) // batch_size + 1 for row in bounds)
    chunks = []
    for step in range(steps):
        parts = []
        for row in bounds:
            first = row.lo + step * batch_size
            if first <= row.hi:
                last = min(row.hi, first + batch_size - 1)
                parts.append((F.col("topic") == row.topic) & (F.col("partition") == row.partition)
                             & F.col("offset").between(first, last))
        chunk = parts[0]
        for part in parts[1:]:
            chunk = chunk | part
        chunks.append(chunk)
    return chunks


def replay(ctx: PipelineContext, config: ConnectorConfig, chosen: ReplayRange, steps: SinkReplay,
           dry_run: bool = False, batch_size: int = BATCH_SIZE,
           progress: Callable[[str], None] | None = None) -> ReplayReport:
    """Replay the bronze rows in ``chosen`` through ``steps``; returns the totals."""
    emit = progress or ctx.progress
    bronze, dlq = TableRef(BRONZE, config.name), TableRef(DLQ, config.name)
    if not ctx.store.exists(bronze):
        raise ConfigError(f"{config.name}: no bronze table yet, nothing to replay")
    if not dry_run:
        ctx.store.ensure(dlq, KAFKA_DLQ)
    selected = ctx.store.read(bronze).filter(chosen.condition())
    report = ReplayReport()
    run_id = uuid.uuid4().hex
    started = time.monotonic()
    for index, chunk in enumerate(_chunks(selected, batch_size)):
        converted = steps.convert(selected.filter(chunk)).persist()
        try:
            good, bad = steps.split(converted)
            counts = converted.agg(F.count(F.lit(1)), F.count("error_class")).first()
            records, failed = int(counts[0]), int(counts[1])
            if failed and not dry_run:
                dead_letter(ctx, config, dlq, bad.withColumn("stage", F.lit("replay")), index, failed,
                            stage="replay", app_id=f"{config.name}/replay@{run_id}")
            published = good.filter(F.col("data").isNotNull()).count() if dry_run else steps.publish(good)
        finally:
            converted.unpersist()
        report.records += records
        report.dead_letters += failed
        report.published += published
        report.chunks += 1
        report.seconds = time.monotonic() - started
        emit(f"[{config.name}.replay] chunk {index + 1}: {report.records:,} records, "
             f"{report.published:,} {'to publish' if dry_run else 'published'} to {steps.target}, "
             f"{report.dead_letters:,} dead letters")
    return report


def parse_time(text: str | None) -> dt.datetime | None:
    """An ISO-8601 instant (``2026-12-05T10:00:00Z``); without a zone, UTC."""
    if not text:
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"replay: {text!r} is not an ISO-8601 time (e.g. 2026-12-05T10:00:00Z)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def replay_range(offsets: Sequence[str], since: str | None, until: str | None, time_column: str) -> ReplayRange:
    """The command line's range."""
    return ReplayRange(tuple(OffsetRange.parse(text) for text in offsets), parse_time(since), parse_time(until),
                       time_column)


def replay_from_parameters(ctx: PipelineContext, config: ConnectorConfig, offsets: str, since: str, until: str,
                           time_column: str, to_topic: str, dry_run: str) -> ReplayReport:
    """A replay as the bundle's job and the replay notebook take it: text parameters, where an
    empty one is an option left out, the offset ranges are separated by spaces (a comma separates
    a job run's ``--params``), and ``dry_run`` is ``true`` or ``false``."""
    chosen = replay_range(offsets.split(), since or None, until or None, time_column or "timestamp")
    dry = dry_run.strip().lower() in ("true", "1", "yes")
    report = replay(ctx, config, chosen, sink_replay(config, to_topic or None), dry_run=dry)
    ctx.progress(report.line(config.name, dry))
    return report

