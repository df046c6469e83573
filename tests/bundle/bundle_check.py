"""Offline validation of the Databricks Asset Bundle (no Databricks CLI can be installed here).

What ``databricks bundle validate`` would do, to the extent it matters for this bundle:

1. load ``databricks.yml`` and every file its ``include`` globs match, rejecting unknown
   top-level keys and duplicate resource keys; check ``bundle.databricks_cli_version``'s syntax
   and that it admits no CLI older than the features the bundle uses (:data:`CLI_FEATURES`);
2. pick a target, apply its variable values over the defaults and the values given as ``--var``
   would over both, require a value for every variable, and resolve every ``${...}``
   reference — bundle variables (also inside other variables' values, and whole-value
   references that yield a number or a mapping, like complex variables), ``bundle.*`` and
   ``workspace.*`` (with placeholder values for the deploying user);
3. check every job strictly against the typed models of ``databricks-bundles``: unknown keys,
   missing required keys, wrong scalar types and invalid enum values. ``Job.from_dict`` is run
   too, but it is lenient on scalars (it turns a mapping into a string with ``str()``), hence
   the strict walk over the same dataclasses;
4. check what the schema cannot: task references (``depends_on``, ``job_cluster_key``,
   ``pipeline_id``), the Jobs service's rules for continuous jobs, the wheel entry point, and that
   each task's parameters are accepted by ``pubsub-connect-job`` and name config files of the
   bundle;
5. check every declarative pipeline against the ``Pipeline`` model, that its source file is in
   the repository, that it installs the synced source editable, and that its configuration loads
   the connector it names without any cluster environment (a serverless pipeline has none),
   secrets answered by a stand-in;
6. check that the two shapes of a connector share no table and no checkpoint: a pipeline's
   schema and folder are those of the job stages around it, and not those of the connector's
   own jobs (:func:`check_shapes_apart`);
7. check that the deploying identity can manage what the bundle's permissions cover.

Every check appends a message to a list instead of raising, so a test can assert the exact
problems a mutated copy of the bundle has.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]
from databricks.bundles.core._variable import Variable
from databricks.bundles.jobs import Job
from databricks.bundles.pipelines import Pipeline

REPO_ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("dev", "prod")
USER = "someone@example.com"
SHORT_NAME = "someone"
HOST = "https://example.cloud.databricks.com"

TOP_LEVEL_KEYS = {"bundle", "include", "artifacts", "variables", "targets", "workspace", "resources",
                  "sync", "permissions", "run_as", "presets", "experimental", "scripts"}
INCLUDED_FILE_KEYS = TOP_LEVEL_KEYS - {"bundle", "include"}
TARGET_KEYS = {"default", "mode", "workspace", "variables", "permissions", "run_as", "presets", "resources",
               "artifacts", "bundle", "git", "sync", "cluster_id", "compute_id"}
VARIABLE_KEYS = {"description", "default", "type", "lookup"}
BUNDLE_KEYS = {"name", "databricks_cli_version", "uuid", "git", "deployment", "cluster_id", "compute_id"}
ARTIFACT_KEYS = {"type", "path", "build", "files", "executable", "dynamic_version"}
BUNDLE_PERMISSION_LEVELS = {"CAN_VIEW", "CAN_RUN", "CAN_MANAGE"}
PRINCIPAL_KEYS = ("user_name", "group_name", "service_principal_name")

#: Stage names per connector kind, in pipeline order (pipelines/runtime.py).
#: The stage of a connector run with ``--set pipeline.mode=fused`` (every connector but the archive).
FUSED_STAGES = {kind: ("fused",) for kind in ("cps_sink", "cps_source", "lite_sink", "lite_source")}

STAGES = {
    "cps_sink": ("ingest", "convert", "publish"),
    "cps_source": ("pull", "convert", "produce"),
    "lite_sink": ("ingest", "convert", "publish"),
    "lite_source": ("pull", "convert", "produce"),
    "archive": ("archive",),
}

#: libyaml's loader when PyYAML has it (the checks parse the bundle many times), same semantics.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: What the bundle uses that an older CLI deploys differently, and the first CLI version that
#: deploys it as written (the CLI's changelog): ``bundle.databricks_cli_version`` must admit no
#: older CLI. (where, version, whether a pipeline uses it)
CLI_FEATURES: tuple[tuple[str, tuple[int, int, int], Callable[[dict[str, Any]], bool]], ...] = (
    # translated relative to the file that names them since v0.253
    ("libraries.glob.include", (0, 253, 0), lambda p: any("glob" in lib for lib in p.get("libraries") or [])),
    # an older CLI drops the field: the pipeline then runs without the package
    ("environment", (0, 258, 0), lambda p: "environment" in p),
)

#: The CLI's syntax of a version constraint: one or two comparisons, comma separated (the CLI
#: also takes wildcards such as 0.258.*, which this bundle does not use).
_CLI_VERSION = r"(\d+)\.(\d+)\.(\d+)(?:-\w+)?"
_CLI_CONSTRAINT = re.compile(rf"^(>=|<=|>|<|!=)? ?{_CLI_VERSION}(?:, (>=|<=|>|<|!=)? ?{_CLI_VERSION})?$")

#: The CLI's default ``workspace.root_path``.
DEFAULT_ROOT_PATH = "/Workspace/Users/${workspace.current_user.userName}/.bundle/${bundle.name}/${bundle.target}"

_REF = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z_][A-Za-z0-9_\-]*)*)\}")


@dataclass
class Bundle:
    """The merged configuration of one target, references resolved."""

    root: Path
    target: str
    config: dict[str, Any]
    variables: dict[str, Any]
    job_sources: dict[str, Path]
    errors: list[str] = field(default_factory=list)
    explicit_root_path: bool = False
    pipeline_sources: dict[str, Path] = field(default_factory=dict)

    @property
    def jobs(self) -> dict[str, dict[str, Any]]:
        return self.config.get("resources", {}).get("jobs", {})

    @property
    def pipelines(self) -> dict[str, dict[str, Any]]:
        return self.config.get("resources", {}).get("pipelines", {})

    @property
    def file_path(self) -> str:
        return self.config["workspace"]["file_path"]


# --------------------------------------------------------------------------------------------
# Loading and resolving
# --------------------------------------------------------------------------------------------


def _read_yaml(path: Path, errors: list[str]) -> dict[str, Any]:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        errors.append(f"{path.name}: invalid YAML ({exc})")
        return {}
    if data is None:
        return {}
    if not isinstance(data, dict):
        errors.append(f"{path.name}: top level must be a mapping")
        return {}
    return data


def load_raw(root: Path) -> tuple[dict[str, Any], dict[str, dict[str, Path]], list[str]]:
    """databricks.yml plus its includes, merged; and where each resource was defined
    (``{"jobs": {key: file}, "pipelines": {key: file}}``)."""
    errors: list[str] = []
    main = _read_yaml(root / "databricks.yml", errors)
    for key in sorted(set(main) - TOP_LEVEL_KEYS):
        errors.append(f"databricks.yml: unknown top-level key {key!r}")
    sources: dict[str, dict[str, Path]] = {"jobs": {}, "pipelines": {}}
    for kind, known in sources.items():
        for key in main.get("resources", {}).get(kind, {}):
            known[key] = root / "databricks.yml"
    includes = main.get("include") or []
    if not isinstance(includes, list):
        errors.append("databricks.yml: include must be a list of globs")
        includes = []
    for pattern in includes:
        matched = sorted(root.glob(pattern))
        if not matched:
            errors.append(f"databricks.yml: include {pattern!r} matches no file")
        for path in matched:
            rel = path.relative_to(root)
            data = _read_yaml(path, errors)
            for key in sorted(set(data) - INCLUDED_FILE_KEYS):
                errors.append(f"{rel}: key {key!r} is not allowed in an included file")
            for section, entries in data.items():
                if section not in INCLUDED_FILE_KEYS or not isinstance(entries, dict):
                    continue
                target = main.setdefault(section, {})
                if section == "resources":
                    for kind, resources in entries.items():
                        merged = target.setdefault(kind, {})
                        for name, resource in (resources or {}).items():
                            if name in merged:
                                errors.append(f"{rel}: resources.{kind}.{name} is defined twice")
                            merged[name] = resource
                            if kind in sources:
                                sources[kind][name] = path
                else:
                    for name, value in entries.items():
                        if name in target:
                            errors.append(f"{rel}: {section}.{name} is defined twice")
                        target[name] = value
    return main, sources, errors


class _Resolver:
    def __init__(self, lookup: dict[str, Any], errors: list[str]):
        self.lookup = lookup
        self.errors = errors

    def value(self, path: str, where: str) -> Any:
        if path not in self.lookup:
            self.errors.append(f"{where}: reference ${{{path}}} cannot be resolved")
            return f"<unresolved {path}>"
        return self.lookup[path]

    def resolve(self, node: Any, where: str) -> Any:
        if isinstance(node, dict):
            return {k: self.resolve(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [self.resolve(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if not isinstance(node, str):
            return node
        whole = _REF.fullmatch(node)
        if whole:  # a whole-value reference keeps the referenced value's type (int, mapping)
            return self.value(whole.group(1), where)

        def replace(match: re.Match[str]) -> str:
            value = self.value(match.group(1), where)
            if isinstance(value, (dict, list)):
                self.errors.append(f"{where}: ${{{match.group(1)}}} is not a scalar and cannot be part of a string")
                return ""
            return str(value).lower() if isinstance(value, bool) else str(value)

        return _REF.sub(replace, node)


def pipeline_id(key: str) -> str:
    """The stand-in for a deployed pipeline's id in ``${resources.pipelines.<key>.id}``."""
    return f"<id of pipeline {key}>"


