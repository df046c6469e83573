"""The worker's connector configs and target states, kept under ``storage.root``.

Why on disk beside the tables: Kafka Connect keeps configs and target states (STARTED, PAUSED,
STOPPED) in its config topic, so a restarted worker brings every connector back as it was. Here
each connector is one JSON file ``<storage.root>/connect/connectors/<name>.json``, replaced
atomically (written aside, then renamed), so a worker killed mid-write leaves the old or the new
file, never half of one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

STARTED = "STARTED"
PAUSED = "PAUSED"
STOPPED = "STOPPED"
TARGET_STATES = (STARTED, PAUSED, STOPPED)


@dataclass(frozen=True)
class StoredConnector:
    name: str
    config: dict[str, str]
    target_state: str


class ConfigStore:
    """One JSON file per connector under ``<root>/connect/connectors``."""

    def __init__(self, storage_root: str):
        if "://" in storage_root:
            raise ValueError(f"storage.root={storage_root!r}: the worker keeps its connectors on a local path "
                             "(or a /Volumes mount)")
        self.folder = Path(storage_root).resolve() / "connect" / "connectors"

    def _path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def load_all(self) -> list[StoredConnector]:
        if not self.folder.is_dir():
            return []
        return [stored for path in sorted(self.folder.glob("*.json")) if (stored := self._read(path)) is not None]

    def get(self, name: str) -> StoredConnector | None:
        path = self._path(name)
        return self._read(path) if path.is_file() else None

    @staticmethod
    def _read(path: Path) -> StoredConnector | None:
        doc = json.loads(path.read_text())
        state = doc.get("target_state", STARTED)
        return StoredConnector(doc["name"], {str(k): str(v) for k, v in doc["config"].items()},
                               state if state in TARGET_STATES else STARTED)

    def put(self, stored: StoredConnector) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        temp = self.folder / f".{stored.name}.json.tmp"
        temp.write_text(json.dumps({"name": stored.name, "config": stored.config,
                                    "target_state": stored.target_state}, indent=1, sort_keys=True))
        os.replace(temp, self._path(stored.name))

    def delete(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)
