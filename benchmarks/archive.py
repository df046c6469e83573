"""Archive sink throughput: end-to-end messages/s vs. the bare clients, in one run.

    .venv/bin/python benchmarks/archive.py [--mode once|continuous] [--records 100000] [--size 1024]
                                           [--partitions 3] [--target local|s3]

Starts a local Kafka broker (and, with ``--target s3``, a moto S3 server with a bucket,
path-style addressing), produces N records of SIZE bytes, then measures, on the same services
and data: (1) a bare confluent-kafka consumer reading them, (2) a bare writer: the same N
payloads as newline-terminated lines through plain ``zlib`` (gzip wrapper, level 6 — the
archive's level) into a local file, (3) the connector (Kafka → Block-GZIP ``.gz`` +
``.index.json`` objects, ``--once``, Spark session already up). The ratio compares (3) with the
slower of (1) and (2), which bounds what one Kafka → gzip stream can reach here; the archive
compresses in executor tasks, one per topic-partition, so with several partitions and cores it
can pass (2). ``--batch`` makes files span micro-batches: a file is then compressed in the batch
that completes it, after reading its first records again from Kafka.

``--mode continuous`` runs the stage as ``pubsub-connect run`` does (the product's default
micro-batch size unless ``--batch`` is given): the rate is that of records in committed files,
the store polled every 0.2 s (a file counts once its ``.gz`` is visible, its records read from its
index), and the steady state is the rate between 10% and 90% of N archived. The last files of
each partition are written by ``offset.flush.interval.ms``, set to 10 s here, not the 60 s default,
so that the run does not wait a minute for its tail; a file that fills up is written at once.

After the run the archive is read back (every file's index, and every block decompressed with
the project's reader) and must hold exactly the N records, once each; otherwise the script fails.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from _common import bare_consume, event_payload, produce, quiet_context, table, write_results
from _streaming import StagesThread, stage_batch_times, stage_rows, steady_rate, time_of

from pubsub_connect.config import loader as cfg
from pubsub_connect.io.objectstore.archive_files import list_archive_files
from pubsub_connect.io.objectstore.base import ObjectStore
from pubsub_connect.io.objectstore.locations import open_store
from pubsub_connect.io.services.lifecycle import LocalServices, environment
from pubsub_connect.model.blockgzip.blocks import DEFAULT_LEVEL, read_records
from pubsub_connect.model.blockgzip.index import parse_index
from pubsub_connect.pipelines.archive.stage import STAGES
from pubsub_connect.pipelines.runner.supervisor import run_stages

TOPIC = "bench"
BUCKET = "bench-archive"
PREFIX = "kafka/"
#: 1 MiB blocks (uncompressed) instead of the 64 MiB default: with the default 16 blocks per file
#: a file holds 1 GiB, so at benchmark sizes no file would close before the end-of-run tail and
#: the commit path (index + upload per file) would run once per partition only. 1 MiB blocks give
#: 16 MiB files, i.e. several committed files per partition at 100k x 1 KB, and 1 MiB is a
#: realistic ``archive read`` granularity (one range request per block).
BLOCK_SIZE = 1_048_576
#: Records per file: large enough that files are cut by ``chunks.per.file`` (16 MiB), not by count.
FLUSH_SIZE = 1_000_000


def bare_gzip_write(n: int, size: int, path: Path, batch: int = 10_000) -> float:
    """The same N payloads as LF-terminated lines through one gzip stream (level 6) into a file;
    returns seconds. Payloads are generated before timing (the connector gets them from Kafka)."""
    payloads = [event_payload(size, seq) for seq in range(n)]
    started = time.perf_counter()
    compressor = zlib.compressobj(DEFAULT_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with open(path, "wb") as out:
        for i in range(0, n, batch):
            out.write(compressor.compress(b"".join(p + b"\n" for p in payloads[i:i + batch])))
        out.write(compressor.flush())
    return time.perf_counter() - started


def archived(store: ObjectStore, n: int, size: int) -> tuple[int, int, int]:
    """Read the archive back; returns (files, records, compressed bytes). Raises unless it holds
    exactly the N records produced (by sequence id, each once) and the indexes agree."""
    files = records = stored = 0
    seen = bytearray(n)
    for (topic, partition), objects in list_archive_files(store, PREFIX).items():
        for obj in objects:
            if not obj.has_index:
                raise RuntimeError(f"{store.url(obj.name.gz_key)} has no index")
            indexed = sum(c.num_records for c in parse_index(store.read(obj.name.index_key)))
            values = read_records(store.read(obj.name.gz_key))
            if len(values) != indexed:
                raise RuntimeError(f"{store.url(obj.name.gz_key)}: {len(values)} records, index says {indexed}")
            for value in values:
                if value is None or len(value) != size:
                    raise RuntimeError(f"{topic}-{partition}: unexpected value {value!r:.40}")
                seen[int(value[:12])] += 1
            files += 1
            records += len(values)
            stored += obj.size
    if records != n or seen.count(1) != n:
        raise RuntimeError(f"archived {records:,} records ({seen.count(1):,} distinct of the {n:,} produced), "
                           f"expected exactly {n:,}")
    return files, records, stored


def archived_so_far(store: ObjectStore, counted: dict[str, int]) -> int:
    """Records in the committed files now; each file's count is read once, from its index."""
    for objects in list_archive_files(store, PREFIX).values():
        for obj in objects:
            if obj.has_index and obj.name.gz_key not in counted:
                counted[obj.name.gz_key] = sum(c.num_records for c in parse_index(store.read(obj.name.index_key)))
    return sum(counted.values())


