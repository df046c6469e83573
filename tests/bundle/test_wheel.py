"""The bundle's wheel artifact: built from pyproject.toml, installed in a fresh venv, and every
entry point a job task names starts (``--help``) — both as a console script and the way a
Databricks python_wheel_task calls it (entry point looked up in the package's metadata).

Why a fresh venv: the test venv has the package installed editable from ``src/``, which would
hide a module missing from the wheel. The fresh venv sees the test venv's site-packages through
a ``.pth`` path entry (for pyspark & co., so nothing is downloaded); ``--system-site-packages``
would not do, it exposes the base interpreter's packages, not the test venv's. A path entry does
not run the test venv's own ``.pth`` files, so the editable install stays invisible.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from bundle_check import REPO_ROOT, STAGES, validate, wheel_tasks

pytestmark = pytest.mark.slow


def _run(*cmd: str | Path, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build from a copy of the project so the build leaves no build/ or *.egg-info in the repo."""
    work = tmp_path_factory.mktemp("wheel")
    project = work / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, project / name)
    shutil.copytree(REPO_ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    result = _run(sys.executable, "-m", "build", "--wheel", "--outdir", work / "dist", project)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (built,) = (work / "dist").glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv") / "venv"
    result = _run(sys.executable, "-m", "venv", root)
    assert result.returncode == 0, result.stderr
    python = root / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (site / "_test_venv_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    result = _run(python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel)
    assert result.returncode == 0, result.stdout + result.stderr
    return root


def test_wheel_contains_the_package_and_its_entry_points(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    for module in ("jobs.py", "explore/__init__.py", "cli.py", "config/loader.py", "pipelines/runtime.py",
                   "io/tables.py"):
        assert f"pubsub_connect/{module}" in names
    assert "pubsub-connect-job = pubsub_connect.jobs:main" in entry_points.splitlines()


def test_every_entry_point_named_by_a_job_task_runs_help(venv: Path) -> None:
    bundle = validate(REPO_ROOT, "prod")
    named = sorted({(t["python_wheel_task"]["package_name"], t["python_wheel_task"]["entry_point"])
                    for _, _, t in wheel_tasks(bundle)})
    assert named == [("pubsub_connect", "pubsub-connect-job")]
    for package, entry_point in named:
        script = _run(venv / "bin" / entry_point, "--help")
        assert script.returncode == 0, script.stderr
        assert script.stdout.startswith(f"usage: {entry_point} ")
        # The way a python_wheel_task starts it: the entry point from the package's metadata,
        # called with sys.argv set to the task parameters.
        probe = (
            "import importlib.metadata as md, sys, pathlib\n"
            f"dist = md.distribution({package!r})\n"
            "print(pathlib.Path(dist.locate_file('pubsub_connect/__init__.py')).resolve())\n"
            f"(ep,) = [e for e in dist.entry_points if e.group == 'console_scripts' and e.name == {entry_point!r}]\n"
            "import pubsub_connect; print(pathlib.Path(pubsub_connect.__file__).resolve())\n"
            f"sys.argv = [{entry_point!r}, '--help']\n"
            "ep.load()()\n"
        )
        called = _run(venv / "bin" / "python", "-c", probe)
        assert called.returncode == 0, called.stderr
        located, imported, *help_lines = called.stdout.splitlines()
        assert Path(located) == Path(imported)
        assert Path(imported).is_relative_to(venv.resolve()), f"imported from {imported}, not the wheel"
        assert help_lines[0].startswith(f"usage: {entry_point} ")


def test_every_pipeline_a_job_runs_imports_from_the_wheel(venv: Path) -> None:
    """A job task loads its kind's pipeline module at its first run: a module the wheel lacks
    would only fail there (the test venv's editable install always finds it in ``src/``)."""
    probe = (
        "import importlib, pathlib\n"
        "from pubsub_connect.pipelines.runtime import PIPELINE_MODULES, stages_for\n"
        "for kind, module in sorted(PIPELINE_MODULES.items()):\n"
        "    stages = ','.join(stage.name for stage in stages_for(kind))\n"
        "    path = importlib.import_module(f'pubsub_connect.pipelines.{module}').__file__\n"
        "    print(kind, stages, pathlib.Path(path).resolve())\n"
    )
    called = _run(venv / "bin" / "python", "-c", probe)
    assert called.returncode == 0, called.stderr[-3000:]
    found = {kind: (tuple(stages.split(",")), Path(path))
             for kind, stages, path in map(str.split, called.stdout.splitlines())}
    assert {kind: stages for kind, (stages, _) in found.items()} == STAGES
    outside = {kind: str(path) for kind, (_, path) in found.items() if not path.is_relative_to(venv.resolve())}
    assert outside == {}, "imported from outside the wheel's install"
