"""The supported Spark range: the check at start, the modules that import on every supported Spark,
and the code chosen by capability where the Spark lines differ.

These tests run on every supported Spark (``.ci/compat``), so the expectations below are stated per
capability of the Spark under test, never as "whatever imports here".
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyspark.sql.datasource
import pytest

import pubsub_connect
from pubsub_connect import cli
from pubsub_connect.io import artifacts, spark, spark_versions
from pubsub_connect.io.pubsublite.read_options import LiteReadOptions
from pubsub_connect.io.pubsublite.stream_reader import LiteInputPartition, LiteStreamReader
from pubsub_connect.io.pubsublite.subscriber import LiteDataLossError
from pubsub_connect.io.spark_versions import UnsupportedSparkError, check_spark, local_combination, release_line

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

#: Modules that need a newer Spark than the oldest supported, with the capability each needs. The
#: fallback engine needs Spark 4.2's Python streaming API (its sink, 4.1's Arrow stream writer);
#: the pipelines' source file runs only
#: inside a pipeline runtime (which provides ``spark``), so it is imported by none of these tests.
VERSION_SPECIFIC: dict[str, Callable[[], bool]] = {
    "pubsub_connect.io.kafka.datasource": spark_versions.python_stream_admission_control,
    "pubsub_connect.io.kafka.python_source": spark_versions.python_stream_admission_control,
    "pubsub_connect.io.kafka.python_sink": lambda: hasattr(pyspark.sql.datasource, "DataSourceStreamArrowWriter"),
    "pubsub_connect.io.delta_rs_source": spark_versions.python_stream_admission_control,
    "pubsub_connect.io.pubsublite.admission_control": spark_versions.python_stream_admission_control,
}
PIPELINE_SOURCE_FILE = "pubsub_connect.lakeflow.definitions"


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(pubsub_connect.__path__, "pubsub_connect."))


@pytest.mark.parametrize(("version", "line"), [
    ("4.0.0", (4, 0)), ("4.0.1", (4, 0)), ("4.1.1", (4, 1)), ("4.2.0", (4, 2)), ("4.1.0.dev0", (4, 1)),
])
def test_every_supported_release_passes_the_check(version: str, line: tuple[int, int]) -> None:
    assert release_line(version) == line
    assert check_spark(version) == version


@pytest.mark.parametrize("version", ["3.5.2", "3.5.0", "4.3.0", "5.0.0", "not-a-version"])
def test_a_release_outside_the_range_is_refused_in_one_line_naming_it_and_the_range(version: str) -> None:
    with pytest.raises(UnsupportedSparkError) as raised:
        check_spark(version)
    assert str(raised.value) == (f"Spark {version} is not supported: pubsub-connect runs on Spark 4.0, 4.1, 4.2 "
                                 "(Databricks Runtime 17.3 LTS, 18.x, 19.x)")


def test_the_installed_spark_is_in_the_range() -> None:
    assert check_spark() == spark_versions.installed_pyspark()


@pytest.mark.parametrize("command", [["run", "x.properties"], ["worker"], ["jars", "--offline"],
                                     ["pipeline", "run", "x.properties"]])
def test_the_spark_commands_stop_at_start_on_an_unsupported_spark(command: list[str], monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(spark_versions, "installed_pyspark", lambda: "3.5.2")
    assert cli.main(command) == cli.EXIT_USER_ERROR
    out, err = capsys.readouterr()
    assert (out, err) == ("", "error: Spark 3.5.2 is not supported: pubsub-connect runs on Spark 4.0, 4.1, 4.2 "
                              "(Databricks Runtime 17.3 LTS, 18.x, 19.x)\n")


def test_validate_needs_no_spark(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(spark_versions, "installed_pyspark", lambda: "3.5.2")
    assert cli.main(["validate", str(FIXTURES / "config" / "cps-sink.properties")]) == 0


def test_the_jobs_stop_at_start_on_an_unsupported_spark(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from pubsub_connect import jobs

    monkeypatch.setattr(spark_versions, "installed_pyspark", lambda: "4.3.0")
    with pytest.raises(SystemExit) as exited:
        jobs.main(["--connector", "x.properties"])
    assert exited.value.code == jobs.EXIT_USER_ERROR
    assert capsys.readouterr().err == ("error: Spark 4.3.0 is not supported: pubsub-connect runs on Spark 4.0, 4.1, "
                                       "4.2 (Databricks Runtime 17.3 LTS, 18.x, 19.x)\n")


def test_pipeline_run_without_declarative_pipelines_says_they_need_a_newer_spark(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from pubsub_connect.lakeflow import local

    monkeypatch.setattr(local, "has_declarative_pipelines", lambda: False)
    monkeypatch.setattr(local, "installed_pyspark", lambda: "4.0.1")
    assert cli.main(["pipeline", "run", "--worker", str(FIXTURES / "config" / "worker.properties"),
                     str(FIXTURES / "config" / "cps-sink.properties"), "--once"]) == cli.EXIT_USER_ERROR
    assert capsys.readouterr().err == (
        "error: declarative pipelines need Spark 4.1 or newer (pyspark.pipelines), found 4.0.1; on Databricks "
        "they run on the pipeline runtime of their channel, not on the job clusters' runtime\n")


def test_declarative_pipelines_are_where_spark_has_them() -> None:
    expected = release_line(spark_versions.installed_pyspark()) >= spark_versions.DECLARATIVE_PIPELINES_SINCE
    assert spark_versions.has_declarative_pipelines() is expected


def test_every_module_imports_on_this_spark_but_those_needing_a_capability_it_lacks() -> None:
    failed: dict[str, str] = {}
    for name in _modules():
        if name == PIPELINE_SOURCE_FILE:
            continue
        try:
            importlib.import_module(name)
        except ImportError as exc:
            failed[name] = str(exc)
    expected = sorted(name for name, capable in VERSION_SPECIFIC.items() if not capable())
    assert sorted(failed) == expected, failed


def _top_level_imports(path: Path) -> set[str]:
    """The modules a file imports when it is imported (not inside functions or TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_nothing_outside_the_version_specific_modules_imports_them_at_import_time() -> None:
    root = Path(pubsub_connect.__file__).parent
    offenders = {}
    for name in _modules():
        if name in VERSION_SPECIFIC or name == PIPELINE_SOURCE_FILE:
            continue
        relative = Path(*name.split(".")[1:])
        path = root / relative / "__init__.py" if (root / relative).is_dir() else root / f"{relative}.py"
        imported = _top_level_imports(path) & set(VERSION_SPECIFIC)
        if imported:
            offenders[name] = sorted(imported)
    assert offenders == {}


@pytest.mark.parametrize(("line", "expected"), [
    ("4.0", ("pyspark[sql]==4.0.0", "delta-spark==4.0.0", "3.12")),
    ("4.1", ("pyspark[sql,pipelines]==4.1.1", "delta-spark==4.4.0", "3.12")),
    ("4.2", ("pyspark[sql,pipelines]==4.2.0", "delta-spark==4.4.0", "3.11")),
])
def test_each_line_has_one_local_combination(line: str, expected: tuple[str, str, str]) -> None:
    assert local_combination(line) == expected


@pytest.mark.parametrize(("spark_line", "delta", "artifact"), [
    ("4.0", "4.0.0", "io.delta:delta-spark_2.13:4.0.0"),
    ("4.1", "4.4.0", "io.delta:delta-spark_4.1_2.13:4.4.0"),
    ("4.2", "4.4.0", "io.delta:delta-spark_4.2_2.13:4.4.0"),
])
def test_delta_lake_jars_are_named_as_each_delta_release_names_them(spark_line: str, delta: str, artifact: str) -> None:
    assert str(spark.delta_coordinate(spark_line, delta)) == artifact


def test_the_default_install_is_the_newest_line() -> None:
    text = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    pyspark_requirement, delta_requirement, _ = local_combination("4.2")
    assert f'"{pyspark_requirement}"' in text
    assert f'"{delta_requirement}"' in text


def test_without_jars_an_older_spark_refuses_the_fallback_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*_args: Any, **_kwargs: Any) -> None:
        raise artifacts.ArtifactError("Maven Central is unreachable")

    monkeypatch.setattr(artifacts, "resolve", unreachable)
    monkeypatch.setattr(spark, "fallback_engine_available", lambda: False)
    monkeypatch.setattr(spark_versions, "installed_pyspark", lambda: "4.0.1")
    with pytest.raises(artifacts.ArtifactError) as raised:
        spark.local_connector_conf({})
    assert str(raised.value) == ("Maven Central is unreachable; the fallback engine (python kafka source, delta-rs) "
                                 "needs Spark 4.2 or newer, found 4.0.1")


