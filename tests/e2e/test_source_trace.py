"""``trace`` of a source: a Cloud Pub/Sub message's journey to Kafka on the real emulator, broker
and Delta tables — waiting in bronze, waiting in the outbox, produced by a batch, dead-lettered,
delivered twice, unknown (one line) — and a Lite message's, by its Lite partition and offset."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from e2e.harness import context, lite_source_with_bronze, source_config
from integration.kafka_helpers import consume_all, create_topic
from integration.pubsub_helpers import PROJECT, create_topic_and_subscription, publish
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import LITE_SOURCE
from pubsub_connect.explore.source_trace import cps_message, lite_message, parse_message, trace_message
from pubsub_connect.explore.trace import FROM_OUTBOX
from pubsub_connect.io.tables import BRONZE, TableRef
from pubsub_connect.pipelines import cps_source, lite_source
from pubsub_connect.pipelines.runner.supervisor import run_stages

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.usefixtures("pubsub_emulator_host")]


def test_a_cloud_pubsub_message_traced_through_pull_convert_and_produce(spark, kafka_bootstrap: str,
                                                                        tmp_path: Path, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    _, subscription = create_topic_and_subscription(unique_name)
    # seq-1 has an attribute, which ByteArrayConverter without kafka.record.headers cannot write
    ids = [publish(unique_name, [(b"seq-%d" % i, {"a": "1"} if i == 1 else {}, None)])[0] for i in range(2)]
    config = source_config(unique_name, subscription, unique_name, **{
        "errors.tolerance": "all", "kafka.partition.count": "3", "kafka.partition.scheme": "round_robin"})
    root = tmp_path / "root"
    ctx = context(spark, kafka_bootstrap, root)
    pull, convert, produce = cps_source.STAGES

    run_stages(ctx, config, [pull])
    waiting = trace_message(ctx.store, unique_name, cps_message(ids[0]))
    assert waiting.record == f"message {ids[0]}"
    assert (waiting.bronze["message_id"], waiting.bronze["data"]) == (ids[0], "seq-0")
    assert (waiting.message, waiting.published) == (None, "not yet: waiting in bronze for the convert stage")

    run_stages(ctx, config, [convert])
    converted = trace_message(ctx.store, unique_name, cps_message(ids[0]))
    assert converted.message_from == FROM_OUTBOX
    assert {k: converted.message[k] for k in ("key", "value", "partition", "message_id")} == {
        "key": None, "value": "seq-0", "partition": 0, "message_id": ids[0]}
    assert converted.published == "not yet: waiting in the outbox for the produce stage"

    run_stages(ctx, config, [produce])
    produced = trace_message(ctx.store, unique_name, cps_message(ids[0]))
    assert produced.published.startswith("by produce batch 0, committed 20"), produced.published
    [record] = consume_all(kafka_bootstrap, unique_name)
    assert (record.value, record.partition) == (b"seq-0", produced.message["partition"])

    dead = trace_message(ctx.store, unique_name, cps_message(ids[1]))
    assert dead.message is None and dead.published is None
    [letter] = dead.dead_letters
    assert (letter["stage"], letter["message_id"], letter["error_class"]) == (
        "convert", ids[1], "StructConverterError")

    # a redelivery after a crash between bronze's commit and the ack lands the message again
    bronze = TableRef(BRONZE, unique_name)
    again = ctx.store.read(bronze).filter(F.col("message_id") == ids[0]).withColumn("ingest_time",
                                                                                    F.current_timestamp())
    ctx.store.append_batch(bronze, again, "test-redelivery", 0)
    twice = trace_message(ctx.store, unique_name, cps_message(ids[0]))
    assert twice.bronze["deliveries in bronze"] == 2 and twice.published == produced.published

    with pytest.raises(ConfigError) as unknown:
        trace_message(ctx.store, unique_name, cps_message("no-such-id"))
    assert str(unknown.value) == f"{unique_name}: no message no-such-id in its bronze table or dead letters"

    # from a shell, as JSON
    worker_file, connector_file = tmp_path / "worker.properties", tmp_path / "source.properties"
    worker_file.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={root}\nspark.master=local[1]\n")
    connector_file.write_text("".join(f"{key}={value}\n" for key, value in {
        "name": unique_name, "connector.class": "CloudPubSubSourceConnector", "cps.project": PROJECT,
        "cps.subscription": subscription, "kafka.topic": unique_name, "cps.useEmulator": "true",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter"}.items()))
    shell = subprocess.run([sys.executable, "-m", "pubsub_connect.cli", "trace", unique_name, "--message-id", ids[0],
                            "--json", "-w", str(worker_file), "-c", str(connector_file)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert shell.returncode == 0, shell.stderr
    document = json.loads(shell.stdout)
    assert (document["record"], document["kafka_record_from"], document["produced"]) == (
        f"message {ids[0]}", FROM_OUTBOX, produced.published)
    wrong = subprocess.run([sys.executable, "-m", "pubsub_connect.cli", "trace", unique_name, "--topic", "t",
                            "--partition", "0", "--offset", "1", "-w", str(worker_file), "-c", str(connector_file)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert (wrong.returncode, wrong.stderr.strip()) == (
        2, f"error: {unique_name}: trace a Cloud Pub/Sub source's message by --message-id alone")


def test_a_lite_message_traced_by_its_partition_and_offset(spark, kafka_bootstrap: str, tmp_path: Path,
                                                           unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    published = dt.datetime(2026, 12, 5, 10, 0, tzinfo=dt.timezone.utc)
    rows = [(0, offset, b"k3", b"p0-%d" % offset, {}, None, published, published) for offset in range(2)]
    ctx, config = lite_source_with_bronze(spark, kafka_bootstrap, tmp_path / "root", unique_name, rows)
    run_stages(ctx, config, lite_source.STAGES[1:])  # convert and produce of what the pull landed

    journey = trace_message(ctx.store, unique_name, parse_message(LITE_SOURCE, "0@1"))  # the notebook's widget
    assert journey.record == "Lite partition 0@1"
    assert (journey.bronze["partition"], journey.bronze["offset"], journey.bronze["data"]) == (0, 1, "p0-1")
    # key k3 goes to Kafka partition 0 of 2 (murmur2, by Kafka's own client)
    assert {k: journey.message[k] for k in ("key", "value", "partition")} == {
        "key": "k3", "value": "p0-1", "partition": 0}
    assert journey.published.startswith("by produce batch 0, committed 20"), journey.published
    assert sorted(r.value for r in consume_all(kafka_bootstrap, unique_name)) == [b"p0-0", b"p0-1"]
    with pytest.raises(ConfigError) as unknown:
        trace_message(ctx.store, unique_name, lite_message(0, 7))
    assert str(unknown.value) == f"{unique_name}: no Lite partition 0@7 in its bronze table or dead letters"
    with pytest.raises(ConfigError) as malformed:
        parse_message(LITE_SOURCE, "0/7")
    assert str(malformed.value) == "trace '0/7': name a Lite source's message as partition@offset, e.g. 0@42"
