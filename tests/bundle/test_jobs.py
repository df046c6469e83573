"""pubsub-connect-job without Spark: secret references, redaction, exit codes, parallelism."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pubsub_connect import jobs
from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import MASK, ConfigError
from pubsub_connect.io import databricks_secrets
from pubsub_connect.pipelines.runtime import apply_tasks_max

GCP_JSON = '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\nabc\\n"}'


class FakeSecrets:
    """dbutils.secrets stand-in that records every read."""

    def __init__(self, values: dict[tuple[str, str], str]):
        self.values = values
        self.reads: list[tuple[str, str]] = []

    def __call__(self, scope: str, key: str) -> str:
        self.reads.append((scope, key))
        if (scope, key) not in self.values:
            raise RuntimeError(f"Secret does not exist with scope: {scope} and key: {key}")
        return self.values[(scope, key)]


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_both_reference_forms_resolve_and_each_secret_is_read_once() -> None:
    secrets = FakeSecrets({("scope-a", "k1"): "v1", ("scope-b", "k2"): "v2"})
    resolver = databricks_secrets.SecretResolver(secrets, default_scope="scope-a")
    text = "x=${secrets:k1};y=${secrets:scope-b/k2};z={{secrets/scope-a/k1}};w={{ secrets/scope-b/k2 }}"
    assert resolver.resolve(text, "f", "key") == "x=v1;y=v2;z=v1;w=v2"
    assert secrets.reads == [("scope-a", "k1"), ("scope-b", "k2")]
    assert resolver.values == ["v1", "v2"]
    assert resolver.resolve("no reference ${env:X} {{other}}", "f", "key") == "no reference ${env:X} {{other}}"


def test_reference_errors_are_one_line_config_errors() -> None:
    resolver = databricks_secrets.SecretResolver(FakeSecrets({}), default_scope=None)
    with pytest.raises(ConfigError) as no_scope:
        resolver.resolve("${secrets:k}", "a.properties", "gcp.credentials.json")
    assert str(no_scope.value) == (
        "a.properties: gcp.credentials.json refers to ${secrets:k} but no secret scope is set "
        "(write ${secrets:SCOPE/KEY}, or pass --secret-scope / set PUBSUB_CONNECT_SECRET_SCOPE)")
    with pytest.raises(ConfigError) as missing:
        resolver.resolve("${secrets:s/k}", "a.properties", "gcp.credentials.json")
    assert str(missing.value) == (
        "a.properties: gcp.credentials.json refers to secret s/k, which cannot be read "
        "(RuntimeError: Secret does not exist with scope: s and key: k)")


def test_default_getter_creates_dbutils_only_when_a_secret_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []

    class FakeDbutilsSecrets:
        def get(self, scope: str, key: str) -> str:
            return f"{scope}:{key}"

    class FakeDbutils:
        secrets = FakeDbutilsSecrets()

    def make() -> FakeDbutils:
        created.append("dbutils")
        return FakeDbutils()

    monkeypatch.setattr(databricks_secrets, "databricks_dbutils", make)
    getter = databricks_secrets.dbutils_secret_getter()
    assert created == []
    assert getter("s", "a") == "s:a"
    assert getter("s", "b") == "s:b"
    assert created == ["dbutils"]


def test_load_run_config_resolves_files_and_overrides_in_memory(tmp_path: Path) -> None:
    connector = _write(tmp_path / "c.properties", (
        "name=c1\nconnector.class=cps-sink\ntopics=t\ncps.topic=pt\ncps.project=p\n"
        "gcp.credentials.json=${secrets:gcp}\n"))
    worker = _write(tmp_path / "w.properties", (
        "bootstrap.servers={{secrets/ops/brokers}}\nstorage.root=/tmp/root\n"
        "consumer.sasl.jaas.config=${secrets:ops/jaas}\nproducer.sasl.jaas.config=${secrets:ops/jaas}\n"))
    secrets = FakeSecrets({("pc", "gcp"): GCP_JSON, ("ops", "brokers"): "b1:9093", ("ops", "jaas"): "JAAS",
                           ("pc", "other"): "b9:9093"})
    resolver = databricks_secrets.SecretResolver(secrets, default_scope="pc")
    run_config = jobs.load_run_config(connector, worker, ["producer.sasl.jaas.config=plain",
                                                          "c1:tasks.max=3"], resolver)
    (conn,) = run_config.connectors
    assert conn.get("gcp.credentials.json") == GCP_JSON
    assert conn.get("tasks.max") == 3
    assert conn.effective()["gcp.credentials.json"] == MASK
    assert run_config.worker.bootstrap_servers == "b1:9093"
    assert run_config.worker.client_conf("consumer.") == {"sasl.jaas.config": "JAAS"}
    assert run_config.worker.client_conf("producer.") == {"sasl.jaas.config": "plain"}  # --set wins
    assert sorted(secrets.reads) == [("ops", "brokers"), ("ops", "jaas"), ("pc", "gcp")]
    # nothing was written next to the files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.properties", "w.properties"]


def test_a_secret_quoted_by_an_error_is_masked_and_the_exit_code_is_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    connector = _write(tmp_path / "c.properties", (
        "name=c1\nconnector.class=cps-sink\ntopics=t\ncps.topic=pt\ncps.project=p\ntasks.max=${secrets:tm}\n"))
    secrets = FakeSecrets({("pc", "tm"): "hunter2-not-a-number"})
    with pytest.raises(SystemExit) as exit_info:
        jobs.main(["--connector", connector, "--secret-scope", "pc", "--stage", "ingest"], secret_getter=secrets)
    assert exit_info.value.code == jobs.EXIT_USER_ERROR
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"error: {connector}: tasks.max='{MASK}' is not an integer (value from a secret)\n"


def _cps_sink_file(tmp_path: Path) -> str:
    return _write(tmp_path / "c.properties",
                  "name=c1\nconnector.class=cps-sink\ntopics=t\ncps.topic=pt\ncps.project=p\n")


def test_unknown_stage_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    connector = _cps_sink_file(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        jobs.main(["--connector", connector, "--stage", "publsh"], secret_getter=FakeSecrets({}))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "error: unknown stage(s) ['publsh'] for a cps_sink connector in pipeline.mode=staged "
        "(stages: ingest, convert, publish)\n")


def test_maintain_runs_no_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    connector = _cps_sink_file(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        jobs.main(["--connector", connector, "--maintain", "--once"], secret_getter=FakeSecrets({}))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "error: --maintain and --replay run no stage, and one at a time: leave out --stage and --once\n")


def test_replay_job_parameters_left_empty_are_options_left_out(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    connector = _cps_sink_file(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        jobs.main(["--connector", connector, "--replay", "--offsets", "", "--since", "", "--until", "",
                   "--to-topic", "", "--dry-run", "true"], secret_getter=FakeSecrets({}))
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: replay: give --offsets topic:partition:first-last, or --since/--until\n"


def test_redacting_filter_masks_messages_arguments_and_tracebacks() -> None:
    resolver = databricks_secrets.SecretResolver(FakeSecrets({("s", "k"): GCP_JSON}), default_scope="s")
    resolver.resolve("${secrets:k}", "f", "key")
    redactor = jobs.RedactingFilter(resolver)
    try:
        raise ValueError(f"bad credentials {GCP_JSON!r}")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "using %s and %r", (GCP_JSON, GCP_JSON),
                                   sys.exc_info())
    assert redactor.filter(record) is True
    assert record.getMessage() == f"using {MASK} and '{MASK}'"
    assert record.exc_info is None
    assert GCP_JSON not in (record.exc_text or "") and repr(GCP_JSON)[1:-1] not in (record.exc_text or "")
    assert f"bad credentials '{MASK}'" in (record.exc_text or "")


def test_tasks_max_sets_shuffle_partitions_unless_the_worker_does(tmp_path: Path) -> None:
    connector = _write(tmp_path / "c.properties",
                       "name=c1\nconnector.class=cps-sink\ntopics=t\ncps.topic=pt\ncps.project=p\ntasks.max=7\n")
    run_config = cfg.load([connector])
    apply_tasks_max(run_config)
    assert run_config.worker.spark_conf["spark.sql.shuffle.partitions"] == "7"
    run_config = cfg.load([connector], overrides=["spark.sql.shuffle.partitions=16"])
    apply_tasks_max(run_config)
    assert run_config.worker.spark_conf["spark.sql.shuffle.partitions"] == "16"


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        jobs.main(["--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: pubsub-connect-job [-h] [--version] --connector")


def test_a_set_override_replaces_a_secret_reference_without_reading_it(tmp_path: Path) -> None:
    connector = _write(tmp_path / "c.properties", (
        "name=c1\nconnector.class=cps-sink\ntopics=t\ncps.topic=pt\ncps.project=p\n"
        "gcp.credentials.json=${secrets:gcp}\n"))
    secrets = FakeSecrets({})
    run_config = jobs.load_run_config(connector, None, ["c1:gcp.credentials.json={}"],
                                      databricks_secrets.SecretResolver(secrets, default_scope="pc"))
    assert run_config.connectors[0].get("gcp.credentials.json") == "{}"
    assert secrets.reads == []


#: The cluster environment of a bundle deployed without --var for the Kafka brokers and the
#: Google Cloud project (databricks.yml's defaults, variable connector_cluster).
PLACEHOLDER_ENV = {
    "PUBSUB_CONNECT_BOOTSTRAP_SERVERS": "localhost:9092",
    "PUBSUB_CONNECT_GCP_PROJECT": "my-gcp-project",
    "PUBSUB_CONNECT_STORAGE_ROOT": "/Volumes/main/pubsub_connect/pubsub_connect",
    "PUBSUB_CONNECT_CATALOG": "main",
    "PUBSUB_CONNECT_SCHEMA": "pubsub_connect",
    "PUBSUB_CONNECT_SECRET_SCOPE": "pubsub-connect",
}


def _bundle_job(stage: str) -> list[str]:
    config = Path(__file__).resolve().parents[2] / "resources" / "config"
    return ["--connector", str(config / "cps_sink.properties"), "--worker", str(config / "worker.properties"),
            "--stage", stage]


def _stopped_by_a_user_error(secrets: FakeSecrets, capsys: pytest.CaptureFixture[str]) -> str:
    """Run the bundle's publish task (its stage name misspelt) and return what it printed on
    stderr, once it stopped with the exit code of a user's error."""
    with pytest.raises(SystemExit) as exit_info:
        jobs.main(_bundle_job("publsh"), secret_getter=secrets)
    assert exit_info.value.code == jobs.EXIT_USER_ERROR
    return capsys.readouterr().err


