"""Which failures of a batch function are a stop cutting it short (``pipelines/runner/interrupted``):
a py4j error whose Java exception is a cancelled or interrupted job, raised directly or as the
cause of the stage's own error; and what Spark is told then."""

from __future__ import annotations

import logging
import re

import pytest

from pubsub_connect.pipelines.fused_batch import side_by_side
from pubsub_connect.pipelines.runner.interrupted import BatchInterrupted, cut_short, stops_cleanly


class JavaException:
    def __init__(self, text: str):
        self.text = text

    def toString(self) -> str:  # py4j's name for it
        return self.text


class Py4JError(Exception):
    """As py4j's Py4JJavaError: the Java exception beside a long text."""

    def __init__(self, java_text: str):
        super().__init__("An error occurred while calling o42.collect.\n" + "\tat frame\n" * 2000)
        self.java_exception = JavaException(java_text)


CANCELLED = "org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 7 cancelled part of cancelled job group q"
INTERRUPTED = "java.lang.InterruptedException: sleep interrupted"
FAILED = "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed 1 times"


def wrapped(cause: Exception) -> Exception:
    try:
        raise cause
    except Exception as exc:
        try:
            raise RuntimeError("publish of batch 3 to projects/p/topics/t failed") from exc
        except RuntimeError as outer:
            return outer


@pytest.mark.parametrize(("error", "expected"), [
    (Py4JError(CANCELLED), True), (Py4JError(INTERRUPTED), True), (wrapped(Py4JError(CANCELLED)), True),
    (Py4JError(FAILED), False), (wrapped(Py4JError(FAILED)), False), (ValueError("bad record"), False),
])
def test_a_cut_short_batch_is_a_cancelled_or_interrupted_job_anywhere_in_the_chain(error: Exception,
                                                                                    expected: bool) -> None:
    assert cut_short(error) is expected


#: Spark's pattern for a Python batch function that a stop interrupted (StreamExecution.PROXY_ERROR).
SPARK_READS_AS_INTERRUPTED = re.compile(
    r"py4j\.protocol\.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)"
    r"(java\.lang\.InterruptedException|java\.io\.InterruptedIOException|java\.nio\.channels\.ClosedByInterruptException)")


def test_spark_is_told_in_one_short_line_it_reads_as_an_interruption() -> None:
    def batch(_df: object, _batch_id: int) -> None:
        raise wrapped(Py4JError(CANCELLED))

    with pytest.raises(BatchInterrupted) as caught:
        stops_cleanly(batch)(None, 12)
    message = str(caught.value)
    assert message == ("py4j.protocol.Py4JJavaError: An error occurred while calling a Spark job of micro-batch 12: "
                       "java.lang.InterruptedException")
    assert SPARK_READS_AS_INTERRUPTED.search(message)
    assert caught.value.__suppress_context__ and caught.value.__cause__ is None  # nothing long chained to it


def test_any_other_failure_passes_as_it_was() -> None:
    failure = wrapped(Py4JError(FAILED))

    def batch(_df: object, _batch_id: int) -> None:
        raise failure

    with pytest.raises(RuntimeError) as caught:
        stops_cleanly(batch)(None, 1)
    assert caught.value is failure


@pytest.mark.parametrize(("landing_error", "logged"), [
    (Py4JError(CANCELLED), []),
    (Py4JError(FAILED), ["fused batch 3: the bronze append failed too: An error occurred while calling o42.collect."]),
])
def test_a_fused_batch_stopped_mid_way_names_one_failure(landing_error: Exception, logged: list[str],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """The fused batch's bronze landing runs beside its publish; a stop cancels both. The landing's
    own failure is logged beside the one raised only when it is not that stop."""
    def landing() -> None:
        raise landing_error

    def publish() -> None:
        raise Py4JError(CANCELLED)

    with caplog.at_level(logging.WARNING, logger="pubsub_connect.pipelines.fused_batch"), \
            pytest.raises(Py4JError):
        side_by_side(landing, publish, "fused batch 3")
    assert [record.getMessage() for record in caplog.records] == logged
