"""The row count of an outbox that one convert stage appends to, kept between micro-batches."""

from __future__ import annotations

from pubsub_connect.io.tables import TableRef, TableStore


class OutboxRowCount:
    """Rows in ``table``, asked of the store once, then moved by what the stage appends.

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

    def appended(self, rows: int) -> None:
        """The stage appended ``rows`` rows (after :meth:`current`)."""
        if self._rows is not None:
            self._rows += rows

    def forget(self) -> None:
        """The table may hold other than what this count says: ask the store next time."""
        self._rows = None
