"""Shared pieces of the benchmark scripts: services, data generation, bare-client baselines, output.

Every benchmark measures the product and a bare-client baseline in the same run, on the same
machine and services, and reports the ratio: absolute numbers depend on the machine, ratios less.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def payload(size: int, seq: int) -> bytes:
    """A ``size``-byte record body that starts with its sequence id (so it can be checked)."""
    head = f"{seq:012d}|".encode()
    return head + b"x" * (size - len(head))


_FIELDS = ("user", "session", "page", "referrer", "device", "country", "campaign", "experiment", "trace")


def event_payload(size: int, seq: int) -> bytes:
    """Like :func:`payload` (starts with the sequence id), but the rest is a log-like JSON event
    with random ids that gzip shrinks about as much as real event data (~2-3x), not a run of one
    byte that costs compression nothing. Deterministic per ``seq``."""
    rng = random.Random(seq)
    out = bytearray(f'{seq:012d}|{{"ts":{1_790_000_000_000 + seq},"kind":"event"'.encode())
    while len(out) < size:
        out += f',"{rng.choice(_FIELDS)}":"{rng.getrandbits(48):012x}"'.encode()
    return bytes(out[:size - 1]) + b"}"


def quiet_context(worker: Any, once: bool = True, progress: Callable[[str], None] | None = None) -> Any:
    """The product's pipeline context (``build_context``) for a benchmark run, as quiet as
    ``pubsub-connect run`` keeps it: a query stopped between micro-batches makes Spark's scheduler
    warn that a finished job group could not be cancelled; ``run`` turns that warning down, and so
    does this, so that it is not printed around a benchmark's table. ``progress``: where the
    stages' progress lines go (nowhere by default)."""
    from pubsub_connect.io.spark import quiet_routine_stops
    from pubsub_connect.pipelines.runtime import build_context

    ctx = build_context(worker, once=once, progress=progress or (lambda _line: None))
    quiet_routine_stops(ctx.spark)
    return ctx


def create_kafka_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """A topic on the local broker, created with the product's own admin call."""
    from pubsub_connect.io.kafka.admin import create_topic

    create_topic({"bootstrap.servers": bootstrap}, topic, partitions)


def produce(bootstrap: str, topic: str, count: int, size: int, partitions: int = 3,
            body: Callable[[int, int], bytes] = payload) -> float:
    """Create ``topic`` and produce ``count`` records of ``body(size, seq)``; returns seconds."""
    from confluent_kafka import Producer

    create_kafka_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000})
    started = time.perf_counter()
    for seq in range(count):
        while True:
            try:
                producer.produce(topic, body(size, seq), key=str(seq % 100).encode())
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("produce did not complete")
    return time.perf_counter() - started


