"""One progress line per completed micro-batch of each running stage."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pubsub_connect.pipelines.runner.query import SupervisedQuery


def _format_progress(name: str, progress: dict[str, Any]) -> str:
    rows = int(progress.get("numInputRows") or 0)
    rate = float(progress.get("processedRowsPerSecond") or 0.0)
    batch = progress.get("batchId")
    lag = ""
    for source in progress.get("sources") or []:
        metrics = source.get("metrics") or {}
        if "lag" in metrics:
            lag = f" lag={metrics['lag']}"
    return f"[{name}] batch={batch} records={rows} rate={rate:,.0f}/s{lag}"


class ProgressPrinter:
    """Prints one line per completed micro-batch of each query (polling ``recentProgress``:
    listeners would need the JVM callback server, which Spark Connect does not offer)."""

    def __init__(self, emit: Callable[[str], None]):
        self.emit = emit
        self.seen: dict[str, int] = {}

    def poll(self, queries: Sequence[SupervisedQuery]) -> None:
        for query in queries:
            name = query.name or str(query.id)
            for progress in query.recentProgress:
                batch = int(progress["batchId"])
                if batch <= self.seen.get(name, -1):
                    continue
                self.seen[name] = batch
                if int(progress.get("numInputRows") or 0) > 0:
                    self.emit(_format_progress(name, progress))
