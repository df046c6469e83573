"""The local driver's class-data archive, built and then mapped by a driver that starts later."""

from __future__ import annotations

import subprocess
import sys
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


def test_built_once_then_mapped_by_every_driver_of_that_classpath(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(archive, "archive_dir", lambda: tmp_path)
    assert _mapped_by_a_new_driver(tmp_path) == "mapped: "  # nothing built yet

    jars = local_connector_conf({}).get("spark.jars", "").split(",")
    lines: list[str] = []
    built = archive.ensure_built(jars, report=lines.append)

    assert built is not None and built.parent == tmp_path and built.stat().st_size > 10 * 2**20
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no temporary file left behind
    assert lines[0].startswith("building the local Spark driver's class-data archive")
    assert archive.ensure_built(jars, report=lines.append) == built and len(lines) == 2  # up to date: not built again
    assert _mapped_by_a_new_driver(tmp_path) == f"mapped: {built.name}"
