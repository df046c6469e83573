"""Object stores against a real S3 API (moto server on loopback) and real local directories:
atomic writes, ranged reads, listing, multipart upload (completed only when whole, aborted on
failure, invisible after kill -9), Volumes fallbacks and archive-file listing."""

from __future__ import annotations

import errno
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from pubsub_connect.config.loader import validate_connector
from pubsub_connect.io.objectstore import s3 as ostore_s3
from pubsub_connect.io.objectstore.archive_files import list_archive_files
from pubsub_connect.io.objectstore.base import ObjectStore, ObjectStoreError
from pubsub_connect.io.objectstore.local import LocalStore, VolumesStore
from pubsub_connect.io.objectstore.locations import open_store, store_for_location
from pubsub_connect.io.objectstore.s3 import S3Credentials
from pubsub_connect.io.services.process import RunningService
from waiting import wait_until

MIB = 1024 * 1024


@pytest.fixture
def s3_env(s3_service: RunningService, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Credentials for moto through the default AWS chain (environment variables)."""
    env = {k: v for k, v in s3_service.env.items() if k != "AWS_ENDPOINT_URL_S3"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return env


@pytest.fixture
def bucket(s3_endpoint: str, s3_env: dict[str, str], unique_name: str) -> str:
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(Bucket=unique_name)
    return unique_name


@pytest.fixture
def s3_store(bucket: str, s3_endpoint: str) -> ostore_s3.S3Store:
    return ostore_s3.S3Store(bucket, endpoint=s3_endpoint, path_style=True, region="us-east-1",
                          part_size=5 * MIB, multipart_threshold=5 * MIB)


@pytest.fixture(params=["s3", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "s3":
        yield request.getfixturevalue("s3_store")
    else:
        yield LocalStore(tmp_path / "out")


def test_put_read_ranges_list_delete(store: ObjectStore, tmp_path: Path) -> None:
    store.check()
    store.put_bytes("a/2016-02-24/x.gz", b"0123456789")
    source = tmp_path / "src.bin"
    source.write_bytes(b"hello world")
    store.put_file("a/2016-02-25/y.gz", source)
    store.put_bytes("b/z.gz", b"z")
    store.put_bytes("a/zz.gz", b"zz")  # key order, as S3 lists: "a/2016…" < "a/zz.gz"
    assert [o.key for o in store.list("a/")] == ["a/2016-02-24/x.gz", "a/2016-02-25/y.gz", "a/zz.gz"]
    store.delete("a/zz.gz")
    assert store.read("a/2016-02-24/x.gz") == b"0123456789"
    assert store.read("a/2016-02-24/x.gz", 3, 7) == b"3456"
    assert store.read("a/2016-02-24/x.gz", 8) == b"89"
    assert store.read("a/2016-02-25/y.gz", 6, 11) == b"world"
    assert [(o.key, o.size) for o in store.list("a/")] == [
        ("a/2016-02-24/x.gz", 10), ("a/2016-02-25/y.gz", 11)]
    assert [o.key for o in store.list("a/2016-02-2")] == ["a/2016-02-24/x.gz", "a/2016-02-25/y.gz"]
    assert [o.key for o in store.list()] == ["a/2016-02-24/x.gz", "a/2016-02-25/y.gz", "b/z.gz"]
    assert store.exists("b/z.gz") and not store.exists("b/none.gz")
    # overwrite replaces the whole object
    store.put_bytes("a/2016-02-24/x.gz", b"new")
    assert store.read("a/2016-02-24/x.gz") == b"new"
    store.delete("b/z.gz")
    store.delete("b/z.gz")  # deleting twice is fine
    assert not store.exists("b/z.gz")
    with pytest.raises(ObjectStoreError, match="does not exist"):
        store.read("b/z.gz")


def test_s3_multipart_upload_is_whole(s3_store: ostore_s3.S3Store, tmp_path: Path) -> None:
    data = os.urandom(12 * MIB + 123)
    source = tmp_path / "big.gz"
    source.write_bytes(data)
    s3_store.put_file("big/file.gz", source)
    head = s3_store.client.head_object(Bucket=s3_store.bucket, Key="big/file.gz")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].strip('"').endswith("-3")  # three parts: 5 + 5 + 2 MiB
    assert s3_store.read("big/file.gz") == data
    assert s3_store.read("big/file.gz", 5 * MIB - 2, 5 * MIB + 2) == data[5 * MIB - 2:5 * MIB + 2]
    assert s3_store.incomplete_uploads() == []


def test_s3_failed_multipart_upload_leaves_nothing(s3_store: ostore_s3.S3Store, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "big.gz"
    source.write_bytes(os.urandom(11 * MIB))
    client = s3_store.client
    real_upload_part = client.upload_part
    calls: list[int] = []

    def failing_upload_part(**kwargs: object) -> object:
        calls.append(int(kwargs["PartNumber"]))  # type: ignore[call-overload]
        if kwargs["PartNumber"] == 2:
            raise ConnectionResetError("network went away")
        return real_upload_part(**kwargs)

    monkeypatch.setattr(client, "upload_part", failing_upload_part)
    with pytest.raises(ConnectionResetError):
        s3_store.put_file("big/failed.gz", source)
    assert calls == [1, 2]
    assert not s3_store.exists("big/failed.gz")
    assert s3_store.incomplete_uploads() == []  # aborted, no parts left behind


def test_s3_upload_killed_mid_way_is_invisible(s3_store: ostore_s3.S3Store, s3_endpoint: str, tmp_path: Path,
                                               s3_env: dict[str, str]) -> None:
    """kill -9 between parts: the object never appears; the incomplete upload is listed and can be
    aborted (in production a bucket lifecycle rule does that)."""
    source = tmp_path / "big.gz"
    source.write_bytes(os.urandom(11 * MIB))
    marker = tmp_path / "part1.done"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from pubsub_connect.io.objectstore.s3 import S3Store
        store = S3Store({s3_store.bucket!r}, endpoint={s3_endpoint!r}, path_style=True, region="us-east-1",
                        part_size=5 * 1024 * 1024, multipart_threshold=5 * 1024 * 1024)
        real = store.client.upload_part
        def slow(**kwargs):
            result = real(**kwargs)
            Path({str(marker)!r}).write_text("x")
            time.sleep(120)
            return result
        store.client.upload_part = slow
        store.put_file("big/killed.gz", {str(source)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, **s3_env},
                            start_new_session=True)
    try:
        def first_part_uploaded() -> bool:
            if marker.exists():
                return True
            assert proc.poll() is None, "uploader exited early"
            return False

        wait_until(first_part_uploaded, 60, "the upload of the first part")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    assert not s3_store.exists("big/killed.gz")
    assert [o.key for o in s3_store.list("big/")] == []
    assert s3_store.incomplete_uploads("big/") == ["big/killed.gz"]
    assert s3_store.abort_incomplete("big/") == 1
    assert s3_store.incomplete_uploads("big/") == []


def _elsewhere(store: ObjectStore, key: str) -> subprocess.CompletedProcess[bytes]:
    """Unpickle ``store`` in a process that has no AWS settings at all (like an executor on another
    machine), write ``key`` and read it back."""
    script = textwrap.dedent(f"""
        import pickle, sys
        store = pickle.loads(sys.stdin.buffer.read())
        store.put_bytes({key!r}, b"from elsewhere")
        sys.stdout.write(store.read({key!r}).decode())
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_CONFIG_FILE": os.devnull,
                "AWS_EC2_METADATA_DISABLED": "true"})
    return subprocess.run([sys.executable, "-c", script], input=pickle.dumps(store), env=env,
                          capture_output=True, timeout=60, check=False)