def _has_ref(node: Any) -> bool:
    if isinstance(node, dict):
        return any(_has_ref(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_ref(v) for v in node)
    return isinstance(node, str) and _REF.search(node) is not None


def lowest_cli_version(constraint: str) -> tuple[int, int, int] | None:
    """The lower bound of a ``databricks_cli_version`` constraint: its ``>=``, ``>`` or exact
    version (a ``>`` bound taken as its version: what matters is whether older CLIs than a
    feature's get in); None without a lower bound."""
    match = _CLI_CONSTRAINT.match(constraint)
    if match is None:
        return None
    groups = match.groups()
    lower = [(int(major), int(minor), int(patch)) for op, major, minor, patch in (groups[0:4], groups[4:8])
             if major is not None and op in (None, ">=", ">")]
    return min(lower) if lower else None


def check_cli_version(bundle_section: Mapping[str, Any], pipelines: Mapping[str, dict[str, Any]],
                      errors: list[str]) -> None:
    """``bundle.databricks_cli_version``: the CLI's syntax, and no CLI older than a feature in use."""
    for key in sorted(set(bundle_section) - BUNDLE_KEYS):
        errors.append(f"databricks.yml: unknown key bundle.{key!r}")
    needed = [(version, feature) for feature, version, used in CLI_FEATURES
              if any(used(p) for p in pipelines.values() if isinstance(p, dict))]
    constraint = bundle_section.get("databricks_cli_version")
    if constraint is None:
        if needed:
            version, feature = max(needed)
            errors.append(f"databricks.yml: bundle.databricks_cli_version is not set; the pipelines' {feature} "
                          f"needs CLI {'.'.join(map(str, version))} or later")
        return
    if not isinstance(constraint, str) or not _CLI_CONSTRAINT.match(constraint):
        errors.append(f"databricks.yml: bundle.databricks_cli_version {constraint!r} is not a CLI version "
                      "constraint ('>= 0.0.0', optionally ', <= 1.0.0')")
        return
    lowest = lowest_cli_version(constraint)
    for version, feature in sorted(needed):
        if lowest is None or lowest < version:
            errors.append(f"databricks.yml: bundle.databricks_cli_version {constraint!r} admits CLIs older than "
                          f"{'.'.join(map(str, version))}, which do not deploy the pipelines' {feature} as written")


def resolve_target(root: Path, target: str, cli_vars: Mapping[str, Any] | None = None) -> Bundle:
    """Load the bundle and resolve it for ``target`` (see the module docstring). ``cli_vars``:
    variable values as ``--var name=value`` gives them, over the target's and the defaults."""
    config, sources, errors = load_raw(root)
    name = config.get("bundle", {}).get("name")
    if not name:
        errors.append("databricks.yml: bundle.name is required")
    check_cli_version(config.get("bundle") or {}, config.get("resources", {}).get("pipelines") or {}, errors)
    targets = config.get("targets") or {}
    defaults = [t for t, spec in targets.items() if (spec or {}).get("default") is True]
    if len(defaults) != 1:
        errors.append(f"databricks.yml: exactly one target must be the default, got {defaults}")
    spec = targets.get(target)
    if spec is None:
        errors.append(f"databricks.yml: target {target!r} is not defined")
        spec = {}
    for key in sorted(set(spec) - TARGET_KEYS):
        errors.append(f"targets.{target}: unknown key {key!r}")
    if "resources" in spec:
        errors.append(f"targets.{target}: resource overrides are not modelled by this check")
    if spec.get("mode") not in (None, "development", "production"):
        errors.append(f"targets.{target}.mode: {spec.get('mode')!r} is not development or production")

    declared = config.get("variables") or {}
    values: dict[str, Any] = {}
    for var, definition in declared.items():
        if not isinstance(definition, dict):
            errors.append(f"variables.{var}: must be a mapping with description/default")
            continue
        for key in sorted(set(definition) - VARIABLE_KEYS):
            errors.append(f"variables.{var}: unknown key {key!r}")
        if isinstance(definition.get("default"), (dict, list)) and definition.get("type") != "complex":
            errors.append(f"variables.{var}: a mapping or list default needs type: complex")
        if "default" in definition:
            values[var] = definition["default"]
    for var, value in (spec.get("variables") or {}).items():
        if var not in declared:
            errors.append(f"targets.{target}.variables.{var}: variable is not declared")
        values[var] = value
    for var, value in (cli_vars or {}).items():
        if var not in declared:
            errors.append(f"--var {var}: variable is not declared")
        values[var] = value
    for var in declared:
        if var not in values:
            # as the CLI refuses every command then; a stand-in value keeps the rest of the checks quiet
            errors.append(f"variables.{var}: no value assigned to required variable {var} (give it with --var, "
                          f"BUNDLE_VAR_{var} or .databricks/bundle/{target}/variable-overrides.json)")
            values[var] = f"<no value for {var}>"

    workspace = {**(config.get("workspace") or {}), **(spec.get("workspace") or {})}
    explicit_root_path = bool(workspace.get("root_path"))
    lookup: dict[str, Any] = {
        "bundle.name": name,
        "bundle.target": target,
        "workspace.host": HOST,
        "workspace.current_user.userName": USER,
        "workspace.current_user.short_name": SHORT_NAME,
        "workspace.current_user.domain_friendly_name": SHORT_NAME,
    }
    resolver = _Resolver(lookup, errors)
    root_path = workspace.get("root_path") or DEFAULT_ROOT_PATH
    root_path = resolver.resolve(root_path, f"targets.{target}.workspace.root_path")
    workspace.update({"root_path": root_path, "file_path": f"{root_path}/files",
                      "artifact_path": f"{root_path}/artifacts", "state_path": f"{root_path}/state"})
    lookup.update({f"workspace.{k}": v for k, v in workspace.items() if isinstance(v, str)})
    # what the CLI fills in at deploy time: the ids of the bundle's own pipelines
    lookup.update({f"resources.pipelines.{key}.id": pipeline_id(key) for key in sources["pipelines"]})

    # Variables may refer to variables: resolve to a fixed point (a cycle never gets there).
    var_errors: list[str] = []
    for _ in range(len(values) + 1):
        lookup.update({f"var.{k}": v for k, v in values.items()})
        if not any(_has_ref(v) for v in values.values()):
            break
        values = {k: _Resolver(lookup, var_errors).resolve(v, f"variables.{k}") for k, v in values.items()}
    else:
        errors.append("variables: references do not resolve (a cycle?)")
    errors.extend(dict.fromkeys(var_errors))
    lookup.update({f"var.{k}": v for k, v in values.items()})

    resolved = {k: v for k, v in config.items() if k not in ("variables", "targets")}
    resolved = resolver.resolve(resolved, "")
    resolved["workspace"] = workspace
    resolved["permissions"] = resolver.resolve(spec.get("permissions") or config.get("permissions") or [],
                                               f"targets.{target}.permissions")
    resolved["mode"] = spec.get("mode")
    return Bundle(root, target, resolved, values, sources["jobs"], errors, explicit_root_path, sources["pipelines"])


# --------------------------------------------------------------------------------------------
# Strict model check
# --------------------------------------------------------------------------------------------


def check_model(tp: Any, value: Any, path: str, errors: list[str]) -> None:
    """Check ``value`` (plain YAML data) against a databricks-bundles model type, strictly."""
    if tp is Any:
        return
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in typing.get_args(tp) if typing.get_origin(a) is not Variable]
        if value is None and type(None) in arms:
            return
        arms = [a for a in arms if a is not type(None)]
        trials = []
        for arm in arms:
            found: list[str] = []
            check_model(arm, value, path, found)
            if not found:
                return
            trials.append(found)
        errors.extend(trials[0] if len(trials) == 1 else [f"{path}: {value!r} matches none of {arms}"])
        return
    if origin is list:
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        (item_type,) = typing.get_args(tp)
        for i, item in enumerate(value):
            check_model(item_type, item, f"{path}[{i}]", errors)
        return
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return
        _, item_type = typing.get_args(tp)
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} is not a string")
            check_model(item_type, item, f"{path}.{key}", errors)
        return
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a mapping ({tp.__name__}), got {type(value).__name__}")
            return
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp)}
        for key in value:
            if key not in fields:
                errors.append(f"{path}: unknown key {key!r} for {tp.__name__}")
        for name, spec in fields.items():
            required = spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
            if name not in value:
                if required:
                    errors.append(f"{path}: missing required key {name!r} for {tp.__name__}")
                continue
            check_model(hints[name], value[name], f"{path}.{name}", errors)
        return
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        allowed = [m.value for m in tp]
        if value not in allowed:
            errors.append(f"{path}: {value!r} is not one of {allowed}")
        return
    expected = {str: (str,), int: (int,), float: (int, float), bool: (bool,)}.get(tp)
    if expected is None:
        errors.append(f"{path}: no rule for type {tp!r}")
    elif not isinstance(value, expected) or (tp is not bool and isinstance(value, bool)):
        errors.append(f"{path}: expected {tp.__name__}, got {type(value).__name__} {value!r}")


