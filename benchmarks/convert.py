"""Conversion throughput per converter: the batch ``to_outbox`` vs. the per-record reference.

    .venv/bin/python benchmarks/convert.py [--records 200000] [--reference-records 50000] [--rounds 3] [--cores 2]

What it answers: how fast does the convert stage turn Kafka records (1 KB values) into Pub/Sub
messages, per converter, and what does running it as a Spark batch buy over the plainest Python
implementation of the same mapping?

* **batch**: :func:`pubsub_connect.model.cps_sink.batch.to_outbox` on a local Spark session
  (``local[CORES]``), the bronze rows generated as a DataFrame and cached *before* timing, the
  result written to Spark's ``noop`` sink (every output column is computed, nothing is stored).
  Byte/string converters are pure column expressions. A schemaless JSON value is classified
  first (Spark's compact JSON text and whether it is the reference's), persisted, then mapped by
  column expressions or, for the records Spark may write differently, the reference. JSON with
  schemas goes through ``mapInArrow`` with the reference code per Arrow batch, its result
  persisted. Each timing includes the cache the convert stage holds for a micro-batch
  (``outbox_and_cache``), as the stage runs it.
* **reference**: the per-record :func:`record_to_message` in a Python loop over the same records
  (collected from that DataFrame), one thread.

Per core is measured, not assumed: the batch side's CPU time is read from ``/proc`` for the
Spark JVM and every process under it (the Python workers that run ``mapInArrow``), the
reference's from ``time.process_time``; records per CPU-second is records/s per core. On a
shared machine this figure holds up where wall-clock rates do not (other tenants slow both
sides' wall time, not their CPU time), so the ratio is taken from it; wall-clock rates are
reported too. A *scan floor* — the cached input written to ``noop`` without conversion — shows
what reading the input alone costs the batch side.

**avro**: Confluent's AvroConverter (Schema Registry wire format), a record whose ``body`` string
field is the message data and five other fields (long, string, decimal, timestamp, enum) its
attributes; the framed values are written by Spark's ``to_avro`` under schema id 1. The batch
side includes, per round, the small job that reads the batch's schema ids (the convert stage runs
it for every micro-batch); the reference decodes each record in Python
(:class:`~pubsub_connect.model.avro.reference.RegistryAvroConverter`) and maps it. Its per-core
rate is also put beside the ``bytes`` path's of the same run.

**json schema**: Confluent's JsonSchemaConverter, the same record as JSON text (the decimal as a
number, the timestamp as milliseconds) under schema id 2 (a JSON Schema as Kafka Connect writes
one); the batch side reads it through Spark's Variant
(:mod:`pubsub_connect.model.jsonschema.batch`), the reference with
:class:`~pubsub_connect.model.jsonschema.reference.RegistryJsonSchemaConverter`.

The Lite sink's convert stage is measured the same way for ByteArray and String converters
(``lite bytes``, ``lite string``): its column expressions
(:func:`pubsub_connect.model.lite.columns.converted_columns`) against the per-record Python
mapping it ran before, in ``mapInArrow`` with its result persisted, as the stage ran it (both
sides' CPU from ``/proc``, the ratio per core as above).

Rounds alternate batch and reference so machine load hits both alike; figures are medians.
Spark session start-up and data generation are excluded. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

from _common import cpu_delta, local_session, table, tree_cpu_seconds, write_results

from pubsub_connect.model.avro.reference import RegistryAvroConverter
from pubsub_connect.model.converters import (
    BYTE_ARRAY_CONVERTER,
    JSON_CONVERTER,
    REGISTRY_AVRO_CONVERTERS,
    REGISTRY_CONVERTERS,
    REGISTRY_JSON_SCHEMA_CONVERTERS,
    STRING_CONVERTER,
)
from pubsub_connect.model.cps_sink.batch import CpsSinkConversion
from pubsub_connect.model.cps_sink.reference import CpsSinkMapper
from pubsub_connect.model.cps_sink.settings import CpsSinkSettings, KafkaRecord
from pubsub_connect.model.jsonschema.reference import RegistryJsonSchemaConverter

RECORD_BYTES = 1024
#: The benchmark's Avro writer schema (id 1 of its registry): ~1 KB records.
AVRO_SCHEMA = json.dumps({"type": "record", "name": "Reading", "namespace": "bench", "fields": [
    {"name": "id", "type": "long"}, {"name": "body", "type": "string"}, {"name": "source", "type": "string"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}}]})


#: The same record as a JSON Schema, as Kafka Connect writes one (id 2).
JSON_SCHEMA = json.dumps({"type": "object", "title": "bench.Reading", "properties": {
    "id": {"type": "integer", "connect.index": 0}, "body": {"type": "string", "connect.index": 1},
    "source": {"type": "string", "connect.index": 2},
    "price": {"type": "number", "title": "org.apache.kafka.connect.data.Decimal", "connect.type": "bytes",
              "connect.parameters": {"scale": "2"}, "connect.index": 3},
    "at": {"type": "integer", "title": "org.apache.kafka.connect.data.Timestamp", "connect.type": "int64",
           "connect.index": 4},
    "kind": {"type": "string", "enum": ["A", "B"], "connect.index": 5}}})


def registry_schema(schema_id: int) -> str:
    """The benchmark's registry: the Avro schema (1) and the JSON Schema (2)."""
    if schema_id not in (1, 2):
        raise KeyError(schema_id)
    return AVRO_SCHEMA if schema_id == 1 else JSON_SCHEMA


