"""A deep Cloud Pub/Sub backlog drains on the native engine with each message pulled about once.

50,000 messages wait on a subscription of Google's Pub/Sub emulator before the Cloud Pub/Sub
source starts (streaming pull, flow control 1,000 messages: 50 pull batches, each a Delta
commit). The emulator ignores a stream's flow control and sends the whole backlog at once; a
client that stopped reading at its limit left the rest in the transport, unleased, until their
60 s deadline ran out and they came again — a backlog that takes longer than that to commit
was then pulled over and over (``SubscriberConfig.client_flow_control``). The test holds:

- bronze holds every published message id, and its rows (the deliveries) are at most 1.1 times the
  messages;
- Kafka (``read_committed``) holds every message's sequence id exactly once.

A pull going round in circles would stop ``run --once`` with its "not making progress" error
before that (``pipelines/redeliveries.py``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import run_once, source_config
from integration.kafka_helpers import consume_all, create_topic
from integration.pubsub_helpers import create_topic_and_subscription, publish
from pubsub_connect.io.tables import BRONZE, SparkDeltaTableStore, TableRef

pytestmark = pytest.mark.usefixtures("pubsub_emulator_host")

BACKLOG = 50_000
#: Deliveries allowed per message: a few may come again when a lease renewal loses a race with
#: the load, never the backlog over again.
MAX_DELIVERIES_PER_MESSAGE = 1.1


#: Each bronze commit of the pull takes this much longer, as a commit to cloud storage under
#: load does (measured here: 2-5 s per 1,000-message batch at a load average of 10-13), so
#: that the pull of the backlog outlasts its leases many times over.
SLOW_COMMIT_S = 0.5


@contextmanager
def slow_bronze_commits(seconds: float) -> Iterator[None]:
    """Every pull batch's bronze append takes ``seconds`` longer (the leases run meanwhile)."""
    original = SparkDeltaTableStore.append_rows

    def append_rows(self: SparkDeltaTableStore, table: TableRef, rows: Any, schema: Any) -> None:
        original(self, table, rows, schema)
        if table.kind == BRONZE:
            time.sleep(seconds)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SparkDeltaTableStore, "append_rows", append_rows)
        yield


def _payload(seq: int) -> bytes:
    return f"{seq:08d}".encode() + b"." * 92


def test_backlog_of_50000_drains_with_each_message_pulled_about_once(spark, kafka_bootstrap: str, tmp_path: Path,
                                                                     unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    _, subscription = create_topic_and_subscription(unique_name)
    published: list[str] = []
    for start in range(0, BACKLOG, 10_000):
        published += publish(unique_name, [_payload(seq) for seq in range(start, start + 10_000)])
    assert len(set(published)) == BACKLOG

    connector = source_config(unique_name, subscription, unique_name, **{
        "cps.streamingPull.enabled": "true", "kafka.partition.count": "3", "kafka.record.headers": "true",
        # leases of 10 s (the stream's ack deadline too): a message the emulator sent but the
        # client left unleased comes again after 10 s, not 60 s, so the test needs no longer
        # pull than that to see it
        "cps.streamingPull.maxMsPerAckExtension": "10000"})
    with slow_bronze_commits(SLOW_COMMIT_S):
        ctx = run_once(spark, kafka_bootstrap, tmp_path, connector)

    bronze = ctx.store.read(TableRef(BRONZE, unique_name)).select("message_id").collect()
    deliveries = Counter(row.message_id for row in bronze)
    assert set(deliveries) == set(published)
    assert sum(deliveries.values()) <= MAX_DELIVERIES_PER_MESSAGE * BACKLOG, (
        f"{sum(deliveries.values()):,} deliveries for {BACKLOG:,} messages; most repeated: "
        f"{deliveries.most_common(3)}")

    in_kafka = Counter(int(record.value[:8]) for record in consume_all(kafka_bootstrap, unique_name))
    assert in_kafka == Counter(range(BACKLOG))