def bare_consume(bootstrap: str, topic: str, count: int, partitions: int = 3) -> float:
    """A plain confluent-kafka consumer reading ``count`` records from the start; returns seconds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    started = time.perf_counter()
    while seen < count:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def bare_publish(project: str, topic: str, count: int, size: int, max_messages: int = 100) -> float:
    """The official publisher alone (same batch settings as the sink's defaults); returns seconds."""
    from google.cloud import pubsub_v1

    client = pubsub_v1.PublisherClient(batch_settings=pubsub_v1.types.BatchSettings(
        max_messages=max_messages, max_bytes=9_500_000, max_latency=0.1))
    path = client.topic_path(project, topic)
    client.create_topic(request={"name": path})
    started = time.perf_counter()
    futures = [client.publish(path, payload(size, seq)) for seq in range(count)]
    for future in futures:
        future.result(timeout=300)
    elapsed = time.perf_counter() - started
    client.stop()
    return elapsed


def create_pubsub_topic(project: str, name: str, subscribe: bool = True) -> str | None:
    """Create topic ``name`` and, when ``subscribe``, its subscription ``<name>-sub`` (returns its
    path): made before a connector starts, so that nothing is published before they exist. A
    throughput run without a reader creates no subscription: the emulator would keep every
    message for it."""
    from google.cloud import pubsub_v1

    publisher = pubsub_v1.PublisherClient()
    topic = publisher.topic_path(project, name)
    publisher.create_topic(request={"name": topic})
    if not subscribe:
        return None
    subscriber = pubsub_v1.SubscriberClient()
    subscription = subscriber.subscription_path(project, f"{name}-sub")
    subscriber.create_subscription(request={"name": subscription, "topic": topic})
    subscriber.close()
    return subscription


class StreamingSubscriber:
    """A streaming-pull subscriber handing each message to :meth:`on_message` (which acks it), with
    the lock its subclasses keep their records under. Subclasses set their own fields before
    calling ``super().__init__``: messages may arrive as soon as it subscribed."""

    def __init__(self, subscription: str, flow_control: Any = None):
        from google.cloud import pubsub_v1

        self.lock = threading.Lock()
        self.client = pubsub_v1.SubscriberClient()
        options = {"flow_control": flow_control} if flow_control is not None else {}
        self.future = self.client.subscribe(subscription, self.on_message, **options)

    def on_message(self, message: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.future.cancel()
        with contextlib.suppress(Exception):  # cancelled: the expected outcome
            self.future.result(timeout=10)
        self.client.close()


def in_child_process(function: Any, *args: Any) -> Any:
    """``function(*args)`` run in a fresh Python process; returns its result.

    Why: a bare client of a large run (a publisher holding a million futures) leaves hundreds of
    MB in this process after it finished (freed memory stays with the process), which would then
    count as the connector's driver memory measured afterwards."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


#: Worker keys of the two engines: Spark's Kafka connector with Delta Lake (what Databricks runs,
#: the default) and the stand-ins for machines without an artifact repository.
ENGINES: dict[str, dict[str, str]] = {
    "native": {},
    "fallback": {"pipeline.kafka.implementation": "python", "pipeline.tables.implementation": "delta-rs"},
}


def add_engine_argument(parser: Any) -> None:
    parser.add_argument("--engine", choices=sorted(ENGINES), default="native",
                        help="native: Spark's Kafka connector + Delta Lake; fallback: Python Kafka source + delta-rs")


def results_name(benchmark: str, engine: str) -> str:
    """Result file name: the native engine keeps the plain name that ``run_all`` reads."""
    return benchmark if engine == "native" else f"{benchmark}-{engine}"


def write_results(name: str, results: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **results}, indent=2))
    return path


def table(rows: list[tuple[str, str]]) -> str:
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in rows)


def timed_stages(ctx: Any, connector: Any, stages: Any) -> tuple[float, dict[str, float]]:
    """Run a connector's stages one after the other to completion (``--once``), as ``run --once``
    does; returns the total seconds and the seconds per stage."""
    from pubsub_connect.pipelines.runner.supervisor import run_stages

    per_stage: dict[str, float] = {}
    started = time.perf_counter()
    for stage in stages:
        t = time.perf_counter()
        run_stages(ctx, connector, [stage])
        per_stage[stage.name] = time.perf_counter() - t
    return time.perf_counter() - started, per_stage


_TICK = os.sysconf("SC_CLK_TCK")


def local_session(cores: int, app_name: str) -> tuple[Any, int]:
    """A ``local[cores]`` Spark session with as many default and shuffle partitions, and its JVM's
    pid (whose process tree's CPU the per-core figures read)."""
    from pubsub_connect.io.spark import build_session

    spark = build_session({"spark.master": f"local[{cores}]", "spark.default.parallelism": str(cores),
                           "spark.sql.shuffle.partitions": str(cores)}, app_name=app_name)
    return spark, int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def tree_cpu_seconds(root_pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of ``root_pid`` and each of its descendants, from ``/proc``."""
    processes = _process_table()
    tree = {root_pid} | _descendants(root_pid, processes)
    return {pid: processes[pid].cpu_seconds for pid in tree if pid in processes}


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two snapshots (processes started in between count from zero)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


class ProcessInfo(NamedTuple):
    """One line of ``/proc/<pid>/stat``, the fields the benchmarks use."""

    ppid: int
    name: str
    cpu_seconds: float  # user + system


def _process_table() -> dict[int, ProcessInfo]:
    """Every process, from ``/proc``: its parent, command name and CPU seconds so far."""
    table_: dict[int, ProcessInfo] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:  # exited meanwhile
            continue
        name, rest = text.split("(", 1)[1].rsplit(")", 1)
        fields = rest.split()
        table_[int(entry)] = ProcessInfo(int(fields[1]), name, (int(fields[11]) + int(fields[12])) / _TICK)
    return table_


def _descendants(root_pid: int, processes: dict[int, ProcessInfo]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, info in processes.items():
        children.setdefault(info.ppid, []).append(pid)
    found: set[int] = set()
    todo = [root_pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _status_kb(pid: int | str, *fields: str) -> dict[str, int]:
    """``VmRSS``/``VmHWM``-style fields of ``/proc/<pid>/status`` in kB (missing when it exited)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in fields:
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def spark_jvm_pid(root_pid: int, processes: dict[int, ProcessInfo] | None = None) -> int | None:
    """The Spark JVM under ``root_pid`` (told apart from the local broker's and the emulator's JVMs
    by its ``SparkSubmit`` command line), or None."""
    processes = _process_table() if processes is None else processes
    for pid in _descendants(root_pid, processes):
        if processes[pid].name == "java" and "org.apache.spark.deploy.SparkSubmit" in _cmdline(pid):
            return pid
    return None


def rss_mb(pid: int) -> float:
    """A process's resident memory now, in MB."""
    return _status_kb(pid, "VmRSS").get("VmRSS", 0) / 1024


class PeakRss:
    """Peak resident memory of a Spark run, split by where it lives, sampled from ``/proc``.

    Why a sampler and not ``resource.getrusage``: the Python process running the benchmark is
    only the driver's front end. Spark's own memory (Delta, the Kafka connector, shuffle and
    Arrow buffers) is in the JVM that PySpark starts as a *child* process, and every Python UDF,
    Arrow batch and ``foreachBatch`` publisher runs in Python workers the JVM forks — neither
    shows up in this process's counters. The local Kafka broker and Pub/Sub emulator are Java
    children too, so the Spark JVM is told apart by its ``SparkSubmit`` command line.

    Used as a context manager around the measured run: on entry it resets this process's
    high-water mark (``/proc/self/clear_refs``, so that earlier set-up such as the bare clients
    does not count), then a background thread samples every ``interval_s`` seconds; on exit
    :attr:`peak_mb` holds, in MB:

    - ``driver_python``: ``VmHWM`` of ``root_pid`` (the kernel's exact peak, not a sample);
    - ``jvm``: the larger of the Spark JVM's sampled ``VmRSS`` and its last ``VmHWM``;
    - ``python_workers``: the largest sampled sum of ``VmRSS`` over the Python processes under
      the JVM (PySpark's daemon and the workers it forks). Forked workers share pages with the
      daemon, so the sum over-counts shared memory: an upper bound.
    """

    def __init__(self, root_pid: int | None = None, interval_s: float = 0.5):
        self.root_pid = root_pid if root_pid is not None else os.getpid()
        self.interval_s = interval_s
        self.peak_kb = {"driver_python": 0, "jvm": 0, "python_workers": 0}
        self.max_workers = 0
        self._jvm_pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def __enter__(self) -> PeakRss:
        if self.root_pid == os.getpid():
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # reset VmHWM to the current RSS
            except OSError:  # old kernel or no permission: the peak then includes the set-up
                pass
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.sample()

    @property
    def peak_mb(self) -> dict[str, float]:
        return {key: round(kb / 1024, 1) for key, kb in self.peak_kb.items()}

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def _find_jvm(self, processes: dict[int, ProcessInfo]) -> int | None:
        if self._jvm_pid is not None and self._jvm_pid in processes:
            return self._jvm_pid
        self._jvm_pid = spark_jvm_pid(self.root_pid, processes)
        return self._jvm_pid

    def sample(self) -> None:
        """One reading of every process of interest; keeps the maxima."""
        peak = self.peak_kb
        driver = _status_kb(self.root_pid, "VmRSS", "VmHWM")
        peak["driver_python"] = max(peak["driver_python"], driver.get("VmHWM", 0), driver.get("VmRSS", 0))
        processes = _process_table()
        jvm = self._find_jvm(processes)
        if jvm is None:
            return
        status = _status_kb(jvm, "VmRSS", "VmHWM")
        peak["jvm"] = max(peak["jvm"], status.get("VmRSS", 0), status.get("VmHWM", 0))
        workers = [pid for pid in _descendants(jvm, processes) if processes[pid].name.startswith("python")]
        total = sum(_status_kb(pid, "VmRSS").get("VmRSS", 0) for pid in workers)
        peak["python_workers"] = max(peak["python_workers"], total)
        self.max_workers = max(self.max_workers, len(workers))
