"""The Databricks Asset Bundle, validated offline for both targets (see bundle_check.py).

The positive tests check the real databricks.yml + resources/*.yml; the negative tests mutate a
copy and assert the exact problems reported, so a check that silently stopped working fails.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from bundle_check import REPO_ROOT, STAGES, TARGETS, cluster_env, repo_path, validate, wheel_tasks
from databricks.bundles.jobs import Job

from pubsub_connect import jobs
from pubsub_connect.explore import context
from pubsub_connect.io import databricks_secrets
from pubsub_connect.lakeflow.datasets import DEFINERS
from pubsub_connect.lakeflow.local import JOB_STAGES
from pubsub_connect.pipelines.runtime import NotAvailableError, stages_for

KINDS = tuple(STAGES)
#: The connectors that also come as a one-task job in pipeline.mode=fused (every connector but the archive).
FUSED = ("cps_sink", "cps_source", "lite_sink", "lite_source")
#: The connectors with tables to maintain: a scheduled <connector>_maintain job each.
MAINTAINED = FUSED
#: The connectors whose bronze can be sent again (a sink's to Pub/Sub, a source's to Kafka): an
#: on-demand <connector>_replay job each.
REPLAYED = FUSED
#: Each replay job's range parameters and their defaults: a Cloud Pub/Sub source's bronze has no
#: offsets, and a source's time range is on the message's publish time by default.
REPLAY_RANGES = {
    "cps_sink": {"offsets": "", "since": "", "until": "", "time_column": "timestamp"},
    "lite_sink": {"offsets": "", "since": "", "until": "", "time_column": "timestamp"},
    "cps_source": {"since": "", "until": "", "time_column": "publish_time"},
    "lite_source": {"offsets": "", "since": "", "until": "", "time_column": "publish_time"},
}


def job_list(kind: str) -> str:
    """A connector's jobs as the bundle checks name them."""
    return ", ".join([kind, f"{kind}_batch", *([f"{kind}_fused"] if kind in FUSED else []),
                      *([f"{kind}_maintain"] if kind in MAINTAINED else []),
                      *([f"{kind}_replay"] if kind in REPLAYED else [])])
#: The connectors that also come as a declarative pipeline (every kind with tables to declare).
DECLARATIVE = tuple(sorted(DEFINERS))
#: What a deploy must give with --var (the variables without a default): an AWS instance type.
DEPLOY_VARS = {"node_type_id": "i3.xlarge"}


@pytest.fixture(scope="module", params=TARGETS)
def bundle(request: pytest.FixtureRequest):
    return validate(REPO_ROOT, request.param, DEPLOY_VARS)


def test_bundle_validates_for_every_target(bundle) -> None:
    assert bundle.errors == []
    assert bundle.config["bundle"]["name"] == "pubsub_connect"
    assert bundle.config["include"] == ["resources/*.yml"]
    assert sorted(bundle.jobs) == sorted([*KINDS, *(f"{k}_batch" for k in KINDS),
                                          *(f"{k}_declarative" for k in DECLARATIVE), *(f"{k}_fused" for k in FUSED),
                                          *(f"{k}_maintain" for k in MAINTAINED), *(f"{k}_replay" for k in REPLAYED)])
    assert {k: p.name for k, p in bundle.job_sources.items()} == {
        **{k: f"{k}.job.yml" for k in KINDS}, **{f"{k}_batch": f"{k}.job.yml" for k in KINDS},
        **{f"{k}_fused": f"{k}.job.yml" for k in FUSED}, **{f"{k}_maintain": f"{k}.job.yml" for k in MAINTAINED},
        **{f"{k}_replay": f"{k}.job.yml" for k in REPLAYED},
        **{f"{k}_declarative": f"{k}.pipeline.yml" for k in DECLARATIVE}}
    assert {k: p.name for k, p in bundle.pipeline_sources.items()} == {
        f"{k}_pipeline": f"{k}.pipeline.yml" for k in DECLARATIVE}
    artifact = bundle.config["artifacts"]["python_artifact"]
    assert (artifact["type"], artifact["path"]) == ("whl", ".")


