"""A connector's tables as the notebooks show them: row counts and a few recent rows.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from pubsub_connect.io.tables import KINDS, TableRef, TableStore

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def table_counts(store: TableStore, connector: str) -> dict[str, int | None]:
    """Rows in the connector's bronze, outbox and dlq tables (``None``: not created yet)."""
    counts: dict[str, int | None] = {}
    for kind in KINDS:
        ref = TableRef(kind, connector)
        counts[kind] = store.read(ref).count() if store.exists(ref) else None
    return counts


_ORDER_COLUMNS = ("failed_at", "ingest_time", "offset")


def display_value(value: Any, width: int) -> Any:
    """Bytes as text when they are UTF-8, else ``base64:``; long text cut to ``width``."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            value = "base64:" + base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {k: display_value(v, width) for k, v in value.items()}
    if isinstance(value, list):
        return [display_value(v, width) for v in value]
    if hasattr(value, "asDict"):
        return display_value(value.asDict(), width)
    if isinstance(value, str) and len(value) > width:
        return value[: width - 1] + "…"
    return value


def sample_rows(store: TableStore, connector: str, kind: str, limit: int = 5,
                width: int = 120) -> list[dict[str, Any]]:
    """The newest ``limit`` rows of a table (by failure/ingest time or offset when the table has
    such a column), binary columns shown as text."""
    ref = TableRef(kind, connector)
    if not store.exists(ref):
        return []
    df = store.read(ref)
    order = next((c for c in _ORDER_COLUMNS if c in df.columns), None)
    if order:
        df = df.orderBy(df[order].desc())
    return [{k: display_value(v, width) for k, v in row.asDict(recursive=False).items()}
            for row in df.limit(limit).collect()]
