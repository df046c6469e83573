"""``replay`` of a source: its bronze of Pub/Sub or Lite messages produced to a real Kafka broker
again, each chunk in one transaction — exactly the range asked, once for ``read_committed``
consumers even when a replay stops half way and is run again, redeliveries in bronze sent once,
the dead-letter rules, and a dry run that counts. Checked by exact records."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from e2e.harness import lite_source_with_bronze, run_once, source_config
from integration.kafka_helpers import consume_all, create_topic
from integration.pubsub_helpers import PROJECT, create_topic_and_subscription, publish
from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SOURCE, LITE_SOURCE
from pubsub_connect.io.tables import BRONZE, DLQ, TableRef
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.replay.ranges import replay_range
from pubsub_connect.pipelines.replay.run import ReplayReport, replay, replay_id_of, replay_steps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.usefixtures("pubsub_emulator_host")]

#: All of bronze, by when it came in: a range no message published later can enter.
ALL_INGESTED = "2000-01-01T00:00:00Z"


def test_a_cut_short_source_replay_run_again_produces_every_record_once(spark, kafka_bootstrap: str,
                                                                        tmp_path: Path, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    _, subscription = create_topic_and_subscription(unique_name)
    # one at a time, so publish order is list order; seq-4 has an attribute, which
    # ByteArrayConverter without kafka.record.headers cannot write: a record that cannot be converted
    ids = [publish(unique_name, [(b"seq-%d" % i, {"a": "1"} if i == 4 else {}, None)])[0] for i in range(7)]
    keys = {"kafka.partition.count": "3", "kafka.partition.scheme": "round_robin"}
    tolerant = source_config(unique_name, subscription, unique_name, **keys, **{"errors.tolerance": "all"})
    root = tmp_path / "root"
    ctx = run_once(spark, kafka_bootstrap, root, tolerant)
    own = {record.value: record.partition for record in consume_all(kafka_bootstrap, unique_name)}
    assert sorted(own) == [b"seq-%d" % i for i in (0, 1, 2, 3, 5, 6)]
    # a redelivery after a crash between bronze's commit and the ack: seq-1 is in bronze twice
    bronze = TableRef(BRONZE, unique_name)
    again = ctx.store.read(bronze).filter(F.col("data") == b"seq-1").withColumn("ingest_time", F.current_timestamp())
    ctx.store.append_batch(bronze, again, "test-redelivery", 0)
    assert ctx.store.read(bronze).count() == 8

    backfill = f"{unique_name}-backfill"
    create_topic(kafka_bootstrap, backfill, partitions=3)
    chosen = replay_range([], ALL_INGESTED, None, "ingest_time", CPS_SOURCE)

    def run(config: cfg.ConnectorConfig, **options: object) -> tuple[ReplayReport, list[str]]:
        lines: list[str] = []
        report = replay(ctx, config, chosen, replay_steps(ctx, config, backfill), batch_size=3,
                        progress=lines.append, **options)  # type: ignore[arg-type]
        return report, lines

    # errors.tolerance=none: chunk 1 (seq-0..2) is produced; chunk 2 stops at seq-4 before any of it is
    strict = source_config(unique_name, subscription, unique_name, **keys)
    with pytest.raises(ConnectorError) as stopped:
        run(strict)
    assert str(stopped.value).startswith(f"record message_id {ids[4]} cannot be converted: StructConverterError: ")
    assert sorted((r.value, r.partition) for r in consume_all(kafka_bootstrap, backfill)) == [
        (value, own[value]) for value in (b"seq-0", b"seq-1", b"seq-2")]

    # the same replay run again, tolerant now: chunk 1 is known committed and not produced again
    report, lines = run(tolerant)
    replay_id = replay_id_of(tolerant, replay_steps(ctx, tolerant, backfill), chosen, 3)
    assert lines == [
        f"[{unique_name}.replay] chunk 1: 3 records; produced to {backfill} by an earlier run of replay "
        f"{replay_id}, not again",
        f"[{unique_name}.replay] chunk 2: 6 records, 2 produced to {backfill}, 1 dead letters",
        f"[{unique_name}.replay] chunk 3: 7 records, 3 produced to {backfill}, 1 dead letters"]
    assert (report.records, report.published, report.sent_before, report.dead_letters, report.chunks) == (
        7, 3, 3, 1, 3)
    assert report.line(unique_name, False, ("produce", "produced")).startswith(
        f"[{unique_name}.replay] 7 records: produced 3, 3 produced by an earlier run, 1 dead letters, ")
    # every record once, on the partition the connector's own round robin gave it
    produced = consume_all(kafka_bootstrap, backfill)
    assert sorted((r.value, r.partition) for r in produced) == sorted(own.items())
    assert all(r.key is None and not r.headers for r in produced)
    dead = ctx.store.read(TableRef(DLQ, unique_name)).orderBy("failed_at").select("stage", "message_id").collect()
    assert [tuple(row) for row in dead] == [("convert", ids[4]), ("replay", ids[4])]

    # once more: nothing is produced or dead-lettered twice
    report, lines = run(tolerant)
    assert (report.published, report.sent_before) == (0, 6)
    assert all(line.endswith(f"by an earlier run of replay {replay_id}, not again") for line in lines)
    assert len(consume_all(kafka_bootstrap, backfill)) == 6
    assert ctx.store.read(TableRef(DLQ, unique_name)).count() == 2

    # a replay of another name sends it all again; a dry run counts and sends nothing
    dry, _ = run(tolerant, dry_run=True, replay_id="counted")
    assert (dry.records, dry.published, dry.dead_letters) == (7, 6, 1)
    assert len(consume_all(kafka_bootstrap, backfill)) == 6

    # a Cloud Pub/Sub source's bronze has no offsets
    with pytest.raises(ConfigError) as no_offsets:
        replay_range([f"{unique_name}:0:0-1"], None, None, None, CPS_SOURCE)
    assert str(no_offsets.value) == ("replay: a cps_source's bronze has no offsets: give --since/--until "
                                     "(on publish_time or ingest_time)")

    # from a shell, to the connector's own topic, by publish time: a dry run's progress and totals
    worker_file, connector_file = tmp_path / "worker.properties", tmp_path / "source.properties"
    worker_file.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={root}\nspark.master=local[1]\n")
    connector_file.write_text("".join(f"{key}={value}\n" for key, value in {
        "name": unique_name, "connector.class": "CloudPubSubSourceConnector", "cps.project": PROJECT,
        "cps.subscription": subscription, "kafka.topic": unique_name, "cps.useEmulator": "true",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter", "errors.tolerance": "all",
        **keys}.items()))
    shell = subprocess.run([sys.executable, "-m", "pubsub_connect.cli", "replay", unique_name, "--since",
                            ALL_INGESTED, "--dry-run", "--batch-size", "4", "-w", str(worker_file),
                            "-c", str(connector_file)], capture_output=True, text=True, timeout=300, check=False)
    assert shell.returncode == 0, shell.stderr
    assert [line for line in shell.stdout.splitlines() if line.startswith("[")] == [
        f"[{unique_name}.replay] chunk 1: 4 records, 4 to produce to {unique_name}, 0 dead letters",
        f"[{unique_name}.replay] chunk 2: 7 records, 6 to produce to {unique_name}, 1 dead letters",
        f"[{unique_name}.replay] 7 records: would produce 6, 1 dead letters"]
    assert len(consume_all(kafka_bootstrap, unique_name)) == 6


#: Kafka's murmur2 partition of each key in a topic of 2 partitions (``Utils.toPositive(
#: Utils.murmur2(key)) % 2``), computed by Kafka's own client: literals, not the code under test.
KEY_PARTITION_OF_2 = {b"k0": 1, b"k1": 1, b"k2": 1, b"k3": 0, b"k4": 0}


def test_a_lite_source_replay_produces_exactly_the_offsets_asked(spark, kafka_bootstrap: str, tmp_path: Path,
                                                                  unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    published = dt.datetime(2026, 12, 5, 10, 0, tzinfo=dt.timezone.utc)
    # Lite partition 0: keys k0..k3 at offsets 0..3; partition 1: no key at offsets 0..2 (a Kafka
    # record without a key: round robin), as the Lite pull lands them
    rows = [(0, offset, b"k%d" % offset, b"p0-%d" % offset, {}, None, published + dt.timedelta(seconds=offset),
             published) for offset in range(4)]
    rows += [(1, offset, b"", b"p1-%d" % offset, {}, None, published, published) for offset in range(3)]
    ctx, config = lite_source_with_bronze(spark, kafka_bootstrap, tmp_path / "root", unique_name, rows)
    chosen = replay_range(["0:1-2", "1:1-"], None, None, None, LITE_SOURCE)
    lines: list[str] = []
    report = replay(ctx, config, chosen, replay_steps(ctx, config), batch_size=2, progress=lines.append)
    assert lines == [f"[{unique_name}.replay] chunk 1: 2 records, 2 produced to {unique_name}, 0 dead letters",
                     f"[{unique_name}.replay] chunk 2: 4 records, 4 produced to {unique_name}, 0 dead letters"]
    assert (report.records, report.published) == (4, 4)
    records = sorted(consume_all(kafka_bootstrap, unique_name), key=lambda r: r.value)
    # k1, k2 by their key's murmur2; the keyless ones round robin on from the rows before them (2, 3)
    assert [(r.value, r.key, r.partition) for r in records] == [
        (b"p0-1", b"k1", KEY_PARTITION_OF_2[b"k1"]), (b"p0-2", b"k2", KEY_PARTITION_OF_2[b"k2"]),
        (b"p1-1", None, 0), (b"p1-2", None, 1)]
    # the record's time is the message's event time when it has one, else its publish time
    assert records[0].timestamp_ms == int((published + dt.timedelta(seconds=1)).timestamp() * 1000)

    with pytest.raises(ConfigError) as sink_form:
        replay_range(["orders:0:1-2"], None, None, None, LITE_SOURCE)
    assert str(sink_form.value) == "--offsets 'orders:0:1-2': give partition:first-last, e.g. 0:1000-1999"
