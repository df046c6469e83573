"""Shared pieces of the benchmarks that run a connector's stages together, as ``pubsub-connect
run`` does: the publish stage's progress as a rate, a steady-state window, and where each stage's
micro-batches spend their time (from Spark's progress reports).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

#: Spark's progress phases of a micro-batch, in the order they run: finding new data
#: (``latestOffset``), writing the offset log (``walCommit``), planning (``queryPlanning``,
#: ``getBatch``), the stage's own work and its Delta commit (``addBatch``), and the commit log.
BATCH_PHASES = ("latestOffset", "walCommit", "getBatch", "queryPlanning", "addBatch", "commitOffsets")


def stage_batch_times(ctx: Any) -> dict[str, dict[str, Any]]:
    """Per running query (stage): how many non-empty micro-batches ran recently, their median
    duration and the median of each phase, from Spark's progress reports — where the end-to-end
    latency goes, and whether it is the stage's work or the streaming bookkeeping around it.
    Input rows are Spark's ``numInputRows``, which counts every read of a micro-batch: a stage
    that reads its batch twice (the convert stage: a count of failed records, then the append)
    reports twice its records."""
    out: dict[str, dict[str, Any]] = {}
    for query in ctx.spark.streams.active:
        progress = [p for p in query.recentProgress if int(p.get("numInputRows") or 0) > 0]
        if progress:
            durations = [float(p["durationMs"].get("triggerExecution", 0)) for p in progress]
            out[query.name or str(query.id)] = {
                "batches": len(durations), "median_ms": statistics.median(durations), "max_ms": max(durations),
                "median_rows": statistics.median(int(p["numInputRows"]) for p in progress),
                "phases_median_ms": {phase: statistics.median(float(p["durationMs"].get(phase, 0)) for p in progress)
                                     for phase in BATCH_PHASES}}
    return out


def phases_text(phases: dict[str, float]) -> str:
    return ", ".join(f"{phase} {ms:,.0f}" for phase, ms in phases.items())


class PublishedCounter:
    """When the publish stage's micro-batches completed and how many messages each published,
    from Spark's query progress events: a publish batch completes only once the service (Pub/Sub
    or Lite) accepted every message of it (a source's produce batch: once its Kafka transaction
    committed), so this is the rate the connector delivers. Arrival
    at a subscriber is not the rate: the Pub/Sub emulator hands messages to subscribers at about
    2,000 msg/s, slower than the sink publishes."""

    def __init__(self, spark: Any, query_name: str):
        from pyspark.sql.streaming import StreamingQueryListener

        counter = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                progress = event.progress
                if progress.name == query_name and progress.numInputRows:
                    counter.add(progress.numInputRows)

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        self.spark = spark
        self.lock = threading.Lock()
        #: ``(monotonic time the batch completed, messages published so far)``, in order
        self.points: list[tuple[float, int]] = []
        self.listener = Listener()
        spark.streams.addListener(self.listener)

    def add(self, rows: int) -> None:
        with self.lock:
            total = (self.points[-1][1] if self.points else 0) + rows
            self.points.append((time.monotonic(), total))

    def published(self) -> int:
        with self.lock:
            return self.points[-1][1] if self.points else 0

    def close(self) -> None:
        self.spark.streams.removeListener(self.listener)


def time_of(points: list[tuple[float, int]], started: float, count: float) -> float:
    """When ``count`` messages had been published, interpolated within the batch that reached it
    (a batch publishes its messages through its duration)."""
    before_t, before_n = started, 0
    for t, n in points:
        if n >= count:
            return before_t + (t - before_t) * (count - before_n) / max(n - before_n, 1)
        before_t, before_n = t, n
    raise ValueError(f"{count} messages were never published")


def steady_rate(points: list[tuple[float, int]], started: float, n: int) -> tuple[float, float]:
    """Messages/s between the 10% and the 90% mark of ``n`` published, and that span (s)."""
    lo, hi = 0.1 * n, 0.9 * n
    span = time_of(points, started, hi) - time_of(points, started, lo)
    return (hi - lo) / span if span > 0 else float("inf"), span


class StagesThread:
    """A connector's stages running together (``run_stages`` in continuous mode) in a thread,
    as ``pubsub-connect run`` runs them; ``stop()`` stops their queries. An error the
    stages raised is kept in ``errors`` for the benchmark's main thread to report."""

    def __init__(self, ctx: Any, connector: Any, stages: Sequence[Any]):
        from pubsub_connect.pipelines.runner.supervisor import run_stages

        self.errors: list[BaseException] = []
        self._stop = threading.Event()

        def run() -> None:
            try:
                run_stages(ctx, connector, stages, self._stop)
            except BaseException as exc:  # reported by the main thread
                self.errors.append(exc)

        self._thread = threading.Thread(target=run, name="stages", daemon=True)
        self._thread.start()

    def running(self) -> bool:
        return not self.errors and self._thread.is_alive()

    def stop(self) -> None:
        """Stop the stages and wait for them; raise the first error they had."""
        self._stop.set()
        self._thread.join(120)
        if self.errors:
            raise self.errors[0]


def run_together(ctx: Any, connector: Any, stages: Sequence[Any], n: int, timeout_s: float,
                 delivered: Callable[[], bool], what: str, last_stage: str = "publish") -> dict[str, Any]:
    """Run ``stages`` together until the last stage (a sink's ``publish``, a source's
    ``produce``) has delivered ``n`` messages and ``delivered()`` confirms they arrived (or
    ``timeout_s`` passed). The rates come from the last stage's progress; ``delivered`` is the
    benchmark's proof that every record arrived."""
    from pubsub_connect.pipelines.context import query_name

    counter = PublishedCounter(ctx.spark, query_name(connector, last_stage))
    started = time.monotonic()
    running = StagesThread(ctx, connector, stages)
    arrived = False
    try:
        deadline = started + timeout_s
        while running.running() and time.monotonic() < deadline:
            if counter.published() >= n and (arrived := delivered()):
                break
            time.sleep(0.2)
        stages_ms = stage_batch_times(ctx)
    finally:
        try:
            running.stop()
        finally:
            counter.close()
    published = counter.published()
    if published < n or not arrived:
        raise SystemExit(f"{what} continuous: {published:,} of {n:,} published"
                         f"{'' if arrived else ', not all delivered'} within {timeout_s:.0f} s")
    with counter.lock:
        points = list(counter.points)
    steady, span = steady_rate(points, started, n)
    return {"started": started, "total_s": time_of(points, started, n) - started, "steady_msgs_per_s": steady,
            "steady_span_s": span, "publish_batches": len(points), "stage_batch_ms": stages_ms}


def stage_rows(stage_batch_ms: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """The report lines of :func:`stage_batch_times`: per stage, its micro-batches and phases."""
    return [row for stage, t in stage_batch_ms.items() for row in (
        (f"  micro-batch {stage}", f"median {t['median_ms']:,.0f} ms, max {t['max_ms']:,.0f} ms "
                                  f"({t['batches']:.0f} non-empty batches, median {t['median_rows']:,.0f} input rows)"),
        ("    median phases (ms)", phases_text(t["phases_median_ms"])))]
