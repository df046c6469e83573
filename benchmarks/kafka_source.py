"""Python Kafka source throughput against a bare confluent-kafka consumer, in the same run.

What it answers: how much does reading Kafka through Spark's Python data source API (this
project's ``pubsub_connect_kafka`` reader: offset planning on the driver, one task per
partition, ``assign`` + ``seek`` in the task, Arrow batches to the JVM) cost compared with the
plainest way to read the same records in Python?

* Baseline: one ``Consumer`` assigned to every partition from offset 0, ``consume()`` in
  chunks until all records arrived, touching each record's key, value and offset (what any
  application does). One Python thread; librdkafka fetches in its own threads.
* Reader: ``read_kafka(..., streaming=False)`` (earliest → latest) written to Spark's ``noop``
  sink, i.e. every column is produced and handed to the JVM, nothing is stored. The Spark
  session is started and warmed up before timing; the time covers planning + all tasks.

Both sides read the same topic on a broker this script starts itself (Apache Kafka via
``pubsub_connect.io.services``), alternately for several rounds so that machine load hits both
alike; the figure is the ratio of the medians (target ≥ 0.7). The Spark side runs
``local[2]`` (two tasks at a time) — that is how the reader is used, and part of what is measured.

Usage: ``python benchmarks/kafka_source.py [--records N] [--value-bytes B] [--partitions P]
[--rounds R] [--min-ratio 0.7]`` (exit status 1 when the ratio is below ``--min-ratio``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from pubsub_connect.io.kafka.admin import create_topic
from pubsub_connect.io.kafka.reader import read_kafka
from pubsub_connect.io.services.kafka import start_kafka
from pubsub_connect.io.spark import Capabilities, build_session


def fill_topic(bootstrap: str, topic: str, partitions: int, records: int, value_bytes: int) -> None:
    create_topic({"bootstrap.servers": bootstrap}, topic, partitions)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "enable.idempotence": True}
    )
    payload = b"x" * value_bytes
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, b"key-%d" % (i % 1000), i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records were not all acknowledged")


def bare_consumer(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Seconds to read ``records`` records with a plain consumer (no Spark)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-bare",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            # the reader's fetch tuning: without it librdkafka pauses fetching for a whole second
            # (fetch.queue.backoff.ms) each time its queue is full, and the baseline measures that
            "fetch.queue.backoff.ms": 5,
        }
    )
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    touched = 0
    while seen < records:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(str(msg.error()))
            value = msg.value()
            key = msg.key()
            touched += len(value or b"") + len(key or b"") + (msg.offset() & 1)
            seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen != records or touched == 0:
        raise RuntimeError(f"bare consumer saw {seen} records, expected {records}")
    return elapsed


def python_reader(spark, bootstrap: str, topic: str) -> float:  # type: ignore[no-untyped-def]
    """Seconds for the Python data source to deliver every record to Spark's noop sink."""
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    started = time.perf_counter()
    df = read_kafka(spark, options, streaming=False, caps=Capabilities(native_kafka=False, native_delta=False))
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-ratio", type=float, default=0.7)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as workdir:
        broker = start_kafka(Path(workdir))
        spark = None
        try:
            bootstrap, topic = broker.endpoint, "bench"
            started = time.perf_counter()
            fill_topic(bootstrap, topic, args.partitions, args.records, args.value_bytes)
            print(
                f"produced {args.records:,} records of {args.value_bytes} B into {args.partitions} partitions "
                f"in {time.perf_counter() - started:.1f} s"
            )
            spark = build_session({"spark.master": "local[2]"}, app_name="bench-kafka-source")
            # Warm-up: Python workers, imports, JIT; and check the reader sees every record.
            counted = read_kafka(
                spark,
                {"kafka.bootstrap.servers": bootstrap, "subscribe": topic},
                streaming=False,
                caps=Capabilities(False, False),
            ).count()
            if counted != args.records:
                raise RuntimeError(f"the reader counted {counted} records, expected {args.records}")
            bare_consumer(bootstrap, topic, args.partitions, min(args.records, 50_000))

            bare_s: list[float] = []
            reader_s: list[float] = []
            for round_no in range(1, args.rounds + 1):
                bare_s.append(bare_consumer(bootstrap, topic, args.partitions, args.records))
                reader_s.append(python_reader(spark, bootstrap, topic))
                print(
                    f"round {round_no}: bare consumer {args.records / bare_s[-1]:>10,.0f} rec/s   "
                    f"python reader {args.records / reader_s[-1]:>10,.0f} rec/s"
                )
        finally:
            if spark is not None:
                spark.stop()
            broker.stop()

    bare_rate = args.records / statistics.median(bare_s)
    reader_rate = args.records / statistics.median(reader_s)
    ratio = reader_rate / bare_rate
    print(f"bare confluent-kafka consumer: {bare_rate:,.0f} records/s (median of {args.rounds})")
    print(f"python reader -> noop sink:    {reader_rate:,.0f} records/s (median of {args.rounds})")
    print(f"ratio reader/bare: {ratio:.2f} (target >= {args.min_ratio})")
    return 0 if ratio >= args.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
