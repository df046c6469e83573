"""The Cloud Pub/Sub source's convert throughput per converter: ``KafkaOutboxConversion`` (Spark
expressions) vs. the per-record reference, per core.

    .venv/bin/python benchmarks/source_convert.py [--records 200000] [--reference-records 50000] [--rounds 3]

What it answers: how fast does the source's convert stage turn Pub/Sub messages (1 KB data, two
attributes, a key attribute) into Kafka records, per value converter, and what does the Schema
Registry Avro path cost beside ByteArray (headers) and JsonConverter (struct values)?

* **batch**: :class:`~pubsub_connect.model.cps_source.batch.KafkaOutboxConversion` applied to
  bronze rows generated as a DataFrame and cached before timing, written to Spark's ``noop``
  sink (every output column computed). The Avro scenarios include, per round, the small job
  that collects the batch's field-name lists (the stage runs it for each micro-batch that has
  attributes), and schemas resolved once (a table of ids stands in for the registry: the
  registry is asked once per schema for the connector's life, so its round trip is not part of
  a batch).
* **reference**: :func:`~pubsub_connect.model.cps_source.reference.message_to_record` in a
  Python loop over the same messages, one thread.

CPU time per side is read as in ``convert.py`` (``/proc`` for the Spark JVM and its Python
workers; ``time.process_time`` for the reference); figures are medians of the rounds, which
alternate batch and reference. Linux only.
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from typing import Any

from _common import cpu_delta, local_session, table, tree_cpu_seconds, write_results

from pubsub_connect.model.converters import BYTE_ARRAY_CONVERTER, JSON_CONVERTER, REGISTRY_AVRO_CONVERTERS
from pubsub_connect.model.cps_source.batch import KafkaOutboxConversion
from pubsub_connect.model.cps_source.reference import message_to_record
from pubsub_connect.model.cps_source.settings import CpsSourceSettings, PubsubReceived

DATA_BYTES = 1024
AVRO = REGISTRY_AVRO_CONVERTERS[0]
STRING = "org.apache.kafka.connect.storage.StringConverter"


def registry(side: str, subject: str, text: str) -> int:
    """Ids by subject and schema (what a registry returns once per schema)."""
    return zlib.crc32(f"{subject}\n{text}".encode()) >> 1


def scenarios() -> dict[str, CpsSourceSettings]:
    common = {"kafka_key_attribute": "user", "partition_scheme": "hash_key", "partition_count": 3,
              "kafka_topic": "bench"}
    return {
        "bytes (headers)": CpsSourceSettings(key_converter=STRING, value_converter=BYTE_ARRAY_CONVERTER,
                                             kafka_record_headers=True, **common),
        "json (struct)": CpsSourceSettings(key_converter=STRING, value_converter=JSON_CONVERTER, **common),
        "avro (struct)": CpsSourceSettings(key_converter=AVRO, value_converter=AVRO, **common),
        "avro (bytes, headers)": CpsSourceSettings(key_converter=AVRO, value_converter=AVRO,
                                                   kafka_record_headers=True, **common),
    }


def bronze(spark: Any, n: int, partitions: int) -> Any:
    """``n`` pulled-bronze rows: 1 KB data, attributes ``user`` (the key), ``region``, ``tier``."""
    from pyspark.sql import functions as F

    filler = "x" * (DATA_BYTES - 13)
    return spark.range(0, n, 1, partitions).select(
        F.concat(F.lit("m-"), F.col("id").cast("string")).alias("message_id"),
        F.concat(F.lpad(F.col("id").cast("string"), 12, "0"), F.lit("|" + filler)).cast("binary").alias("data"),
        F.create_map(F.lit("user"), F.concat(F.lit("u"), (F.col("id") % 100).cast("string")),
                     F.lit("region"), F.lit("eu"), F.lit("tier"), F.lit("gold")).alias("attributes"),
        F.lit("").alias("ordering_key"),
        F.timestamp_millis(F.lit(1_700_000_000_000) + F.col("id")).alias("publish_time"),
        F.lit(None).cast("int").alias("delivery_attempt"),
        F.lit("projects/p/subscriptions/s").alias("subscription"),
        F.timestamp_millis(F.lit(1_700_000_000_000) + F.col("id")).alias("ingest_time"),
    )


def time_batch(conversion: KafkaOutboxConversion, df: Any, jvm_pid: int) -> tuple[float, float]:
    cpu_before = tree_cpu_seconds(jvm_pid)
    started = time.perf_counter()
    conversion.apply(df).write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started, cpu_delta(cpu_before, tree_cpu_seconds(jvm_pid))


def time_reference(messages: list[PubsubReceived], settings: CpsSourceSettings) -> tuple[float, float]:
    cpu_started, started = time.process_time(), time.perf_counter()
    for message in messages:
        message_to_record(message, settings, 0, registry)
    return time.perf_counter() - started, time.process_time() - cpu_started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--reference-records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()

    spark, jvm_pid = local_session(args.cores, "bench-source-convert")
    results: dict[str, dict[str, float]] = {}
    try:
        df = bronze(spark, args.records, args.cores).persist()
        df.count()
        messages = [PubsubReceived(r["message_id"], bytes(r["data"]), dict(r["attributes"]), r["ordering_key"],
                                   1_700_000_000_000)
                    for r in df.limit(args.reference_records).toArrow().to_pylist()]
        for name, settings in scenarios().items():
            conversion = KafkaOutboxConversion(settings, schema_ids=registry)
            time_batch(conversion, df, jvm_pid)  # warm-up; the schemas are resolved here once
            batch, ref = [], []
            for _ in range(args.rounds):
                batch.append(time_batch(conversion, df, jvm_pid))
                ref.append(time_reference(messages, settings))
            n, m = args.records, len(messages)
            r = {"batch_records_per_cpu_s": n / statistics.median(s[1] for s in batch),
                 "batch_records_per_s": n / statistics.median(s[0] for s in batch),
                 "reference_records_per_cpu_s": m / statistics.median(s[1] for s in ref)}
            r["ratio_per_core"] = r["batch_records_per_cpu_s"] / r["reference_records_per_cpu_s"]
            results[name] = r
            print(f"{name}: batch {r['batch_records_per_cpu_s']:,.0f} rec/CPU-s, reference "
                  f"{r['reference_records_per_cpu_s']:,.0f} rec/CPU-s, ratio per core {r['ratio_per_core']:.2f}",
                  flush=True)
        df.unpersist()
    finally:
        spark.stop()

    rows = [("records x size", f"{args.records:,} (batch) / {args.reference_records:,} (reference) x ~1 KB, "
                               f"local[{args.cores}], median of {args.rounds}")]
    for name, r in results.items():
        rows.append((name, f"batch {r['batch_records_per_cpu_s']:>9,.0f}/core "
                           f"(wall {r['batch_records_per_s']:>8,.0f}/s)  "
                           f"reference {r['reference_records_per_cpu_s']:>7,.0f}/core  "
                           f"ratio per core {r['ratio_per_core']:5.2f}"))
    for avro in ("avro (struct)", "avro (bytes, headers)"):
        base = "json (struct)" if "struct" in avro else "bytes (headers)"
        versus = results[avro]["batch_records_per_cpu_s"] / results[base]["batch_records_per_cpu_s"]
        results[avro][f"ratio_per_core_to_{base.split()[0]}"] = versus
        rows.append((f"{avro} / {base}", f"per core {versus:5.2f}"))
    print(table(rows))
    path = write_results("source_convert", {"records": args.records, "reference_records": args.reference_records,
                                            "data_bytes": DATA_BYTES, "cores": args.cores, "rounds": args.rounds,
                                            "converters": results})
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