def test_targets_resolve_their_own_settings() -> None:
    dev, prod = validate(REPO_ROOT, "dev", DEPLOY_VARS), validate(REPO_ROOT, "prod", DEPLOY_VARS)
    assert (dev.config["mode"], prod.config["mode"]) == ("development", "production")
    assert dev.variables["schema"] == "pubsub_connect_someone"
    assert dev.variables["storage_root"] == "/Volumes/main/pubsub_connect_someone/pubsub_connect"
    assert dev.variables["pipeline_schema"] == "pubsub_connect_someone_pipelines"
    assert dev.variables["pipeline_storage_root"] == "/Volumes/main/pubsub_connect_someone/pubsub_connect/pipelines"
    assert prod.variables["storage_root"] == "/Volumes/main/pubsub_connect/pubsub_connect"
    assert prod.variables["pipeline_schema"] == "pubsub_connect_pipelines"
    assert prod.variables["pipeline_storage_root"] == "/Volumes/main/pubsub_connect/pubsub_connect/pipelines"
    assert prod.config["workspace"]["root_path"] == "/Workspace/Users/someone@example.com/.bundle/pubsub_connect/prod"
    assert dev.config["permissions"] == []


def test_prod_lets_the_deploying_identity_manage_and_users_view() -> None:
    """Without a CAN_MANAGE entry for the deploying identity the CLI warns that only whoever
    deploys may manage the bundle's folder and resources."""
    prod = validate(REPO_ROOT, "prod", DEPLOY_VARS)
    assert prod.config["permissions"] == [{"user_name": "someone@example.com", "level": "CAN_MANAGE"},
                                          {"group_name": "users", "level": "CAN_VIEW"}]


def test_the_bundle_states_the_oldest_cli_that_deploys_it_and_the_readme_agrees() -> None:
    """Pipelines' glob.include paths are translated since CLI v0.253, their environment field
    exists since v0.258 (an older CLI drops it, and the pipeline then lacks the package)."""
    config = yaml.safe_load((REPO_ROOT / "databricks.yml").read_text(encoding="utf-8"))
    assert config["bundle"]["databricks_cli_version"] == ">= 0.258.0"
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert "Requirements: Databricks CLI 0.258 or later" in readme
    assert "CLI 0.250" not in readme


def test_the_instance_type_has_no_default_of_one_cloud() -> None:
    """n2-standard-4 exists on Google Cloud only: a deploy names the instance type of its cloud,
    and without one every bundle command stops (the CLI's message, here the check's)."""
    config = yaml.safe_load((REPO_ROOT / "databricks.yml").read_text(encoding="utf-8"))
    assert "default" not in config["variables"]["node_type_id"]
    description = config["variables"]["node_type_id"]["description"]
    for instance_type in ("i3.xlarge", "m5d.xlarge", "Standard_D4ds_v5", "n2-standard-4"):
        assert instance_type in description
    assert validate(REPO_ROOT, "prod").errors == [
        "variables.node_type_id: no value assigned to required variable node_type_id (give it with --var, "
        "BUNDLE_VAR_node_type_id or .databricks/bundle/prod/variable-overrides.json)"]
    gcp = validate(REPO_ROOT, "prod", {"node_type_id": "n2-standard-4"})
    assert gcp.errors == []
    assert {job["job_clusters"][0]["new_cluster"]["node_type_id"] for job in gcp.jobs.values()} == {"n2-standard-4"}