@dataclass(frozen=True)
class Scenario:
    """One converter setting and how its 1 KB values are built (``prefix + id + filler + suffix``)."""

    name: str
    settings: CpsSinkSettings
    prefix: str
    suffix: str


def _envelope_parts() -> tuple[str, str]:
    schema = {"type": "struct", "fields": [
        {"field": "cps_message_body", "type": "string"}, {"field": "source", "type": "string"},
        {"field": "n", "type": "int64"}]}
    head = json.dumps({"schema": schema}, separators=(",", ":"))[:-1]
    return head + ',"payload":{"cps_message_body":"', '","source":"bench","n":7}}'


def scenarios() -> list[Scenario]:
    env_prefix, env_suffix = _envelope_parts()
    return [
        Scenario("bytes", CpsSinkSettings(key_converter=BYTE_ARRAY_CONVERTER, value_converter=BYTE_ARRAY_CONVERTER),
                 "", ""),
        Scenario("string", CpsSinkSettings(key_converter=STRING_CONVERTER, value_converter=STRING_CONVERTER), "", ""),
        Scenario("json (schema)", CpsSinkSettings(key_converter=STRING_CONVERTER, value_converter=JSON_CONVERTER,
                                                  value_schemas_enable=True), env_prefix, env_suffix),
        Scenario("json (schemaless)", CpsSinkSettings(key_converter=STRING_CONVERTER, value_converter=JSON_CONVERTER,
                                                      value_schemas_enable=False),
                 '{"body":"', '","source":"bench","n":7}'),
        Scenario("avro", CpsSinkSettings(key_converter=STRING_CONVERTER, value_converter=REGISTRY_AVRO_CONVERTERS[0],
                                         message_body_name="body"), "", ""),
        Scenario("json schema", CpsSinkSettings(key_converter=STRING_CONVERTER,
                                                value_converter=REGISTRY_JSON_SCHEMA_CONVERTERS[0],
                                                message_body_name="body"), "", ""),
    ]


