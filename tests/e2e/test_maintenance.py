"""``maintain`` on a Cloud Pub/Sub sink's real tables (Kafka broker, Pub/Sub emulator, Delta Lake):
retention deletes exactly the rows every reading stage has consumed, a stage that is behind holds
its input back, and the stages go on streaming through the deletions and compactions, every kept
row delivered once — checked by sequence ids; and the same beside the running stages, as
``run`` and the worker do it."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from e2e.harness import batches_of_one_stage_run, context, sink_config
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import assert_no_more_messages, create_topic_and_subscription, pull_all
from pubsub_connect.io import checkpoints
from pubsub_connect.io.tables import BRONZE, DLQ, OUTBOX, TableRef
from pubsub_connect.pipelines import cps_sink
from pubsub_connect.pipelines.maintenance import COMPACTED_FILE, maintain, maintained_while_running
from pubsub_connect.pipelines.runner.supervisor import run_stages
from pubsub_connect.pipelines.runtime import connector_stages
from waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def seqs(first: int, last: int) -> list[Rec]:
    return [Rec(value=f"seq-{i}".encode(), partition=0) for i in range(first, last)]


def test_retention_waits_for_the_slowest_stage(spark, kafka_bootstrap: str, pubsub_emulator_host: str,
                                               unique_name: str, tmp_path: Path) -> None:
    topic = f"{unique_name}-in"
    create_topic(kafka_bootstrap, topic)
    pubsub_topic, subscription = create_topic_and_subscription(unique_name)
    config = sink_config(unique_name, topic, pubsub_topic, **{"bronze.retention.ms": "0", "outbox.retention.ms": "0"})
    root = tmp_path / "root"
    ctx = context(spark, kafka_bootstrap, root)

    def run(stage) -> int:
        return batches_of_one_stage_run(spark, kafka_bootstrap, root, stage, config)

    def offsets(kind: str) -> list[int]:
        return sorted(r.offset for r in ctx.store.read(TableRef(kind, unique_name)).select("offset").collect())

    def delivered(count: int) -> list[int]:
        return sorted(int(m.data.decode().removeprefix("seq-")) for m in pull_all(subscription, count, 120))

    reports = []

    def maintained() -> dict[str, int]:
        reports[:] = maintain(ctx, config)
        return {report.kind: report.deleted for report in reports}

    # the tables, empty: nothing to delete, nothing held back
    for stage in (cps_sink.staged_ingest, cps_sink.convert, cps_sink.publish):
        assert run(stage) == 0
    assert maintained() == {BRONZE: 0, OUTBOX: 0, DLQ: 0}
    assert [note for report in reports for note in report.notes] == []
    produce(kafka_bootstrap, topic, seqs(0, 10))
    for stage in (cps_sink.staged_ingest, cps_sink.convert, cps_sink.publish):
        assert run(stage) == 1
    assert delivered(10) == list(range(10))
    produce(kafka_bootstrap, topic, seqs(10, 20))
    assert run(cps_sink.staged_ingest) == run(cps_sink.convert) == 1  # publish is behind: 10..19 wait in the outbox
    produce(kafka_bootstrap, topic, seqs(20, 30))
    assert run(cps_sink.staged_ingest) == 1  # convert is behind: 20..29 wait in bronze

    # bronze keeps what convert has not read, the outbox what publish has not sent
    assert maintained() == {BRONZE: 20, OUTBOX: 10, DLQ: 0}
    assert [note for report in reports for note in report.notes if "held back" in note] == [
        "10 expired rows held back: convert has not read past version 5",
        "10 expired rows held back: publish has not read past version 4"]
    assert offsets(BRONZE) == list(range(20, 30)) and offsets(OUTBOX) == list(range(10, 20))
    # each table's size after its compaction, from which the next turn's threshold is reckoned
    compacted = checkpoints.read_json(checkpoints.beside(ctx.store.checkpoint(unique_name, "maintain"), COMPACTED_FILE))
    assert compacted == {r.kind: r.bytes_after for r in reports} and compacted[BRONZE] > 0

    # the stages stream on through the deletions and the compaction: each kept row once
    assert run(cps_sink.publish) == 1
    assert delivered(10) == list(range(10, 20))
    assert run(cps_sink.convert) == 1 and run(cps_sink.publish) == 1
    assert delivered(10) == list(range(20, 30))
    assert maintained() == {BRONZE: 10, OUTBOX: 20, DLQ: 0}
    assert offsets(BRONZE) == offsets(OUTBOX) == []
    assert maintained() == {BRONZE: 0, OUTBOX: 0, DLQ: 0}
    assert [(r.kind, r.files_after) for r in reports] == [(BRONZE, 0), (OUTBOX, 0), (DLQ, 0)]
    # a connector that is stopping ends the run at the next table
    assert [r.kind for r in maintain(ctx, config, stopping=iter([False, True]).__next__)] == [BRONZE]

    # the same from a shell: the connector's file, the worker's storage, one line per table
    worker_file, connector_file = tmp_path / "worker.properties", tmp_path / "sink.properties"
    worker_file.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={root}\nspark.master=local[1]\n")
    connector_file.write_text("".join(f"{key}={config.get(key)}\n" for key in (
        "name", "connector.class", "topics", "cps.project", "cps.topic", "bronze.retention.ms", "outbox.retention.ms")))
    shell = subprocess.run([sys.executable, "-m", "pubsub_connect.cli", "maintain", unique_name, "-w", str(worker_file),
                            "-c", str(connector_file)], capture_output=True, text=True, timeout=300, check=False)
    assert shell.returncode == 0, shell.stderr
    # the report alone: VACUUM's own count, printed by Delta to the JVM's standard output, is kept off
    assert shell.stdout.splitlines() == [
        f"[{unique_name}.maintain] {kind}: deleted 0 rows, files 0 → 0 (0.0 MB)" for kind in (BRONZE, OUTBOX, DLQ)]


# The compatibility subset's maintenance test: Delta's conflict rules between a stage's appends and
# maintenance's DELETE and OPTIMIZE are what differs between Delta versions, and this one meets them.
@pytest.mark.compat
def test_maintenance_beside_the_running_stages(spark, kafka_bootstrap: str, pubsub_emulator_host: str,
                                               unique_name: str, tmp_path: Path) -> None:
    """Maintenance turns every half second while the stages run continuously and records keep
    coming: retention deletes rows from bronze and the outbox while the stages go on appending
    (Delta Lake's Serializable isolation would refuse a deletion that an append overtook, so the
    stages' appends wait for it), and every record is delivered exactly once.

    The turns begin once publish has sent 100 records, so that the first turn already finds 100
    rows of each table read by the stage after it: a turn that began with the stages (as ``run``
    begins them) would find nothing read yet, and a turn takes tens of seconds beside them."""
    topic = f"{unique_name}-in"
    create_topic(kafka_bootstrap, topic)
    pubsub_topic, subscription = create_topic_and_subscription(unique_name)
    config = sink_config(unique_name, topic, pubsub_topic, **{"bronze.retention.ms": "0", "outbox.retention.ms": "0"})
    lines: list[str] = []
    ctx = context(spark, kafka_bootstrap, tmp_path / "root", lines, once=False,
                  **{"pipeline.trigger.interval.ms": "200"})
    stop, enough = threading.Event(), threading.Event()
    failures: list[BaseException] = []
    sent = [0]

    def run() -> None:
        try:
            run_stages(ctx, config, connector_stages(config), stop)
        except BaseException as exc:
            failures.append(exc)

    def keep_producing() -> None:  # a steady load until retention has deleted beside it
        while not enough.is_set():
            produce(kafka_bootstrap, topic, seqs(sent[0], sent[0] + 5))
            sent[0] += 5
            enough.wait(0.1)

    def summed(pattern: str) -> int:  # the numbers the lines give in the pattern's group, added up
        return sum(int(m.group(1).replace(",", "")) for line in list(lines) if (m := re.match(pattern, line)))

    def published() -> int:
        return summed(rf"\[{unique_name}\.publish\] batch=\d+ records=(\d+) ")

    def deleted(kind: str) -> int:
        return summed(rf"\[{unique_name}\.maintain\] {kind}: deleted ([\d,]+) rows")

    thread = threading.Thread(target=run, daemon=True)
    producer = threading.Thread(target=keep_producing, daemon=True)
    thread.start()
    producer.start()
    try:
        wait_until(lambda: published() >= 100 or failures, 300, lambda: f"the stages' first batches: {lines[-6:]}")
        with maintained_while_running(ctx, config, 0.5, contextlib.nullcontext):
            wait_until(lambda: (deleted(BRONZE) >= 100 and deleted(OUTBOX) >= 100) or failures, 300,
                       lambda: f"retention beside the appends: {lines[-6:]}")
        enough.set()
        producer.join(60)
        assert not failures
        got = sorted(int(m.data.decode().removeprefix("seq-")) for m in pull_all(subscription, sent[0], 180))
        assert got == list(range(sent[0]))
        assert_no_more_messages(subscription)
    finally:
        enough.set()
        stop.set()
        thread.join(120)


def test_the_delta_log_is_trimmed_to_what_its_readers_still_read(spark, kafka_bootstrap: str,
                                                                pubsub_emulator_host: str, unique_name: str,
                                                                tmp_path: Path) -> None:
    """On a local file system maintenance removes the log files before a checkpoint, never past
    the version a stage resumes at (convert, behind, then reads on through the trim: every record
    once), the newest commits kept, or the table's own ``delta.logRetentionDuration``."""
    topic = f"{unique_name}-in"
    create_topic(kafka_bootstrap, topic)
    pubsub_topic, subscription = create_topic_and_subscription(unique_name)
    config = sink_config(unique_name, topic, pubsub_topic, **{"outbox.retention.ms": "-1"})
    root = tmp_path / "root"
    ctx = context(spark, kafka_bootstrap, root)
    bronze = TableRef(BRONZE, unique_name)

    def run(stage) -> int:
        return batches_of_one_stage_run(spark, kafka_bootstrap, root, stage, config)

    def log_versions() -> list[int]:
        log = Path(ctx.store.path(bronze)) / "_delta_log"
        return sorted(int(p.name[:20]) for p in log.glob("*.json"))

    def log_notes() -> dict[str, list[str]]:
        return {r.kind: [n for n in r.notes if "Delta log" in n] for r in maintain(ctx, config)}

    def delivered(count: int) -> list[int]:
        return sorted(int(m.data.decode().removeprefix("seq-")) for m in pull_all(subscription, count, 120))

    for stage in (cps_sink.staged_ingest, cps_sink.convert, cps_sink.publish):
        assert run(stage) == 0
    spark.sql(f"ALTER TABLE {ctx.store.sql_target(bronze)} SET TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    # bronze: version 0 its creation, 1 ingest's first batch (empty), 2 the property; then a
    # checkpoint every second version
    for first in range(0, 40, 10):  # versions 3..6, read by convert
        produce(kafka_bootstrap, topic, seqs(first, first + 10))
        assert run(cps_sink.staged_ingest) == 1
    assert run(cps_sink.convert) == 1 and run(cps_sink.publish) == 1
    assert delivered(40) == list(range(40))
    for first in range(40, 100, 10):  # versions 7..12: convert is behind
        produce(kafka_bootstrap, topic, seqs(first, first + 10))
        assert run(cps_sink.staged_ingest) == 1
    assert log_versions() == list(range(13))

    # a restart of convert plans its last batch again, from version 2 (the end of its first,
    # empty batch) to 7: the log starts at version 2, not at checkpoint 12 (where ingest's newest
    # mark is); versions 0 and 1 leave 4 files each
    assert log_notes() == {BRONZE: ["Delta log: 8 files before version 2 removed"], OUTBOX: [], DLQ: []}
    assert log_versions() == list(range(2, 16))  # 13..15: maintenance's OPTIMIZE and VACUUM
    assert run(cps_sink.convert) == 1 and run(cps_sink.publish) == 1
    assert delivered(60) == list(range(40, 100))
    assert_no_more_messages(subscription)

    # now convert's restart reads from version 7: checkpoint 6; versions 2..5 and checkpoints 2 and 4 go
    assert log_notes()[BRONZE] == ["Delta log: 20 files before version 6 removed"]
    assert log_versions()[0] == 6
    produce(kafka_bootstrap, topic, seqs(100, 110))
    assert run(cps_sink.staged_ingest) == run(cps_sink.convert) == run(cps_sink.publish) == 1
    assert delivered(10) == list(range(100, 110))
    # a table that keeps a week of history (the least Delta takes: its VACUUM retention) keeps it
    spark.sql(f"ALTER TABLE {ctx.store.sql_target(bronze)} SET TBLPROPERTIES "
              "('delta.logRetentionDuration' = 'interval 7 days')")
    assert log_notes()[BRONZE] == [] and log_versions()[0] == 6
    # without it, convert's restart (from version 16) and ingest's newest mark hold it
    spark.sql(f"ALTER TABLE {ctx.store.sql_target(bronze)} UNSET TBLPROPERTIES ('delta.logRetentionDuration')")
    notes = log_notes()[BRONZE]
    assert len(notes) == 1 and notes[0].endswith(f"files before version {log_versions()[0]} removed")
    assert log_versions()[0] >= 16
