"""A cut-over from Google's sink connector (in Kafka Connect) to ours, by connector name.

Google's ``CloudPubSubSinkConnector`` publishes the first part of a topic, its offsets are
committed to consumer group ``connect-<name>``, and it is stopped. More records arrive. Ours,
started under the same name with no checkpoint, starts from that group: every record reaches
Pub/Sub, none that Google's connector had committed is published again, and after our run the
group shows lag 0 (ours commits its position back). Then a second run of ours continues from
its own checkpoint and the group follows it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.harness import run_once, sink_config
from integration.kafka_helpers import Rec, create_topic, end_offsets, produce
from integration.pubsub_helpers import PROJECT, create_topic_and_subscription, pull_distinct
from pubsub_connect.io.kafka.groups import ConsumerGroupOffsets
from reference.connect import SINK_CONNECTOR_CLASS, ConnectStandalone
from reference.test_sink_conformance import _wait_committed

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pubsub_emulator_host")]

PARTITIONS = 3


def records(first: int, last: int) -> list[Rec]:
    return [Rec(value=f"seq-{i}".encode(), partition=i % PARTITIONS) for i in range(first, last)]


def seq(message) -> int:
    return int(message.data.decode().removeprefix("seq-"))


def test_ours_takes_over_from_googles_connector_by_name(google_connect: ConnectStandalone, spark,
                                                        kafka_bootstrap: str, tmp_path: Path,
                                                        unique_name: str) -> None:
    name = f"{unique_name}-cut"
    kafka_topic = f"{name}-in"
    create_topic(kafka_bootstrap, kafka_topic, partitions=PARTITIONS)
    pubsub_topic, subscription = create_topic_and_subscription(name)
    produce(kafka_bootstrap, kafka_topic, records(0, 60))
    group = ConsumerGroupOffsets({"bootstrap.servers": kafka_bootstrap}, f"connect-{name}")
    partitions = [(kafka_topic, p) for p in range(PARTITIONS)]

    # Google's connector publishes what is there, commits, and is stopped
    google_connect.create_connector(name, SINK_CONNECTOR_CLASS, {
        "topics": kafka_topic, "tasks.max": "1", "cps.project": PROJECT, "cps.topic": pubsub_topic.rsplit("/", 1)[1]})
    try:
        _wait_committed(kafka_bootstrap, f"connect-{name}", kafka_topic, lambda: google_connect.raise_if_failed(name))
    finally:
        google_connect.remove_connector(name)
    by_google = pull_distinct(subscription, set(range(60)), seq)
    assert {seq(m) for m in by_google} == set(range(60))
    assert group.read(partitions) == {(kafka_topic, p): 20 for p in range(PARTITIONS)}

    # more records arrive; ours starts under the same name with no checkpoint
    produce(kafka_bootstrap, kafka_topic, records(60, 90))
    lines: list[str] = []
    ours = sink_config(name, kafka_topic, pubsub_topic.rsplit("/", 1)[1])
    run_once(spark, kafka_bootstrap, tmp_path / "root", ours, lines)
    assert f"[{name}.ingest] starting from consumer group connect-{name}: " \
           f"{kafka_topic}-0@20, {kafka_topic}-1@20, {kafka_topic}-2@20" in lines
    by_ours = pull_distinct(subscription, set(range(60, 90)), seq)
    assert sorted(seq(m) for m in by_ours) == list(range(60, 90))  # nothing Google delivered, nothing twice
    ends = end_offsets(kafka_bootstrap, kafka_topic)
    assert group.read(partitions) == {(kafka_topic, p): ends[p] for p in range(PARTITIONS)} == \
        {(kafka_topic, p): 30 for p in range(PARTITIONS)}  # lag 0

    # the next run continues from its own checkpoint; the group follows
    produce(kafka_bootstrap, kafka_topic, records(90, 99))
    lines.clear()
    run_once(spark, kafka_bootstrap, tmp_path / "root", ours, lines)
    assert not any("consumer group" in line for line in lines)
    assert sorted(seq(m) for m in pull_distinct(subscription, set(range(90, 99)), seq)) == list(range(90, 99))
    assert group.read(partitions) == {(kafka_topic, p): 33 for p in range(PARTITIONS)}
    group.close()
