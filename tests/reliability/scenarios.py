"""The five connectors as the kill -9 loops run them: each one's input, its checkpoints and the
checks of its promise after the crashes, by identity.

Every check compares the exact ids (sequence ids, Kafka coordinates, Pub/Sub message ids, Lite
coordinates) and how many times each is there with what was produced, never a count alone. The
duplicates a connector may leave are named by id: a sink's at-least-once publish may repeat only
the records of a publish batch that a kill cut short (read from its checkpoint and the outbox's
Delta log), and the Cloud Pub/Sub source's bronze may hold a message again only because a killed
puller had leased it (its ``convert`` removes those). The archive and the sources' Kafka topics
may hold nothing twice.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from archive_checks import T0, archive_values, archived_records, produce_at, topic_records
from e2e.test_lite_sink import lite_path, read_table, write_connector
from e2e.test_lite_source import message, source_connector
from integration.kafka_helpers import Rec, consume_all, create_topic, produce
from integration.pubsub_helpers import create_topic_and_subscription, publish, pull_distinct
from lite_server import LiteServer
from pubsub_connect.io.objectstore.local import LocalStore
from pubsub_connect.pipelines.cps_pull import LEASE_S
from reliability.kill_loop import Kill, Tally, Target


@dataclass(frozen=True)
class Volume:
    """How much each cycle feeds: ``per_cycle`` new sequence ids per cycle, ``cycles`` cycles."""

    cycles: int
    per_cycle: int

    @property
    def total(self) -> int:
        return self.cycles * self.per_cycle

    def ids(self, cycle: int) -> range:
        return range(cycle * self.per_cycle, (cycle + 1) * self.per_cycle)


@dataclass
class Scenario:
    target: Target
    properties: Path
    feed: Callable[[int], None]
    #: The connector's checks after the drain, given every kill of the loop.
    verify: Callable[[Sequence[Kill]], Tally]
    #: Waits until what the last kill left behind can be picked up by the drain (e.g. Pub/Sub
    #: messages leased by the killed puller are deliverable again).
    settle: Callable[[], None] = lambda: None


def seq_of(data: bytes) -> int:
    return int(data.decode().removeprefix("seq-"))


def stage_checkpoints(root: Path, name: str, stages: Iterable[str]) -> Callable[[int], Mapping[str, Path]]:
    return lambda _pid: {stage: root / "checkpoints" / name / stage for stage in stages}


def each_once(found: Counter[object], expected: Iterable[object], what: str) -> None:
    """Every expected id exactly once, nothing else."""
    wanted = set(expected)
    lost, extra = sorted(map(str, wanted - set(found))), sorted(map(str, set(found) - wanted))
    duplicates = {key: n for key, n in found.items() if n > 1}
    assert not lost and not extra and not duplicates, (
        f"{what}: lost {len(lost)} {lost[:10]}, unexpected {len(extra)} {extra[:10]}, "
        f"duplicated {len(duplicates)} {list(duplicates.items())[:5]}")


def at_least_once(found: Counter[object], expected: Iterable[object], may_repeat: set[object], what: str) -> int:
    """Every expected id at least once, nothing else, and repeats only of ``may_repeat``; returns
    the number of duplicate deliveries."""
    wanted = set(expected)
    lost, extra = sorted(map(str, wanted - set(found))), sorted(map(str, set(found) - wanted))
    assert not lost and not extra, f"{what}: lost {len(lost)} {lost[:10]}, unexpected {len(extra)} {extra[:10]}"
    unexplained = sorted(str(key) for key, n in found.items() if n > 1 and key not in may_repeat)
    assert not unexplained, (f"{what}: {len(unexplained)} id(s) repeated outside every batch a kill cut short, "
                             f"e.g. {unexplained[:10]}")
    return sum(n - 1 for n in found.values())


def coordinates(table: pa.Table, partition: str = "partition", offset: str = "offset",
                value: str = "value") -> Counter[tuple[int, int, bytes]]:
    return Counter(zip(table.column(partition).to_pylist(), table.column(offset).to_pylist(),
                       table.column(value).to_pylist(), strict=True))


def topic_coordinates(records: Iterable[Rec]) -> list[tuple[int, int, bytes]]:
    return [(r.partition, r.offset, r.value) for r in records]


def _offset_line(checkpoint: Path, batch: int) -> dict[str, object] | None:
    path = checkpoint / "offsets" / str(batch)
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8").splitlines()
    return json.loads(lines[2]) if len(lines) > 2 and lines[2].strip() not in ("", "-") else None


def _versions_read(start: Mapping[str, object] | None, end: Mapping[str, object]) -> range:
    """Delta table versions a micro-batch of a Delta stream source may have read, from its start
    and end offsets: Delta Lake's ``reservoirVersion`` (+ ``index`` into it: the batch can start
    and end inside a version, so both ends' versions are included) or the fallback's ``version``
    (the last version read)."""
    if "reservoirVersion" in end:
        first = int(start["reservoirVersion"]) if start else 0  # type: ignore[arg-type]
        return range(first, int(end["reservoirVersion"]) + 1)  # type: ignore[arg-type]
    first = int(start["version"]) + 1 if start else 0  # type: ignore[arg-type]
    return range(first, int(end["version"]) + 1)  # type: ignore[arg-type]


def batch_rows(table: Path, checkpoint: Path, batch: int) -> pa.Table:
    """The rows of ``table`` a streaming stage's micro-batch ``batch`` read (or may have read):
    the files its Delta log added in the versions between the batch's start and end offsets."""
    end = _offset_line(checkpoint, batch)
    if end is None:
        return pa.table({})
    files = []
    for version in _versions_read(_offset_line(checkpoint, batch - 1), end):
        commit = table / "_delta_log" / f"{version:020d}.json"
        if commit.is_file():
            for line in commit.read_text(encoding="utf-8").splitlines():
                action = json.loads(line)
                if "add" in action:
                    files.append(pq.read_table(table / action["add"]["path"]))
    return pa.concat_tables(files, promote_options="default") if files else pa.table({})


