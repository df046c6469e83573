"""Secrets never leak: ``gcp.credentials.json`` in validate output, run output, logs, Delta tables.

The requirement: "run with ``gcp.credentials.json`` set and assert it never appears in logs, progress
output, ``validate`` output, or Delta tables". The credential is a fake but well-formed service
account JSON whose private key and key id carry a recognisable marker. With
``cps.useEmulator=true`` the emulator ignores credentials, so the sink really runs end to end
while the secret travels through everything a real deployment's would: the parsed config, the
pickled publisher config shipped to Spark's Python workers, the driver's logs.

Where a leak could hide, and how each is checked:

* what a user sees — ``pubsub-connect validate`` and ``pubsub-connect run … --once`` (as
  subprocesses, so Spark's and py4j's own output is included), once plain and once with
  ``--debug`` (DEBUG logging of every library, py4j's command traces, tracebacks);
* error messages for a failing config — a second connector whose ``gcp.credentials.json`` is
  broken (marker inside) stops each run; with ``--debug`` that is a traceback; and in-process,
  google-auth's failure to load the fake key (``cps.useEmulator=false``);
* storage — every file under ``storage.root`` (tables, ``_delta_log``, Spark checkpoints), read
  raw and, for Parquet, decoded (values could sit in compressed column chunks).

A leak may be encoded: pickles and py4j traces carry bytes as base64. So the marker is also
searched as base64 (standard and URL-safe, all three alignments).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from e2e.harness import sink_config
from integration.kafka_helpers import Rec, create_topic, produce
from integration.pubsub_helpers import assert_no_more_messages, create_topic_and_subscription, pull_all
from pubsub_connect.config.errors import MASK, ConfigError
from pubsub_connect.pipelines.pubsub_settings import cps_connection

MARKER = "SECRET-MARKER-9f4c2e7a-do-not-print"
#: Service-account shaped, so nothing rejects it before it has travelled; the key is not a key.
FAKE_SERVICE_ACCOUNT = {
    "type": "service_account",
    "project_id": "test-project",
    "private_key_id": f"{MARKER}-key-id",
    "private_key": f"-----BEGIN PRIVATE KEY-----\n{MARKER}\n-----END PRIVATE KEY-----\n",
    "client_email": "leak-check@test-project.iam.gserviceaccount.com",
    "client_id": "100000000000000000001",
    "token_uri": "https://oauth2.googleapis.com/token",
}
CREDENTIALS = json.dumps(FAKE_SERVICE_ACCOUNT)
#: A failing config: not JSON at all, and the marker in it.
BROKEN_CREDENTIALS = "{this is not json " + MARKER
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
RUN_TIMEOUT_S = 600


def leak_forms(secret: str) -> list[bytes]:
    """The secret as raw bytes and every base64 substring that only its own bytes determine."""
    raw = secret.encode()
    forms = [raw]
    for pad in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * pad + raw)
            first = -(-8 * pad // 6)  # first 6-bit group entirely inside the secret
            last = (8 * (pad + len(raw)) - 6) // 6  # last one
            forms.append(encoded[first:last + 1])
    return forms


FORMS = leak_forms(MARKER)


#: The start of a log record in the CLI's format (``%(asctime)s %(levelname)s %(name)s: ``).
_LOG_RECORD = re.compile(rb"(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ([A-Z]+) ([\w.]+): ")


@dataclass(frozen=True)
class Leak:
    """Where a secret was found: how it was encoded, the start of its line, the text before it,
    and the log record it belongs to (``(level, logger)``; log messages may span lines)."""

    encoding: str
    line_head: bytes
    before: bytes
    record: tuple[str, str] | None


def find_leaks(data: bytes | str) -> list[Leak]:
    """Every occurrence of the secret in any of its forms."""
    blob = data.encode("utf-8", "replace") if isinstance(data, str) else data
    leaks = []
    for form in FORMS:
        at = blob.find(form)
        while at >= 0:
            line_start = blob.rfind(b"\n", 0, at) + 1
            records = list(_LOG_RECORD.finditer(blob, 0, at))
            record = (records[-1].group(1).decode(), records[-1].group(2).decode()) if records else None
            leaks.append(Leak("raw" if form == FORMS[0] else "base64", blob[line_start:min(at, line_start + 100)],
                              blob[max(line_start, at - 100):at], record))
            at = blob.find(form, at + 1)
    return leaks


def assert_no_leak(what: str, data: bytes | str) -> None:
    """Fail naming where the secret is (its line's start and the text before it, not the secret)."""
    leaks = find_leaks(data)
    assert not leaks, (f"secret found {len(leaks)} time(s) in {what}, first ({leaks[0].encoding}): "
                       f"log record {leaks[0].record}, line {leaks[0].line_head!r}, after {leaks[0].before!r}")


def test_leak_forms_catch_base64() -> None:
    """The detector itself: a base64-encoded pickle of the credentials is caught."""
    assert_no_leak("clean text", "nothing to see")
    for blob in (CREDENTIALS, base64.b64encode(b"x" + CREDENTIALS.encode()), base64.b64encode(CREDENTIALS.encode())):
        with pytest.raises(AssertionError):
            assert_no_leak("probe", blob)


def _properties(values: dict[str, str]) -> str:
    """A .properties file (backslashes escaped, so the JSON's ``\\n`` survives)."""
    return "".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in values.items())


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``pubsub-connect`` in a subprocess, output captured (stdout, stderr: logs, Spark, py4j)."""
    return subprocess.run([sys.executable, "-m", "pubsub_connect.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S, env=dict(os.environ), check=False)


def _check_output(what: str, proc: subprocess.CompletedProcess[str]) -> None:
    assert_no_leak(f"{what} stdout", proc.stdout)
    assert_no_leak(f"{what} stderr", proc.stderr)


def _scan_storage(root: Path) -> int:
    """Every file under ``root``, raw; Parquet files also decoded. Returns the number of files."""
    files = [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        assert_no_leak(str(path.relative_to(root)), path.read_bytes())
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            assert_no_leak(f"{path.relative_to(root)} (decoded)", repr(table.to_pylist()))
            assert_no_leak(f"{path.relative_to(root)} (metadata)", repr(pq.read_metadata(path).metadata))
    return len(files)


@dataclass(frozen=True)
class Setup:
    """Config files in ``workdir`` for a sink (``good``) and a failing connector (``broken``)."""

    workdir: Path
    root: Path
    good: str
    broken: str
    subscription: str


def _setup(kafka_bootstrap: str, workdir: Path, name: str) -> Setup:
    root = workdir / "storage"
    good, broken = name, f"{name}-broken"
    for topic in (good, broken):
        create_topic(kafka_bootstrap, topic)
    _, subscription = create_topic_and_subscription(good)
    create_topic_and_subscription(broken)
    (workdir / "worker.properties").write_text(_properties({
        "bootstrap.servers": kafka_bootstrap, "storage.root": str(root), "spark.master": "local[2]",
        "spark.sql.shuffle.partitions": "2"}))
    (workdir / "secrets.properties").write_text(_properties({"creds": CREDENTIALS}))
    common = {"connector.class": "cps-sink", "cps.project": "test-project", "cps.useEmulator": "true",
              "tasks.max": "2"}
    # The sink: everything that writes tables and logs per record is on (DLQ, errors.log, headers,
    # metadata), and the credentials come in through a Connect config provider.
    (workdir / "sink.properties").write_text(_properties({
        **common, "name": good, "topics": good, "cps.topic": good,
        "gcp.credentials.json": f"${{file:{workdir / 'secrets.properties'}:creds}}",
        "value.converter": JSON_CONVERTER, "value.converter.schemas.enable": "false",
        "errors.tolerance": "all", "errors.log.enable": "true", "headers.publish": "true",
        "metadata.publish": "true"}))
    # A failing config with the secret inline (and broken): runs ingest and convert, then stops
    # when the publish stage reads its credentials.
    (workdir / "broken.properties").write_text(_properties({
        **common, "name": broken, "topics": broken, "cps.topic": broken, "gcp.credentials.json": BROKEN_CREDENTIALS}))
    # And one with the good secret inline, for validate.
    (workdir / "inline.properties").write_text(_properties({
        **common, "name": "inline", "topics": "inline", "cps.topic": "inline", "gcp.credentials.json": CREDENTIALS}))
    produce(kafka_bootstrap, good, [Rec(json.dumps({"n": n}).encode(), key=f"k{n}".encode(), headers=[("h", b"v")])
                                    for n in range(5)] + [Rec(b"{not json", key=b"bad")])
    produce(kafka_bootstrap, broken, [Rec(b"x")])
    return Setup(workdir, root, good, broken, subscription)


def _check_run_and_storage(setup: Setup, run: subprocess.CompletedProcess[str]) -> None:
    """Both connectors ran: the sink published its 5 good records and dead-lettered the bad one,
    the broken connector stopped; no file under storage.root holds the secret."""
    assert f"[{setup.good}] done" in run.stdout, run.stdout
    assert len(pull_all(setup.subscription, 5, timeout=60)) == 5
    assert_no_more_messages(setup.subscription, wait=0.5)
    scanned = _scan_storage(setup.root)
    assert (setup.root / "dlq" / setup.good / "_delta_log").is_dir()  # a DLQ row was written, and scanned
    assert (setup.root / "bronze" / setup.broken / "_delta_log").is_dir()
    assert (setup.root / "checkpoints").is_dir() and scanned > 20, scanned


@pytest.mark.usefixtures("pubsub_emulator_host")
def test_validate_run_and_tables_never_show_the_credentials(kafka_bootstrap: str, tmp_path: Path,
                                                            unique_name: str) -> None:
    setup = _setup(kafka_bootstrap, tmp_path, unique_name)
    validate = _cli(["validate", "--worker", "worker.properties", "sink.properties", "inline.properties",
                     "broken.properties"], tmp_path)
    assert validate.returncode == 0, validate.stderr
    _check_output("validate", validate)
    assert validate.stdout.count(f"gcp.credentials.json={MASK}") == 3, validate.stdout

    run = _cli(["run", "--worker", "worker.properties", "sink.properties", "broken.properties", "--once"], tmp_path)
    _check_output("run --once", run)
    assert run.returncode == 2, run.stderr[-2000:]
    error = run.stderr.strip().splitlines()[-1]
    assert error.startswith("error: broken.properties: gcp.credentials.json is not valid JSON"), error
    _check_run_and_storage(setup, run)


@pytest.mark.usefixtures("pubsub_emulator_host")
def test_debug_run_never_shows_the_credentials(kafka_bootstrap: str, tmp_path: Path, unique_name: str) -> None:
    setup = _setup(kafka_bootstrap, tmp_path, unique_name)
    run = _cli(["--debug", "run", "--worker", "worker.properties", "sink.properties", "broken.properties", "--once"],
               tmp_path)
    assert run.returncode == 1, run.stderr[-2000:]  # --debug re-raises: a traceback, not one line
    assert "Traceback" in run.stderr and "gcp.credentials.json is not valid JSON" in run.stderr
    assert " INFO pubsub_connect." in run.stderr  # the debug logging was really on (default: WARNING)
    _check_run_and_storage(setup, run)
    # This run found a leak: py4j logs each command sent to the JVM at DEBUG, i.e. base64 pickles of
    # the publish function, which carries the credentials. The CLI now keeps py4j at INFO.
    assert_no_leak("--debug run --once stdout", run.stdout)
    assert_no_leak("--debug run --once stderr", run.stderr)


def test_google_auth_failure_does_not_echo_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the real service (no emulator) google-auth parses the key and fails on it: the
    one-line error, and the whole traceback a ``--debug`` run would print, stay clean."""
    monkeypatch.delenv("PUBSUB_EMULATOR_HOST", raising=False)
    config = sink_config("auth", "t", "t", **{"cps.useEmulator": "false", "gcp.credentials.json": CREDENTIALS})
    connection = cps_connection(config)
    assert_no_leak("repr(Connection)", repr(connection))
    with pytest.raises(ConfigError) as err:
        connection.credentials()
    assert str(err.value).startswith("gcp.credentials.json does not hold usable Google credentials")
    assert_no_leak("the error", str(err.value))
    assert_no_leak("the traceback", "".join(traceback.format_exception(err.value)))
