"""Pub/Sub Lite source with ``pipeline.mode=fused``, end to end, as users run it: one
``pubsub-connect run --once`` of two connectors reading the same Lite topic through two
subscriptions, one staged and one switched to fused with ``--set NAME:pipeline.mode=fused``. The
fused connector's Kafka topic must hold exactly the staged one's records (keys, values, headers,
timestamps, partitions, and their order in each partition), its bronze the same messages once, and
it writes no outbox; the staged mode's mapping is held against Google's connector elsewhere
(``tests/reference``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from e2e.test_lite_sink import cli, lite_path, read_table, run_once, write_worker
from e2e.test_lite_source import message, model_messages, source_connector
from integration.kafka_helpers import consume_all, create_topic
from lite_server import LiteServer

pytestmark = pytest.mark.slow


def test_fused_mode_produces_the_staged_modes_records(lite: LiteServer, kafka_bootstrap: str, tmp_path: Path,
                                                      unique_name: str) -> None:
    staged, fused = f"{unique_name}-s", f"{unique_name}-f"
    topic = lite_path("topics", unique_name)
    lite.create_topic(topic, 3)
    for name in (staged, fused):
        lite.create_subscription(lite_path("subscriptions", name), topic)
        create_topic(kafka_bootstrap, name, partitions=4)
    for partition, batch in model_messages().items():
        lite.publish(topic, partition, batch)
    worker, root = write_worker(tmp_path, kafka_bootstrap)
    files = [source_connector(tmp_path, name, lite, name) for name in (staged, fused)]

    stdout = run_once(lite, worker, *files, "--set", f"{fused}:pipeline.mode=fused")  # type: ignore[arg-type]

    own = [line for line in stdout.splitlines() if line.startswith(f"[{fused}.") and "] batch=" in line]
    assert own and all(line.startswith(f"[{fused}.fused] batch=") for line in own), stdout

    def records(name: str) -> list[tuple[object, ...]]:
        return sorted((r.partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms)
                      for r in consume_all(kafka_bootstrap, name))

    want = records(staged)
    assert len(want) == sum(len(batch) for batch in model_messages().values())
    assert records(fused) == want
    landed = {name: sorted((r["partition"], r["offset"]) for r in read_table(root, "bronze", name).to_pylist())
              for name in (staged, fused)}
    assert landed[fused] == landed[staged] and len(set(landed[fused])) == len(want)
    assert not (root / "outbox" / fused).exists()
    assert [lite.committed_cursor(lite_path("subscriptions", fused), p) for p in range(3)] == \
        [lite.committed_cursor(lite_path("subscriptions", staged), p) for p in range(3)]


def test_switching_modes_keeps_every_message_once(lite: LiteServer, kafka_bootstrap: str, tmp_path: Path,
                                                  unique_name: str) -> None:
    """staged (pull only: bronze holds what convert and produce have not seen) → fused (they
    finish bronze first) → staged (the fused query drains the subscription, convert starts at a
    version of bronze committed for it): each message in Kafka once, each Lite partition's
    messages in their order, round robin turning on across the switches."""
    topic, subscription = lite_path("topics", unique_name), lite_path("subscriptions", unique_name)
    lite.create_topic(topic, 2)
    lite.create_subscription(subscription, topic)
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    worker, root = write_worker(tmp_path, kafka_bootstrap)
    connector = source_connector(tmp_path, unique_name, lite, unique_name)

    def send(first: int, count: int) -> None:
        for partition in range(2):
            lite.publish(topic, partition, [message(b"", b"p%d-%d" % (partition, i))
                                            for i in range(first, first + count)])

    send(0, 5)
    pulled = cli(["run", "--once", "--stage", "pull", "--worker", str(worker), str(connector)], lite)
    assert pulled.returncode == 0, pulled.stdout[-3000:] + pulled.stderr[-3000:]
    assert consume_all(kafka_bootstrap, unique_name) == []
    send(5, 5)
    fused = run_once(lite, worker, connector, "--set", "pipeline.mode=fused")  # type: ignore[arg-type]
    send(10, 5)
    staged = run_once(lite, worker, connector)

    records = consume_all(kafka_bootstrap, unique_name)
    values = [r.value for r in records]
    assert sorted(values) == sorted(b"p%d-%d" % (p, i) for p in range(2) for i in range(15))
    for partition in range(2):  # each Lite partition's order, within each Kafka partition
        for kafka_partition in range(3):
            mine = [int(r.value.split(b"-")[1]) for r in sorted(records, key=lambda r: r.offset)
                    if r.partition == kafka_partition and r.value.startswith(b"p%d-" % partition)]
            assert mine == sorted(mine)
    assert sorted(Counter(r.partition for r in records).values()) == [10, 10, 10]  # round robin: an even spread
    assert len(read_table(root, "bronze", unique_name)) == 30
    assert f"[{unique_name}.fused] taking over from pipeline.mode=staged: convert and produce finish what " \
           "bronze holds first" in fused
    assert f"[{unique_name}.pull] taking over from pipeline.mode=fused: the fused query finishes what the " \
           "subscription holds first" in staged
