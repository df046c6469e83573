"""The fallback engine — the project's Python Kafka source and delta-rs — end to end, one
scenario per connector, chosen by the worker keys ``pipeline.kafka.implementation=python`` and
``pipeline.tables.implementation=delta-rs``; and the automatic choice of it, with one line, where
no artifact repository can be reached.

The native engine runs every other test; these keep the stand-ins honest for machines without
Maven Central. Assertions are exact, as in each connector's own tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.harness import ENGINES, run_once, sink_config, source_config
from e2e.test_lite_sink import cli, lite_path, produce_records, write_connector, write_worker
from e2e.test_lite_source import message, source_connector
from integration.kafka_helpers import Rec, consume_all, create_topic, produce
from integration.pubsub_helpers import assert_no_more_messages, create_topic_and_subscription, publish, pull_all
from lite_server import LiteServer
from pubsub_connect.io.tables import DeltaRsTableStore, TableRef

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pubsub_emulator_host")]

FALLBACK = ENGINES["fallback"]


def test_cps_sink_on_the_fallback(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    produce(kafka_bootstrap, unique_name, [Rec(f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2,
                                               headers=[("h", str(i).encode())]) for i in range(6)])
    _, subscription = create_topic_and_subscription(unique_name)
    connector = sink_config(unique_name, unique_name, unique_name, **{
        "key.converter": "org.apache.kafka.connect.storage.StringConverter", "headers.publish": "true"})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector, **FALLBACK)
    assert isinstance(ctx.store, DeltaRsTableStore) and not ctx.caps.native_kafka
    got = sorted((m.data, dict(m.attributes)) for m in pull_all(subscription, 6, timeout=60))
    assert got == [(f"v{i}".encode(), {"key": f"k{i}", "h": str(i)}) for i in range(6)]
    assert_no_more_messages(subscription, wait=1.0)


def test_cps_source_on_the_fallback(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=1)
    _, subscription = create_topic_and_subscription(unique_name)
    publish(unique_name, [(f"m{i}".encode(), {"seq": str(i)}, None) for i in range(25)])
    connector = source_config(unique_name, subscription, unique_name, **{"kafka.record.headers": "true"})
    ctx = run_once(spark, kafka_bootstrap, tmp_path, connector, **FALLBACK)
    assert isinstance(ctx.store, DeltaRsTableStore)
    records = consume_all(kafka_bootstrap, unique_name)
    assert sorted((r.value, r.headers) for r in records) == sorted(
        (f"m{i}".encode(), [("seq", str(i).encode())]) for i in range(25))
    assert ctx.store.count(TableRef("bronze", unique_name)) == 25


def test_lite_sink_on_the_fallback(lite: LiteServer, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    lite.create_topic(lite_path("topics", unique_name), 2)
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    produce_records(kafka_bootstrap, unique_name, [
        {"key": f"k{i}".encode(), "value": f"v{i}".encode(), "partition": i % 2, "timestamp": 1_000 + i}
        for i in range(8)])
    worker, _ = write_worker(tmp_path, kafka_bootstrap, **FALLBACK)
    connector = write_connector(tmp_path, unique_name, lite, **{
        "connector.class": "PubSubLiteSinkConnector", "topics": unique_name, "pubsublite.topic": unique_name,
        "pubsublite.ordering.mode": "KAFKA"})
    result = cli(["run", "--once", "--worker", str(worker), str(connector)], lite)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "local: python kafka source, delta-rs" in result.stdout
    published = {p: [(m.message.key, m.message.data) for m in lite.messages(lite_path("topics", unique_name), p)]
                 for p in range(2)}
    assert published == {p: [(f"k{i}".encode(), f"v{i}".encode()) for i in range(p, 8, 2)] for p in range(2)}


def test_lite_source_on_the_fallback(lite: LiteServer, kafka_bootstrap: str, tmp_path: Path,
                                     unique_name: str) -> None:
    topic = lite_path("topics", unique_name)
    lite.create_topic(topic, 2)
    lite.create_subscription(lite_path("subscriptions", unique_name), topic)
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    for partition in range(2):
        lite.publish(topic, partition, [message(b"k%d" % partition, b"d%d-%d" % (partition, i)) for i in range(5)])
    worker, _ = write_worker(tmp_path, kafka_bootstrap, **FALLBACK)
    connector = source_connector(tmp_path, unique_name, lite, unique_name)
    result = cli(["run", "--once", "--worker", str(worker), str(connector)], lite)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "local: python kafka source, delta-rs" in result.stdout
    got = sorted((r.key, r.value) for r in consume_all(kafka_bootstrap, unique_name))
    assert got == sorted((b"k%d" % p, b"d%d-%d" % (p, i)) for p in range(2) for i in range(5))


def test_archive_on_the_fallback(spark, kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    from archive_checks import KEEP, T0, archived_records, produce_at, topic_records
    from pubsub_connect.config import loader as cfg
    from pubsub_connect.io.objectstore import local as ostore_local
    from pubsub_connect.pipelines.runner.supervisor import run_stages
    from pubsub_connect.pipelines.runtime import build_context, stages_for

    create_topic(kafka_bootstrap, unique_name, partitions=2, config=KEEP)
    produce_at(kafka_bootstrap, unique_name, [(p, b"a%d-%d" % (p, i), T0 + i) for p in range(2) for i in range(20)])
    out, buffer = tmp_path / "out", tmp_path / "buffer"
    buffer.mkdir()
    worker = cfg.validate_worker({"bootstrap.servers": kafka_bootstrap, "storage.root": str(tmp_path / "storage"),
                                  **FALLBACK})
    connector = cfg.validate_connector({"name": unique_name, "connector.class": "S3SinkConnector",
                                        "topics": unique_name, "output.path": str(out),
                                        "local.buffer.dir": str(buffer)})
    ctx = build_context(worker, once=True, progress=lambda _line: None)
    assert not ctx.caps.native_kafka
    run_stages(ctx, connector, stages_for(connector.kind))
    store = ostore_local.LocalStore(out)
    assert sorted(o.key for o in store.list() if o.key.endswith(".gz")) == [
        f"2016-02-24/{unique_name}-{p:05d}-000000000000.gz" for p in range(2)]
    assert archived_records(store, "") == topic_records(kafka_bootstrap, unique_name)


def test_without_an_artifact_repository_the_fallback_is_chosen_with_one_line(
        kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    """No cached jars and a repository that refuses connections: ``run`` says so in one line and
    runs the connector on the fallback; asking for the native engine explicitly is an error."""
    create_topic(kafka_bootstrap, unique_name, partitions=1)
    produce(kafka_bootstrap, unique_name, [Rec(b"x", key=b"k", partition=0)])
    _, subscription = create_topic_and_subscription(unique_name)
    worker = tmp_path / "worker.properties"
    worker.write_text(f"bootstrap.servers={kafka_bootstrap}\nstorage.root={tmp_path / 'root'}\n"
                      "spark.master=local[1]\n")
    connector = tmp_path / "sink.properties"
    connector.write_text(f"name={unique_name}\nconnector.class=cps-sink\ntopics={unique_name}\n"
                         f"cps.project=test-project\ncps.topic={unique_name}\ncps.useEmulator=true\n")
    env = {**os.environ, "PUBSUB_CONNECT_CACHE": str(tmp_path / "empty-cache"),
           "PUBSUB_CONNECT_MAVEN_REPOSITORIES": "http://127.0.0.1:9/"}
    command = [sys.executable, "-m", "pubsub_connect.cli", "run", "--once", "--worker", str(worker), str(connector)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    fallback_lines = [line for line in result.stderr.splitlines() if "using the fallback" in line]
    assert len(fallback_lines) == 1, result.stderr
    assert "http://127.0.0.1:9/" in fallback_lines[0]
    assert "local: python kafka source, delta-rs" in result.stdout
    assert [(m.data, m.attributes.get("key")) for m in pull_all(subscription, 1, timeout=60)] == [(b"x", "k")]

    explicit = subprocess.run([*command, "--set", "pipeline.kafka.implementation=native"], env=env,
                              capture_output=True, text=True, timeout=400, check=False)
    assert explicit.returncode == 2, explicit.stdout[-2000:] + explicit.stderr[-2000:]
    errors = [line for line in explicit.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot resolve" in errors[0], explicit.stderr