def run_continuous(ctx: Any, connector: Any, store: ObjectStore, n: int, timeout_s: float) -> dict[str, Any]:
    """The stage running as ``run`` runs it until the store holds N records; the points are
    ``(monotonic time seen, records archived)``."""
    counted: dict[str, int] = {}
    points: list[tuple[float, int]] = []
    started = time.monotonic()
    running = StagesThread(ctx, connector, STAGES)
    count = 0
    try:
        while running.running() and time.monotonic() < started + timeout_s:
            count = archived_so_far(store, counted)
            if count > (points[-1][1] if points else 0):
                points.append((time.monotonic(), count))
            if count >= n:
                break
            time.sleep(0.2)
        stage_ms = stage_batch_times(ctx)
    finally:
        running.stop()
    if count < n:
        raise SystemExit(f"archive continuous: {count:,} of {n:,} records archived within {timeout_s:.0f} s")
    steady, span = steady_rate(points, started, n)
    return {"total_s": time_of(points, started, n) - started, "steady_msgs_per_s": steady, "steady_span_s": span,
            "stage_batch_ms": stage_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("once", "continuous"), default="once",
                        help="once: --once, one micro-batch; continuous: as run, the steady-state rate")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--target", choices=("local", "s3"), default="local")
    parser.add_argument("--batch", type=int, default=0,
                        help="pipeline.max.records.per.batch (default: --mode once all records in one "
                             "micro-batch, --mode continuous the product's default)")
    parser.add_argument("--timeout", type=float, default=900, help="continuous mode: seconds to wait for all N")
    args = parser.parse_args()
    continuous = args.mode == "continuous"
    n = args.records
    root = Path(tempfile.mkdtemp(prefix="bench-archive-"))
    buffer = root / "buffer"
    buffer.mkdir()
    names = ("kafka", "s3") if args.target == "s3" else ("kafka",)
    with LocalServices(root / "services", names) as services:
        bootstrap = services.running["kafka"].endpoint
        connector = {"name": "bench-archive", "connector.class": "S3SinkConnector", "topics": TOPIC,
                     "s3.prefix": PREFIX, "local.buffer.dir": str(buffer),
                     "compressed_block_size": str(BLOCK_SIZE), "flush.size": str(FLUSH_SIZE)}
        aws: dict[str, str] = {}
        if args.target == "s3":
            s3 = services.running["s3"]
            # The credentials/region of the moto server; the endpoint goes in the connector config
            # (s3.endpoint), as a user would set it, not through AWS_ENDPOINT_URL_S3.
            aws = {k: v for k, v in s3.env.items() if k != "AWS_ENDPOINT_URL_S3"}
            connector.update({"s3.bucket": BUCKET, "s3.endpoint": s3.endpoint, "s3.path_style": "true",
                              "s3.region": "us-east-1"})
            with environment(aws):
                import boto3

                boto3.client("s3", endpoint_url=s3.endpoint).create_bucket(Bucket=BUCKET)
        else:
            connector["output.path"] = str(root / "out")
        with environment(aws):
            produce_s = produce(bootstrap, TOPIC, n, args.size, args.partitions, body=event_payload)
            consume_s = bare_consume(bootstrap, TOPIC, n, args.partitions)
            gzip_s = bare_gzip_write(n, args.size, root / "bare.gz")
            gzip_bytes = (root / "bare.gz").stat().st_size

            worker = {"bootstrap.servers": bootstrap, "storage.root": str(root / "data")}
            if args.batch or not continuous:
                worker["pipeline.max.records.per.batch"] = str(args.batch or n)
            if continuous:
                worker["offset.flush.interval.ms"] = "10000"
            run = cfg.load_raw(connector, worker)
            store = open_store(run.connectors[0])
            chunks_per_file = int(run.connectors[0].get("chunks.per.file"))
            t0 = time.perf_counter()
            ctx = quiet_context(run.worker, once=not continuous)
            session_s = time.perf_counter() - t0
            try:
                started = time.perf_counter()
                if continuous:
                    together = run_continuous(ctx, run.connectors[0], store, n, args.timeout)
                    e2e_s = together["total_s"]
                else:
                    run_stages(ctx, run.connectors[0], STAGES)
                    e2e_s = time.perf_counter() - started
            finally:
                ctx.spark.stop()
            files, _, stored = archived(store, n, args.size)
    shutil.rmtree(root, ignore_errors=True)

    mb = n * args.size / 1e6
    rate = {"bare consume": n / consume_s, "bare gzip writer": n / gzip_s, "connector end-to-end": n / e2e_s}
    if continuous:
        rate["connector steady state"] = together["steady_msgs_per_s"]
    limit = min(rate["bare consume"], rate["bare gzip writer"])
    ratio = rate["connector steady state" if continuous else "connector end-to-end"] / limit
    rows = [
        ("records x size", f"{n:,} x {args.size} B ({mb:,.0f} MB), {args.partitions} partitions"),
        ("mode", f"{args.mode}, pipeline.max.records.per.batch "
                 f"{run.worker.get('pipeline.max.records.per.batch'):,}"),
        ("target", f"{args.target} ({store.url(PREFIX)})"),
        ("produce (setup)", f"{n / produce_s:,.0f} msg/s"),
        ("bare consume (confluent-kafka)", f"{rate['bare consume']:,.0f} msg/s"),
        ("bare gzip writer (zlib level 6)", f"{mb / gzip_s:,.1f} MB/s, {rate['bare gzip writer']:,.0f} msg/s "
                                            f"-> {gzip_bytes / 1e6:,.2f} MB"),
        ("connector end-to-end", f"{rate['connector end-to-end']:,.0f} msg/s, {mb / e2e_s:,.1f} MB/s "
                                 f"({e2e_s:,.1f} s{', start-up and the 10 s tail included' if continuous else ''})"),
        *([("connector steady state", f"{together['steady_msgs_per_s']:,.0f} msg/s "
                                      f"(10% -> 90% archived in {together['steady_span_s']:,.1f} s)"),
           *stage_rows(together["stage_batch_ms"])] if continuous else []),
        ("spark session start (excluded)", f"{session_s:,.1f} s"),
        ("files written", f"{files} .gz (+ {files} .index.json), {stored / 1e6:,.2f} MB; "
                          f"block {BLOCK_SIZE:,} B, {chunks_per_file} blocks per file"),
        ("records archived (read back)", f"{n:,} (each once)"),
        ("ratio to the slower bare client", f"{ratio:.2f}{' (steady state)' if continuous else ''}"),
    ]
    print(table(rows))
    path = write_results("archive-continuous" if continuous else "archive", {
        "mode": args.mode, "records": n, "size": args.size, "partitions": args.partitions, "target": args.target,
        "block_size": BLOCK_SIZE, "rates_msgs_per_s": rate,
        "mb_per_s": {"bare gzip writer": mb / gzip_s, "connector end-to-end": mb / e2e_s},
        "spark_session_s": session_s, "files": files, "ratio": ratio,
        **({"steady_span_s": together["steady_span_s"], "stage_batch_ms": together["stage_batch_ms"]}
           if continuous else {})})
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
