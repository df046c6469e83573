"""A micro-batch cut short by a stop: told to Spark in a few words, so that the stop is clean.

Why: stopping a query cancels the Spark jobs of the micro-batch it is running, so a
``foreachBatch`` function waiting on one of them raises py4j's ``Py4JJavaError``, whose text is
the whole Java stack trace. Spark recognizes a stop that interrupted a Python ``foreachBatch`` by
that text alone (``StreamExecution.isInterruptionException``: a pattern that begins with
``py4j.protocol.Py4JJavaError: An error occurred while calling`` and names an interruption
exception further on). Its pattern steps through the text one character per level of recursion,
so a stack trace of a few thousand characters overflows the query thread's stack: the thread
dies of a ``StackOverflowError`` printed to the console, a thousand lines, on every stop that
meets a batch in flight (``pubsub-connect run`` stopped with Ctrl-C, a connector paused, a stuck
batch stopped).

:func:`stops_cleanly` wraps a stage's batch function: a batch whose Spark job was cancelled or
interrupted raises :class:`BatchInterrupted` instead, with a one-line message in that shape and
nothing chained, which Spark reads as the interruption it is. Any other failure passes as it was.
A batch cut short is not committed either way and runs again on restart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: What Spark's pattern looks for, in the order it looks: the py4j error's opening words, then an
#: interruption exception's class name.
_SPARK_READS_AS_INTERRUPTED = "py4j.protocol.Py4JJavaError: An error occurred while calling {what}: {name}"
#: Java exceptions of a job that a stop cancelled or interrupted (class names and Spark's words).
_CUT_SHORT = ("cancelled", "java.lang.InterruptedException", "java.io.InterruptedIOException",
              "java.nio.channels.ClosedByInterruptException")


class BatchInterrupted(Exception):
    """A micro-batch's Spark job was cancelled or interrupted (its query is stopping)."""


def cut_short(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, is a Spark job of this batch cancelled
    or interrupted: a py4j error whose Java exception says so in its first line (its class and
    message). Stages wrap their failures (the publish stage names its batch and topic), so the py4j
    error is often a cause, not the exception the batch function ends with."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        java = getattr(current, "java_exception", None)
        if java is not None and _says_cut_short(java):
            return True
        current = current.__cause__ or current.__context__
    return False


def _says_cut_short(java: Any) -> bool:
    try:
        first = str(java.toString())
    except Exception:  # the JVM is going away: nothing to read, and nothing to tell it
        return False
    return any(word in first for word in _CUT_SHORT)


def stops_cleanly(process: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
    """``process`` for ``foreachBatch``, a batch cut short by a stop told to Spark in one line."""

    def run(batch: Any, batch_id: int) -> None:
        try:
            process(batch, batch_id)
        except Exception as exc:
            if not cut_short(exc):
                raise
            raise BatchInterrupted(_SPARK_READS_AS_INTERRUPTED.format(
                what=f"a Spark job of micro-batch {batch_id}", name="java.lang.InterruptedException")) from None

    return run