@pytest.mark.parametrize("kind", KINDS)
def test_stage_names_are_the_pipelines_stage_names(kind: str) -> None:
    """Every kind the bundle deploys has its pipeline: a job whose module is missing would only
    fail on the cluster, at its first run."""
    assert context.STAGE_ORDER[kind] == STAGES[kind]
    try:
        stages = stages_for(kind)
    except NotAvailableError as exc:
        pytest.fail(f"the bundle deploys {kind} jobs, but its pipeline is missing: {exc}")
    assert tuple(stage.name for stage in stages) == STAGES[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_continuous_job_runs_all_stages_side_by_side(bundle, kind: str) -> None:
    job = bundle.jobs[kind]
    # deployed paused in every target: a deploy starts no connector (bundle run does)
    assert job["continuous"] == {"pause_status": "PAUSED", "task_retry_mode": "ON_FAILURE"}
    assert "schedule" not in job
    assert [t["task_key"] for t in job["tasks"]] == list(STAGES[kind])
    assert all("depends_on" not in t for t in job["tasks"])
    for task in job["tasks"]:
        params = task["python_wheel_task"]["parameters"]
        assert params == [
            "--connector", f"{bundle.file_path}/resources/config/{kind}.properties",
            "--worker", f"{bundle.file_path}/resources/config/worker.properties",
            "--stage", task["task_key"],
        ]


@pytest.mark.parametrize("kind", MAINTAINED)
def test_maintain_job_runs_the_maintenance_on_a_schedule(bundle, kind: str) -> None:
    job = bundle.jobs[f"{kind}_maintain"]
    assert job["schedule"] == {"quartz_cron_expression": "0 17 * * * ?", "timezone_id": "UTC", "pause_status": "PAUSED"}
    assert job["max_concurrent_runs"] == 1 and "continuous" not in job
    [task] = job["tasks"]
    assert task["python_wheel_task"]["parameters"] == [
        "--connector", f"{bundle.file_path}/resources/config/{kind}.properties",
        "--worker", f"{bundle.file_path}/resources/config/worker.properties", "--maintain"]
    assert task["python_wheel_task"]["entry_point"] == "pubsub-connect-job"


@pytest.mark.parametrize("kind", REPLAYED)
def test_replay_job_takes_its_range_as_job_parameters(bundle, kind: str) -> None:
    job = bundle.jobs[f"{kind}_replay"]
    assert "schedule" not in job and "continuous" not in job and job["max_concurrent_runs"] == 1
    assert {p["name"]: p["default"] for p in job["parameters"]} == {
        **REPLAY_RANGES[kind], "to_topic": "", "replay_id": "", "dry_run": "true"}
    [task] = job["tasks"]
    args = jobs.build_parser().parse_args(task["python_wheel_task"]["parameters"])
    assert args.replay and not args.stage and not args.once
    assert (args.offsets, args.since, args.until, args.time_column, args.to_topic, args.replay_id, args.dry_run) == (
        ["{{job.parameters.offsets}}"] if "offsets" in REPLAY_RANGES[kind] else [], "{{job.parameters.since}}",
        "{{job.parameters.until}}", "{{job.parameters.time_column}}", "{{job.parameters.to_topic}}",
        "{{job.parameters.replay_id}}", "{{job.parameters.dry_run}}")


@pytest.mark.parametrize("kind", FUSED)
def test_fused_job_runs_one_task_in_the_fused_mode(bundle, kind: str) -> None:
    job = bundle.jobs[f"{kind}_fused"]
    assert job["continuous"] == {"pause_status": "PAUSED", "task_retry_mode": "ON_FAILURE"}
    (task,) = job["tasks"]
    assert task["task_key"] == "fused"
    args = jobs.build_parser().parse_args(task["python_wheel_task"]["parameters"])
    assert (args.stage, args.overrides, args.once) == (["fused"], ["pipeline.mode=fused"], False)
    assert [stage.name for stage in stages_for(kind, "fused")] == ["fused"]


@pytest.mark.parametrize("kind", KINDS)
def test_batch_job_chains_stages_with_once_on_a_paused_schedule(bundle, kind: str) -> None:
    job = bundle.jobs[f"{kind}_batch"]
    assert job["schedule"] == {"quartz_cron_expression": "0 0/15 * * * ?", "timezone_id": "UTC",
                               "pause_status": "PAUSED"}
    assert "continuous" not in job
    assert job["max_concurrent_runs"] == 1
    stages = STAGES[kind]
    assert [(t["task_key"], [d["task_key"] for d in t.get("depends_on", [])]) for t in job["tasks"]] == [
        (stage, [stages[i - 1]] if i else []) for i, stage in enumerate(stages)]
    assert all(t["python_wheel_task"]["parameters"][-1] == "--once" for t in job["tasks"])


def test_job_clusters_come_from_the_sizing_variables(bundle) -> None:
    for key, job in bundle.jobs.items():
        (cluster,) = job["job_clusters"]
        spec = cluster["new_cluster"]
        assert cluster["job_cluster_key"] == "connector", key
        assert (spec["spark_version"], spec["node_type_id"], spec["num_workers"]) == (
            bundle.variables["spark_version"], "i3.xlarge", bundle.variables["num_workers"])
        assert isinstance(spec["num_workers"], int)
        assert spec["spark_env_vars"] == {
            "PUBSUB_CONNECT_BOOTSTRAP_SERVERS": bundle.variables["kafka_bootstrap_servers"],
            "PUBSUB_CONNECT_STORAGE_ROOT": bundle.variables["storage_root"],
            "PUBSUB_CONNECT_CATALOG": bundle.variables["catalog"],
            "PUBSUB_CONNECT_SCHEMA": bundle.variables["schema"],
            "PUBSUB_CONNECT_GCP_PROJECT": bundle.variables["gcp_project"],
            "PUBSUB_CONNECT_SECRET_SCOPE": bundle.variables["secret_scope"],
        }


def test_every_task_config_loads_with_the_project_config(bundle, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a task does first on the cluster: load its .properties (with the cluster's env vars)
    and resolve its secret references, here through a fake dbutils."""
    checked = 0
    for job_key, job, task in wheel_tasks(bundle):
        env = cluster_env(job, task)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        asked: list[tuple[str, str]] = []

        def fake_secret(scope: str, key: str, asked: list[tuple[str, str]] = asked) -> str:
            asked.append((scope, key))
            return '{"type": "service_account"}'

        args = jobs.build_parser().parse_args(task["python_wheel_task"]["parameters"])
        resolver = databricks_secrets.SecretResolver(fake_secret, env["PUBSUB_CONNECT_SECRET_SCOPE"])
        run_config = jobs.load_run_config(str(repo_path(bundle, args.connector)),
                                          str(repo_path(bundle, args.worker)), args.overrides, resolver)
        (connector,) = run_config.connectors
        kind = job["tags"]["connector"]
        assert (connector.name, connector.kind) == (kind, kind), job_key
        assert job_key in (kind, f"{kind}_batch", f"{kind}_declarative", f"{kind}_fused", f"{kind}_maintain",
                           f"{kind}_replay")
        worker = run_config.worker
        assert worker.bootstrap_servers == bundle.variables["kafka_bootstrap_servers"]
        # the stages around a pipeline use the pipeline's schema and folder, not the jobs'
        shape = "pipeline_" if job_key.endswith("_declarative") else ""
        assert worker.storage_root == bundle.variables[f"{shape}storage_root"]
        assert (worker.get("storage.catalog"), worker.get("storage.schema")) == (
            bundle.variables["catalog"], bundle.variables[f"{shape}schema"])
        if kind == "archive":
            assert asked == []
            assert connector.get("output.path") == f"{bundle.variables['storage_root']}/archive"
        else:
            assert asked == [(bundle.variables["secret_scope"], "gcp-credentials-json")]
            assert connector.get("gcp.credentials.json") == '{"type": "service_account"}'
            project_key = "cps.project" if kind.startswith("cps") else "pubsublite.project"
            assert connector.get(project_key) == bundle.variables["gcp_project"]
        checked += 1
    declarative = sum(len(before) + len(after) for before, after in JOB_STAGES.values())
    assert checked == (2 * sum(len(s) for s in STAGES.values()) + declarative + len(FUSED) + len(MAINTAINED)
                       + len(REPLAYED))


@pytest.mark.parametrize("kind", DECLARATIVE)
def test_pipeline_reads_the_jobs_config_and_takes_deployment_values_from_variables(bundle, kind: str) -> None:
    pipeline = bundle.pipelines[f"{kind}_pipeline"]
    schema = {"dev": "pubsub_connect_someone", "prod": "pubsub_connect"}[bundle.target]
    # a schema of its own: the jobs of the same connector may have created tables of the same names
    assert (pipeline["catalog"], pipeline["schema"]) == ("main", f"{schema}_pipelines")
    assert (pipeline["serverless"], pipeline["continuous"]) == (True, False)
    assert pipeline["libraries"] == [{"glob": {"include": "../src/pubsub_connect/lakeflow/definitions.py"}}]
    # editable: a cached environment (same dependency list) still imports the deployed files
    root = {"dev": "/Workspace/Users/someone@example.com/.bundle/pubsub_connect/dev",
            "prod": "/Workspace/Users/someone@example.com/.bundle/pubsub_connect/prod"}[bundle.target]
    assert pipeline["environment"] == {"dependencies": [f"--editable {root}/files"]}
    project_key = "pubsublite.project" if kind.startswith("lite") else "cps.project"
    assert pipeline["configuration"] == {
        "pubsub_connect.connector": f"{bundle.file_path}/resources/config/{kind}.properties",
        "pubsub_connect.worker": f"{bundle.file_path}/resources/config/worker.properties",
        "pubsub_connect.secret_scope": "pubsub-connect",
        "pubsub_connect.set.bootstrap.servers": "localhost:9092",
        "pubsub_connect.set.storage.root": f"/Volumes/main/{schema}/pubsub_connect/pipelines",
        "pubsub_connect.set.storage.catalog": "main",
        "pubsub_connect.set.storage.schema": f"{schema}_pipelines",
        f"pubsub_connect.set.{project_key}": "my-gcp-project",
    }


@pytest.mark.parametrize("kind", DECLARATIVE)
def test_pipeline_job_runs_pull_pipeline_publish_once_on_a_paused_schedule(bundle, kind: str) -> None:
    job = bundle.jobs[f"{kind}_declarative"]
    assert job["schedule"] == {"quartz_cron_expression": "0 0/15 * * * ?", "timezone_id": "UTC",
                               "pause_status": "PAUSED"}
    before, after = JOB_STAGES[kind]
    chain = [*before, "pipeline", *after]
    assert [t["task_key"] for t in job["tasks"]] == chain
    assert [[d["task_key"] for d in t.get("depends_on", [])] for t in job["tasks"]] == [
        [], *([previous] for previous in chain[:-1])]
    pipeline_task = job["tasks"][len(before)]["pipeline_task"]
    assert pipeline_task == {"pipeline_id": f"<id of pipeline {kind}_pipeline>", "full_refresh": False}
    schema = {"dev": "pubsub_connect_someone", "prod": "pubsub_connect"}[bundle.target]
    for task in job["tasks"]:
        if "python_wheel_task" in task:
            assert task["python_wheel_task"]["parameters"] == [
                "--connector", f"{bundle.file_path}/resources/config/{kind}.properties",
                "--worker", f"{bundle.file_path}/resources/config/worker.properties",
                "--set", f"storage.schema={schema}_pipelines",
                "--set", f"storage.root=/Volumes/main/{schema}/pubsub_connect/pipelines",
                "--stage", task["task_key"], "--once"]


# --------------------------------------------------------------------------------------------
# Negative cases: a mutated copy of the bundle must fail with exactly these problems
# --------------------------------------------------------------------------------------------


def _copy_bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(REPO_ROOT / "resources", root / "resources")
    definitions = "src/pubsub_connect/lakeflow/definitions.py"  # the pipelines' source file
    (root / definitions).parent.mkdir(parents=True)
    shutil.copy(REPO_ROOT / definitions, root / definitions)
    for name in ("databricks.yml", "pyproject.toml"):
        shutil.copy(REPO_ROOT / name, root / name)
    return root


def _edit(root: Path, file: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = root / file
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def _job(data: dict[str, Any], key: str) -> dict[str, Any]:
    return data["resources"]["jobs"][key]


def _task(data: dict[str, Any], job: str, task: str) -> dict[str, Any]:
    return next(t for t in _job(data, job)["tasks"] if t["task_key"] == task)


def _set(target: dict[str, Any], key: str, value: Any) -> None:
    target[key] = value


J = "resources.jobs"
FP = "/Workspace/Users/someone@example.com/.bundle/pubsub_connect/dev/files"

NEGATIVE_CASES: dict[str, tuple[str, Callable[[dict[str, Any]], None], list[str]]] = {
    "unknown task key": (
        "resources/cps_sink.job.yml",
        lambda d: _set(_task(d, "cps_sink", "ingest"), "python_wheel_tsk", {}),
        [f"{J}.cps_sink.tasks[0]: unknown key 'python_wheel_tsk' for Task"],
    ),
    "unknown job key": (
        "resources/cps_sink.job.yml",
        lambda d: _set(_job(d, "cps_sink"), "continous", {"pause_status": "PAUSED"}),
        [f"{J}.cps_sink: unknown key 'continous' for Job"],
    ),
    "mapping where a string belongs": (
        "resources/cps_sink.job.yml",
        lambda d: _set(_job(d, "cps_sink"), "name", {"text": "pubsub-connect"}),
        [f"{J}.cps_sink.name: expected str, got dict {{'text': 'pubsub-connect'}}"],
    ),
    "string where an int belongs": (
        "resources/cps_sink.job.yml",
        lambda d: _set(_job(d, "cps_sink_batch"), "max_concurrent_runs", "one"),
        [f"{J}.cps_sink_batch.max_concurrent_runs: expected int, got str 'one'"],
    ),
    "string where a list belongs": (
        "resources/archive.job.yml",
        lambda d: _set(_task(d, "archive", "archive")["python_wheel_task"], "parameters", "--stage archive"),
        [f"{J}.archive.tasks[0].python_wheel_task.parameters: expected a list, got str",
         f"{J}.archive.tasks[archive]: parameters --stage archive are rejected by pubsub-connect-job"],
    ),
    "invalid enum value": (
        "resources/cps_sink.job.yml",
        lambda d: _set(_job(d, "cps_sink")["continuous"], "pause_status", "STOPPED"),
        [f"{J}.cps_sink.continuous.pause_status: 'STOPPED' is not one of ['UNPAUSED', 'PAUSED']"],
    ),
    "missing required key": (
        "resources/cps_sink.job.yml",
        lambda d: _task(d, "cps_sink", "publish")["python_wheel_task"].pop("package_name"),
        [f"{J}.cps_sink.tasks[2].python_wheel_task: missing required key 'package_name' for PythonWheelTask",
         f"{J}.cps_sink.tasks[publish]: package_name None is not 'pubsub-connect'"],
    ),
    "dangling depends_on": (
        "resources/cps_sink.job.yml",
        lambda d: _set(_task(d, "cps_sink_batch", "publish"), "depends_on", [{"task_key": "conver"}]),
        [f"{J}.cps_sink_batch.tasks[publish].depends_on: task 'conver' does not exist in this job",
         f"{J}.cps_sink_batch: scheduled tasks must run in the chain ingest -> convert -> publish, depends_on is "
         "{'ingest': [], 'convert': ['ingest'], 'publish': ['conver']}"],
    ),
    "depends_on cycle": (
        "resources/cps_sink.job.yml",
        lambda d: _set(_task(d, "cps_sink_batch", "ingest"), "depends_on", [{"task_key": "publish"}]),
        [f"{J}.cps_sink_batch: depends_on cycle ingest -> publish -> convert -> ingest",
         f"{J}.cps_sink_batch: scheduled tasks must run in the chain ingest -> convert -> publish, depends_on is "
         "{'ingest': ['publish'], 'convert': ['ingest'], 'publish': ['convert']}"],
    ),
    "depends_on in a continuous job": (
        "resources/cps_source.job.yml",
        lambda d: _set(_task(d, "cps_source", "convert"), "depends_on", [{"task_key": "pull"}]),
        [f"{J}.cps_source.tasks[convert]: continuous jobs cannot have task dependencies"],
    ),
    "retries in a continuous job": (
        "resources/lite_sink.job.yml",
        lambda d: _set(_task(d, "lite_sink", "publish"), "max_retries", 3),
        [f"{J}.lite_sink.tasks[publish]: continuous jobs cannot have retry policies"],
    ),
    "dangling job cluster": (
        "resources/lite_source.job.yml",
        lambda d: _set(_task(d, "lite_source", "produce"), "job_cluster_key", "conector"),
        [f"{J}.lite_source.tasks[produce].job_cluster_key: 'conector' is not in job_clusters"],
    ),
    "undefined variable": (
        "resources/cps_sink.job.yml",
        lambda d: _set(_job(d, "cps_sink")["job_clusters"][0], "new_cluster", "${var.connector_clusters}"),
        ["resources.jobs.cps_sink.job_clusters[0].new_cluster: reference ${var.connector_clusters} cannot be resolved",
         f"{J}.cps_sink.job_clusters[0].new_cluster: expected a mapping (ClusterSpec), got str"],
    ),
    "entry point not in the wheel": (
        "resources/archive.job.yml",
        lambda d: _set(_task(d, "archive_batch", "archive")["python_wheel_task"], "entry_point", "pubsub-connect-jobs"),
        [f"{J}.archive_batch.tasks[archive]: entry_point 'pubsub-connect-jobs' is not a [project.scripts] name "
         "(pubsub-connect, pubsub-connect-job)"],
    ),
    "unknown stage": (
        "resources/cps_sink.job.yml",
        lambda d: _task(d, "cps_sink", "publish")["python_wheel_task"]["parameters"].__setitem__(5, "publsh"),
        [f"{J}.cps_sink.tasks[publish]: --stage must name one stage of a cps_sink connector "
         "(ingest, convert, publish), got ['publsh']",
         f"{J}.cps_sink: tasks run stages ['ingest', 'convert'], the connector has ['ingest', 'convert', 'publish']"],
    ),
    "batch task without --once": (
        "resources/cps_sink.job.yml",
        lambda d: _task(d, "cps_sink_batch", "convert")["python_wheel_task"]["parameters"].remove("--once"),
        [f"{J}.cps_sink_batch: a scheduled job must pass --once to every task"],
    ),
    "config file not in the bundle": (
        "resources/cps_sink.job.yml",
        lambda d: _task(d, "cps_sink", "ingest")["python_wheel_task"]["parameters"].__setitem__(
            1, "${workspace.file_path}/resources/config/cps-sink.properties"),
        [f"{J}.cps_sink.tasks[ingest]: --connector {FP}/resources/config/cps-sink.properties is not a file of "
         "the bundle (expected ${workspace.file_path}/<file in the repo>)",
         f"{J}.cps_sink: tasks run stages ['convert', 'publish'], the connector has ['ingest', 'convert', 'publish']"],
    ),
    "wheel not installed": (
        "resources/cps_sink.job.yml",
        lambda d: _set(_task(d, "cps_sink", "ingest"), "libraries", [{"pypi": {"package": "pubsub-connect"}}]),
        [f"{J}.cps_sink.tasks[ingest]: libraries must install the bundle's wheel (dist/*.whl), got []"],
    ),
    "unknown pipeline key": (
        "resources/cps_sink.pipeline.yml",
        lambda d: _set(d["resources"]["pipelines"]["cps_sink_pipeline"], "continous", False),
        ["resources.pipelines.cps_sink_pipeline: unknown key 'continous' for Pipeline"],
    ),
    "pipeline source not in the repository": (
        "resources/cps_source.pipeline.yml",
        lambda d: _set(d["resources"]["pipelines"]["cps_source_pipeline"]["libraries"][0]["glob"], "include",
                       "../src/pubsub_connect/lakeflow/definition.py"),
        ["resources.pipelines.cps_source_pipeline.libraries[0]: '../src/pubsub_connect/lakeflow/definition.py' "
         "is not a file of the repository"],
    ),
    "pipeline config file not in the bundle": (
        "resources/lite_sink.pipeline.yml",
        lambda d: _set(d["resources"]["pipelines"]["lite_sink_pipeline"]["configuration"], "pubsub_connect.connector",
                       "${workspace.file_path}/resources/config/lite-sink.properties"),
        [f"resources.pipelines.lite_sink_pipeline.configuration.pubsub_connect.connector: '{FP}/resources/config/"
         "lite-sink.properties' is not a file of the bundle (expected ${workspace.file_path}/<file in the repo>)"],
    ),
    "publish before the pipeline": (
        "resources/cps_sink.pipeline.yml",
        lambda d: _task(d, "cps_sink_declarative", "publish").pop("depends_on"),
        [f"{J}.cps_sink_declarative: tasks must run in the chain pipeline -> publish, depends_on is "
         "{'pipeline': [], 'publish': []}"],
    ),
    "pipeline task for another pipeline": (
        "resources/cps_source.pipeline.yml",
        lambda d: _set(_task(d, "cps_source_declarative", "pipeline")["pipeline_task"], "pipeline_id", "1234"),
        [f"{J}.cps_source_declarative.tasks[pipeline].pipeline_task.pipeline_id: '1234' is not "
         "${resources.pipelines.<key>.id} of a pipeline of the bundle"],
    ),
    "unknown top-level key": (
        "databricks.yml",
        lambda d: _set(d, "resource", {}),
        ["databricks.yml: unknown top-level key 'resource'"],
    ),
    "complex variable without type": (
        "databricks.yml",
        lambda d: d["variables"]["connector_cluster"].pop("type"),
        ["variables.connector_cluster: a mapping or list default needs type: complex"],
    ),
    "target variable not declared": (
        "databricks.yml",
        lambda d: _set(d["targets"]["dev"]["variables"], "shema", "x"),
        ["targets.dev.variables.shema: variable is not declared"],
    ),
    "pipeline installs the synced source as a plain path": (
        "resources/cps_sink.pipeline.yml",
        lambda d: _set(d["resources"]["pipelines"]["cps_sink_pipeline"]["environment"], "dependencies",
                       ["${workspace.file_path}"]),
        [f"resources.pipelines.cps_sink_pipeline.environment.dependencies: ['{FP}'] does not install the synced "
         "source editable ('--editable ${workspace.file_path}')"],
    ),
    "CLI older than the pipelines' fields": (
        "databricks.yml",
        lambda d: _set(d["bundle"], "databricks_cli_version", ">= 0.250.0"),
        ["databricks.yml: bundle.databricks_cli_version '>= 0.250.0' admits CLIs older than 0.253.0, which do not "
         "deploy the pipelines' libraries.glob.include as written",
         "databricks.yml: bundle.databricks_cli_version '>= 0.250.0' admits CLIs older than 0.258.0, which do not "
         "deploy the pipelines' environment as written"],
    ),
    "no CLI version constraint": (
        "databricks.yml",
        lambda d: d["bundle"].pop("databricks_cli_version"),
        ["databricks.yml: bundle.databricks_cli_version is not set; the pipelines' environment needs CLI 0.258.0 "
         "or later"],
    ),
    "CLI version constraint the CLI cannot read": (
        "databricks.yml",
        lambda d: _set(d["bundle"], "databricks_cli_version", ">= v0.258"),
        ["databricks.yml: bundle.databricks_cli_version '>= v0.258' is not a CLI version constraint "
         "('>= 0.0.0', optionally ', <= 1.0.0')"],
    ),
    "pipelines in the jobs' schema": (
        "databricks.yml",
        lambda d: _set(d["variables"]["pipeline_schema"], "default", "${var.schema}"),
        [f"resources.pipelines.{kind}_pipeline: its tables are in main.pubsub_connect_someone, where the same "
         f"connector's jobs write theirs ({job_list(kind)}); a pipeline cannot take over a table another "
         "writer created" for kind in DECLARATIVE],
    ),
    "pipelines' stages in the jobs' checkpoint folder": (
        "databricks.yml",
        lambda d: _set(d["variables"]["pipeline_storage_root"], "default", "${var.storage_root}"),
        [f"resources.pipelines.{kind}_pipeline: the stages around it keep their checkpoints under "
         f"/Volumes/main/pubsub_connect_someone/pubsub_connect, as the same connector's jobs do ({job_list(kind)})"
         for kind in DECLARATIVE],
    ),
    "stage around a pipeline in the jobs' schema": (
        "resources/cps_sink.pipeline.yml",
        lambda d: _task(d, "cps_sink_declarative", "publish")["python_wheel_task"]["parameters"].__delitem__(
            slice(4, 6)),
        [f"{J}.cps_sink_declarative.tasks[publish]: runs on main.pubsub_connect_someone and "
         "/Volumes/main/pubsub_connect_someone/pubsub_connect/pipelines, its pipeline cps_sink_pipeline on "
         "main.pubsub_connect_someone_pipelines and /Volumes/main/pubsub_connect_someone/pubsub_connect/pipelines"],
    ),
    "pipeline datasets apart from the storage its stages use": (
        "resources/lite_source.pipeline.yml",
        lambda d: _set(d["resources"]["pipelines"]["lite_source_pipeline"], "schema", "${var.schema}"),
        ["resources.pipelines.lite_source_pipeline: its datasets go to main.pubsub_connect_someone, its "
         "configuration names main.pubsub_connect_someone_pipelines (pubsub_connect.set.storage.*)"],
    ),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE_CASES))
def test_mutated_bundle_fails_with_exact_errors(tmp_path: Path, case: str) -> None:
    file, change, expected = NEGATIVE_CASES[case]
    root = _copy_bundle(tmp_path)
    assert validate(root, "dev", DEPLOY_VARS).errors == []  # the copy is valid before the change
    _edit(root, file, change)
    assert validate(root, "dev", DEPLOY_VARS).errors == expected


def test_pipeline_config_must_not_need_a_cluster_environment(tmp_path: Path) -> None:
    """A serverless pipeline has no job cluster's environment: every ``${env:...}`` key of the
    connector's files needs a ``pubsub_connect.set.*`` value in the pipeline's configuration."""
    root = _copy_bundle(tmp_path)
    key = "pubsub_connect.set.cps.project"
    _edit(root, "resources/cps_sink.pipeline.yml",
          lambda d: d["resources"]["pipelines"]["cps_sink_pipeline"]["configuration"].pop(key))
    assert validate(root, "dev", DEPLOY_VARS).errors == [
        f"resources.pipelines.cps_sink_pipeline.configuration: {root / 'resources/config/cps_sink.properties'}: "
        "cps.project refers to ${env:PUBSUB_CONNECT_GCP_PROJECT} but that variable is not set"]


def test_prod_needs_root_path_and_permissions(tmp_path: Path) -> None:
    root = _copy_bundle(tmp_path)

    def strip(d: dict[str, Any]) -> None:
        del d["targets"]["prod"]["workspace"]
        del d["targets"]["prod"]["permissions"]

    _edit(root, "databricks.yml", strip)
    assert validate(root, "dev", DEPLOY_VARS).errors == []
    assert validate(root, "prod", DEPLOY_VARS).errors == [
        "targets.prod: an explicit workspace.root_path under /Workspace is required",
        "targets.prod: permissions are required",
    ]


def test_prod_permissions_must_let_the_deploying_identity_manage(tmp_path: Path) -> None:
    root = _copy_bundle(tmp_path)
    _edit(root, "databricks.yml", lambda d: d["targets"]["prod"]["permissions"].pop(0))
    assert validate(root, "prod", DEPLOY_VARS).errors == [
        "targets.prod.permissions: the deploying identity has no CAN_MANAGE "
        "(user_name or service_principal_name: ${workspace.current_user.userName})"]

    def as_principal(d: dict[str, Any]) -> None:  # what a CI pipeline's service principal writes
        d["targets"]["prod"]["permissions"].insert(
            0, {"service_principal_name": "${workspace.current_user.userName}", "level": "CAN_MANAGE"})

    _edit(root, "databricks.yml", as_principal)
    assert validate(root, "prod", DEPLOY_VARS).errors == []


def test_typed_models_alone_let_a_wrong_scalar_type_through() -> None:
    """Why bundle_check walks the models itself: Job.from_dict stringifies a mapping given for a
    string field instead of rejecting it."""
    job = Job.from_dict({"name": {"text": "x"}, "tasks": [{"task_key": "a"}]})
    assert job.name == "{'text': 'x'}"
