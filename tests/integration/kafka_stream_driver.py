"""A streaming query in its own process, for the kill -9 test of the Python Kafka source.

Reads a topic with :func:`read_kafka` (Python implementation) and writes each micro-batch to
``<out>/batch-<id>-<random>.parquet`` (written to a temporary name, then renamed, so a file is
either complete or absent). A batch that Spark re-runs after a crash therefore leaves a second
file with the same batch id, which the test compares with the first.

``--pause-after-write`` keeps the batch open after its file exists, so the test can SIGKILL the
process while the batch is written but not yet committed to the checkpoint.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pubsub_connect.io.kafka.reader import read_kafka
from pubsub_connect.io.spark import Capabilities, build_session


class BatchFiles:
    """``foreachBatch`` target: each micro-batch becomes ``batch-<id>-<random>.parquet``."""

    def __init__(self, out: Path, pause_after_write: float = 0.0):
        self.out = out
        self.pause_after_write = pause_after_write
        out.mkdir(parents=True, exist_ok=True)

    def __call__(self, df: Any, batch_id: int) -> None:
        table = df.select("partition", "offset", "value").toArrow()
        final = self.out / f"batch-{batch_id:06d}-{uuid.uuid4().hex}.parquet"
        tmp = final.with_suffix(".tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, final)
        print(f"{time.strftime('%H:%M:%S')} batch {batch_id}: {table.num_rows} records", flush=True)
        time.sleep(self.pause_after_write)


def start_query(
    spark: Any, bootstrap: str, topic: str, checkpoint: str, sink: BatchFiles, max_offsets: str, available_now: bool
) -> Any:
    """The query under test; the kill -9 test runs it here and restarts it in its own session."""
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": max_offsets,
    }
    df = read_kafka(spark, options, caps=Capabilities(native_kafka=False, native_delta=False))
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    trigger: dict[str, Any] = {"availableNow": True} if available_now else {"processingTime": "100 milliseconds"}
    return writer.trigger(**trigger).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--max-offsets", default="300")
    parser.add_argument("--trigger", choices=("processing", "available-now"), required=True)
    parser.add_argument("--pause-after-write", type=float, default=0.0)
    args = parser.parse_args(argv)

    spark = build_session({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"}, app_name="kill9-driver")
    print(f"{time.strftime('%H:%M:%S')} session started", flush=True)
    query = start_query(
        spark,
        args.bootstrap,
        args.topic,
        args.checkpoint,
        BatchFiles(args.out, args.pause_after_write),
        args.max_offsets,
        available_now=args.trigger == "available-now",
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
