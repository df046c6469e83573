"""One stage of a process starting at a time: the next starts once the last has run a trigger.

Why: starting a streaming query is the expensive part of its life on a small driver. Each
query plans its sources, and each Python data source of the fallback engine gets a Python
process of its own, which must connect back to the JVM within 10 s (a limit fixed in Spark).
A worker that starts every stage of every connector at the same moment (fifteen queries for
five connectors) makes all of them compete for the same cores with a cold JVM, and on two
cores the connect-backs time out, the stages fail, restart together and time out again.
Started one after the other, each query is through its first trigger (its sources are
planned, their processes connected) before the next begins; a connector is then fully running
after about the same total time, without the failures. Kafka Connect's own worker starts its
tasks in parallel because a task start is cheap; ours is not.

The gate is process-wide (one per :class:`~pubsub_connect.pipelines.context.PipelineContext`),
since the connectors of one worker share its Spark session. A start is let through anyway
after :attr:`StartGate.max_hold_s`, so a first trigger that processes a large backlog delays
the next start by at most that much.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class StartGate:
    """Serialises stage starts: :meth:`enter` waits until the previous start has settled, i.e.
    its query has reported its first progress (Spark reports the first trigger even when it
    found no data)."""

    def __init__(self, max_hold_s: float = 20.0, clock: Callable[[], float] = time.monotonic):
        self.max_hold_s = max_hold_s
        self._clock = clock
        self._lock = threading.Condition()
        #: Who holds the gate (``None``: nobody) and, once started, the query it waits on.
        self._holder: object = None
        self._query: Any = None
        self._since = 0.0

    def _held(self) -> bool:
        if self._holder is None or self._clock() - self._since >= self.max_hold_s:
            return False
        if self._query is None:  # still starting
            return True
        try:
            return self._query.lastProgress is None
        except Exception:  # the holder's query is gone (e.g. its session stopped): not holding
            return False

    @property
    def busy(self) -> bool:
        """Whether a start would have to wait now."""
        with self._lock:
            return self._held()

    def enter(self, holder: object, poll_s: float = 0.1) -> None:
        """Wait for the turn to start, then hold the gate for ``holder`` until :meth:`started`
        names its query (or :meth:`leave` is called). The holder's query is polled by whoever
        waits, so a connector thread waiting here for its own previous stage still sees that
        one settle."""
        with self._lock:
            while self._held():
                self._lock.wait(poll_s)
            self._holder, self._query, self._since = holder, None, self._clock()

    def started(self, holder: object, query: Any) -> None:
        """``holder``'s query is up; the gate opens once it reports its first progress."""
        with self._lock:
            if self._holder is holder:
                self._query = query

    def leave(self, holder: object) -> None:
        """``holder``'s start failed, stopped or needs no settling: open the gate now (if it is
        still the one holding it)."""
        with self._lock:
            if self._holder is holder:
                self._holder, self._query = None, None
                self._lock.notify_all()