def test_on_databricks_a_placeholder_of_the_bundle_stops_the_task_naming_its_variable(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A deploy without --var kafka_bootstrap_servers / gcp_project must not leave the tasks
    retrying against localhost:9092 or a project that is not there: one line names the variable.
    (The stage name is wrong on purpose: were the check gone, the run would stop at it, before any
    Spark session.)"""
    for name, value in PLACEHOLDER_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    secrets = FakeSecrets({("pubsub-connect", "gcp-credentials-json"): GCP_JSON})
    worker = Path(_bundle_job("publsh")[3])
    assert _stopped_by_a_user_error(secrets, capsys) == (
        f"error: {worker}: bootstrap.servers=localhost:9092 is the bundle's placeholder; deploy with "
        "--var kafka_bootstrap_servers=<value> (variable kafka_bootstrap_servers in databricks.yml)\n")

    monkeypatch.setenv("PUBSUB_CONNECT_BOOTSTRAP_SERVERS", "broker-1.example.com:9093")
    connector = Path(_bundle_job("publsh")[1])
    assert _stopped_by_a_user_error(secrets, capsys) == (
        f"error: {connector}: cps.project=my-gcp-project is the bundle's placeholder; deploy with "
        "--var gcp_project=<value> (variable gcp_project in databricks.yml)\n")


def test_off_databricks_the_same_values_are_left_alone(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Locally localhost:9092 may be the broker: the run gets past the check (to the stage
    selection, where an unknown stage stops it before any Spark session)."""
    for name, value in PLACEHOLDER_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    secrets = FakeSecrets({("pubsub-connect", "gcp-credentials-json"): GCP_JSON})
    assert _stopped_by_a_user_error(secrets, capsys) == (
        "error: unknown stage(s) ['publsh'] for a cps_sink connector in pipeline.mode=staged "
        "(stages: ingest, convert, publish)\n")