def bronze(spark: Any, scenario: Scenario, n: int, partitions: int) -> Any:
    """``n`` bronze rows (the ingest stage's columns) with ~1 KB values, generated by Spark."""
    from pyspark.sql import functions as F

    from pubsub_connect.model.schemas import KAFKA_HEADERS

    filler = "x" * (RECORD_BYTES - len(scenario.prefix) - len(scenario.suffix) - 13)
    value = F.concat(F.lit(scenario.prefix), F.lpad(F.col("id").cast("string"), 12, "0"), F.lit("|" + filler),
                     F.lit(scenario.suffix))
    if scenario.settings.value_converter in REGISTRY_CONVERTERS:
        from pyspark.sql.avro.functions import to_avro

        record = F.struct(F.col("id"), F.concat(F.lpad(F.col("id").cast("string"), 12, "0"),
                                                F.lit("|" + filler[:-60])).alias("body"),
                          F.lit("bench").alias("source"),
                          (F.col("id") % 100000 / 100).cast("decimal(10,2)").alias("price"),
                          F.timestamp_millis(F.lit(1_700_000_000_000) + F.col("id")).alias("at"),
                          F.when(F.col("id") % 2 == 0, "A").otherwise("B").alias("kind"))
        if scenario.settings.value_converter in REGISTRY_AVRO_CONVERTERS:
            value = F.concat(F.lit(b"\x00\x00\x00\x00\x01"), to_avro(record, AVRO_SCHEMA))
        else:
            as_json = record.withField("at", F.unix_millis(record.getField("at")))
            value = F.concat(F.lit(b"\x00\x00\x00\x00\x02"), F.to_json(as_json).cast("binary"))
    return spark.range(0, n, 1, partitions).select(
        F.concat(F.lit("key-"), (F.col("id") % 100).cast("string")).cast("binary").alias("key"),
        value.cast("binary").alias("value"),
        F.lit("bench").alias("topic"),
        (F.col("id") % 3).cast("int").alias("partition"),
        F.col("id").alias("offset"),
        F.timestamp_millis(F.lit(1_700_000_000_000) + F.col("id")).alias("timestamp"),
        F.lit(0).alias("timestampType"),
        F.lit(None).cast(KAFKA_HEADERS).alias("headers"),
    )


def time_write(df: Any, jvm_pid: int, cached: Any = None) -> tuple[float, float]:
    """Wall and CPU seconds of writing ``df`` to the ``noop`` sink (every column computed); with
    ``cached``, that frame (which ``df`` reads) is persisted first and released after, as the
    convert stage does with each micro-batch's classified rows."""
    cpu_before = tree_cpu_seconds(jvm_pid)
    started = time.perf_counter()
    if cached is not None:
        cached.persist()
    df.write.format("noop").mode("overwrite").save()
    if cached is not None:
        cached.unpersist()
    wall = time.perf_counter() - started
    return wall, cpu_delta(cpu_before, tree_cpu_seconds(jvm_pid))


def time_reference(records: list[KafkaRecord], settings: CpsSinkSettings) -> tuple[float, float]:
    mapper = reference_mapper(settings)
    cpu_started, started = time.process_time(), time.perf_counter()
    for record in records:
        mapper.map(record)
    return time.perf_counter() - started, time.process_time() - cpu_started


def time_mapped(converter: CpsSinkConversion, df: Any, jvm_pid: int) -> tuple[float, float]:
    """:func:`time_write` of a conversion that reads its batch before mapping it (the Schema
    Registry converters read the batch's schema ids), that read included."""
    cpu_before = tree_cpu_seconds(jvm_pid)
    started = time.perf_counter()
    outbox, _ = converter.outbox_and_cache(df)
    outbox.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started, cpu_delta(cpu_before, tree_cpu_seconds(jvm_pid))


def reference_mapper(settings: CpsSinkSettings) -> CpsSinkMapper:
    if settings.value_converter in REGISTRY_AVRO_CONVERTERS:
        return CpsSinkMapper(settings, value_converter=RegistryAvroConverter(registry_schema))
    if settings.value_converter in REGISTRY_JSON_SCHEMA_CONVERTERS:
        return CpsSinkMapper(settings, value_converter=RegistryJsonSchemaConverter(registry_schema))
    return CpsSinkMapper(settings)


def conversion(settings: CpsSinkSettings) -> CpsSinkConversion:
    registry = settings.value_converter in REGISTRY_CONVERTERS
    return CpsSinkConversion(settings, schemas=registry_schema if registry else None)


def python_records(df: Any, limit: int) -> list[KafkaRecord]:
    rows = df.limit(limit).select("key", "value", "topic", "partition", "offset",
                                  "timestamp").toArrow().to_pylist()
    return [KafkaRecord(r["key"], r["value"], r["topic"], r["partition"], r["offset"],
                        int(r["timestamp"].timestamp() * 1000)) for r in rows]


