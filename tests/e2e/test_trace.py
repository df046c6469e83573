"""``trace``: a Kafka record's journey through a Cloud Pub/Sub sink on the real broker, emulator and
Delta tables — a published record (its bronze row, the message the outbox sent, the publish batch),
one waiting for the publish stage, one for the convert stage, a dead-lettered one, the fused
mode's and one whose outbox row expired (their messages made again from bronze, equal to the
outbox's), an offset no table holds, in one line, and rows that compaction rewrote, each traced to
the batch that sent it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.harness import batches_of_one_stage_run, context, sink_config
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import create_topic_and_subscription, pull_all
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.explore.trace import FROM_OUTBOX, REMADE, message_maker, trace
from pubsub_connect.pipelines import cps_sink
from pubsub_connect.pipelines.maintenance import maintain

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

JSON = {"value.converter": "org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable": "false",
        "errors.tolerance": "all"}


def test_trace_published_waiting_dead_lettered_fused_and_unknown(spark, kafka_bootstrap: str, pubsub_emulator_host: str,
                                                               unique_name: str, tmp_path: Path) -> None:
    topic = f"{unique_name}-in"
    create_topic(kafka_bootstrap, topic)
    pubsub_topic, subscription = create_topic_and_subscription(unique_name)
    staged = sink_config(unique_name, topic, pubsub_topic, **JSON)
    root = tmp_path / "root"
    ctx = context(spark, kafka_bootstrap, root)
    produce(kafka_bootstrap, topic, [Rec(key=b"k0", value=b'"seq-0"', partition=0), Rec(value=b"not json", partition=0),
                                     Rec(key=b"k2", value=b'"seq-2"', partition=0)])
    for stage in (cps_sink.staged_ingest, cps_sink.convert, cps_sink.publish):
        assert batches_of_one_stage_run(spark, kafka_bootstrap, root, stage, staged) == 1
    assert sorted(m.data for m in pull_all(subscription, 2, 120)) == [b"seq-0", b"seq-2"]

    published = trace(ctx.store, unique_name, topic, 0, 2)
    assert published.record == f"{topic}/0@2"
    assert {k: published.bronze[k] for k in ("key", "value", "topic", "partition", "offset")} == {
        "key": "k2", "value": '"seq-2"', "topic": topic, "partition": 0, "offset": 2}
    assert (published.message, published.message_from) == (
        {"data": "seq-2", "attributes": {"key": "k2"}, "ordering_key": ""}, FROM_OUTBOX)
    assert published.dead_letters == []
    assert published.published.startswith("by publish batch 0, committed 20"), published.published

    dead = trace(ctx.store, unique_name, topic, 0, 1)
    assert dead.message is None and dead.published is None
    [letter] = dead.dead_letters
    assert (letter["stage"], letter["error_class"], letter["value"]) == ("convert", "ConverterError", "not json")

    # a record the publish stage has not read yet
    produce(kafka_bootstrap, topic, [Rec(key=b"k3", value=b'"seq-3"', partition=0)])
    for stage in (cps_sink.staged_ingest, cps_sink.convert):
        assert batches_of_one_stage_run(spark, kafka_bootstrap, root, stage, staged) == 1
    waiting = trace(ctx.store, unique_name, topic, 0, 3)
    assert waiting.published == "not yet: waiting in the outbox for the publish stage"

    # the fused mode has no outbox: its message is made again from bronze, the same one
    fused = sink_config(f"{unique_name}-f", topic, pubsub_topic, **JSON, **{"pipeline.mode": "fused"})
    assert batches_of_one_stage_run(spark, kafka_bootstrap, root, cps_sink.fused, fused) == 1
    again = trace(ctx.store, fused.name, topic, 0, 2, message_maker(fused))
    assert (again.message, again.message_from) == (published.message, REMADE)
    assert again.published == "by the fused query, in the micro-batch that landed it in bronze"

    with pytest.raises(ConfigError) as unknown:
        trace(ctx.store, unique_name, topic, 0, 99)
    assert str(unknown.value) == (f"{unique_name}: no record {topic}/0@99 in its bronze table or dead letters "
                                  f"(bronze holds 4 records of {topic}/0, offsets 0..3)")

    # from a shell: the journey as JSON, and the unknown offset as one line with exit code 2
    worker_file, connector_file = tmp_path / "worker.properties", tmp_path / "sink.properties"
    worker_file.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={root}\nspark.master=local[1]\n")
    connector_file.write_text("".join(f"{key}={value}\n" for key, value in {
        "name": unique_name, "connector.class": "CloudPubSubSinkConnector", "topics": topic,
        "cps.project": staged.get("cps.project"), "cps.topic": pubsub_topic, **JSON}.items()))

    def shell(offset: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pubsub_connect.cli", "trace", unique_name, "--topic", topic,
                               "--partition", "0", "--offset", str(offset), "--json", "-w", str(worker_file),
                               "-c", str(connector_file)], capture_output=True, text=True, timeout=300, check=False)

    shown = shell(2)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == published.as_dict()
    missing = shell(99)
    assert (missing.returncode, missing.stderr.strip().splitlines()[-1]) == (2, f"error: {unknown.value}")

    # a record convert has not read yet; and one whose outbox row retention deleted once it was sent
    remake = message_maker(staged)
    produce(kafka_bootstrap, topic, [Rec(key=b"k4", value=b'"seq-4"', partition=0)])
    assert batches_of_one_stage_run(spark, kafka_bootstrap, root, cps_sink.staged_ingest, staged) == 1
    fresh = trace(ctx.store, unique_name, topic, 0, 4, remake)
    assert (fresh.message, fresh.message_from, fresh.published) == (
        {"data": "seq-4", "attributes": {"key": "k4"}, "ordering_key": ""}, REMADE,
        "not yet: waiting in bronze for the convert stage")
    expiring = sink_config(unique_name, topic, pubsub_topic, **JSON, **{"outbox.retention.ms": "0"})
    # retention deletes the outbox rows publish has sent (offsets 0 and 2), then the rest once it sent them
    assert {r.kind: r.deleted for r in maintain(ctx, expiring)} == {"bronze": 0, "outbox": 2, "dlq": 0}
    for stage in (cps_sink.convert, cps_sink.publish):
        assert batches_of_one_stage_run(spark, kafka_bootstrap, root, stage, staged) == 1
    assert {r.kind: r.deleted for r in maintain(ctx, expiring)} == {"bronze": 0, "outbox": 2, "dlq": 0}
    expired = trace(ctx.store, unique_name, topic, 0, 2, remake)
    assert (expired.message, expired.message_from, expired.published) == (
        published.message, REMADE, "by the publish stage; its outbox row has expired since (outbox.retention.ms)")


def test_a_compacted_row_is_traced_to_the_batch_that_sent_it(spark, kafka_bootstrap: str, pubsub_emulator_host: str,
                                                            unique_name: str, tmp_path: Path) -> None:
    """Compaction rewrites the outbox's rows into a file of a later version; trace follows each row
    back through it to the commit that added it, and so to the publish batch that sent it."""
    topic = f"{unique_name}-in"
    create_topic(kafka_bootstrap, topic)
    pubsub_topic, subscription = create_topic_and_subscription(unique_name)
    config = sink_config(unique_name, topic, pubsub_topic, **JSON)
    root = tmp_path / "root"
    ctx = context(spark, kafka_bootstrap, root)

    def run(stage) -> int:
        return batches_of_one_stage_run(spark, kafka_bootstrap, root, stage, config)

    produce(kafka_bootstrap, topic, [Rec(key=b"k0", value=b'"seq-0"', partition=0)])
    assert run(cps_sink.staged_ingest) == run(cps_sink.convert) == run(cps_sink.publish) == 1  # publish batch 0
    produce(kafka_bootstrap, topic, [Rec(key=b"k1", value=b'"seq-1"', partition=0)])
    assert run(cps_sink.staged_ingest) == run(cps_sink.convert) == 1  # offset 1 waits in the outbox
    outbox = next(report for report in maintain(ctx, config) if report.kind == "outbox")
    assert (outbox.deleted, outbox.files_before, outbox.files_after) == (0, 2, 1)  # both rows in one new file
    assert run(cps_sink.publish) == 1  # publish batch 1
    assert sorted(m.data for m in pull_all(subscription, 2, 120)) == [b"seq-0", b"seq-1"]

    sent = [trace(ctx.store, unique_name, topic, 0, offset).published for offset in (0, 1)]
    assert [text.split(",")[0] for text in sent] == ["by publish batch 0", "by publish batch 1"], sent
