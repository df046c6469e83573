"""The row count of an outbox that one convert stage appends to, kept between micro-batches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from pubsub_connect.io.tables import TableRef, TableStore
from pubsub_connect.pipelines.observed_counts import ObservedCounts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class OutboxRowCount:
    """Rows in ``table``, asked of the store once, then moved by what the stage appends through
    :meth:`append_batch`.

    Why: the source connectors number records without a key round-robin from the outbox's row
    count at the start of each micro-batch (the same start when a batch is replayed). Asking
    Delta Lake for that count reads the table's log every batch, about a second on a small
    cluster. The convert stage is the outbox's only writer, so after one look-up the count
    changes only by the rows the stage itself appended. After an append that was skipped (a
    replayed batch already in the table) or that failed, the count is asked of the store again.
    """

    def __init__(self, store: TableStore, table: TableRef):
        self.store = store
        self.table = table
        self._rows: int | None = None

    def current(self) -> int:
        if self._rows is None:
            self._rows = self.store.row_count(self.table)
        return self._rows

    def append_batch(self, df: DataFrame, app_id: str, batch_id: int) -> bool:
        """Append ``df`` to the outbox once per (``app_id``, ``batch_id``), as
        :meth:`TableStore.append_batch`, and move the count by the rows that append wrote.

        Those rows are counted by the append's own Spark job (:class:`ObservedCounts`), not by a
        count before it: that count was a job of its own, reading and converting the batch once
        more. Nor by a count after it: a frame that reads the outbox (the Cloud Pub/Sub source's
        look-up of converted message ids) computed again once the outbox changed counts
        differently. When the append's job brought no count, the store is asked again."""
        written = ObservedCounts(df, rows=F.lit(True))
        try:
            appended = self.store.append_batch(self.table, written.observed, app_id, batch_id)
        except BaseException:
            self._rows = None  # the table may or may not hold the batch now
            raise
        counted = written.from_action() if appended else None
        if counted is not None and self._rows is not None:
            self._rows += counted["rows"]
        else:  # skipped as already appended, appended before the first look-up, or not counted
            self._rows = None
        return appended