def check(df: Any, settings: CpsSinkSettings, n: int) -> None:
    """Not timed: every generated record converts cleanly, in both implementations."""
    from pyspark.sql import functions as F

    out = conversion(settings).to_outbox(df)
    good = out.filter(F.col("error_class").isNull() & F.col("data").isNotNull()).count()
    if good != n:
        raise RuntimeError(f"batch converted {good} of {n} records cleanly")
    for record in python_records(df, 10):
        if reference_mapper(settings).map(record).message is None:
            raise RuntimeError("the reference published nothing for a generated record")


#: The Lite sink's converter settings measured: (key converter, value converter).
LITE_SCENARIOS = {"lite bytes": (BYTE_ARRAY_CONVERTER, BYTE_ARRAY_CONVERTER),
                  "lite string": (STRING_CONVERTER, STRING_CONVERTER)}


def lite_converted(df: Any, key_converter: str, value_converter: str, in_columns: bool) -> Any:
    """The Lite convert stage's rows: its column expressions, or the per-record Python mapping
    in ``mapInArrow`` (what other converters run)."""
    from pubsub_connect.model.frames import map_in_arrow, schema_of
    from pubsub_connect.model.lite.columns import converted_columns
    from pubsub_connect.model.schemas import KAFKA_BRONZE
    from pubsub_connect.pipelines.lite_sink import BRONZE_INPUT, CONVERTED, ConvertPartition

    if in_columns:
        return converted_columns(df, key_converter, value_converter)
    convert = ConvertPartition(key_converter, False, value_converter, False)
    return map_in_arrow(df.select(*BRONZE_INPUT), convert, CONVERTED, schema_of(KAFKA_BRONZE, BRONZE_INPUT))


