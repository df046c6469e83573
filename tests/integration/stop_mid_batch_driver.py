"""A stage's query stopped while its micro-batch waits on a Spark job, in a process of its own so
that the test reads what the driver JVM prints (for ``test_stop_mid_batch.py``).

The stage is started as every stage is (``PipelineContext.start_batches``); its batch function
runs a Spark job that sleeps until it is cancelled, and names its failure as the publish stage
does (the py4j error then is the cause of the exception the function ends with). Once that job
runs, the query is stopped, and the last line printed is the query's exception as Spark recorded
it (None: a clean stop).
"""

from __future__ import annotations

import sys
import threading

from pubsub_connect.config import loader as cfg
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.runtime import build_context

#: A Spark job that waits in a task until cancelled (Thread.sleep is interrupted by the cancellation).
SLEEPING_JOB = "reflect('java.lang.Thread', 'sleep', cast(600000 as bigint))"


def main(root: str) -> None:
    run = cfg.load_raw({"name": "stopped", "connector.class": "CloudPubSubSinkConnector", "topics": "t",
                        "cps.project": "p", "cps.topic": "t"},
                       {"bootstrap.servers": "127.0.0.1:9", "storage.root": root, "spark.master": "local[1]"})
    ctx = build_context(run.worker, once=False, progress=lambda _line: None)
    started = threading.Event()

    def batch(_df: object, batch_id: int) -> None:
        started.set()
        try:
            ctx.spark.range(1, numPartitions=1).selectExpr(SLEEPING_JOB).collect()
        except Exception as exc:  # as a stage names its failure (the publish stage: its batch and topic)
            raise ConnectorError(f"publish of batch {batch_id} failed: {error_line(exc)}") from exc

    query = ctx.start_batches(ctx.spark.readStream.format("rate").load(), run.connectors[0], "publish", batch)
    if not started.wait(300):
        sys.exit("the batch function never ran")
    tracker = ctx.spark.sparkContext.statusTracker()
    while not any(tracker.getJobInfo(job).status == "RUNNING" for job in tracker.getActiveJobsIds()):
        started.wait(0.05)  # the sleeping job is submitted: poll until it runs
    query.stop()
    print(f"stopped; exception: {query.exception()!r}", flush=True)
    ctx.spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
