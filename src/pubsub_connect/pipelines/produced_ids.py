"""Which Pub/Sub messages the fused Cloud Pub/Sub source has produced to Kafka.

Why: Pub/Sub delivers at least once — a message whose ack was lost, or whose puller died between
its Kafka transaction and its ack, comes again. The staged source removes such redeliveries in its
convert stage by looking their ids up in the outbox. The fused source writes no outbox, and a
look-up in a Delta table per pulled window would cost the latency the mode exists to save. So it
remembers the ids it produced (the newest :data:`REMEMBERED_IDS`) in memory, and keeps beside its
checkpoints one small file per window (``checkpoints/<name>/fused/<batch>.json``), written *before*
the window's Kafka transaction: its batch number, its fresh message ids and its round-robin
counter.

On start, the Kafka marker topic says which batch committed last (the transaction's marker names
the journal's sequence and the batch number, :mod:`pubsub_connect.io.kafka.transactions`): the
files up to it fill the memory again; a file after it is a window whose transaction never
committed (its messages were never acked, so Pub/Sub delivers them again) and is marked aborted.
A window that committed but whose file was not completed (the process died between the
transaction and the window's dead letters) has its ids *rechecked*: when they come again they are
converted again, those that convert are not produced again and those that do not are
dead-lettered (perhaps a second time: a dead letter may repeat, none is lost).
Batch numbers are never used twice: the marker and the dead-letter appends are once per number,
so a number reused after an aborted window would skip its writes as done.

The journal is a driver's bookkeeping, not data: the Kafka records are the output, bronze the
record of every message received.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pubsub_connect.io import checkpoints
from pubsub_connect.io.batch_marks import stage_app_id
from pubsub_connect.pipelines.redeliveries import REMEMBERED_IDS, RecentIds

_SEQUENCE_FILE = "sequence.json"
#: The ids the staged mode produced last, carried over when the fused mode took over from it.
_SEED_FILE = "seed.json"


@dataclass(frozen=True)
class Window:
    """One pulled window's produce: its batch number, the round-robin counter it starts at and the
    ids of its fresh messages (those not produced before)."""

    batch_id: int
    counter: int
    message_ids: tuple[str, ...]


class ProducedIds:
    """The fused source's journal of produced message ids (see the module's docstring)."""

    def __init__(self, folder: Path, connector: str, remembered: int = REMEMBERED_IDS):
        self.folder = folder
        self.connector = connector
        self._remembered = remembered
        self._ids = RecentIds(remembered)
        self._files: deque[tuple[int, int]] = deque()  # (batch, ids) of the kept files, oldest first
        #: Ids of a committed window whose file was not completed (see the module's docstring).
        self.recheck: set[str] = set()
        self._kept = 0
        self.next_batch = 0
        self.counter = 0
        folder.mkdir(parents=True, exist_ok=True)
        recorded = checkpoints.read_json(folder / _SEQUENCE_FILE)
        if recorded is None:
            recorded = {"sequence": uuid.uuid4().hex}
            checkpoints.write_json(folder / _SEQUENCE_FILE, recorded)
        #: The Kafka markers' sequence: new with a new journal, as a stage's with a new checkpoint.
        self.sequence = str(recorded["sequence"])

    def app_id(self, part: str) -> str:
        """The app id of this journal's dead-letter appends (``part``: what they are)."""
        return stage_app_id(f"{self.connector}/fused{part}", self.sequence)

    def _path(self, batch_id: int) -> Path:
        return self.folder / f"{batch_id:020d}.json"

    def _entries(self) -> list[tuple[int, dict]]:
        entries = []
        for path in sorted(self.folder.glob("[0-9]*.json")):
            entry = checkpoints.read_json(path)
            if entry is not None:
                entries.append((int(path.stem), entry))
        return entries

    def recover(self, last_committed: int | None) -> None:
        """Fill the memory from the files of committed windows (``last_committed``: the newest
        batch the marker topic shows committed in this sequence, None: none); mark the later ones
        aborted."""
        seed = checkpoints.read_json(self.folder / _SEED_FILE)
        if seed is not None:
            self._remember(seed["message_ids"])
            self.counter = int(seed["counter"])
        entries = self._entries()
        newest = entries[-1][0] if entries else -1
        self.next_batch = newest + 1
        for batch_id, entry in entries:
            if entry.get("aborted") or last_committed is None or batch_id > last_committed:
                if batch_id == newest:  # kept, so that its number is not used again
                    checkpoints.write_json(self._path(batch_id), {**entry, "aborted": True})
                else:
                    self._path(batch_id).unlink(missing_ok=True)
                continue
            if "rows" in entry:
                self._remember(entry["message_ids"])
                self._files.append((batch_id, len(entry["message_ids"])))
                self._kept += len(entry["message_ids"])
            else:
                self.recheck.update(entry["message_ids"])
            # a window whose file was not completed advances the counter by every fresh id (an
            # upper bound: only the round-robin spread depends on it)
            self.counter = int(entry["counter"]) + int(entry.get("rows", len(entry["message_ids"])))

    def seed(self, message_ids: Iterable[str], counter: int) -> None:
        """What the staged mode produced last (its outbox's newest ids, and its row count as the
        round-robin counter), carried into the fused mode when it takes over."""
        ids = list(message_ids)[-self._remembered:]
        checkpoints.write_json(self.folder / _SEED_FILE, {"message_ids": ids, "counter": counter})

    def fresh(self, message_ids: Iterable[str]) -> list[bool]:
        """For each id: whether it is not known as produced."""
        return [message_id not in self._ids for message_id in message_ids]

    def begin(self, message_ids: Iterable[str]) -> Window:
        """Record a window before its Kafka transaction starts."""
        window = Window(self.next_batch, self.counter, tuple(dict.fromkeys(message_ids)))
        checkpoints.write_json(self._path(window.batch_id), {"counter": window.counter,
                                                             "message_ids": list(window.message_ids)})
        self.next_batch += 1
        return window

    def committed(self, window: Window, rows: int) -> None:
        """The window's transaction committed with ``rows`` outbox rows (the records produced and
        those Kafka refused: what the staged outbox would have held)."""
        checkpoints.write_json(self._path(window.batch_id), {"counter": window.counter, "rows": rows,
                                                             "message_ids": list(window.message_ids)})
        self.counter = window.counter + rows
        self._remember(window.message_ids)
        self.recheck.difference_update(window.message_ids)
        self._files.append((window.batch_id, len(window.message_ids)))
        self._kept += len(window.message_ids)
        while len(self._files) > 1 and self._kept - self._files[0][1] >= self._remembered:
            batch_id, count = self._files.popleft()
            self._path(batch_id).unlink(missing_ok=True)
            self._kept -= count

    def _remember(self, message_ids: Iterable[str]) -> None:
        for message_id in message_ids:
            self._ids.add(message_id)