# --------------------------------------------------------------------------------------------
# Bundle semantics
# --------------------------------------------------------------------------------------------


def _pyproject(root: Path) -> dict[str, Any]:
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))


def normalize(name: str) -> str:
    """Python package name normalisation (PEP 503), as wheel installers compare names."""
    return re.sub(r"[-_.]+", "-", name).lower()


def check_top_level(bundle: Bundle) -> None:
    errors, config = bundle.errors, bundle.config
    artifacts = config.get("artifacts") or {}
    wheels = {k: a for k, a in artifacts.items() if (a or {}).get("type") == "whl"}
    if not wheels:
        errors.append("artifacts: no python wheel artifact (type: whl)")
    for key, artifact in artifacts.items():
        for bad in sorted(set(artifact or {}) - ARTIFACT_KEYS):
            errors.append(f"artifacts.{key}: unknown key {bad!r}")
        path = bundle.root / str((artifact or {}).get("path", "."))
        if (artifact or {}).get("type") == "whl" and not (path / "pyproject.toml").is_file():
            errors.append(f"artifacts.{key}: {path} has no pyproject.toml")
    if bundle.target == "prod":
        if bundle.config.get("mode") != "production":
            errors.append("targets.prod: mode must be production")
        if not bundle.explicit_root_path or not config["workspace"]["root_path"].startswith("/Workspace/"):
            errors.append("targets.prod: an explicit workspace.root_path under /Workspace is required")
        if not config.get("permissions"):
            errors.append("targets.prod: permissions are required")
    permissions = config.get("permissions") or []
    managers = [p for p in permissions if p.get("level") == "CAN_MANAGE"
                and USER in (p.get("user_name"), p.get("service_principal_name"))]
    if permissions and not managers:
        # What the CLI warns about: the permissions then leave the deploying identity, and a
        # later one, without the right to manage the bundle's folder and resources.
        errors.append(f"targets.{bundle.target}.permissions: the deploying identity has no CAN_MANAGE "
                      "(user_name or service_principal_name: ${workspace.current_user.userName})")
    for i, perm in enumerate(config.get("permissions") or []):
        where = f"permissions[{i}]"
        if perm.get("level") not in BUNDLE_PERMISSION_LEVELS:
            errors.append(f"{where}: level {perm.get('level')!r} is not one of {sorted(BUNDLE_PERMISSION_LEVELS)}")
        principals = [k for k in PRINCIPAL_KEYS if perm.get(k)]
        if len(principals) != 1:
            errors.append(f"{where}: exactly one of {', '.join(PRINCIPAL_KEYS)} is required")
        for bad in sorted(set(perm) - {"level", *PRINCIPAL_KEYS}):
            errors.append(f"{where}: unknown key {bad!r}")