class _Offsets:
    """An offset client of a Lite subscription: what the reader asks while it plans."""

    def __init__(self, heads: dict[int, int], cursors: dict[int, int], earliest: dict[int, int]):
        self.heads, self.cursors, self.earliest = heads, cursors, earliest

    def partition_count(self) -> int:
        return len(self.heads)

    def head_offsets(self, partitions: Any) -> dict[int, int]:
        return {p: self.heads[p] for p in partitions}

    def committed_cursors(self) -> dict[int, int]:
        return dict(self.cursors)

    def earliest_offsets(self, partitions: Any) -> dict[int, int]:
        return {p: self.earliest[p] for p in partitions}

    def close(self) -> None:
        pass


def _lite_reader(offsets: _Offsets, **options: str) -> LiteStreamReader:
    reader = LiteStreamReader(LiteReadOptions.parse({"project": "p", "location": "l", "subscription": "s",
                                                     "flowControlBytes": str(2**63 - 1), **options}))
    reader._client = offsets  # type: ignore[assignment]
    return reader


def _ranges(planned: Any) -> list[tuple[int, int, int]]:
    return [(p.partition, p.start, p.end) for p in planned if isinstance(p, LiteInputPartition)]


def test_the_lite_reader_without_admission_control_keeps_the_start_and_caps_each_batch() -> None:
    offsets = _Offsets(heads={0: 120, 1: 7}, cursors={0: 100}, earliest={0: 0, 1: 0})
    reader = _lite_reader(offsets, flowControlMessages="8")
    # after a restart Spark gives no start: the committed cursors are where the checkpoint stands
    assert reader.latestOffset() == {"0": 108, "1": 7}
    assert _ranges(reader.partitions({"0": 100, "1": 0}, {"0": 108, "1": 7})) == [(0, 100, 108), (1, 0, 7)]
    # the next batch starts where the planned one ended, not at the (unchanged) cursors
    assert reader.latestOffset() == {"0": 116, "1": 7}
    assert _ranges(reader.partitions({"0": 108, "1": 7}, {"0": 116, "1": 7})) == [(0, 108, 116)]
    assert reader.latestOffset() == {"0": 120, "1": 7}