def replayed(kills: Sequence[Kill], name: str, stage: str, table: Path, checkpoint: Path,
             column: str) -> set[object]:
    """Values of ``column`` in every batch of ``stage`` that a kill cut short: the only records a
    replay may deliver twice."""
    out: set[object] = set()
    for kill in kills:
        batch = kill.interrupted.get(name, {}).get(stage)
        if batch is not None:
            rows = batch_rows(table, checkpoint, batch)
            if rows.num_rows:
                out.update(rows.column(column).to_pylist())
    return out


def cps_sink(bootstrap: str, root: Path, tmp_path: Path, name: str, volume: Volume) -> Scenario:
    stages = ("ingest", "convert", "publish")
    create_topic(bootstrap, name, partitions=3)
    _, subscription = create_topic_and_subscription(name, ack_deadline_seconds=60)
    properties = tmp_path / f"{name}.properties"
    properties.write_text(f"name={name}\nconnector.class=cps-sink\ntopics={name}\ncps.project=test-project\n"
                          f"cps.topic={name}\ncps.useEmulator=true\nmaxBufferSize=50\n")

    def feed(cycle: int) -> None:
        produce(bootstrap, name, [Rec(f"seq-{i}".encode(), key=f"k{i % 7}".encode()) for i in volume.ids(cycle)])

    def verify(kills: Sequence[Kill]) -> Tally:
        topic = topic_coordinates(consume_all(bootstrap, name))
        assert sorted(seq_of(v) for _, _, v in topic) == list(range(volume.total)), "the test's own input"
        for kind in ("bronze", "outbox"):
            value = "value" if kind == "bronze" else "data"
            each_once(coordinates(read_table(root, kind, name), value=value), topic, kind)
        received = pull_distinct(subscription, set(range(volume.total)), lambda m: seq_of(m.data), timeout=180)
        may_repeat = {seq_of(d) for d in replayed(kills, name, "publish", root / "outbox" / name,
                                                   root / "checkpoints" / name / "publish", "data")}
        duplicates = at_least_once(Counter(seq_of(m.data) for m in received), range(volume.total), may_repeat,
                                   "Pub/Sub")
        return Tally(volume.total, duplicates)

    return Scenario(Target(name, stages, stage_checkpoints(root, name, stages)), properties, feed, verify)


