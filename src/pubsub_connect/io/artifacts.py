"""JVM artifacts from Maven Central, resolved once and cached for offline use.

Why: a pip-installed PySpark has neither Spark's Kafka connector nor Delta Lake; Spark users add
them with ``spark.jars.packages``. That setting resolves with Ivy on *every* session start (it
needs the network each time, and it trips over a ``~/.m2`` that holds a pom without its jar, which
any Maven build on the machine can leave behind). Here the same coordinates are resolved once
with the Ivy that ships inside PySpark, against Maven Central (plus ``spark.jars.repositories``),
into a cache of this project's own; the resulting classpath is written to a manifest, and later
sessions start from the manifest with ``spark.jars`` — offline, and without Ivy's start-up cost.

The same resolver provides the classpaths of the JVM services the tests run (the Apache Kafka
broker, Kafka Connect), so every JVM artifact of the project comes from one place.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import quoteattr

log = logging.getLogger(__name__)

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
#: Environment variable with the repositories to resolve from *instead of* Maven Central (comma
#: separated URLs): a company mirror on a machine that cannot reach Central.
REPOSITORIES_ENV = "PUBSUB_CONNECT_MAVEN_REPOSITORIES"
#: How long one resolution may take before it is given up (a first download is ~40 s here).
RESOLVE_TIMEOUT_S = 900


class ArtifactError(RuntimeError):
    """Artifacts could not be resolved; ``str()`` is one line with the reason."""


@dataclass(frozen=True)
class Coordinate:
    """``group:artifact:version`` of a Maven artifact."""

    group: str
    artifact: str
    version: str

    @classmethod
    def parse(cls, text: str) -> Coordinate:
        parts = text.strip().split(":")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"a Maven coordinate is group:artifact:version, got {text!r}")
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


@dataclass(frozen=True)
class ArtifactSet:
    """A named set of artifacts resolved together into one classpath.

    ``provided_dirs``: directories of jars already on the classpath where the set is used (e.g.
    PySpark's own ``jars/``); a resolved module that has a jar there is left out, as Maven's
    ``provided`` scope would, so the runtime's version is the only one.
    """

    name: str
    coordinates: tuple[Coordinate, ...]
    excludes: tuple[tuple[str, str], ...] = ()
    provided_dirs: tuple[Path, ...] = field(default_factory=tuple)

    def key(self, repositories: Sequence[str]) -> str:
        text = json.dumps([self.name, [str(c) for c in self.coordinates], list(self.excludes), list(repositories)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """``$PUBSUB_CONNECT_CACHE`` or ``~/.cache/pubsub-connect`` (``$XDG_CACHE_HOME`` honoured)."""
    explicit = os.environ.get("PUBSUB_CONNECT_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pubsub-connect"


def pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def _ivy_jar() -> Path:
    jars = sorted(pyspark_jars_dir().glob("ivy-*.jar"))
    if not jars:
        raise ArtifactError(f"no Ivy jar in {pyspark_jars_dir()} (PySpark ships one; is PySpark installed?)")
    return jars[-1]


def java_command() -> str:
    """The ``java`` that ``spark-submit`` starts too: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else "java"


def default_repositories() -> list[str]:
    """Maven Central, or the mirrors named by ``$PUBSUB_CONNECT_MAVEN_REPOSITORIES``."""
    configured = [r.strip() for r in os.environ.get(REPOSITORIES_ENV, "").split(",") if r.strip()]
    return configured or [MAVEN_CENTRAL]


def _ivy_settings(cache: Path, repositories: Sequence[str]) -> str:
    resolvers = "".join(
        f'<ibiblio name={quoteattr(f"repo-{i}")} m2compatible="true" root={quoteattr(url.rstrip("/") + "/")}/>'
        for i, url in enumerate(repositories))
    return (f'<ivysettings><settings defaultResolver="chain"/><caches defaultCacheDir={quoteattr(str(cache))}/>'
            f'<resolvers><chain name="chain" returnFirst="true">{resolvers}</chain></resolvers></ivysettings>')


def _ivy_module(artifacts: ArtifactSet) -> str:
    deps = "".join(
        f'<dependency org={quoteattr(c.group)} name={quoteattr(c.artifact)} rev={quoteattr(c.version)} '
        f'conf="default->default"/>' for c in artifacts.coordinates)
    excludes = "".join(f'<exclude org={quoteattr(g)} module={quoteattr(a)}/>' for g, a in artifacts.excludes)
    return (f'<ivy-module version="2.0"><info organisation="pubsub-connect" module={quoteattr(artifacts.name)}/>'
            f'<dependencies>{deps}{excludes}</dependencies></ivy-module>')


def _provided_modules(dirs: Sequence[Path]) -> set[str]:
    """Module names of the jars in ``dirs`` (``name-1.2.3.jar`` → ``name``)."""
    names: set[str] = set()
    for directory in dirs:
        for jar in directory.glob("*.jar"):
            match = re.match(r"^(.+?)-\d", jar.name)
            if match:
                names.add(match.group(1))
    return names


def _module_of(jar: Path) -> str:
    """Ivy's cache layout is ``<org>/<module>/jars/<module>-<rev>.jar``."""
    return jar.parent.parent.name


def _last_lines(text: str, count: int = 1) -> str:
    interesting = [line.strip() for line in text.splitlines()
                   if line.strip() and ("UNRESOLVED" in line or "not found" in line or "::" in line
                                        or "download failed" in line or "Exception" in line)
                   and "USE VERBOSE" not in line]
    lines = interesting or [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(lines[-count:]) if lines else "no output"


def manifest_path(artifacts: ArtifactSet, repositories: Sequence[str] = ()) -> Path:
    return cache_dir() / "classpaths" / f"{artifacts.name}-{artifacts.key(repositories)}.json"


def cached_classpath(artifacts: ArtifactSet, repositories: Sequence[str] = ()) -> list[Path] | None:
    """The classpath resolved earlier, when every jar of it is still in the cache."""
    manifest = manifest_path(artifacts, repositories)
    try:
        jars = [Path(p) for p in json.loads(manifest.read_text())["jars"]]
    except (OSError, ValueError, KeyError):
        return None
    return jars if jars and all(j.is_file() for j in jars) else None


def _announce(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def resolve(artifacts: ArtifactSet, repositories: Sequence[str] = (), offline: bool = False,
            report: Callable[[str], None] | None = _announce) -> list[Path]:
    """The jars of ``artifacts`` and their dependencies: from the cache, else resolved now from
    ``repositories`` (searched first) and :func:`default_repositories`.

    A download prints one progress line through ``report`` (it takes a while the first time).
    Raises :class:`ArtifactError` with one line when they cannot be had (``offline`` forbids a
    download: then only the cache counts).
    """
    repositories = [*repositories, *[r for r in default_repositories() if r not in repositories]]
    cached = cached_classpath(artifacts, repositories)
    if cached is not None:
        return cached
    if offline:
        raise ArtifactError(f"{artifacts.name}: not in the cache {cache_dir()} and downloads are off")
    with _resolution_lock():
        cached = cached_classpath(artifacts, repositories)  # another process may have just resolved it
        if cached is not None:
            return cached
        return _download(artifacts, repositories, report)


def fetch_jar(coordinate: Coordinate, repositories: Sequence[str] = (), offline: bool = False,
              report: Callable[[str], None] | None = _announce) -> Path:
    """One jar *without* its dependencies, downloaded from the repository layout and checked
    against its published SHA-1, then cached.

    Why beside :func:`resolve`: a self-contained (shaded) jar needs nothing else, but Ivy would
    still read its POM's parents and every BOM they import — for Google's connector ~200 poms and
    two minutes — before it yields the one file.
    """
    return fetch_file(coordinate, repositories=repositories, offline=offline, report=report)


def fetch_file(coordinate: Coordinate, classifier: str = "", extension: str = "jar", repositories: Sequence[str] = (),
               offline: bool = False, report: Callable[[str], None] | None = _announce) -> Path:
    """One file of an artifact (``<artifact>-<version>[-<classifier>].<extension>``, e.g. an
    application's distribution archive), checked against its published SHA-1 and cached."""
    repositories = [*repositories, *[r for r in default_repositories() if r not in repositories]]
    name = f"{coordinate.artifact}-{coordinate.version}{f'-{classifier}' if classifier else ''}.{extension}"
    label = f"{coordinate}:{extension}:{classifier}" if classifier else str(coordinate)
    target = cache_dir() / "jars" / coordinate.group / name
    if target.is_file():
        return target
    if offline:
        raise ArtifactError(f"{label}: not in the cache {cache_dir()} and downloads are off")
    with _resolution_lock():
        if target.is_file():  # another process may have just fetched it
            return target
        if report is not None:
            report(f"fetching {label} from {', '.join(repositories)} into {cache_dir()} (first run only)")
        failures: list[str] = []
        for repository in repositories:
            url = (f"{repository.rstrip('/')}/{coordinate.group.replace('.', '/')}/{coordinate.artifact}/"
                   f"{coordinate.version}/{name}")
            try:
                _download_checked(url, target, timeout_s=300)
                return target
            except (OSError, ValueError) as exc:  # urllib's errors are OSErrors
                failures.append(f"{url}: {exc}")
        raise ArtifactError(f"cannot fetch {label}: {'; '.join(failures)}")


def _download_checked(url: str, target: Path, timeout_s: float = 60) -> None:
    """``url`` into ``target`` (atomically) when its bytes match the ``.sha1`` published beside it."""
    from urllib.request import urlopen

    with urlopen(url + ".sha1", timeout=timeout_s) as answer:
        expected = answer.read().decode("ascii", "replace").split()[0].strip().lower()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.part")
    digest = hashlib.sha1()  # Maven publishes SHA-1: an integrity check, not a security one
    try:
        with urlopen(url, timeout=timeout_s) as answer, open(partial, "wb") as out:
            while chunk := answer.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != expected:
            raise ValueError(f"SHA-1 {digest.hexdigest()} is not the published {expected}")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


@contextlib.contextmanager
def _resolution_lock() -> Iterator[None]:
    """One resolution at a time per cache: Ivy's cache is not safe for concurrent writers (tests
    and ``services up`` may start several JVM users at once)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _download(artifacts: ArtifactSet, repositories: Sequence[str], report: Callable[[str], None] | None) -> list[Path]:
    if report is not None:
        report(f"fetching {', '.join(str(c) for c in artifacts.coordinates)} and dependencies from "
               f"{', '.join(repositories)} into {cache_dir()} (first run only)")
    root = cache_dir()
    work = root / "ivy-work" / f"{artifacts.name}-{artifacts.key(repositories)}"
    work.mkdir(parents=True, exist_ok=True)
    settings = work / "ivysettings.xml"
    module = work / "ivy.xml"
    classpath_file = work / "classpath.txt"
    settings.write_text(_ivy_settings(root / "ivy", repositories))
    module.write_text(_ivy_module(artifacts))
    classpath_file.unlink(missing_ok=True)
    command = [java_command(), "-cp", str(_ivy_jar()), "org.apache.ivy.Main", "-settings", str(settings),
               "-ivy", str(module), "-confs", "default", "-cachepath", str(classpath_file)]
    log.info("resolving %s: %s", artifacts.name, ", ".join(str(c) for c in artifacts.coordinates))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise ArtifactError(f"{artifacts.name}: no Java found to run Ivy ({command[0]})") from None
    except subprocess.TimeoutExpired:
        raise ArtifactError(f"{artifacts.name}: resolution did not finish in {RESOLVE_TIMEOUT_S} s") from None
    if done.returncode != 0 or not classpath_file.is_file():
        reason = _last_lines(done.stdout + done.stderr, 2)
        raise ArtifactError(f"{artifacts.name}: cannot resolve {', '.join(str(c) for c in artifacts.coordinates)} "
                            f"from {', '.join(repositories)}: {reason}")
    provided = _provided_modules(artifacts.provided_dirs)
    jars = [Path(p) for p in classpath_file.read_text().strip().split(os.pathsep) if p]
    kept = [j for j in jars if _module_of(j) not in provided]
    manifest = manifest_path(artifacts, repositories)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps({"coordinates": [str(c) for c in artifacts.coordinates],
                               "jars": [str(j) for j in kept]}, indent=1))
    tmp.replace(manifest)
    log.info("resolved %s: %d jars (%d provided by the runtime left out)", artifacts.name, len(kept),
             len(jars) - len(kept))
    return kept