def test_the_lite_reader_without_admission_control_reads_to_the_heads_under_available_now() -> None:
    reader = _lite_reader(_Offsets(heads={0: 120, 1: 7}, cursors={0: 100}, earliest={0: 0, 1: 0}),
                          flowControlMessages="8", maxMessagesPerTrigger="5", untilHeads="true")
    assert reader.latestOffset() == {"0": 120, "1": 7}


def test_the_lite_reader_without_admission_control_honours_max_messages_per_trigger() -> None:
    reader = _lite_reader(_Offsets(heads={0: 120, 1: 7}, cursors={0: 100, 1: 7}, earliest={0: 0, 1: 0}),
                          maxMessagesPerTrigger="5")
    assert reader.latestOffset() == {"0": 105, "1": 7}


def test_the_lite_reader_without_admission_control_joins_a_new_partition_reading_nothing() -> None:
    offsets = _Offsets(heads={0: 120}, cursors={}, earliest={0: 0})
    reader = _lite_reader(offsets, startingOffsets='{"0": 100, "1": 40}')
    assert reader.initialOffset() == {"0": 100}
    offsets.heads, offsets.earliest, offsets.cursors = {0: 120, 1: 55}, {0: 0, 1: 10}, {1: 30}
    # partition 1 is new: committed cursor 30, bronze holds up to 40 (the floor), oldest message 10
    assert reader.latestOffset() == {"0": 120, "1": 40}


def test_the_lite_reader_reads_a_partition_the_checkpoint_lacks_from_its_start_position() -> None:
    # after a restart the reader planned partition 2 from the cursors, but Spark's start lacks it
    reader = _lite_reader(_Offsets(heads={0: 120, 1: 7, 2: 55}, cursors={2: 30}, earliest={0: 0, 1: 0, 2: 10}),
                          startingOffsets='{"2": 40}')
    planned = reader.partitions({"0": 100, "1": 7}, {"0": 120, "1": 7, "2": 55})
    assert _ranges(planned) == [(0, 100, 120), (2, 40, 55)]


def test_the_lite_reader_without_admission_control_refuses_a_partition_that_went_backwards() -> None:
    reader = _lite_reader(_Offsets(heads={0: 90}, cursors={0: 100}, earliest={0: 0}))
    with pytest.raises(LiteDataLossError, match="partition 0 ends at 90, below the checkpoint's offset 100"):
        reader.latestOffset()
    with pytest.raises(LiteDataLossError, match="partition 0 ends at 90, below the checkpoint's offset 100"):
        reader.partitions({"0": 100}, {"0": 90})


def test_the_lite_source_uses_admission_control_where_spark_has_it() -> None:
    from pubsub_connect.io.pubsublite.data_source import LiteDataSource

    source = LiteDataSource({"project": "p", "location": "l", "subscription": "s"})
    reader = source.streamReader(source.schema())
    if spark_versions.python_stream_admission_control():
        from pubsub_connect.io.pubsublite.admission_control import AdmissionControlledLiteStreamReader

        assert type(reader) is AdmissionControlledLiteStreamReader
    else:
        assert type(reader) is LiteStreamReader
