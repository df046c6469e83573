"""``replay``: a Cloud Pub/Sub sink's bronze published again on the real broker, emulator and Delta
tables — exactly the offset ranges asked, to the connector's topic or to a fresh subscription's
(``--to-topic``), a time range, the dead-letter rules, and a dry run that counts — checked by
sequence ids."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from e2e.harness import batches_of_one_stage_run, context, sink_config
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import assert_no_more_messages, create_topic_and_subscription, pull_all
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.io.tables import DLQ, TableRef
from pubsub_connect.pipelines import cps_sink
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.replay.ranges import replay_range
from pubsub_connect.pipelines.replay.run import ReplayReport, replay
from pubsub_connect.pipelines.replay.sink import sink_replay

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

JSON = {"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false"}


def seq_of(message) -> int:
    return int(message.data.decode().removeprefix("seq-"))


def test_replay_republishes_exactly_the_range(spark, kafka_bootstrap: str, pubsub_emulator_host: str,
                                              unique_name: str, tmp_path: Path) -> None:
    topic = f"{unique_name}-in"
    create_topic(kafka_bootstrap, topic, partitions=2)
    pubsub_topic, subscription = create_topic_and_subscription(unique_name)
    config = sink_config(unique_name, topic, pubsub_topic, **JSON, **{"errors.tolerance": "all"})
    root = tmp_path / "root"
    ctx = context(spark, kafka_bootstrap, root)
    # seq-i to partition i % 2 (offset i // 2), and one record that is not JSON at partition 1 offset 5
    produce(kafka_bootstrap, topic, [Rec(value=f'"seq-{i}"'.encode(), partition=i % 2) for i in range(10)]
            + [Rec(value=b"not json", partition=1)])
    for stage in (cps_sink.staged_ingest, cps_sink.convert, cps_sink.publish):
        assert batches_of_one_stage_run(spark, kafka_bootstrap, root, stage, config) == 1
    assert sorted(seq_of(m) for m in pull_all(subscription, 10, 120)) == list(range(10))

    def run(*offsets: str, to_topic: str | None = None, dry_run: bool = False, **kwargs: str) -> ReplayReport:
        chosen = replay_range(offsets, kwargs.get("since"), kwargs.get("until"), kwargs.get("column", "timestamp"))
        return replay(ctx, config, chosen, sink_replay(config, to_topic), dry_run=dry_run, batch_size=2)

    # a new subscription's topic backfilled with partition 0 offsets 1..3 and partition 1 from offset 3 on
    backfill_topic, backfill = create_topic_and_subscription(f"{unique_name}-new")
    report = run(f"{topic}:0:1-3", f"{topic}:1:3-", to_topic=backfill_topic)
    assert (report.records, report.published, report.dead_letters, report.chunks) == (6, 5, 1, 2)
    assert sorted(seq_of(m) for m in pull_all(backfill, 5, 120)) == [2, 4, 6, 7, 9]
    assert_no_more_messages(backfill)
    assert_no_more_messages(subscription)  # the connector's own topic got nothing
    dead = ctx.store.read(TableRef(DLQ, unique_name)).orderBy("failed_at").collect()
    assert [(row.stage, row.partition, row.offset, row.value) for row in dead] == [
        ("convert", 1, 5, b"not json"), ("replay", 1, 5, b"not json")]

    # to the connector's own topic, by a time range on ingest time (all of bronze), as a dry run first
    dry = run(dry_run=True, since="2000-01-01T00:00:00Z", column="ingest_time")
    assert (dry.records, dry.published, dry.dead_letters) == (11, 10, 1)
    assert_no_more_messages(subscription)
    assert run(f"{topic}:0:0-0").published == 1
    assert [seq_of(m) for m in pull_all(subscription, 1, 120)] == [0]

    # errors.tolerance=none stops at the first bad record, before its chunk is published
    strict = sink_config(unique_name, topic, pubsub_topic, **JSON)
    with pytest.raises(ConnectorError) as stopped:
        replay(ctx, strict, replay_range([f"{topic}:1:4-5"], None, None, "timestamp"), sink_replay(strict))
    assert str(stopped.value).startswith(f"record {topic}/1@5 cannot be converted: ConverterError: ")
    assert_no_more_messages(subscription)
    with pytest.raises(ConfigError) as neither:
        replay_range([], None, None, "timestamp")
    assert str(neither.value) == "replay: give --offsets topic:partition:first-last, or --since/--until"

    # from a shell: a dry run's progress and totals
    worker_file, connector_file = tmp_path / "worker.properties", tmp_path / "sink.properties"
    worker_file.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={root}\nspark.master=local[1]\n")
    connector_file.write_text("".join(f"{key}={value}\n" for key, value in {
        "name": unique_name, "connector.class": "CloudPubSubSinkConnector", "topics": topic,
        "cps.project": config.get("cps.project"), "cps.topic": pubsub_topic, "cps.useEmulator": "true",
        "errors.tolerance": "all", **JSON}.items()))
    shell = subprocess.run([sys.executable, "-m", "pubsub_connect.cli", "replay", unique_name, "--offsets",
                            f"{topic}:0:0-4", "--dry-run", "--batch-size", "3", "-w", str(worker_file),
                            "-c", str(connector_file)], capture_output=True, text=True, timeout=300, check=False)
    assert shell.returncode == 0, shell.stderr
    assert [line for line in shell.stdout.splitlines() if line.startswith("[")] == [
        f"[{unique_name}.replay] chunk 1: 3 records, 3 to publish to {pubsub_topic}, "
        "0 dead letters",
        f"[{unique_name}.replay] chunk 2: 5 records, 5 to publish to {pubsub_topic}, "
        "0 dead letters",
        f"[{unique_name}.replay] 5 records: would publish 5, 0 dead letters"]
    assert_no_more_messages(subscription)
