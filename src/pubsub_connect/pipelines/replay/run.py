"""The replay loop: a range of a connector's bronze, chunk by chunk, through its steps
(:mod:`.steps`), with a progress line per chunk and the totals; see the package for what a replay
promises."""


from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import functions as F

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.tables import BRONZE, DLQ, TableRef
from pubsub_connect.pipelines.context import PipelineContext
from pubsub_connect.pipelines.dead_letters import dead_letter
from pubsub_connect.pipelines.replay.ranges import ReplayRange, replay_range
from pubsub_connect.pipelines.replay.sink import sink_replay
from pubsub_connect.pipelines.replay.steps import ReplaySteps

#: Records (offsets per partition, for a sink) per chunk, by default.
BATCH_SIZE = 100_000


@dataclass
class ReplayReport:
    records: int = 0
    published: int = 0
    dead_letters: int = 0
    chunks: int = 0
    seconds: float = 0.0
    #: Records of chunks an earlier run of the same replay had sent (a source's: not sent again).
    sent_before: int = 0
    #: Records that could not be converted (dead letters Kafka did not refuse).
    converted_failed: int = 0

    def line(self, name: str, dry_run: bool, verbs: tuple[str, str] = ("publish", "published")) -> str:
        verb = f"would {verbs[0]}" if dry_run else verbs[1]
        rate = f", {self.records / self.seconds:,.0f} records/s" if self.seconds and not dry_run else ""
        earlier = f", {self.sent_before:,} {verbs[1]} by an earlier run" if self.sent_before else ""
        return (f"[{name}.replay] {self.records:,} records: {verb} {self.published:,}{earlier}, "
                f"{self.dead_letters:,} dead letters{rate}")


def replay_steps(ctx: PipelineContext, config: ConnectorConfig, to_topic: str | None = None) -> ReplaySteps:
    """The connector's replay steps: a sink's (:mod:`.sink`) or a source's (:mod:`.source`)."""
    if config.is_sink:
        return sink_replay(config, to_topic)
    from pubsub_connect.pipelines.replay.source import source_replay

    return source_replay(ctx, config, to_topic)


def replay_id_of(config: ConnectorConfig, steps: ReplaySteps, chosen: ReplayRange, batch_size: int) -> str:
    """A replay's name, from what it sends where: the same command gives the same id, so a
    source's replay run again knows the chunks it had committed."""
    what = json.dumps([config.name, steps.target, chosen.text(), batch_size])
    return hashlib.sha256(what.encode()).hexdigest()[:16]


def replay(ctx: PipelineContext, config: ConnectorConfig, chosen: ReplayRange, steps: ReplaySteps,
           dry_run: bool = False, batch_size: int = BATCH_SIZE,
           progress: Callable[[str], None] | None = None, replay_id: str | None = None) -> ReplayReport:
    """Replay the bronze rows in ``chosen`` through ``steps``; returns the totals. ``replay_id``:
    the replay's name (by default :func:`replay_id_of`)."""
    emit = progress or ctx.progress
    bronze, dlq = TableRef(BRONZE, config.name), TableRef(DLQ, config.name)
    if not ctx.store.exists(bronze):
        raise ConfigError(f"{config.name}: no bronze table yet, nothing to replay")
    if not dry_run:
        ctx.store.ensure(dlq, steps.dlq_schema)
    replay_id = replay_id or replay_id_of(config, steps, chosen, batch_size)
    selected = steps.select(ctx.store.read(bronze), chosen)
    report = ReplayReport()
    started = time.monotonic()
    for index, rows in enumerate(steps.chunks(selected, batch_size)):
        converted = steps.convert(rows, report.records - report.converted_failed).persist()
        try:
            good, bad = steps.split(converted)
            counts = converted.agg(F.count(F.lit(1)), F.count("error_class")).first()
            records, failed = int(counts[0]), int(counts[1])
            if failed and not dry_run:
                dead_letter(ctx, config, dlq, bad.withColumn("stage", F.lit("replay")), index, failed,
                            stage="replay", app_id=f"{config.name}/replay@{replay_id}")
            if dry_run:
                sent, refused, earlier = steps.sendable(good), 0, False
            else:
                outcome = steps.send(good, index, replay_id)
                sent, refused, earlier = outcome.records, outcome.refused, outcome.earlier
        finally:
            converted.unpersist()
        report.records += records
        report.converted_failed += failed
        report.dead_letters += failed + refused
        report.chunks += 1
        report.seconds = time.monotonic() - started
        if earlier:
            report.sent_before += records - failed
            emit(f"[{config.name}.replay] chunk {index + 1}: {report.records:,} records; {steps.verbs[1]} to "
                 f"{steps.target} by an earlier run of replay {replay_id}, not again")
            continue
        report.published += sent
        emit(f"[{config.name}.replay] chunk {index + 1}: {report.records:,} records, "
             f"{report.published:,} {'to ' + steps.verbs[0] if dry_run else steps.verbs[1]} to {steps.target}, "
             f"{report.dead_letters:,} dead letters")
    return report


def replay_from_parameters(ctx: PipelineContext, config: ConnectorConfig, offsets: str, since: str, until: str,
                           time_column: str, to_topic: str, dry_run: str, replay_id: str = "") -> ReplayReport:
    """A replay as the bundle's job and the replay notebook take it: text parameters, where an
    empty one is an option left out, the offset ranges are separated by spaces (a comma separates
    a job run's ``--params``), and ``dry_run`` is ``true`` or ``false``."""
    chosen = replay_range(offsets.split(), since or None, until or None, time_column or None, config.kind)
    dry = dry_run.strip().lower() in ("true", "1", "yes")
    steps = replay_steps(ctx, config, to_topic or None)
    report = replay(ctx, config, chosen, steps, dry_run=dry, replay_id=replay_id or None)
    ctx.progress(report.line(config.name, dry, steps.verbs))
    return report
