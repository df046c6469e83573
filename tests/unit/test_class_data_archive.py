"""Which class-data archive a local driver uses, and when it uses none."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pubsub_connect.io import class_data_archive as archive


@pytest.fixture
def jars(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "jars"
    folder.mkdir()
    made = []
    for name in ("delta.jar", "kafka.jar"):
        (folder / name).write_bytes(b"x" * 10)
        made.append(folder / name)
    return made


@pytest.fixture
def java(tmp_path: Path) -> Path:
    path = tmp_path / "java"
    path.write_bytes(b"#!")
    return path


@pytest.fixture
def archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "class-data"
    folder.mkdir()
    monkeypatch.setattr(archive, "archive_dir", lambda: folder)
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    return folder


def test_the_fingerprint_follows_every_jar_and_the_java_runtime(jars: list[Path], java: Path, tmp_path: Path):
    names = [str(j) for j in jars]
    first = archive.fingerprint(names, java)
    assert first == archive.fingerprint(names, java)

    os.utime(jars[1], ns=(1_000_000_000, 1_000_000_000))
    touched = archive.fingerprint(names, java)
    jars[0].write_bytes(b"x" * 11)
    resized = archive.fingerprint(names, java)
    other_java = tmp_path / "java2"
    other_java.write_bytes(b"#!")

    assert len({first, touched, resized, archive.fingerprint(names, other_java)}) == 4
    assert archive.fingerprint([*names, str(tmp_path / "gone.jar")], java) is None


def test_a_built_archive_is_added_to_the_driver_options_with_the_jvm_kept_quiet(archives: Path, jars: list[Path]):
    conf = {"spark.jars": ",".join(str(j) for j in jars), "spark.driver.extraJavaOptions": "-Dx=1"}
    assert archive.driver_options(conf) is None  # not built yet

    path = archive.archive_path(conf["spark.jars"].split(","))
    assert path is not None and path.parent == archives
    path.write_bytes(b"archive")

    assert archive.driver_options(conf) == f"-XX:SharedArchiveFile={path} -Xlog:cds*=off"
    archive.add_driver_options(conf)
    assert conf["spark.driver.extraJavaOptions"] == f"-Dx=1 -XX:SharedArchiveFile={path} -Xlog:cds*=off"
    other_classpath = {**conf, "spark.jars": str(jars[0])}
    assert archive.driver_options(other_classpath) is None


@pytest.mark.parametrize("setting", [
    {"spark.driver.extraJavaOptions": "-Xshare:off"},
    {"spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/mine.jsa"},
    {"SPARK_SUBMIT_OPTS": "-XX:ArchiveClassesAtExit=/mine.jsa"},
])
def test_sharing_options_of_the_users_own_are_left_alone(archives: Path, jars: list[Path], setting: dict[str, str],
                                                          monkeypatch: pytest.MonkeyPatch):
    conf = {"spark.jars": ",".join(str(j) for j in jars)}
    archive.archive_path(conf["spark.jars"].split(",")).write_bytes(b"archive")
    if "SPARK_SUBMIT_OPTS" in setting:
        monkeypatch.setenv("SPARK_SUBMIT_OPTS", setting["SPARK_SUBMIT_OPTS"])
    else:
        conf.update(setting)
    assert archive.driver_options(conf) is None


def test_leftovers_of_dead_builds_and_long_unused_archives_are_removed(archives: Path):
    keep = archives / f"{archive.ARCHIVE_PREFIX}current.jsa"
    keep.write_bytes(b"a")
    unused = archives / f"{archive.ARCHIVE_PREFIX}old.jsa"
    unused.write_bytes(b"a")
    old = time.time() - archive.STALE_AFTER_S - 60
    os.utime(unused, (old, old))
    recent = archives / f"{archive.ARCHIVE_PREFIX}other.jsa"
    recent.write_bytes(b"a")
    building = archives / f"{archive.ARCHIVE_PREFIX}current.jsa.{os.getpid()}.tmp"
    building.write_bytes(b"a")
    dead = archives / f"{archive.ARCHIVE_PREFIX}current.jsa.{2**22 + 7}.tmp"  # above any pid Linux allows
    dead.write_bytes(b"a")
    os.utime(keep, (old, old))

    archive._remove_leftovers(archives, keep)

    assert sorted(p.name for p in archives.iterdir()) == sorted([keep.name, recent.name, building.name])


def test_jars_reports_a_failed_build_in_one_line_and_still_succeeds(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]):
    from pubsub_connect import cli
    from pubsub_connect.io import artifacts

    monkeypatch.setattr(artifacts, "resolve", lambda artifact_set, *_, **__: [Path(f"/cache/{artifact_set.name}.jar")])
    built_for: list[list[str]] = []

    def fail(jars: list[str], report) -> None:
        built_for.append(list(jars))
        raise RuntimeError("class-data archive: the write step failed (exit 1): no space left on device")

    monkeypatch.setattr(archive, "ensure_built", fail)

    assert cli.main(["jars"]) == 0
    assert built_for == [["/cache/spark-kafka-delta-avro.jar"]]  # the engine's jars, not the broker's
    assert capsys.readouterr().out.splitlines()[-1] == (
        "class-data archive: the write step failed (exit 1): no space left on device; "
        "local sessions start without it")
