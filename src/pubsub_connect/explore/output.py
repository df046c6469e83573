"""Text tables and plots: the notebooks print these; Databricks also renders the plots.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pubsub_connect.explore.context import UTC

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------------------------
# Text output (the notebooks print; Databricks also renders the plots)
# --------------------------------------------------------------------------------------------


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A fixed-width text table: readable in a notebook cell, a job log and a test assertion."""
    if not rows:
        return "(no rows)"
    columns = list(columns or rows[0].keys())
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def plot_series(title: str, x: Sequence[dt.datetime], series: Mapping[str, Sequence[float]],
                ylabel: str) -> Any:
    """A line plot when matplotlib is installed (it is on Databricks), else ``None``."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for label, values in series.items():
        ax.plot(list(x), list(values), marker="o", label=label)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.autofmt_xdate()
    return fig
