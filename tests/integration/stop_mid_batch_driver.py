"""A stage's query stopped while its micro-batch waits on a Spark job, in a process of its own so
that the test reads what the driver JVM prints (for ``test_stop_mid_batch.py``).

    python stop_mid_batch_driver.py ROOT job|append

The driver's loggers are set as ``pubsub-connect run`` sets them. The stage is started as every
stage is (``PipelineContext.start_batches``); its batch function runs a Spark job that sleeps until
it is cancelled: a bare job (``job``), named as the publish stage names its failure (the py4j
error then is the cause of the exception the function ends with), or the write of a Delta append
(``append``), as bronze and the outbox are written. Once that job runs, the query is stopped, and
the last line printed is the query's exception as Spark recorded it (None: a clean stop).
"""

from __future__ import annotations

import sys
import threading

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.spark import quiet_routine_stops, silence_query_failure_logs
from pubsub_connect.model.error_text import error_line
from pubsub_connect.pipelines.context import ConnectorError
from pubsub_connect.pipelines.runtime import build_context

#: Printed to standard error between the query's stop and the session's.
SESSION_STOPS = "-- the query has stopped; the session stops --"
#: A Spark job that waits in a task until cancelled (Thread.sleep is interrupted by the cancellation).
SLEEPING_JOB = "reflect('java.lang.Thread', 'sleep', cast(600000 as bigint))"


def main(root: str, cut_short: str) -> None:
    run = cfg.load_raw({"name": "stopped", "connector.class": "CloudPubSubSinkConnector", "topics": "t",
                        "cps.project": "p", "cps.topic": "t"},
                       {"bootstrap.servers": "127.0.0.1:9", "storage.root": root, "spark.master": "local[1]"})
    ctx = build_context(run.worker, once=False, progress=lambda _line: None)
    quiet_routine_stops(ctx.spark)  # as `run` does
    silence_query_failure_logs(ctx.spark)
    started = threading.Event()

    def batch(_df: object, batch_id: int) -> None:
        started.set()
        sleeping = ctx.spark.range(1, numPartitions=1).selectExpr("id", f"{SLEEPING_JOB} AS slept")
        if cut_short == "append":
            sleeping.write.format("delta").mode("append").save(f"{root}/appended")
            return
        try:
            sleeping.collect()
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
    # What the JVM logs after this line is the session's shutdown, not the query's stop: on Spark
    # 4.0 a task still winding down can log its failure when the session stops under it.
    print(SESSION_STOPS, file=sys.stderr, flush=True)
    ctx.spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
