"""The local driver's class-data archive, built and then mapped by a driver that starts later."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pubsub_connect.io import class_data_archive as archive
from pubsub_connect.io.spark import local_connector_conf

pytestmark = pytest.mark.slow

#: A driver started the way the product starts one, reporting whether the JVM mapped the archive
#: (a mapped archive is in the process's memory map; one the JVM refused is not).
DRIVER = """
import sys
from pathlib import Path
from pubsub_connect.io import class_data_archive
class_data_archive.archive_dir = lambda: Path(sys.argv[1])
from pubsub_connect.io.spark import build_session
spark = build_session({"spark.master": "local[1]"})
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
mapped = sorted({line.split()[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                 if line.endswith(".jsa")})
print("mapped:", ",".join(Path(m).name for m in mapped if Path(m).parent == Path(sys.argv[1])))
spark.stop()
"""


def _mapped_by_a_new_driver(folder: Path) -> str:
    result = subprocess.run([sys.executable, "-c", DRIVER, str(folder)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return next(line for line in result.stdout.splitlines() if line.startswith("mapped:"))


@dataclass(frozen=True)
class Build:
    """One real build, shared by the tests of this module (a build takes about a minute)."""

    folder: Path
    jars: list[str]
    mapped_before: str
    lines: list[str]
    archive: Path | None


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Build]:
    folder = tmp_path_factory.mktemp("class-data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(archive, "archive_dir", lambda: folder)
        mapped_before = _mapped_by_a_new_driver(folder)
        jars = local_connector_conf({}).get("spark.jars", "").split(",")
        lines: list[str] = []
        yield Build(folder, jars, mapped_before, lines, archive.ensure_built(jars, report=lines.append))


def test_built_once_then_mapped_by_every_driver_of_that_classpath(build: Build):
    assert build.mapped_before == "mapped: "  # nothing built yet
    built = build.archive

    assert built is not None and built.parent == build.folder and built.stat().st_size > 10 * 2**20
    assert [p.name for p in build.folder.iterdir()] == [built.name]  # no temporary file left behind
    assert build.lines[0].startswith("building the local Spark driver's class-data archive")
    assert archive.ensure_built(build.jars, report=build.lines.append) == built  # up to date:
    assert len(build.lines) == 2  # not built again
    assert _mapped_by_a_new_driver(build.folder) == f"mapped: {built.name}"


def test_a_truncated_archive_is_refused_before_it_could_be_put_in_place(build: Build, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch):
    """The JVM crashes on a half-written archive, so the verify step must refuse one, leaving its
    crash report in its scratch directory, not in the working directory."""
    assert build.archive is not None
    truncated = tmp_path / "truncated.jsa"
    truncated.write_bytes(build.archive.read_bytes()[: 2**20])
    monkeypatch.chdir(tmp_path)

    with pytest.raises(RuntimeError, match=r"^class-data archive: the verify step failed \(exit -?\d+\)"):
        archive._run_child("verify", truncated)
    assert [p.name for p in tmp_path.iterdir()] == ["truncated.jsa"]
