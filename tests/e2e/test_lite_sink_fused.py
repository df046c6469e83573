"""Pub/Sub Lite sink with ``pipeline.mode=fused``, end to end, as users run it: one
``pubsub-connect run --once`` of two connectors over the same Kafka topic, one staged and one
switched to fused with ``--set NAME:pipeline.mode=fused``. The fused connector's Lite topic must
receive exactly the staged one's messages (keys, data, attributes, event times, partitions and
their order), and its dead letters must be the same rows; the staged mode's data model is held
against Google's connector elsewhere (``tests/reference``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.test_lite_sink import (
    JSON,
    MODEL_RECORDS,
    STRING,
    attributes,
    event_time,
    lite_path,
    produce_records,
    read_table,
    run_once,
    write_connector,
    write_worker,
)
from integration.kafka_helpers import create_topic
from lite_server import LiteServer

pytestmark = pytest.mark.slow


def published(lite: LiteServer, name: str, partitions: int) -> dict[str, object]:
    """What a Lite topic received, in the terms the publisher decides: each keyed message in its
    partition, in the order of its key (the key's routing, SHA-256 modulo partitions), and the
    messages without a key, which the official publisher spreads round robin, as a sorted list.
    The order of messages from different Kafka partitions within a Lite partition is not defined."""
    keyed: dict[tuple[int, bytes], list[tuple[bytes, object, object]]] = {}
    unkeyed = []
    for partition in range(partitions):
        for seq in lite.messages(lite_path("topics", name), partition):
            m = seq.message
            fields = (bytes(m.data), sorted(attributes(m).items()), event_time(m))
            if m.key:
                keyed.setdefault((partition, bytes(m.key)), []).append(fields)
            else:
                unkeyed.append(fields)
    return {"keyed": keyed, "unkeyed": sorted(unkeyed, key=repr)}


def test_fused_mode_publishes_the_staged_modes_messages(lite: LiteServer, kafka_bootstrap: str, tmp_path: Path,
                                                        unique_name: str) -> None:
    staged, fused = f"{unique_name}-s", f"{unique_name}-f"
    create_topic(kafka_bootstrap, unique_name, partitions=3)
    produce_records(kafka_bootstrap, unique_name, MODEL_RECORDS)
    for name in (staged, fused):
        lite.create_topic(lite_path("topics", name), 3)
    worker, root = write_worker(tmp_path, kafka_bootstrap)
    files = [write_connector(tmp_path, name, lite, **{
        "connector.class": "PubSubLiteSinkConnector", "topics": unique_name, "pubsublite.topic": name,
        "tasks.max": "2", "key.converter": STRING, "value.converter": JSON, "errors.tolerance": "all"})
        for name in (staged, fused)]

    stdout = run_once(lite, worker, *files, "--set", f"{fused}:pipeline.mode=fused")  # type: ignore[arg-type]

    assert f"[{fused}.fused] batch=0 records={len(MODEL_RECORDS)} " in stdout, stdout
    assert not [line for line in stdout.splitlines() if line.startswith(f"[{fused}.") and "] batch=" in line
                and not line.startswith(f"[{fused}.fused]")], stdout
    want = published(lite, staged, 3)
    assert sum(map(len, want["keyed"].values())) + len(want["unkeyed"]) == len(MODEL_RECORDS) - 1  # 1 dead letter
    assert published(lite, fused, 3) == want
    dead = {name: [(r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["error_class"],
                    r["error_message"]) for r in read_table(root, "dlq", name).to_pylist()]
            for name in (staged, fused)}
    assert len(dead[staged]) == 1 and dead[fused] == dead[staged]
    assert not (root / "outbox" / fused).exists()
