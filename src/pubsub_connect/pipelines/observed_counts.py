"""Counts of a micro-batch's rows taken by the Spark job that writes them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


class ObservedCounts:
    """For each named condition, the rows of ``df`` where it holds, counted while another action
    reads ``df``.

    Why: a convert stage needs a few counts of every micro-batch (records that could not be
    converted, records with nothing to publish), and counting them in a job of its own reads the
    batch's files and converts it a second time; Spark's progress then also reports every input
    row twice. Spark's ``Observation`` computes the aggregates inside the job of the frame's first
    action (here, the append). Should that action not have run (a replayed batch that was
    skipped), or the frame belong to a Spark Connect session (whose client keeps the metrics in a
    form this does not read), the counts run as one job of their own, so :meth:`values` never
    waits for metrics that are not coming.
    """

    def __init__(self, df: DataFrame, **conditions: Column):
        from pyspark.sql import Observation

        self._df = df
        self._counts = [F.count(F.when(condition, 1)).alias(name) for name, condition in conditions.items()]
        self._observation = Observation()  # a fresh random name per micro-batch
        #: ``df`` with the counts attached: the frame the action must read.
        self.observed = df.observe(self._observation, *self._counts)

    def from_action(self) -> dict[str, int] | None:
        """The counts the action that read :attr:`observed` took; None when no such action
        finished (or the session cannot tell).

        Why apart from :meth:`values`: a frame that reads the table its action wrote to (the
        source converts look up what the outbox already holds) counts differently when computed
        again afterwards, so its caller must not take a job's counts in their place."""
        java = getattr(self._observation, "_jo", None)
        if java is not None and java.future().isCompleted():
            return {name: int(value) for name, value in self._observation.get.items()}
        return None

    def values(self) -> dict[str, int]:
        """The counts, from the action that read :attr:`observed` when it finished, else by a job."""
        found = self.from_action()
        if found is not None:
            return found
        row = self._df.agg(*self._counts).first()
        return {name: int(value) for name, value in row.asDict().items()}
