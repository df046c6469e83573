"""The child process that writes or verifies the local driver's class-data archive.

Why a module of its own: the archive is written by a JVM as it exits, so the workload runs in an
interpreter of its own whose driver can be ended on purpose; :mod:`.class_data_archive` starts it
(``python -m``) and puts the archive in place only after both steps succeeded.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from pubsub_connect.io.class_data_archive import BUILD_TIMEOUT_S, QUIET
from pubsub_connect.io.spark import build_session


def run_step(step: str, archive: Path, scratch: Path) -> None:
    """``write``: run the workload with ``-XX:ArchiveClassesAtExit`` and end the JVM, which writes
    the archive as it exits. ``verify``: start a driver that must map the archive, checking it."""
    from pyspark import SparkContext

    if step == "write":
        options = f"-XX:ArchiveClassesAtExit={archive} {QUIET}"
    else:
        options = f"-Xshare:on -XX:+VerifySharedSpaces -XX:SharedArchiveFile={archive} {QUIET}"
    spark = build_session({"spark.master": "local[2]", "spark.driver.extraJavaOptions": options},
                          app_name="pubsub-connect-class-data")
    if step == "write":
        _workload(spark, scratch)
    else:
        maps = Path(f"/proc/{spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()}/maps")
        if maps.exists() and str(archive) not in maps.read_text():
            raise SystemExit("the driver started without mapping the archive")
    spark.stop()
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if process is None:
        raise SystemExit("the driver's JVM is not a child of this process")
    gateway.shutdown()
    process.stdin.close()  # the driver exits at the end of its input, and the archive is written then
    if process.wait(timeout=BUILD_TIMEOUT_S) != 0:
        raise SystemExit(f"the driver's JVM exited with {process.returncode}")


def _workload(spark, scratch: Path) -> None:
    """What a connector's stages do, small: Delta writes with a transaction id, reads, history, a
    streaming query with ``foreachBatch``, Arrow batches through a Python worker, Kafka planning."""
    from pyspark.sql import functions as F

    source, sink = str(scratch / "source"), str(scratch / "sink")
    rows = spark.range(1000).select(F.col("id"), F.expr("cast(repeat('x', 100) as binary)").alias("value"),
                                    F.current_timestamp().alias("time"))
    for version in range(2):
        (rows.write.format("delta").mode("append").option("txnAppId", "class-data")
         .option("txnVersion", str(version)).option("userMetadata", "class-data").save(source))
    spark.read.format("delta").load(source).filter(F.col("id") > 10).groupBy().count().collect()
    spark.sql(f"DESCRIBE HISTORY delta.`{source}` LIMIT 10").collect()

    def land(batch, batch_id: int) -> None:
        arrow = batch.mapInArrow(lambda tables: tables, batch.schema)
        arrow.write.format("delta").mode("append").save(sink)

    (spark.readStream.format("delta").load(source).writeStream.foreachBatch(land)
     .option("checkpointLocation", str(scratch / "checkpoint")).trigger(availableNow=True).start()
     .awaitTermination())
    with contextlib.suppress(Exception):  # without Spark's Kafka connector there is nothing to load
        spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t").load()


if __name__ == "__main__":
    run_step(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