def _task_order(tasks: list[dict[str, Any]], where: str, errors: list[str]) -> None:
    """depends_on must name tasks of the same job and form no cycle."""
    keys = [t.get("task_key") for t in tasks]
    for dup in sorted({k for k in keys if keys.count(k) > 1}):
        errors.append(f"{where}: task_key {dup!r} is used twice")
    graph = {t.get("task_key"): [d.get("task_key") for d in t.get("depends_on") or []] for t in tasks}
    for key, deps in graph.items():
        for dep in deps:
            if dep not in graph:
                errors.append(f"{where}.tasks[{key}].depends_on: task {dep!r} does not exist in this job")
    state: dict[str, int] = {}

    def visit(key: str, trail: list[str]) -> None:
        if state.get(key) == 2:
            return
        if state.get(key) == 1:
            errors.append(f"{where}: depends_on cycle {' -> '.join([*trail, key])}")
            return
        state[key] = 1
        for dep in graph.get(key, []):
            if dep in graph:
                visit(dep, [*trail, key])
        state[key] = 2

    for key in graph:
        visit(key, [])


def check_resource(model: Any, resource: dict[str, Any], where: str, errors: list[str]) -> None:
    """A resource against its databricks-bundles model: the strict walk, then the model's own
    ``from_dict`` (which catches what the walk does not model, and only then)."""
    found: list[str] = []
    check_model(model, resource, where, found)
    errors.extend(found)
    if not found:
        try:
            model.from_dict(resource)
        except (ValueError, TypeError) as exc:
            errors.append(f"{where}: rejected by databricks.bundles {model.__name__}.from_dict: {exc}")


