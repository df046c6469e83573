"""What a connector gives replay: its steps from a bronze selection to records sent.

Why a seam: the loop (:func:`pubsub_connect.pipelines.replay.run.replay`) is the same for every
connector — select, cut into chunks, convert, dead-letter, send, report — while how a bronze
table is cut, converted and sent is each connector's own (:mod:`.sink`, :mod:`.source`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from pubsub_connect.pipelines.replay.ranges import ReplayRange


@dataclass(frozen=True)
class Sent:
    """A chunk's sending: the records sent, those the destination refused for good and that
    were dead-lettered, and whether an earlier run of the same replay had sent the chunk already
    (then nothing was sent now)."""

    records: int
    refused: int = 0
    earlier: bool = False


class ReplaySteps(ABC):
    """A connector's replay steps, aimed at ``target`` (what the progress lines name)."""

    #: The destination, as the progress lines name it.
    target: str
    #: The shape of the connector's dead-letter table.
    dlq_schema: StructType
    #: What sending is called in the progress lines (infinitive, past).
    verbs: tuple[str, str] = ("send", "sent")

    def select(self, bronze: DataFrame, chosen: ReplayRange) -> DataFrame:
        """The bronze rows in ``chosen``."""
        return bronze.filter(chosen.condition())

    @abstractmethod
    def chunks(self, selected: DataFrame, batch_size: int) -> Iterator[DataFrame]:
        """The selection cut into chunks of at most ``batch_size`` records (per partition, where
        the bronze has partitions), in the order they are sent."""

    @abstractmethod
    def convert(self, rows: DataFrame, converted_before: int) -> DataFrame:
        """A chunk through the connector's data model: its rows with ``error_class`` (null when
        converted). ``converted_before``: the records the chunks before it converted, where a
        round-robin spread goes on from (as the convert stage's goes on from its outbox's rows)."""

    @abstractmethod
    def split(self, converted: DataFrame) -> tuple[DataFrame, DataFrame]:
        """The converted rows to send, and the dead-letter rows of those that failed."""

    @abstractmethod
    def sendable(self, good: DataFrame) -> int:
        """How many of ``good`` would be sent (a dry run's count)."""

    @abstractmethod
    def send(self, good: DataFrame, chunk: int, replay_id: str) -> Sent:
        """Send a chunk; ``replay_id`` names the replay (a rerun of the same one has the same)."""
