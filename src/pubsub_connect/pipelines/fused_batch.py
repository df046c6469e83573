"""What every fused mode's batch shares: its bronze append on a thread of its own beside the
work that converts and delivers the same rows, and how soon the next batch starts.

Why one module: the fused sinks (:mod:`.fused_sink`), the fused Cloud Pub/Sub source
(:mod:`.fused_source`) and the fused Lite source (:mod:`.lite_source`) cost a batch the longer of
its two halves, not their sum, in the same way, and read ``pipeline.trigger.interval.ms`` the
same way (a fused mode's default is "at once": the staged default of 1 s would be most of a
record's latency).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.context import PipelineContext
from pubsub_connect.pipelines.runner.interrupted import cut_short

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The fused query's trigger interval when the worker does not set ``pipeline.trigger.interval.ms``:
#: the next micro-batch is planned as soon as the last one is done.
DEFAULT_TRIGGER_MS = 0
#: How long a fused Cloud Pub/Sub source's window goes on after its first messages came, when the
#: worker does not set ``pipeline.trigger.interval.ms``: what arrived while the last window was
#: written is taken at once, and a window stays small enough that its writes, not its pulling,
#: set the latency.
DEFAULT_LINGER_MS = 50


def _interval_ms(ctx: PipelineContext, default: int) -> int:
    """``pipeline.trigger.interval.ms`` when the worker sets it, else ``default``."""
    setting = ctx.worker.settings["pipeline.trigger.interval.ms"]
    return default if setting.origin == "default" else int(setting.value)


def fused_trigger(ctx: PipelineContext) -> dict[str, Any]:
    """A fused query's trigger: ``availableNow`` under ``--once``; else the worker's
    ``pipeline.trigger.interval.ms``, or :data:`DEFAULT_TRIGGER_MS`."""
    if ctx.once:
        return {"availableNow": True}
    return {"processingTime": f"{_interval_ms(ctx, DEFAULT_TRIGGER_MS)} milliseconds"}


def fused_linger_s(ctx: PipelineContext) -> float:
    """A fused pull loop's window after its first message: the worker's
    ``pipeline.trigger.interval.ms``, or :data:`DEFAULT_LINGER_MS`."""
    return _interval_ms(ctx, DEFAULT_LINGER_MS) / 1000.0


class Beside:
    """A call run on a Spark-aware thread beside the caller's (PySpark's ``InheritableThread``
    carries the micro-batch's job group and local properties over, so stopping the query cancels
    its jobs too); :meth:`result` waits for it and raises what it raised."""

    def __init__(self, call: Callable[[], object]):
        from pyspark import InheritableThread

        self._error: BaseException | None = None

        def run() -> None:
            try:
                call()
            except BaseException as exc:  # handed to the waiting thread
                self._error = exc

        self._thread: threading.Thread = InheritableThread(run)
        self._thread.start()

    def error(self) -> BaseException | None:
        """Wait for the call; what it raised, if anything (not raised here, so that it is not
        chained to an exception being handled)."""
        self._thread.join()
        return self._error

    def result(self) -> None:
        if self.error() is not None:
            raise self._error


def side_by_side(landing: Callable[[], object], work: Callable[[], T], shown_as: str) -> T:
    """Run ``landing`` (a bronze append) on a :class:`Beside` thread while ``work`` runs here;
    return ``work``'s result once both are done. When ``work`` fails, its error is the one
    raised (the landing's, if it failed too, is logged: ``shown_as`` names the batch). A landing
    cut short by a stop is not logged: a stop that meets a batch cancels both, and says so once."""
    landed = Beside(landing)
    try:
        result = work()
    except BaseException:
        landing_failure = landed.error()  # the work's own failure is the one to report
        if isinstance(landing_failure, Exception) and not cut_short(landing_failure):
            log.warning("%s: the bronze append failed too: %s", shown_as, error_line(landing_failure))
        raise
    landed.result()
    return result