def lite_round(spark: Any, name: str, args: argparse.Namespace, jvm_pid: int) -> dict[str, float]:
    """One Lite converter setting: column expressions vs. the per-record mapping, per core."""
    from pyspark.sql import functions as F

    key_converter, value_converter = LITE_SCENARIOS[name]
    scenario = Scenario(name, CpsSinkSettings(), "", "")
    df = bronze(spark, scenario, args.records, args.cores).persist()
    df.count()
    columns = lite_converted(df, key_converter, value_converter, True)
    per_record = lite_converted(df, key_converter, value_converter, False)
    for converted in (columns, per_record):  # not timed: every record converts cleanly
        good = converted.filter(F.col("error_class").isNull()).count()
        if good != args.records:
            raise RuntimeError(f"{name}: {good} of {args.records} records converted cleanly")
    time_write(columns, jvm_pid)  # warm-up
    time_write(per_record, jvm_pid, per_record)
    batch, before = [], []
    for _ in range(args.rounds):
        batch.append(time_write(columns, jvm_pid))
        before.append(time_write(per_record, jvm_pid, per_record))
    df.unpersist()
    n = args.records
    r = {"batch_records_per_cpu_s": n / statistics.median(cpu for _, cpu in batch),
         "batch_records_per_s": n / statistics.median(wall for wall, _ in batch),
         "per_record_records_per_cpu_s": n / statistics.median(cpu for _, cpu in before)}
    r["ratio_per_core"] = r["batch_records_per_cpu_s"] / r["per_record_records_per_cpu_s"]
    print(f"{name}: columns {r['batch_records_per_cpu_s']:,.0f} rec/CPU-s, per-record mapping "
          f"{r['per_record_records_per_cpu_s']:,.0f} rec/CPU-s, ratio per core {r['ratio_per_core']:.2f}", flush=True)
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="records per batch round")
    parser.add_argument("--reference-records", type=int, default=50_000, help="records per reference round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--only", default="", help="comma-separated converters (bytes, string, json (schema), …)")
    args = parser.parse_args()

    spark, jvm_pid = local_session(args.cores, "bench-convert")
    results: dict[str, dict[str, float]] = {}
    try:
        only = {name.strip() for name in args.only.split(",") if name.strip()}
        for scenario in scenarios():
            if only and scenario.name not in only:
                continue
            df = bronze(spark, scenario, args.records, args.cores).persist()
            df.count()
            check(df, scenario.settings, args.records)
            records = python_records(df, args.reference_records)
            converter = conversion(scenario.settings)
            outbox, cached = converter.outbox_and_cache(df)
            time_write(outbox, jvm_pid, cached)  # warm-up: Python workers, code paths
            registry = scenario.settings.value_converter in REGISTRY_AVRO_CONVERTERS
            scan, batch, ref = [], [], []
            for _ in range(args.rounds):
                scan.append(time_write(df, jvm_pid))
                if registry:  # the batch's schema ids are read in the round, as the stage does per batch
                    batch.append(time_mapped(converter, df, jvm_pid))
                else:
                    batch.append(time_write(outbox, jvm_pid, cached))
                ref.append(time_reference(records, scenario.settings))
            df.unpersist()
            n, m = args.records, len(records)

            def median(samples: list[tuple[float, float]], i: int) -> float:
                return statistics.median(sample[i] for sample in samples)

            r = {
                "batch_records_per_s": n / median(batch, 0),
                "batch_records_per_cpu_s": n / median(batch, 1),
                "scan_floor_records_per_cpu_s": n / median(scan, 1),
                "reference_records_per_s": m / median(ref, 0),
                "reference_records_per_cpu_s": m / median(ref, 1),
                "batch_cpu_s_per_round": median(batch, 1),
                "batch_wall_s_per_round": median(batch, 0),
            }
            r["ratio_per_core"] = r["batch_records_per_cpu_s"] / r["reference_records_per_cpu_s"]
            r["ratio_wall_per_core"] = r["batch_records_per_s"] / args.cores / r["reference_records_per_s"]
            results[scenario.name] = r
            print(f"{scenario.name}: batch {r['batch_records_per_cpu_s']:,.0f} rec/CPU-s "
                  f"({r['batch_records_per_s']:,.0f} rec/s wall), reference {r['reference_records_per_cpu_s']:,.0f} "
                  f"rec/CPU-s, ratio per core {r['ratio_per_core']:.2f}", flush=True)
        for name in LITE_SCENARIOS:
            if not only or name in only:
                results[name] = lite_round(spark, name, args, jvm_pid)
    finally:
        spark.stop()

    rows = [("records x size", f"{args.records:,} (batch) / {args.reference_records:,} (reference) x ~1 KB, "
                               f"local[{args.cores}], median of {args.rounds}"),
            ("per core = per CPU-second", "batch: Spark JVM + Python workers; reference: this process")]
    for name, r in results.items():
        if name in LITE_SCENARIOS:
            rows.append((name, f"columns {r['batch_records_per_cpu_s']:>9,.0f}/core (wall "
                               f"{r['batch_records_per_s']:>8,.0f}/s)  per-record mapping in Spark "
                               f"{r['per_record_records_per_cpu_s']:>7,.0f}/core  ratio per core "
                               f"{r['ratio_per_core']:5.2f}"))
            continue
        rows.append((name, f"batch {r['batch_records_per_cpu_s']:>9,.0f}/core (scan floor "
                           f"{r['scan_floor_records_per_cpu_s']:>9,.0f}; wall {r['batch_records_per_s']:>8,.0f}/s)  "
                           f"reference {r['reference_records_per_cpu_s']:>7,.0f}/core  "
                           f"ratio per core {r['ratio_per_core']:5.2f}"))
    for registry in ("avro", "json schema"):
        if registry in results and "bytes" in results:
            versus = results[registry]["batch_records_per_cpu_s"] / results["bytes"]["batch_records_per_cpu_s"]
            results[registry]["ratio_per_core_to_bytes"] = versus
            rows.append((f"{registry} / bytes", f"per core {versus:5.2f}"))
    print(table(rows))
    path = write_results("convert", {"records": args.records, "reference_records": args.reference_records,
                                     "record_bytes": RECORD_BYTES, "cores": args.cores, "rounds": args.rounds,
                                     "converters": results})
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
