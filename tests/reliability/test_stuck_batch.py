"""A micro-batch that never finishes is stopped after ``pipeline.batch.timeout.ms`` and its stage
restarted from the checkpoint; when it keeps hanging, the connector stops with one line.

The wedge is real: the batch runs a ``mapInArrow`` whose Python worker never answers, so the
JVM task waits on the worker exactly as in the Spark 4.2 Python runner hang this setting guards
against (each side waiting for the other). What is proven is that stopping the query cancels
such a task and the stage comes back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from e2e.harness import context, sink_config
from pubsub_connect.config import loader as cfg
from pubsub_connect.pipelines.context import ConnectorError, PipelineContext, Stage
from pubsub_connect.pipelines.runner.supervisor import run_stages
from waiting import wait_until

pytestmark = pytest.mark.slow


def wedged(ctx: PipelineContext, config: cfg.ConnectorConfig):  # type: ignore[no-untyped-def]
    def never_answers(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # nested: pickled by value (the Python workers cannot import this test module)
        for _ in batches:
            time.sleep(3600)
        yield from ()

    source = ctx.spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    return ctx.start_batches(source, config, "wedged",
                             lambda batch, _id: batch.mapInArrow(never_answers, "value long").collect())


def test_a_wedged_micro_batch_is_stopped_restarted_and_finally_reported(spark, tmp_path: Path) -> None:
    lines: list[str] = []
    # no Kafka is contacted: the stage reads Spark's rate source
    ctx = context(spark, "127.0.0.1:9", tmp_path, lines, once=False,
                  **{"pipeline.batch.timeout.ms": "4000", "pipeline.restart.timeout.ms": "10000"})
    with pytest.raises(ConnectorError) as err:
        run_stages(ctx, sink_config("w", "x", "t"), [Stage("wedged", wedged)], threading.Event())

    stuck = "a micro-batch ran longer than pipeline.batch.timeout.ms=4000; stopped"
    assert lines[:2] == [f"[w.wedged] {stuck}; restarting from the checkpoint in 1 s (restart 1)",
                         f"[w.wedged] {stuck}; restarting from the checkpoint in 2 s (restart 2)"]
    assert str(err.value).startswith(f"w wedged: {stuck} (still failing after ")
    assert str(err.value).endswith("pipeline.restart.timeout.ms=10000)")
    # Stopping the query freed the wedged task: no Spark job of it is left running (cancelling
    # is asynchronous, so wait for that, bounded, rather than look once).
    tracker = spark.sparkContext.statusTracker()
    wait_until(lambda: not tracker.getActiveJobsIds(), 60,
               lambda: f"the end of the wedged jobs {tracker.getActiveJobsIds()} (stopping did not free them)")
    assert not any(q.isActive for q in spark.streams.active)