def kafka_batch_records(checkpoint: Path, batch: int, topic: Iterable[tuple[int, int, bytes]]) -> set[bytes]:
    """Values of the Kafka records a streaming query's micro-batch ``batch`` read: those between
    the previous batch's end offsets (or the partition's start) and this batch's."""
    end = _offset_line(checkpoint, batch)
    if end is None:
        return set()
    start = _offset_line(checkpoint, batch - 1) or {}
    (topic_name, ends), = end.items()
    starts = start.get(topic_name, {})  # type: ignore[union-attr]
    return {value for partition, offset, value in topic
            if int(starts.get(str(partition), 0)) <= offset < int(ends.get(str(partition), 0))}  # type: ignore[union-attr]


def cps_sink_fused(bootstrap: str, root: Path, tmp_path: Path, name: str, volume: Volume) -> Scenario:
    """The Cloud Pub/Sub sink with ``pipeline.mode=fused``: one query, on the ``ingest`` checkpoint,
    lands bronze while it publishes; Pub/Sub may repeat only the records of a batch a kill cut short."""
    create_topic(bootstrap, name, partitions=3)
    _, subscription = create_topic_and_subscription(name, ack_deadline_seconds=60)
    properties = tmp_path / f"{name}.properties"
    properties.write_text(f"name={name}\nconnector.class=cps-sink\ntopics={name}\ncps.project=test-project\n"
                          f"cps.topic={name}\ncps.useEmulator=true\nmaxBufferSize=50\npipeline.mode=fused\n")
    checkpoint = root / "checkpoints" / name / "ingest"

    def feed(cycle: int) -> None:
        produce(bootstrap, name, [Rec(f"seq-{i}".encode(), key=f"k{i % 7}".encode()) for i in volume.ids(cycle)])

    def verify(kills: Sequence[Kill]) -> Tally:
        topic = topic_coordinates(consume_all(bootstrap, name))
        assert sorted(seq_of(v) for _, _, v in topic) == list(range(volume.total)), "the test's own input"
        each_once(coordinates(read_table(root, "bronze", name)), topic, "bronze")
        assert not (root / "outbox" / name).exists(), "the fused mode writes no outbox"
        received = pull_distinct(subscription, set(range(volume.total)), lambda m: seq_of(m.data), timeout=180)
        may_repeat = {seq_of(value) for kill in kills if (batch := kill.interrupted.get(name, {}).get("fused"))
                      is not None for value in kafka_batch_records(checkpoint, batch, topic)}
        duplicates = at_least_once(Counter(seq_of(m.data) for m in received), range(volume.total), may_repeat,
                                   "Pub/Sub")
        return Tally(volume.total, duplicates)

    return Scenario(Target(name, ("fused",), lambda _pid: {"fused": checkpoint}), properties, feed, verify)


