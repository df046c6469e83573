"""One progress line per completed micro-batch of each running stage, and what else a batch's
progress tells without touching its data (the Kafka topics it read)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pubsub_connect.pipelines.runner.query import SupervisedQuery

#: Called with a stage's name and the progress of each of its completed micro-batches.
ProgressObserver = Callable[[str, dict[str, Any]], None]

KafkaOffsets = dict[str, dict[str, int]]


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


def as_reported(progress: Mapping[str, Any]) -> dict[str, Any]:
    """A micro-batch's progress as Spark reports it in JSON. PySpark's progress object is a dict
    whose source offsets are not JSON on every line: Spark 4.1 keeps a Kafka source's offsets as
    Python's text of a dict (``"{'t': {'0': 5}}"``) and a missing start as ``"None"``; its ``json``
    is the same progress as the JVM gives it. Progress made here (a stage that is not a Spark
    query) is a plain dict and is taken as it is."""
    reported = getattr(progress, "json", None)
    if isinstance(reported, str):
        try:
            parsed = json.loads(reported)
        except json.JSONDecodeError:
            return dict(progress)
        if isinstance(parsed, dict):
            return parsed
    return dict(progress)


def kafka_offsets(value: Any) -> KafkaOffsets | None:
    """A source's offsets in Kafka's shape ``{topic: {partition: offset}}`` (Spark gives them as
    JSON text), or None for any other source's (a Delta table's version, Pub/Sub Lite's cursors
    are not keyed by topic and partition) or for none (a query's first batch has no start)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not isinstance(value, Mapping) or not value:
        return None
    parsed: KafkaOffsets = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, Mapping):
            return None
        try:
            parsed[str(topic)] = {str(p): int(o) for p, o in partitions.items()}
        except (TypeError, ValueError):
            return None
    return parsed


def kafka_topics_read(progress: Mapping[str, Any], initial: Callable[[], Any | None]) -> set[str]:
    """The Kafka topics a micro-batch read records from: those with a partition whose offset moved.
    A query's first batch has no start in its progress; ``initial`` gives the offsets it started
    from (a partition not in them started at its beginning)."""
    if not int(progress.get("numInputRows") or 0):
        return set()
    read: set[str] = set()
    for source in progress.get("sources") or []:
        end = kafka_offsets(source.get("endOffset"))
        if end is None:
            continue
        start = kafka_offsets(source.get("startOffset")) or kafka_offsets(initial()) or {}
        for topic, partitions in end.items():
            began = start.get(topic, {})
            if any(offset > max(began.get(partition, 0), 0) for partition, offset in partitions.items()):
                read.add(topic)
    return read


def progress_position(progress: Mapping[str, Any]) -> tuple[int, str]:
    """Where a progress report stands in its query's sequence: its batch id, then its trigger's
    start (ISO-8601 text in UTC, so ordered as text; absent from progress made here).

    The batch id alone does not tell reports apart: a trigger that finds no new data reports the
    id of the batch still to come, so the batch that later runs with data reports the same id
    as the idle report before it."""
    return int(progress["batchId"]), str(progress.get("timestamp") or "")


class ProgressPrinter:
    """Prints one line per completed micro-batch of each query (polling ``recentProgress``:
    listeners would need the JVM callback server, which Spark Connect does not offer), and hands
    each batch's progress to ``observe``."""

    def __init__(self, emit: Callable[[str], None], observe: ProgressObserver | None = None,
                 stage_of: Callable[[str], str] = lambda name: name):
        self.emit = emit
        self.observe = observe
        self.stage_of = stage_of
        self.seen: dict[str, tuple[int, str]] = {}

    def poll(self, queries: Sequence[SupervisedQuery]) -> None:
        for query in queries:
            name = query.name or str(query.id)
            for progress in query.recentProgress:
                position = progress_position(progress)
                if position <= self.seen.get(name, (-1, "")):
                    continue
                self.seen[name] = position
                if int(progress.get("numInputRows") or 0) > 0:
                    self.emit(_format_progress(name, progress))
                if self.observe is not None:
                    self.observe(self.stage_of(name), as_reported(progress))
