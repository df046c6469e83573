"""Connect's topic tracking (KIP-558): the Kafka topics each connector actually used.

Why kept apart from the configs: Kafka Connect records a topic in its status topic the first time
a sink task is handed a record of it, or a source task's record of it is acknowledged, and
``GET /connectors/{name}/topics`` reports those (not the configured ones) until
``PUT /connectors/{name}/topics/reset`` clears them or the connector is deleted. Here the worker
learns them from each micro-batch's progress, on the driver and without touching the batch's
data: a Kafka-reading stage's topics whose offsets moved; the ``kafka.topic`` of a source once its
producing stage took records. Each connector's set is one JSON file
``<storage.root>/connect/topics/<name>.json``, written only when a topic is new to it, so a
restarted worker still knows them.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.keys import CPS_SOURCE, LITE_SOURCE
from pubsub_connect.io import checkpoints
from pubsub_connect.io.tables import checkpoint_location
from pubsub_connect.pipelines.runner.progress import kafka_topics_read

#: The stages of a source connector that write to Kafka (staged, fused).
PRODUCING_STAGES = ("produce", "fused")


class ActiveTopics:
    """Per connector, the topics it used since it was created or its topics were last reset.

    Safe to call from the REST server's threads and the connectors' threads at once."""

    def __init__(self, storage_root: str):
        self.storage_root = storage_root
        self.folder = Path(storage_root).resolve() / "connect" / "topics"
        self._lock = threading.Lock()
        self._known: dict[str, set[str]] = {}

    def _path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def _load(self, name: str) -> set[str]:
        if name not in self._known:
            try:
                self._known[name] = set(json.loads(self._path(name).read_text())["topics"])
            except FileNotFoundError:
                self._known[name] = set()
        return self._known[name]

    def topics(self, name: str) -> list[str]:
        with self._lock:
            return sorted(self._load(name))

    def record(self, name: str, topics: Iterable[str]) -> None:
        """Add ``topics`` to the connector's set (one file write when any is new)."""
        with self._lock:
            known = self._load(name)
            new = set(topics) - known
            if not new:
                return
            known.update(new)
            self.folder.mkdir(parents=True, exist_ok=True)
            temp = self.folder / f".{name}.json.tmp"
            temp.write_text(json.dumps({"topics": sorted(known)}))
            os.replace(temp, self._path(name))

    def reset(self, name: str) -> None:
        """Forget every topic of the connector: a topic it uses again is recorded again."""
        with self._lock:
            self._known[name] = set()
            self._path(name).unlink(missing_ok=True)

    def observe(self, config: cfg.ConnectorConfig, stage: str, progress: Mapping[str, Any]) -> None:
        """Record what one micro-batch of ``stage`` shows the connector used."""
        if config.kind in (CPS_SOURCE, LITE_SOURCE):
            if stage in PRODUCING_STAGES and int(progress.get("numInputRows") or 0):
                self.record(config.name, [str(config.get("kafka.topic"))])
            return
        checkpoint = checkpoint_location(self.storage_root, config.name, stage)
        self.record(config.name, kafka_topics_read(progress, lambda: checkpoints.initial_source_offsets(checkpoint)))