def cps_source(bootstrap: str, root: Path, tmp_path: Path, name: str, volume: Volume, fused: bool = False) -> Scenario:
    """The Cloud Pub/Sub source. Staged, ``pull`` is not a streaming query (no checkpoint): the
    kill points are the two that are. Fused (``pipeline.mode=fused``), the kill points are the
    loop's windows, begun and not committed in its journal of produced ids."""
    stages = ("fused",) if fused else ("convert", "produce")
    create_topic(bootstrap, name, partitions=3)
    _, subscription = create_topic_and_subscription(name, ack_deadline_seconds=10)
    properties = tmp_path / f"{name}.properties"
    properties.write_text(f"name={name}\nconnector.class=cps-source\ncps.project=test-project\n"
                          f"cps.subscription={subscription.rsplit('/', 1)[-1]}\nkafka.topic={name}\n"
                          "cps.useEmulator=true\nkafka.record.headers=true\nkafka.partition.count=3\n"
                          "cps.maxBatchSize=50\n" + ("pipeline.mode=fused\n" if fused else ""))
    published: dict[str, int] = {}

    def feed(cycle: int) -> None:
        ids = list(volume.ids(cycle))
        published.update(zip(publish(name, [(f"m{i}".encode(), {"seq": str(i)}, None) for i in ids]), ids,
                             strict=True))

    def verify(kills: Sequence[Kill]) -> Tally:
        if fused:
            assert not (root / "outbox" / name).exists(), "the fused mode writes no outbox"
        else:
            each_once(Counter(read_table(root, "outbox", name).column("message_id").to_pylist()), published, "outbox")
        committed = consume_all(bootstrap, name)
        each_once(Counter((int(dict(r.headers)["seq"]), r.value) for r in committed),
                  [(seq, f"m{seq}".encode()) for seq in published.values()], "kafka (read_committed)")
        aborted = len(consume_all(bootstrap, name, isolation="read_uncommitted")) - len(committed)
        # Bronze may hold a message again: the pull acks after its commit, so what a killed puller
        # had leased comes back; every id there must be one that was published.
        redelivered = at_least_once(Counter(read_table(root, "bronze", name).column("message_id").to_pylist()),
                                    published, set(published), "bronze")
        print(f"{name}: {aborted} record(s) of aborted produce transactions hidden from read_committed")
        return Tally(volume.total, redelivered)

    def settle() -> None:
        # Messages not in bronze yet may be leased by the last killed puller: they come back when
        # the lease (LEASE_S) runs out. Wait until each has come back, handed straight back.
        bronze_log = root / "bronze" / name / "_delta_log"
        in_bronze = set(read_table(root, "bronze", name).column("message_id").to_pylist()) \
            if bronze_log.exists() else set()
        pull_distinct(subscription, set(published) - in_bronze, lambda m: m.message_id, timeout=LEASE_S + 120,
                      hand_back=True)

    return Scenario(Target(name, stages, stage_checkpoints(root, name, stages)), properties, feed, verify, settle)


def cps_source_fused(bootstrap: str, root: Path, tmp_path: Path, name: str, volume: Volume) -> Scenario:
    return cps_source(bootstrap, root, tmp_path, name, volume, fused=True)