def check_jobs(bundle: Bundle) -> None:
    errors = bundle.errors
    project = _pyproject(bundle.root)["project"]
    scripts = project.get("scripts", {})
    if not bundle.jobs:
        errors.append("resources.jobs: no jobs")
    for job_key, job in bundle.jobs.items():
        where = f"resources.jobs.{job_key}"
        if not isinstance(job, dict):
            errors.append(f"{where}: must be a mapping")
            continue
        check_resource(Job, job, where, errors)
        tasks = job.get("tasks") or []
        _task_order(tasks, where, errors)
        clusters = {c.get("job_cluster_key") for c in job.get("job_clusters") or []}
        continuous = job.get("continuous") is not None
        if continuous and (job.get("schedule") or job.get("trigger")):
            errors.append(f"{where}: a job is either continuous or scheduled/triggered, not both")
        for task in tasks:
            task_where = f"{where}.tasks[{task.get('task_key')}]"
            if task.get("job_cluster_key") and task["job_cluster_key"] not in clusters:
                errors.append(f"{task_where}.job_cluster_key: {task['job_cluster_key']!r} is not in job_clusters")
            if continuous and task.get("depends_on"):
                errors.append(f"{task_where}: continuous jobs cannot have task dependencies")
            if continuous and any(k in task for k in ("max_retries", "min_retry_interval_millis", "retry_on_timeout")):
                errors.append(f"{task_where}: continuous jobs cannot have retry policies")
            pipeline_task = task.get("pipeline_task")
            if pipeline_task and pipeline_task.get("pipeline_id") not in {pipeline_id(k) for k in bundle.pipelines}:
                errors.append(f"{task_where}.pipeline_task.pipeline_id: {pipeline_task.get('pipeline_id')!r} is not "
                              "${resources.pipelines.<key>.id} of a pipeline of the bundle")
            wheel = task.get("python_wheel_task")
            if not wheel:
                continue
            if normalize(str(wheel.get("package_name"))) != normalize(project["name"]):
                errors.append(f"{task_where}: package_name {wheel.get('package_name')!r} is not {project['name']!r}")
            if wheel.get("entry_point") not in scripts:
                errors.append(f"{task_where}: entry_point {wheel.get('entry_point')!r} is not a "
                              f"[project.scripts] name ({', '.join(scripts)})")
            libraries = [lib.get("whl") for lib in task.get("libraries") or [] if lib.get("whl")]
            source_dir = bundle.job_sources.get(job_key, bundle.root / "databricks.yml").parent
            if not any((source_dir / whl).parent.resolve() == (bundle.root / "dist").resolve()
                       and whl.endswith(".whl") for whl in libraries):
                errors.append(f"{task_where}: libraries must install the bundle's wheel (dist/*.whl), got {libraries}")


