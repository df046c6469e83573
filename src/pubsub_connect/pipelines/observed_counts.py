"""Counts of a micro-batch's rows taken by the Spark job that writes them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: How long :meth:`ObservedCounts.from_action` waits for metrics that have not reached the driver yet.
METRICS_WAIT_MS = 2_000


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
        if java is None or not self._metrics_arrived(java.future()):
            return None
        try:
            metrics = self._observation.get
        except Exception:  # Py4JJavaError: an empty row came (see below)
            return None
        # Seen when the action's rows after the observed frame were all filtered out before a
        # shuffle (a fused source's window of rechecked messages only): the metrics then came as
        # an empty row, which PySpark cannot read; the job below counts instead.
        return {name: int(value) for name, value in metrics.items()} if metrics else None

    def _metrics_arrived(self, future: Any) -> bool:
        """Whether the observation's metrics are in, waiting up to :data:`METRICS_WAIT_MS` for them:
        Spark 4.0 and 4.1 hand them over on the listener bus, after the action has returned (on a
        busy machine, measurably later), while 4.2 has them when the action returns. A frame that
        no action read never gets them, hence a bounded wait."""
        if future.isCompleted():
            return True
        scala = self._df.sparkSession.sparkContext._jvm.scala  # type: ignore[attr-defined]
        try:
            scala.concurrent.Await.ready(future, scala.concurrent.duration.Duration.apply(METRICS_WAIT_MS, "ms"))
        except Exception:  # Py4JJavaError carrying Java's TimeoutException
            return False
        return bool(future.isCompleted())

    def values(self) -> dict[str, int]:
        """The counts, from the action that read :attr:`observed` when it finished, else by a job."""
        found = self.from_action()
        if found is not None:
            return found
        row = self._df.agg(*self._counts).first()
        return {name: int(value) for name, value in row.asDict().items()}