def archive(bootstrap: str, tmp_path: Path, name: str, volume: Volume) -> Scenario:
    partitions, per_partition = 3, volume.per_cycle // 3
    create_topic(bootstrap, name, partitions=partitions)
    out, buffer = tmp_path / f"{name}-out", tmp_path / f"{name}-buffer"
    buffer.mkdir()
    properties = tmp_path / f"{name}.properties"
    properties.write_text(f"name={name}\nconnector.class=S3SinkConnector\ntopics={name}\noutput.path={out}\n"
                          f"local.buffer.dir={buffer}\nflush.size=70\ncompressed_block_size=600\n")

    def checkpoints(pid: int) -> Mapping[str, Path]:
        # The archive's checkpoint lives per run, in the driver's staging directory.
        runs = sorted((buffer / name).glob(f"run-{socket.gethostname()}-{pid}-*/checkpoint"))
        return {"archive": runs[0]} if runs else {}

    def feed(cycle: int) -> None:
        start = cycle * per_partition
        produce_at(bootstrap, name, [(p, v, T0 + (start + i) * 1000) for p in range(partitions)
                                     for i, v in enumerate(archive_values(p, start, per_partition))])

    def verify(kills: Sequence[Kill]) -> Tally:
        archived = archived_records(LocalStore(out), "")
        assert archived == topic_records(bootstrap, name)
        assert {tp: len(r) for tp, r in archived.items()} == {(name, p): volume.total // 3 for p in range(partitions)}
        assert not list(out.rglob("*.part")) and not list(buffer.rglob("*.part"))
        return Tally(sum(map(len, archived.values())))

    return Scenario(Target(name, ("archive",), checkpoints), properties, feed, verify)


def lite_sink(bootstrap: str, lite: LiteServer, root: Path, tmp_path: Path, name: str, volume: Volume) -> Scenario:
    stages = ("ingest", "convert", "publish")
    lite.create_topic(lite_path("topics", name), 3)
    create_topic(bootstrap, name, partitions=3)
    properties = write_connector(tmp_path, name, lite, **{
        "connector.class": "PubSubLiteSinkConnector", "topics": name, "pubsublite.topic": name})

    def feed(cycle: int) -> None:
        produce(bootstrap, name, [Rec(f"seq-{i}".encode(), key=f"k{i % 7}".encode()) for i in volume.ids(cycle)])

    def verify(kills: Sequence[Kill]) -> Tally:
        topic = topic_coordinates(consume_all(bootstrap, name))
        for kind in ("bronze", "outbox"):
            value = "value" if kind == "bronze" else "data"
            each_once(coordinates(read_table(root, kind, name), value=value), topic, kind)
        per_key: dict[bytes, list[int]] = {}
        for partition in range(3):
            for seq in lite.messages(lite_path("topics", name), partition):
                per_key.setdefault(seq.message.key, []).append(seq_of(seq.message.data))
        for key, values in per_key.items():
            first_seen = list(dict.fromkeys(values))
            assert first_seen == sorted(first_seen), f"order of {key!r} broken"
            assert {f"k{v % 7}".encode() for v in values} == {key}, f"records under the wrong key {key!r}"
        may_repeat = {seq_of(d) for d in replayed(kills, name, "publish", root / "outbox" / name,
                                                   root / "checkpoints" / name / "publish", "data")}
        found = Counter(v for values in per_key.values() for v in values)
        return Tally(volume.total, at_least_once(found, range(volume.total), may_repeat, "Lite"))

    return Scenario(Target(name, stages, stage_checkpoints(root, name, stages)), properties, feed, verify)


def lite_source(bootstrap: str, lite: LiteServer, root: Path, tmp_path: Path, name: str, volume: Volume) -> Scenario:
    stages = ("pull", "convert", "produce")
    topic, subscription = lite_path("topics", name), lite_path("subscriptions", name)
    lite.create_topic(topic, 3)
    lite.create_subscription(subscription, topic)
    create_topic(bootstrap, name, partitions=2)
    properties = source_connector(tmp_path, name, lite, name)
    published: dict[tuple[int, int], int] = {}

    def feed(cycle: int) -> None:
        for partition in range(3):
            ids = [i for i in volume.ids(cycle) if i % 3 == partition]
            offsets = lite.publish(topic, partition, [message(b"k%d" % (i % 5), b"seq-%d" % i) for i in ids])
            published.update(zip(((partition, o) for o in offsets), ids, strict=True))

    def verify(kills: Sequence[Kill]) -> Tally:
        outbox = read_table(root, "outbox", name)
        each_once(Counter(zip(outbox.column("lite_partition").to_pylist(), outbox.column("lite_offset").to_pylist(),
                              map(seq_of, outbox.column("value").to_pylist()), strict=True)),
                  [(p, o, seq) for (p, o), seq in published.items()], "outbox")
        each_once(Counter(seq_of(r.value) for r in consume_all(bootstrap, name)), published.values(),
                  "kafka (read_committed)")
        assert [lite.committed_cursor(subscription, p) for p in range(3)] == [lite.head(topic, p) for p in range(3)]
        return Tally(volume.total)

    return Scenario(Target(name, stages, stage_checkpoints(root, name, stages)), properties, feed, verify)