def wheel_tasks(bundle: Bundle) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(job key, job, task) of every python_wheel_task."""
    return [(key, job, task) for key, job in bundle.jobs.items() for task in job.get("tasks") or []
            if task.get("python_wheel_task")]


def repo_path(bundle: Bundle, deployed: str) -> Path | None:
    """The bundle file a deployed workspace path refers to (``${workspace.file_path}/x`` → ``x``)."""
    prefix = bundle.file_path + "/"
    return bundle.root / deployed[len(prefix):] if deployed.startswith(prefix) else None


def check_task_parameters(bundle: Bundle) -> None:
    """Each wheel task's parameters must parse with pubsub-connect-job's parser and name config
    files of the bundle; stages must match the connector's kind; continuous jobs run every stage
    without --once, scheduled jobs chain them in pipeline order with --once."""
    from pubsub_connect.config import loader as cfg
    from pubsub_connect.config.errors import ConfigError
    from pubsub_connect.config.properties import read_properties
    from pubsub_connect.jobs import build_parser

    errors = bundle.errors
    parser = build_parser()
    by_job: dict[str, list[tuple[str, bool]]] = {}
    kinds: dict[str, str] = {}
    for job_key, _job, task in wheel_tasks(bundle):
        where = f"resources.jobs.{job_key}.tasks[{task.get('task_key')}]"
        params = task["python_wheel_task"].get("parameters") or []
        try:
            args = parser.parse_args(params)
        except SystemExit:
            errors.append(f"{where}: parameters {params} are rejected by pubsub-connect-job")
            continue
        for label, deployed in (("--connector", args.connector), ("--worker", args.worker)):
            if deployed is None:
                errors.append(f"{where}: {label} is missing")
                continue
            local = repo_path(bundle, deployed)
            if local is None or not local.is_file():
                errors.append(f"{where}: {label} {deployed} is not a file of the bundle "
                              f"(expected ${{workspace.file_path}}/<file in the repo>)")
        local = repo_path(bundle, args.connector)
        if local is None or not local.is_file():
            continue
        try:
            kind = cfg.connector_kind(read_properties(local), str(local))
        except ConfigError as exc:
            errors.append(f"{where}: {exc}")
            continue
        kinds[job_key] = kind
        if args.maintain or args.replay:  # a maintenance or replay task runs no stage, and alone in its job
            if args.stage or args.once or len(bundle.jobs[job_key]["tasks"]) != 1:
                errors.append(f"{where}: --maintain and --replay run alone: no --stage, no --once, no other task")
            continue
        stages = FUSED_STAGES.get(kind, ()) if "pipeline.mode=fused" in args.overrides else STAGES[kind]
        if len(args.stage) != 1 or args.stage[0] not in stages:
            errors.append(f"{where}: --stage must name one stage of a {kind} connector "
                          f"({', '.join(stages)}), got {args.stage}")
            continue
        if args.stage[0] != task.get("task_key"):
            errors.append(f"{where}: task_key should be the stage name {args.stage[0]!r}")
        by_job.setdefault(job_key, []).append((args.stage[0], args.once))
    for job_key, stages in by_job.items():
        job = bundle.jobs[job_key]
        if any(t.get("pipeline_task") for t in job["tasks"]):
            _check_declarative_chain(bundle, job_key, kinds[job_key], stages)
            continue
        names = [s for s, _ in stages]
        expected = list(FUSED_STAGES[kinds[job_key]] if names == ["fused"] else STAGES[kinds[job_key]])
        if sorted(names) != sorted(expected):
            errors.append(f"resources.jobs.{job_key}: tasks run stages {names}, the connector has {expected}")
            continue
        if job.get("continuous") is not None:
            if any(once for _, once in stages):
                errors.append(f"resources.jobs.{job_key}: a continuous job must not pass --once")
        else:
            if not all(once for _, once in stages):
                errors.append(f"resources.jobs.{job_key}: a scheduled job must pass --once to every task")
            deps = {t["task_key"]: [d["task_key"] for d in t.get("depends_on") or []] for t in job["tasks"]}
            chain = {stage: ([expected[i - 1]] if i else []) for i, stage in enumerate(expected)}
            if deps != chain:
                errors.append(f"resources.jobs.{job_key}: scheduled tasks must run in the chain "
                              f"{' -> '.join(expected)}, depends_on is {deps}")


def _check_declarative_chain(bundle: Bundle, job_key: str, kind: str, stages: list[tuple[str, bool]]) -> None:
    """A job around a declarative pipeline runs the job stages before the pipeline (the source
    connectors' pull), the pipeline, then the publish/produce stage, each once, in that chain."""
    from pubsub_connect.lakeflow.local import JOB_STAGES

    errors, job = bundle.errors, bundle.jobs[job_key]
    before, after = JOB_STAGES.get(kind, ((), ()))
    pipeline_keys = [t["task_key"] for t in job["tasks"] if t.get("pipeline_task")]
    expected = [*before, *pipeline_keys[:1], *after]
    names = [t["task_key"] for t in job["tasks"]]
    if len(pipeline_keys) != 1 or sorted(names) != sorted(expected):
        errors.append(f"resources.jobs.{job_key}: tasks {names}, a {kind} pipeline job runs {expected}")
        return
    if job.get("continuous") is not None or not all(once for _, once in stages):
        errors.append(f"resources.jobs.{job_key}: a pipeline job is scheduled and passes --once to every wheel task")
    deps = {t["task_key"]: [d["task_key"] for d in t.get("depends_on") or []] for t in job["tasks"]}
    chain = {task: ([expected[i - 1]] if i else []) for i, task in enumerate(expected)}
    if deps != chain:
        errors.append(f"resources.jobs.{job_key}: tasks must run in the chain {' -> '.join(expected)}, "
                      f"depends_on is {deps}")


#: The keys a pipeline's configuration must give (``pubsub_connect.lakeflow.conf``).
PIPELINE_FILE_KEYS = ("pubsub_connect.connector", "pubsub_connect.worker")


def check_pipelines(bundle: Bundle) -> None:
    """Each pipeline against the ``Pipeline`` model; its source files in the repository; its
    configuration loads the connector it names with no cluster environment and stand-in secrets."""
    from pubsub_connect.config.errors import ConfigError
    from pubsub_connect.io.databricks_secrets import SecretResolver
    from pubsub_connect.lakeflow.conf import CONNECTOR_KEY, WORKER_KEY, load_from_conf
    from pubsub_connect.lakeflow.datasets import check_declarable

    errors = bundle.errors
    for key, pipeline in bundle.pipelines.items():
        where = f"resources.pipelines.{key}"
        check_resource(Pipeline, pipeline, where, errors)
        source_dir = bundle.pipeline_sources.get(key, bundle.root / "databricks.yml").parent
        libraries = pipeline.get("libraries") or []
        if not libraries:
            errors.append(f"{where}.libraries: no source file")
        for i, library in enumerate(libraries):
            included = (library.get("glob") or {}).get("include") or (library.get("file") or {}).get("path")
            if not included or not (source_dir / included).resolve().is_file():
                errors.append(f"{where}.libraries[{i}]: {included!r} is not a file of the repository")
        dependencies = (pipeline.get("environment") or {}).get("dependencies") or []
        if f"--editable {bundle.file_path}" not in dependencies:
            # A pipeline reuses its Python environment while the dependency list is unchanged: a
            # plain path or a fixed wheel name would keep the package installed before a redeploy.
            errors.append(f"{where}.environment.dependencies: {dependencies} does not install the synced source "
                          "editable ('--editable ${workspace.file_path}')")
        conf = {k: str(v) for k, v in (pipeline.get("configuration") or {}).items()}
        local: dict[str, str] = {}
        for conf_key in PIPELINE_FILE_KEYS:
            path = repo_path(bundle, conf.get(conf_key, ""))
            if path is None or not path.is_file():
                errors.append(f"{where}.configuration.{conf_key}: {conf.get(conf_key)!r} is not a file of the bundle "
                              "(expected ${workspace.file_path}/<file in the repo>)")
            else:
                local[conf_key] = str(path)
        if len(local) != len(PIPELINE_FILE_KEYS):
            continue
        offline = {**conf, CONNECTOR_KEY: local[CONNECTOR_KEY], WORKER_KEY: local[WORKER_KEY]}
        resolver = SecretResolver(lambda _scope, _key: "stand-in secret", conf.get("pubsub_connect.secret_scope"))
        deployment_env = {k: v for k, v in os.environ.items() if not k.startswith("PUBSUB_CONNECT_")}
        try:
            with mock.patch.dict(os.environ, deployment_env, clear=True):  # no job cluster's environment
                run_config = load_from_conf(offline, resolver)
            check_declarable(run_config.connectors[0])
        except ConfigError as exc:
            errors.append(f"{where}.configuration: {exc}")


@dataclass(frozen=True)
class Storage:
    """Where a job stage or a pipeline keeps a connector's tables and checkpoints."""

    catalog: str
    schema: str
    root: str

    def __str__(self) -> str:
        return f"{self.catalog}.{self.schema} and {self.root}"


def task_storage(bundle: Bundle, job: Mapping[str, Any], task: Mapping[str, Any]) -> tuple[Path, Storage] | None:
    """The connector file a wheel task runs and the storage its worker config resolves to on the
    task's cluster (its environment variables, its ``--set`` values); None when it does not load
    (the other checks say why)."""
    from pubsub_connect.config.errors import ConfigError
    from pubsub_connect.io.databricks_secrets import SecretResolver
    from pubsub_connect.jobs import build_parser, load_run_config

    try:
        args = build_parser().parse_args(task["python_wheel_task"].get("parameters") or [])
    except SystemExit:
        return None
    connector = repo_path(bundle, args.connector or "")
    worker = repo_path(bundle, args.worker or "")
    if connector is None or worker is None or not connector.is_file() or not worker.is_file():
        return None
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PUBSUB_CONNECT_")}, **cluster_env(job, task)}
    resolver = SecretResolver(lambda _scope, _key: "stand-in secret", env.get("PUBSUB_CONNECT_SECRET_SCOPE"))
    try:
        with mock.patch.dict(os.environ, env, clear=True):
            worker_config = load_run_config(str(connector), str(worker), args.overrides, resolver).worker
    except ConfigError:
        return None
    return connector, Storage(str(worker_config.get("storage.catalog")), str(worker_config.get("storage.schema")),
                              worker_config.storage_root)


def check_shapes_apart(bundle: Bundle) -> None:
    """A connector's pipeline and its own jobs share no table and no checkpoint.

    A pipeline cannot take over a table another writer created: were its datasets in the jobs'
    schema, the first of the two shapes to run would keep the other from its tables. And the job
    stages around a pipeline (pull, publish, produce) are the jobs' stages under the same names,
    whose checkpoints track the tables they were started on. So the pipeline's datasets, the
    storage its configuration names and the job stages around it are in one place, and the
    connector's jobs in another."""
    errors = bundle.errors
    # pipeline key ("" for the connectors' own jobs) -> (job key, task key, connector file, storage)
    stages: dict[str, list[tuple[str, str, Path, Storage]]] = {}
    for job_key, job, task in wheel_tasks(bundle):
        found = task_storage(bundle, job, task)
        if found is None:
            continue
        runs = {t["pipeline_task"].get("pipeline_id") for t in job.get("tasks") or [] if t.get("pipeline_task")}
        owner = next((key for key in bundle.pipelines if pipeline_id(key) in runs), None if runs else "")
        if owner is not None:  # None: a pipeline task naming no pipeline of the bundle (check_jobs says so)
            stages.setdefault(owner, []).append((job_key, str(task.get("task_key")), *found))
    for key, pipeline in bundle.pipelines.items():
        where = f"resources.pipelines.{key}"
        conf = {k: str(v) for k, v in (pipeline.get("configuration") or {}).items()}
        named = Storage(*(conf.get(f"pubsub_connect.set.storage.{k}", "") for k in ("catalog", "schema", "root")))
        tables = (named.catalog, named.schema)
        if (str(pipeline.get("catalog")), str(pipeline.get("schema"))) != tables:
            errors.append(f"{where}: its datasets go to {pipeline.get('catalog')}.{pipeline.get('schema')}, its "
                          f"configuration names {named.catalog}.{named.schema} (pubsub_connect.set.storage.*)")
        for job_key, task_key, _, storage in stages.get(key, []):
            if storage != named:
                errors.append(f"resources.jobs.{job_key}.tasks[{task_key}]: runs on {storage}, its pipeline {key} "
                              f"on {named}")
        connector = repo_path(bundle, conf.get("pubsub_connect.connector", ""))
        jobs = [(job_key, storage) for job_key, _, file, storage in stages.get("", []) if file == connector]
        same_tables = sorted({job_key for job_key, s in jobs if (s.catalog, s.schema) == tables})
        if same_tables:
            errors.append(f"{where}: its tables are in {named.catalog}.{named.schema}, where the same connector's jobs "
                          f"write theirs ({', '.join(same_tables)}); a pipeline cannot take over a table another "
                          "writer created")
        same_root = sorted({job_key for job_key, s in jobs if s.root == named.root})
        if same_root:
            errors.append(f"{where}: the stages around it keep their checkpoints under {named.root}, as the same "
                          f"connector's jobs do ({', '.join(same_root)})")


def validate(root: Path, target: str, cli_vars: Mapping[str, Any] | None = None) -> Bundle:
    """Everything above, for one target; ``bundle.errors`` lists the problems. ``cli_vars``: as
    ``--var`` gives them."""
    bundle = resolve_target(root, target, cli_vars)
    check_top_level(bundle)
    check_jobs(bundle)
    check_task_parameters(bundle)
    check_pipelines(bundle)
    check_shapes_apart(bundle)
    return bundle


def cluster_env(job: Mapping[str, Any], task: Mapping[str, Any]) -> dict[str, str]:
    """The environment variables a task's job cluster sets (what ``${env:...}`` reads)."""
    for cluster in job.get("job_clusters") or []:
        if cluster.get("job_cluster_key") == task.get("job_cluster_key"):
            spec = cluster.get("new_cluster")
            return {k: str(v) for k, v in (spec.get("spark_env_vars") or {}).items()} if isinstance(spec, dict) else {}
    return {}