def test_portable_s3_store_works_where_the_environment_has_nothing(
        bucket: str, s3_endpoint: str, s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark executors do not share the driver's environment: the portable copy carries the
    credentials, region and endpoint resolved here (never showing the secret), and pickles without
    its client."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    store = ostore_s3.S3Store(bucket, path_style=True)  # endpoint and region from the environment
    store.check()  # a client exists now: pickling must leave it behind
    portable = store.portable()
    assert (portable.endpoint, portable.region) == (s3_endpoint, s3_env["AWS_DEFAULT_REGION"])
    assert portable.credentials == S3Credentials(s3_env["AWS_ACCESS_KEY_ID"], s3_env["AWS_SECRET_ACCESS_KEY"])
    shown = repr(ostore_s3.S3Store(bucket, credentials=S3Credentials("AKIDEXAMPLE", "s3cr3t", "t0ken")))
    assert "AKIDEXAMPLE" in shown and "s3cr3t" not in shown and "t0ken" not in shown
    done = _elsewhere(portable, "travel/portable.gz")
    assert done.returncode == 0 and done.stdout == b"from elsewhere", done.stderr.decode()[-2000:]
    assert store.read("travel/portable.gz") == b"from elsewhere"
    # The plain store relies on the environment, which the other process does not have.
    failed = _elsewhere(store, "travel/plain.gz")
    assert failed.returncode != 0 and not store.exists("travel/plain.gz")


def test_s3_missing_bucket_is_one_line(s3_endpoint: str, s3_env: dict[str, str]) -> None:
    store = ostore_s3.S3Store("no-such-bucket-here", endpoint=s3_endpoint, path_style=True, region="us-east-1")
    with pytest.raises(ObjectStoreError) as info:
        store.check()
    assert str(info.value) == f"s3.bucket='no-such-bucket-here' does not exist at {s3_endpoint}"


def test_local_writes_go_through_a_hidden_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalStore(tmp_path / "out")
    seen: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy_replace(src: str | Path, dst: str | Path) -> None:
        seen.append((Path(src).parent.name, Path(dst).relative_to(tmp_path / "out").as_posix()))
        assert Path(src).read_bytes() == b"payload"  # whole before it becomes visible
        assert not Path(dst).exists()
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy_replace)
    store.put_bytes("d/2016-02-24/k.gz", b"payload")
    assert seen == [(".tmp", "d/2016-02-24/k.gz")]
    assert list((tmp_path / "out" / ".tmp").iterdir()) == []


