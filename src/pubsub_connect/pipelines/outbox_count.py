"""The row count of an outbox that one convert stage appends to, kept between micro-batches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubsub_connect.io.tables import TableRef, TableStore

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

    def append_batch(self, df: DataFrame, rows: int, app_id: str, batch_id: int) -> bool:
        """Append ``df`` to the outbox once per (``app_id``, ``batch_id``), as
        :meth:`TableStore.append_batch`, and move the count by ``rows``.

        ``rows`` is counted by the caller before the append: a frame that reads the outbox (the
        Cloud Pub/Sub source's look-up of converted message ids) is computed again once the
        outbox changed, and would then count differently."""
        try:
            appended = self.store.append_batch(self.table, df, app_id, batch_id)
        except BaseException:
            self._rows = None  # the table may or may not hold the batch now
            raise
        if appended and self._rows is not None:
            self._rows += rows
        else:  # skipped as already appended, or appended before the first look-up
            self._rows = None
        return appended
