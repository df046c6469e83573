"""Pub/Sub Lite source with ``pipeline.mode=fused``, end to end, as users run it: one
``pubsub-connect run --once`` of two connectors reading the same Lite topic through two
subscriptions, one staged and one switched to fused with ``--set NAME:pipeline.mode=fused``. The
fused connector's Kafka topic must hold exactly the staged one's records (keys, values, headers,
timestamps, partitions, and their order in each partition), its bronze the same messages once, and
it writes no outbox; the staged mode's mapping is held against Google's connector elsewhere
(``tests/reference``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.test_lite_sink import lite_path, read_table, run_once, write_worker
from e2e.test_lite_source import model_messages, source_connector
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
