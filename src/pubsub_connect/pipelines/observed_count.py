"""A count of a micro-batch's rows taken by the Spark job that writes them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


class ObservedCount:
    """The rows of ``df`` where ``condition`` holds, counted while another action reads ``df``.

    Why: a convert stage needs a few counts of every micro-batch (records to warn about), and a
    count of its own is one more Spark job that reads the batch's files and converts it again.
    Spark's ``Observation`` computes the aggregate inside the job of the frame's first action
    (here, the append). Should that action not have run (a replayed batch that was skipped) or
    not report the metric (Spark Connect's client, whose observations work otherwise), the count
    runs as a job of its own, so :meth:`value` never waits for a metric that is not coming.
    """

    def __init__(self, df: DataFrame, condition: Column):
        from pyspark.sql import Observation

        self._df = df
        self._condition = condition
        self._observation = Observation()  # a fresh random name per micro-batch
        #: ``df`` with the count attached: the frame the action must read.
        self.observed = df.observe(self._observation, F.count(F.when(condition, 1)).alias("rows"))

    def value(self) -> int:
        """The count, from the action that read :attr:`observed` when it finished, else by a job."""
        java = getattr(self._observation, "_jo", None)
        if java is not None and java.future().isCompleted():
            return int(self._observation.get["rows"])
        return self._df.filter(self._condition).count()