def test_local_leftovers_of_dead_writers_are_hidden_and_cleaned(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "out")
    store.put_bytes("k/a.gz", b"a")
    tmp = tmp_path / "out" / ".tmp"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    host = socket.gethostname()
    leftover = tmp / f"{host}-{dead.pid}-deadbeef"
    leftover.write_bytes(b"partial")
    alive = tmp / f"{host}-{os.getpid()}-cafe"
    alive.write_bytes(b"in progress")
    foreign = tmp / f"otherhost-{dead.pid}-beef"
    foreign.write_bytes(b"someone else's")
    assert [o.key for o in store.list()] == ["k/a.gz"]
    assert store.cleanup_temp() == 1
    assert sorted(p.name for p in tmp.iterdir()) == sorted([alive.name, foreign.name])


def test_volumes_store_falls_back_when_rename_is_unsupported(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    store = VolumesStore(tmp_path / "vol")

    def no_rename(src: str | Path, dst: str | Path) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    def no_fsync(fd: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "replace", no_rename)
    monkeypatch.setattr(os, "fsync", no_fsync)
    source = tmp_path / "f.gz"
    source.write_bytes(b"x" * 3_000_000)
    store.put_file("t/2016-02-24/t-00000-000000000000.gz", source)
    assert store.read("t/2016-02-24/t-00000-000000000000.gz") == b"x" * 3_000_000
    assert list((tmp_path / "vol" / ".tmp").iterdir()) == []
    # a plain local store does not hide such errors
    with pytest.raises(ObjectStoreError, match="Invalid argument"):
        LocalStore(tmp_path / "loc").put_bytes("a.gz", b"a")


def _archive_config(**keys: str) -> dict[str, str]:
    return {"name": "arch", "connector.class": "com.deviantart.kafka_connect_s3.S3SinkConnector",
            "topics": "t", "local.buffer.dir": "/tmp", **keys}


def test_open_store_picks_the_target() -> None:
    s3 = open_store(validate_connector(_archive_config(**{
        "s3.bucket": "b", "s3.endpoint": "http://127.0.0.1:9", "s3.path_style": "true",
        "s3.region": "eu-west-1"})))
    assert isinstance(s3, ostore_s3.S3Store)
    assert (s3.bucket, s3.endpoint, s3.path_style, s3.region) == (
        "b", "http://127.0.0.1:9", True, "eu-west-1")
    volumes = open_store(validate_connector(_archive_config(**{"output.path": "/Volumes/c/s/v/arch"})))
    assert type(volumes) is VolumesStore and volumes.url() == "/Volumes/c/s/v/arch"
    local = open_store(validate_connector(_archive_config(**{"output.path": "/data/arch"})))
    assert type(local) is LocalStore


def test_store_for_location() -> None:
    store, key = store_for_location("s3://bkt/p/2016-02-24/t-00000-000000000000.gz",
                                           endpoint="http://127.0.0.1:9")
    assert isinstance(store, ostore_s3.S3Store) and store.bucket == "bkt" and store.path_style
    assert key == "p/2016-02-24/t-00000-000000000000.gz"
    store, key = store_for_location("/Volumes/c/s/v/2016-02-24/t-00000-000000000000.gz")
    assert type(store) is VolumesStore and store.url() == "/Volumes/c/s/v/2016-02-24"
    assert key == "t-00000-000000000000.gz"
    with pytest.raises(ObjectStoreError, match="expected s3://BUCKET/KEY"):
        store_for_location("s3://bucket-only")


def test_list_archive_files_groups_by_partition(store: ObjectStore) -> None:
    keys = [
        "arch/2016-02-24/my-topic-00000-000000000000.gz",
        "arch/2016-02-24/my-topic-00000-000000000000.index.json",
        "arch/2016-02-25/my-topic-00000-000000000100.gz",
        "arch/2016-02-25/my-topic-00000-000000000100.index.json",
        "arch/2016-02-24/my-topic-00001-000000000000.gz",  # no index (original connector crash)
        "arch/2016-02-25/my-topic-00001-000000000050.index.json",  # index without .gz: not committed
        "arch/2016-02-24/other-00000-000000000000.gz", "arch/2016-02-24/other-00000-000000000000.index.json",
        "arch/readme.txt", "elsewhere/2016-02-24/my-topic-00000-000000000200.gz",
    ]
    for key in keys:
        store.put_bytes(key, b"12345")
    grouped = list_archive_files(store, "arch/")
    assert {tp: [(f.name.first_offset, f.name.date, f.has_index, f.size) for f in files]
            for tp, files in grouped.items()} == {
        ("my-topic", 0): [(0, "2016-02-24", True, 5), (100, "2016-02-25", True, 5)],
        ("my-topic", 1): [(0, "2016-02-24", False, 5)],
        ("other", 0): [(0, "2016-02-24", True, 5)],
    }
