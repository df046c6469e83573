"""The explore package without Spark: Spark checkpoint files, Delta commit files, throughput, parameters,
text output. (tests/e2e/test_notebooks.py reads real checkpoints and tables written by Spark.)"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.explore import checkpoints, context, history, output, tables
from pubsub_connect.io import delta_log

UTC = dt.timezone.utc
T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
CONF = '{"spark.sql.shuffle.partitions":"4","spark.sql.streaming.multipleWatermarkPolicy":"min"}'


def _offsets(batch_ms: int, *sources: str) -> str:
    return "\n".join(["v1", f'{{"batchWatermarkMs":0,"batchTimestampMs":{batch_ms},"conf":{CONF}}}', *sources])


def _checkpoint(root: Path, offsets: dict[int, str], commits: list[int]) -> Path:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch, text in offsets.items():
        (root / "offsets" / str(batch)).write_text(text)
        (root / "offsets" / f".{batch}.crc").write_bytes(b"crc")  # Hadoop checksum files are ignored
    for batch in commits:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "offsets" / ".3.6f1c.tmp").write_text("partial write")
    (root / "metadata").write_text('{"id":"9a4c"}')
    return root


def test_offset_log_sources_of_every_kind() -> None:
    metadata, sources = checkpoints.parse_offset_log(_offsets(
        T0,
        '{"orders":{"1":120,"0":95},"audit":{"0":7}}',
        '{"sourceVersion":1,"reservoirId":"r-1","reservoirVersion":7,"index":-1,"isStartingVersion":false}',
        '{"version":3}',
        "-",
    ))
    assert metadata["batchTimestampMs"] == T0
    kafka, delta, delta_rs, empty = sources
    assert kafka.partitions == {("audit", 0): 7, ("orders", 0): 95, ("orders", 1): 120}
    assert list(kafka.partitions) == [("audit", 0), ("orders", 0), ("orders", 1)]
    # native Delta points at the next version (index -1) once version 6 is read whole
    assert (delta.partitions, delta.table_version) == ({}, 6)
    assert (delta_rs.partitions, delta_rs.table_version) == ({}, 3)
    assert (empty.index, empty.raw, empty.partitions, empty.table_version) == (3, None, {}, None)
    assert checkpoints.describe_position(sources) == (
        "audit-0:7, orders-0:95, orders-1:120; table version 6; table version 3")
    with pytest.raises(ValueError, match="not a Spark offset log entry"):
        checkpoints.parse_offset_log('{"orders":{"0":1}}')


def test_checkpoint_state_takes_offsets_of_the_last_commit(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "checkpoints" / "c1" / "ingest", {
        0: _offsets(T0, '{"t":{"0":10,"1":4}}'),
        1: _offsets(T0 + 60_000, '{"t":{"0":25,"1":9}}'),
        2: _offsets(T0 + 120_000, '{"t":{"0":40,"1":9}}'),
    }, commits=[0, 1])
    state = checkpoints.checkpoint_state(str(root))
    assert (state.stage, state.last_committed, state.pending) == ("ingest", 1, 2)
    assert state.partition_offsets() == {("t", 0): 25, ("t", 1): 9}
    assert state.pending_offsets[0].partitions == {("t", 0): 40, ("t", 1): 9}
    assert state.batch_timestamp == dt.datetime(2023, 11, 14, 22, 14, 20, tzinfo=UTC)
    assert checkpoints.offset_rows(state, {("t", 0): 31, ("t", 1): 9, ("t", 2): 5}) == [
        {"stage": "ingest", "topic": "t", "partition": 0, "committed_offset": 25, "end_offset": 31, "lag": 6},
        {"stage": "ingest", "topic": "t", "partition": 1, "committed_offset": 9, "end_offset": 9, "lag": 0},
        {"stage": "ingest", "topic": "t", "partition": 2, "committed_offset": None, "end_offset": 5, "lag": None},
    ]
    assert checkpoints.offset_rows(state) == [
        {"stage": "ingest", "topic": "t", "partition": 0, "committed_offset": 25, "end_offset": None, "lag": None},
        {"stage": "ingest", "topic": "t", "partition": 1, "committed_offset": 9, "end_offset": None, "lag": None},
    ]


def test_checkpoint_without_commits_and_missing_checkpoints(tmp_path: Path) -> None:
    root = _checkpoint(tmp_path / "cp", {0: _offsets(T0, '{"t":{"0":3}}')}, commits=[])
    state = checkpoints.checkpoint_state(str(root), "convert")
    assert (state.stage, state.last_committed, state.committed, state.pending) == ("convert", None, (), 0)
    assert checkpoints.checkpoint_rows([state]) == [
        {"stage": "convert", "committed_batch": None, "committed_at": None, "position": "-", "pending_batch": 0}]
    nothing = checkpoints.checkpoint_state(str(tmp_path / "absent"))
    assert (nothing.last_committed, nothing.pending, nothing.committed) == (None, None, ())


def test_lag_is_end_minus_committed_and_never_negative() -> None:
    assert checkpoints.lag({("t", 0): 10, ("t", 1): 5, ("u", 0): 3}, {("t", 0): 12, ("t", 1): 4, ("v", 0): 9}) == {
        ("t", 0): 2, ("t", 1): 0, ("u", 0): None, ("v", 0): None}


def _commit_lines(*actions: dict) -> str:
    return "\n".join(json.dumps(a) for a in actions) + "\n"


def test_commit_row_counts_from_metrics_or_file_statistics() -> None:
    spark_write = delta_log.parse_commit(4, _commit_lines(
        {"commitInfo": {"timestamp": T0 + 123, "operation": "WRITE", "operationParameters": {"mode": "Append"},
                        "operationMetrics": {"numFiles": "2", "numOutputRows": "150", "numOutputBytes": "4096"}}},
        {"txn": {"appId": "c1/ingest", "version": 9, "lastUpdated": T0}},
        {"add": {"path": "a.parquet", "size": 1, "dataChange": True, "stats": '{"numRecords":100}'}},
        {"add": {"path": "b.parquet", "size": 1, "dataChange": True, "stats": '{"numRecords":50}'}},
    ))
    assert spark_write == delta_log.Commit(4, dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC), "WRITE",
                                           150, "c1/ingest", 9)
    stats_only = delta_log.parse_commit(5, _commit_lines(
        {"add": {"path": "a.parquet", "size": 1, "dataChange": True, "stats": '{"numRecords":7,"minValues":{}}'}},
        {"commitInfo": {"timestamp": T0, "operation": "WRITE"}},
        {"add": {"path": "b.parquet", "size": 1, "dataChange": True, "stats": '{"numRecords":5}'}},
    ))
    assert (stats_only.rows, stats_only.app_id, stats_only.batch_id) == (12, None, None)
    created = delta_log.parse_commit(0, _commit_lines(
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "x", "format": {"provider": "parquet"}, "schemaString": "{}"}},
        {"commitInfo": {"timestamp": T0, "operation": "CREATE TABLE"}},
    ))
    assert (created.operation, created.rows) == ("CREATE TABLE", None)
    marked = delta_log.parse_commit(6, _commit_lines(
        {"commitInfo": {"timestamp": T0, "operation": "WRITE", "userMetadata": "pubsub-connect batch 12 of c1/ingest@q",
                        "operationMetrics": {"numOutputRows": "40"}}},
    ))
    assert (marked.rows, marked.app_id, marked.batch_id, marked.mark) == (40, "c1/ingest@q", 12, ("c1/ingest@q", 12))
    assert spark_write.mark is None  # a transaction id is not a mark: the fallback engine's and old tables' writes


def test_delta_log_commits_reads_only_json_commit_files(tmp_path: Path) -> None:
    log = tmp_path / "table" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text(_commit_lines(
        {"commitInfo": {"timestamp": T0, "operation": "CREATE TABLE"}}))
    (log / "00000000000000000001.json").write_text(_commit_lines(
        {"commitInfo": {"timestamp": T0 + 5000, "operation": "WRITE", "operationMetrics": {"num_added_rows": 3}}}))
    (log / "00000000000000000001.checkpoint.parquet").write_bytes(b"PAR1")
    (log / "_last_checkpoint").write_text("{}")
    (log / ".00000000000000000002.json.tmp").write_text("{}")
    commits = history.delta_log_commits(str(tmp_path / "table"))
    assert [(c.version, c.operation, c.rows) for c in commits] == [(0, "CREATE TABLE", None), (1, "WRITE", 3)]
    assert history.delta_log_commits(str(tmp_path / "absent")) == []


def test_throughput_buckets_rows_by_commit_time() -> None:
    def commit(version: int, seconds: float, rows: int | None, op: str = "WRITE") -> delta_log.Commit:
        return delta_log.Commit(version, dt.datetime.fromtimestamp(T0 / 1000 + seconds, UTC), op, rows)

    commits = [commit(0, 0, 0, "CREATE TABLE"), commit(1, 1, 100), commit(2, 59, 20), commit(3, 61, 30),
               commit(4, 62, None), commit(5, 185, 600)]
    # T0 is 20 s into a minute, so buckets start at :00 of 22:13, 22:14 and 22:16
    assert history.throughput(commits, 60) == [
        history.ThroughputPoint(dt.datetime(2023, 11, 14, 22, 13, tzinfo=UTC), 1, 100, 100 / 60),
        history.ThroughputPoint(dt.datetime(2023, 11, 14, 22, 14, tzinfo=UTC), 2, 50, 50 / 60),
        history.ThroughputPoint(dt.datetime(2023, 11, 14, 22, 16, tzinfo=UTC), 1, 600, 10.0),
    ]
    with pytest.raises(ValueError, match="bucket_seconds"):
        history.throughput(commits, 0)


class FakeWidgets:
    def __init__(self, values: dict[str, str]):
        self.values = values
        self.created: list[tuple[str, str]] = []

    def text(self, name: str, default: str) -> None:
        self.created.append((name, default))

    def get(self, name: str) -> str:
        return self.values.get(name, "")


class FakeDbutils:
    def __init__(self, values: dict[str, str]):
        self.widgets = FakeWidgets(values)


def test_notebook_params_from_widgets_arguments_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = {"connector": "c.properties", "storage_root": "./root", "samples": "5"}
    dbutils = FakeDbutils({"connector": "cps_sink", "storage_root": "/Volumes/m/s/v", "samples": "3"})
    assert context.notebook_params({"dbutils": dbutils}, defaults) == {
        "connector": "cps_sink", "storage_root": "/Volumes/m/s/v", "samples": "3"}
    assert dbutils.widgets.created == list(defaults.items())
    monkeypatch.setenv("PUBSUB_CONNECT_SAMPLES", "9")
    monkeypatch.delenv("PUBSUB_CONNECT_STORAGE_ROOT", raising=False)
    assert context.notebook_params({}, defaults, ["--connector", "x.properties", "--storage-root=/tmp/r",
                                                  "--unknown", "1"]) == {
        "connector": "x.properties", "storage_root": "/tmp/r", "samples": "9"}
    assert context.notebook_params({}, defaults, []) == {**defaults, "samples": "9"}


def test_connector_ref_from_a_properties_file_or_a_name(tmp_path: Path) -> None:
    props = tmp_path / "c.properties"
    props.write_text("name=orders_sink\nconnector.class=com.google.pubsub.kafka.sink.CloudPubSubSinkConnector\n"
                     "gcp.credentials.json=${secrets:gcp}\n")
    ref = context.connector_ref(str(props))
    assert (ref.name, ref.kind, ref.stages) == ("orders_sink", "cps_sink", ("ingest", "convert", "publish"))
    assert context.connector_ref("orders_sink") == context.ConnectorRef("orders_sink", None)
    (tmp_path / "bad.properties").write_text("connector.class=cps-sink\n")
    with pytest.raises(ConfigError, match="missing required key name"):
        context.connector_ref(str(tmp_path / "bad.properties"))


def test_format_table_and_display_values() -> None:
    rows = [{"table": "bronze", "rows": 12, "at": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)},
            {"table": "dlq", "rows": None, "at": None}]
    assert output.format_table(rows) == (
        "table   rows  at\n"
        "bronze  12    2024-01-02 03:04:05\n"
        "dlq     -     -")
    assert output.format_table([]) == "(no rows)"
    assert tables.display_value(b"hello", 10) == "hello"
    assert tables.display_value(b"\xff\x00", 20) == "base64:/wA="
    assert tables.display_value("x" * 12, 10) == "xxxxxxxxx…"
    assert tables.display_value({"k": [b"v"]}, 10) == {"k": ["v"]}


def test_stage_order_matches_the_bundle_stages() -> None:
    assert context.STAGE_ORDER == {
        "cps_sink": ("ingest", "convert", "publish"), "cps_source": ("pull", "convert", "produce"),
        "lite_sink": ("ingest", "convert", "publish"), "lite_source": ("pull", "convert", "produce"),
        "archive": ("archive",)}


def test_pipeline_mode_is_the_one_the_last_run_recorded(tmp_path: Path) -> None:
    store = SimpleNamespace(root=str(tmp_path))
    connector = context.ConnectorRef("c", "cps_sink")
    assert checkpoints.pipeline_mode(store, connector).startswith("pipeline.mode=staged: ")  # nothing recorded
    (tmp_path / "checkpoints" / "c").mkdir(parents=True)
    (tmp_path / "checkpoints" / "c" / "mode.json").write_text('{"mode": "fused"}')
    assert checkpoints.pipeline_mode(store, connector) == (
        "pipeline.mode=fused: one query lands bronze and publishes; its position is the ingest checkpoint, and it "
        "writes no outbox")
    (tmp_path / "checkpoints" / "c" / "mode.json").write_text('{"mode": "staged"}')
    assert checkpoints.pipeline_mode(store, connector).startswith("pipeline.mode=staged: ")
