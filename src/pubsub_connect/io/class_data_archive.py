"""A class-data-sharing archive for the local Spark driver's JVM: built once, used by every start.

Why: a local driver loads the classes of Spark, Delta Lake, Spark's Kafka connector and their
dependencies from jars, verifying and parsing each, before and while it does its first work. The
JVM can instead map the classes it loaded once from an archive (the JDK's application class-data
sharing: ``-XX:ArchiveClassesAtExit`` writes one as a JVM exits, ``-XX:SharedArchiveFile`` uses
it). Measured on a 2-core machine, three runs each way: a session start took 8.9-10.4 s without
and 5.6-7.1 s with the archive, its first Delta append 16.5-19.1 s and 12.6-13.0 s. Nothing else
changes: the same bytecode runs, compiled the same way.

How it stays safe:

- The archive is built by ``pubsub-connect jars`` (the step that fetches the jars), in a child
  process that runs a small Delta, streaming and Python workload and exits; the JVM writes the
  archive at its exit under a temporary name. A second child starts a driver that *must* map it
  (``-Xshare:on``), with the archive's checksums verified; only then is it renamed into place,
  so a session never sees a half-written archive (the JVM can crash on one).
- Its name is a fingerprint of the Java runtime and of every jar on the driver's classpath (path,
  size, modification time): another PySpark, Delta Lake or JDK looks for another archive. Should
  the JVM still refuse one (it checks the classpath itself), it starts without it, silently:
  the archive only ever saves time.
- A user who sets class-data sharing options of their own keeps them; nothing is added then.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pubsub_connect.io import artifacts
from pubsub_connect.io.processes import pid_alive

#: The JVM options of class-data sharing; a user's own setting of any of them wins.
SHARING_OPTIONS = ("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-XX:SharedClassListFile")
#: The JVM's notes about the archive (classes it skips while writing, an archive it cannot use)
#: are not the user's concern: the archive is an optimisation that falls back by itself.
QUIET = "-Xlog:cds*=off"
#: How long building may take (about a minute on a slow 2-core machine).
BUILD_TIMEOUT_S = 900
#: Archives of other classpaths (an older PySpark, another JDK) are removed after this long unused.
STALE_AFTER_S = 30 * 24 * 3600
ARCHIVE_PREFIX = "spark-driver-"
#: The module a build runs in a child interpreter (its driver must be a JVM of its own).
TRAINING_MODULE = "pubsub_connect.io.class_data_training"


def archive_dir() -> Path:
    return artifacts.cache_dir() / "class-data"


def _java_executable() -> Path | None:
    """The driver's ``java`` as a file (symlinks resolved, so that a JDK update changes it)."""
    found = shutil.which(artifacts.java_command())
    return Path(found).resolve() if found else None


def _classpath_jars(extra_jars: Iterable[str]) -> list[Path]:
    return [*sorted(artifacts.pyspark_jars_dir().glob("*.jar")), *(Path(j) for j in extra_jars if j)]


def fingerprint(extra_jars: Iterable[str], java: Path | None = None) -> str | None:
    """A digest of the Java runtime and of every jar the driver loads (``None`` without Java)."""
    java = java or _java_executable()
    if java is None:
        return None
    digest = hashlib.sha256()
    for path in (java, *_classpath_jars(extra_jars)):
        try:
            stat = path.stat()
        except OSError:
            return None  # a jar is missing: the session will fail or fall back, not use an archive
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def archive_path(extra_jars: Iterable[str]) -> Path | None:
    """Where the archive for this classpath lives (whether or not it was built)."""
    key = fingerprint(extra_jars)
    return archive_dir() / f"{ARCHIVE_PREFIX}{key}.jsa" if key else None


def _user_chose_sharing(conf: dict[str, str]) -> bool:
    options = f"{conf.get('spark.driver.extraJavaOptions', '')} {os.environ.get('SPARK_SUBMIT_OPTS', '')}"
    return any(option in options for option in SHARING_OPTIONS)


def driver_options(conf: dict[str, str]) -> str | None:
    """The JVM options that map this classpath's archive into the driver, when it was built."""
    if _user_chose_sharing(conf):
        return None
    path = archive_path(conf.get("spark.jars", "").split(","))
    if path is None or not path.is_file():
        return None
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def add_driver_options(conf: dict[str, str]) -> None:
    """Add :func:`driver_options` to ``conf``'s driver JVM options, when there is an archive."""
    sharing = driver_options(conf)
    if sharing:
        conf["spark.driver.extraJavaOptions"] = f"{conf.get('spark.driver.extraJavaOptions', '')} {sharing}".strip()


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


def _remove_leftovers(directory: Path, keep: Path) -> None:
    """Temporary archives of builds whose process died, and archives long unused."""
    now = time.time()
    for path in directory.glob(f"{ARCHIVE_PREFIX}*"):
        if path == keep:
            continue
        if path.name.endswith(".tmp"):
            pid = path.name.rsplit(".", 2)[-2]
            if pid.isdigit() and not pid_alive(int(pid)):
                path.unlink(missing_ok=True)
        elif now - path.stat().st_atime > STALE_AFTER_S:
            path.unlink(missing_ok=True)


def ensure_built(jars: Sequence[str], report: Callable[[str], None] = print) -> Path | None:
    """Build the archive of the local driver's classpath (PySpark's jars and ``jars``, the
    native engine's) unless it exists.

    Returns its path, or ``None`` where there is nothing to archive (no engine jars, no Java); a
    failed build raises :class:`RuntimeError` with the child's last line.
    """
    target = archive_path(jars)
    if not jars or target is None:
        return None
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(target.parent, target)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    started = time.monotonic()
    report("building the local Spark driver's class-data archive (once per classpath, about a minute)")
    try:
        for step in ("write", "verify"):
            _run_child(step, temporary)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    report(f"built in {time.monotonic() - started:.0f} s ({target.stat().st_size / 2**20:.0f} MiB)")
    return target


def _run_child(step: str, archive: Path) -> None:
    """Run one step of :data:`TRAINING_MODULE` in a fresh interpreter, in a scratch directory, so
    that a JVM that dies leaves its crash report there and not here."""
    with tempfile.TemporaryDirectory(prefix="pubsub-connect-class-data-") as scratch:
        # the options meant for other drivers (the tests' C1-only compilation, a user's own sharing
        # settings) are not the archive's
        env = {k: v for k, v in os.environ.items() if k != "SPARK_SUBMIT_OPTS"}
        try:
            result = subprocess.run([sys.executable, "-m", TRAINING_MODULE, step, str(archive), scratch],
                                    cwd=scratch, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"class-data archive: the {step} step took over {BUILD_TIMEOUT_S} s") from exc
    if result.returncode != 0 or (step == "write" and not archive.is_file()):
        lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
        raise RuntimeError(f"class-data archive: the {step} step failed (exit {result.returncode}): "
                           f"{lines[-1] if lines else 'no output'}")
