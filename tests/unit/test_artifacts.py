"""Resolution of JVM artifacts: the cache manifest, the runtime's own jars left out, and one-line
errors when nothing can be had."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from pubsub_connect.io import artifacts
from pubsub_connect.io.artifacts import ArtifactError, ArtifactSet, Coordinate
from pubsub_connect.io.spark import spark_connectors

SMALL = ArtifactSet("small", (Coordinate.parse("org.example:thing_2.13:1.0.0"),),
                    excludes=(("org.example", "other"),))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PUBSUB_CONNECT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(artifacts.REPOSITORIES_ENV, raising=False)
    return tmp_path / "cache"


def test_coordinates_parse_and_print() -> None:
    assert str(Coordinate.parse(" io.delta:delta-spark_4.2_2.13:4.4.0 ")) == "io.delta:delta-spark_4.2_2.13:4.4.0"
    with pytest.raises(ValueError, match="group:artifact:version"):
        Coordinate.parse("io.delta:delta-spark")


def test_spark_connectors_pair_with_the_installed_pyspark_and_delta() -> None:
    import pyspark

    line = ".".join(pyspark.__version__.split(".")[:2])
    delta = {"4.0": "io.delta:delta-spark_2.13:4.0.0", "4.1": "io.delta:delta-spark_4.1_2.13:4.4.0",
             "4.2": "io.delta:delta-spark_4.2_2.13:4.4.0"}[line]  # each line's tested combination
    avro = f"org.apache.spark:spark-avro_2.13:{pyspark.__version__}"
    chosen = spark_connectors()
    assert [str(c) for c in chosen.coordinates] == [
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}", delta, avro]
    assert chosen.provided_dirs == (artifacts.pyspark_jars_dir(),)
    assert [str(c) for c in spark_connectors(kafka=False).coordinates] == [delta, avro]


def test_modules_the_runtime_provides_are_recognised(tmp_path: Path) -> None:
    for name in ("zstd-jni-1.5.7-7.jar", "spark-core_2.13-4.2.0.jar", "jackson-databind-2.21.2.jar", "README"):
        (tmp_path / name).write_text("")
    assert artifacts._provided_modules([tmp_path]) == {"zstd-jni", "spark-core_2.13", "jackson-databind"}


def test_ivy_files_name_the_coordinates_excludes_and_repositories(tmp_path: Path) -> None:
    module = artifacts._ivy_module(SMALL)
    assert '<dependency org="org.example" name="thing_2.13" rev="1.0.0" conf="default->default"/>' in module
    assert '<exclude org="org.example" module="other"/>' in module
    settings = artifacts._ivy_settings(tmp_path, ["https://mirror.example/m2", artifacts.MAVEN_CENTRAL])
    assert 'root="https://mirror.example/m2/"' in settings
    assert settings.index("mirror.example") < settings.index("repo1.maven.org")


def test_a_manifest_counts_only_while_its_jars_are_there(cache: Path, tmp_path: Path) -> None:
    jar = tmp_path / "thing.jar"
    jar.write_text("")
    manifest = artifacts.manifest_path(SMALL, [artifacts.MAVEN_CENTRAL])
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"jars": [str(jar)]}))
    assert artifacts.resolve(SMALL, offline=True) == [jar]
    jar.unlink()
    with pytest.raises(ArtifactError, match=r"not in the cache .* downloads are off"):
        artifacts.resolve(SMALL, offline=True)


def test_an_unreachable_repository_is_one_line(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(artifacts.REPOSITORIES_ENV, "http://127.0.0.1:9/")
    lines: list[str] = []
    with pytest.raises(ArtifactError) as raised:
        artifacts.resolve(SMALL, report=lines.append)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("small: cannot resolve org.example:thing_2.13:1.0.0 from http://127.0.0.1:9/: ")
    assert "Connection refused" in message
    assert lines == [f"fetching org.example:thing_2.13:1.0.0 and dependencies from http://127.0.0.1:9/ into {cache} "
                     "(first run only)"]


def test_fetch_jar_checks_the_published_sha1_and_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One jar from a repository's layout (a local HTTP server here): kept only when its bytes
    match the ``.sha1`` beside it, then served from the cache without the network."""
    import hashlib
    import http.server
    import threading

    repo = tmp_path / "repo"
    module = repo / "com" / "example" / "shaded" / "1.0"
    module.mkdir(parents=True)
    (module / "shaded-1.0.jar").write_bytes(b"jar bytes")
    (module / "shaded-1.0.jar.sha1").write_text(hashlib.sha1(b"jar bytes").hexdigest() + "  shaded-1.0.jar\n")
    module_bad = repo / "com" / "example" / "bad" / "1.0"
    module_bad.mkdir(parents=True)
    (module_bad / "bad-1.0.jar").write_bytes(b"tampered")
    (module_bad / "bad-1.0.jar.sha1").write_text(hashlib.sha1(b"original").hexdigest())

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(repo))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("PUBSUB_CONNECT_CACHE", str(tmp_path / "cache"))
    # the local server replaces Maven Central: nothing leaves the machine
    monkeypatch.setenv(artifacts.REPOSITORIES_ENV, f"http://127.0.0.1:{server.server_address[1]}/")
    try:
        jar = artifacts.fetch_jar(artifacts.Coordinate("com.example", "shaded", "1.0"), report=None)
        assert jar == tmp_path / "cache" / "jars" / "com.example" / "shaded-1.0.jar"
        assert jar.read_bytes() == b"jar bytes"
        with pytest.raises(artifacts.ArtifactError, match=r"^cannot fetch com\.example:bad:1\.0: .*SHA-1 "):
            artifacts.fetch_jar(artifacts.Coordinate("com.example", "bad", "1.0"), report=None)
        assert not (tmp_path / "cache" / "jars" / "com.example" / "bad-1.0.jar").exists()
    finally:
        server.shutdown()
        server.server_close()
    # cached: no server needed, offline is fine
    assert artifacts.fetch_jar(artifacts.Coordinate("com.example", "shaded", "1.0"), offline=True) == jar
