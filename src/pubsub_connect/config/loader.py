"""Kafka Connect style configuration: ``.properties`` files → typed, validated config objects.

Why: users move from ``connect-standalone worker.properties connector.properties …`` and must
be able to bring the same files, keys and defaults. So the loader follows Kafka Connect's
``ConfigDef`` semantics (the key table of :mod:`~pubsub_connect.config.keys`: types, defaults,
ranges, required keys) and Java's ``.properties`` syntax, resolves ``${provider:reference}``
values through :mod:`~pubsub_connect.config.providers`, and reports a bad file as one line
naming the file, the key, the value and what is allowed — never a traceback.

:func:`load` parses worker + connector files + ``--set`` overrides into a :class:`RunConfig`;
:func:`validate_connector` / :func:`validate_worker` check in-memory maps the same way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pubsub_connect.config.errors import MASK, ConfigError
from pubsub_connect.config.keys import (
    ARCHIVE,
    CONNECTOR_CLASSES,
    CONNECTOR_KEYS,
    CONNECTOR_PREFIXES,
    CPS_SINK,
    CPS_SOURCE,
    INHERITED_BY_CONNECTORS,
    LITE_SINK,
    LITE_SOURCE,
    REQUIRED,
    SINK_KINDS,
    WORKER_IGNORED,
    WORKER_KEYS,
    WORKER_PREFIXES,
    Key,
)
from pubsub_connect.config.properties import read_properties
from pubsub_connect.config.providers import DEFAULT_PROVIDERS, ConfigProviders
from pubsub_connect.model.avro.writer import SUBJECT_NAME_STRATEGIES, TOPIC_NAME_STRATEGY
from pubsub_connect.model.converters import (
    REGISTRY_AVRO_CONVERTERS,
    REGISTRY_CONVERTERS,
    REGISTRY_JSON_SCHEMA_CONVERTERS,
)
from pubsub_connect.model.cps_sink.batch import COLUMN_KEY_CONVERTERS, COLUMN_VALUE_CONVERTERS

log = logging.getLogger(__name__)



@dataclass
class Setting:
    """An effective value and where it came from (``default``, a file, ``--set``, ``worker``)."""

    value: Any
    origin: str
    secret: bool = False

    def __repr__(self) -> str:
        # configs end up in logs and tracebacks: a secret value never appears in a repr
        shown = MASK if self.secret and self.value is not None else repr(self.value)
        return f"Setting(value={shown}, origin={self.origin!r}, secret={self.secret})"


@dataclass
class _Validated:
    source: str
    settings: dict[str, Setting]
    passthrough: dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        return self.settings[key].value

    def __getitem__(self, key: str) -> Any:
        return self.get(key)

    def effective(self, mask_secrets: bool = True) -> dict[str, str]:
        """Every key's effective value as text, secrets masked — what ``validate`` prints."""
        rows: dict[str, str] = {}
        for key, setting in sorted(self.settings.items()):
            if setting.value is None:
                continue
            rows[key] = MASK if (setting.secret and mask_secrets) else to_text(setting.value)
        for key, value in sorted(self.passthrough.items()):
            rows[key] = MASK if (mask_secrets and is_secret_key(key)) else value
        return rows


def to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


_SECRET_KEY_RE = re.compile(r"(password|secret|credentials\.json|sasl\.jaas|token|private[._]key)", re.I)


def is_secret_key(key: str) -> bool:
    """Keys whose values are never printed (client passwords, credential blobs, tokens)."""
    return bool(_SECRET_KEY_RE.search(key))


@dataclass
class ConnectorConfig(_Validated):
    """One connector's validated configuration."""

    kind: str = ""

    @property
    def name(self) -> str:
        return str(self.get("name"))

    @property
    def is_sink(self) -> bool:
        return self.kind in SINK_KINDS

    def secrets(self) -> list[str]:
        """Secret values, for scrubbing logs."""
        return [str(s.value) for s in self.settings.values() if s.secret and s.value]


@dataclass
class WorkerConfig(_Validated):
    """The worker (``connect-standalone.properties`` equivalent)."""

    @property
    def spark_conf(self) -> dict[str, str]:
        return {k: v for k, v in self.passthrough.items() if k.startswith("spark.")}

    def client_conf(self, prefix: str) -> dict[str, str]:
        """``consumer.*`` / ``producer.*`` / ``admin.*`` worker keys without the prefix."""
        return {k[len(prefix):]: v for k, v in self.passthrough.items() if k.startswith(prefix)}

    @property
    def bootstrap_servers(self) -> str:
        return str(self.get("bootstrap.servers"))

    @property
    def storage_root(self) -> str:
        return str(self.get("storage.root"))


@dataclass
class RunConfig:
    worker: WorkerConfig
    connectors: list[ConnectorConfig]
    #: connector name → its key/value map as read, overrides applied (what a worker stores).
    raw: dict[str, dict[str, str]] = field(default_factory=dict)


def _apply(defs: tuple[Key, ...], raw: Mapping[str, str], origins: Mapping[str, str], source: str,
           prefixes: tuple[str, ...], ignored: frozenset[str] = frozenset(),
           inherited: Mapping[str, Setting] | None = None,
           providers: ConfigProviders = DEFAULT_PROVIDERS) -> tuple[dict[str, Setting], dict[str, str]]:
    by_name: dict[str, Key] = {}
    for key in defs:
        by_name[key.name] = key
        for alias in key.aliases:
            by_name[alias] = key
    settings: dict[str, Setting] = {}
    passthrough: dict[str, str] = {}
    seen_canonical: dict[str, str] = {}
    for name, text in raw.items():
        origin = origins.get(name, source)
        definition = by_name.get(name)
        if definition is None:
            if name.startswith(prefixes):
                passthrough[name] = providers.resolve(text, origin, name)
            elif name not in ignored:
                log.warning("%s: unknown key %s (ignored)", origin, name)
            continue
        if definition.name in seen_canonical and seen_canonical[definition.name] != name:
            log.warning("%s: both %s and %s are set; using %s", origin, seen_canonical[definition.name], name, name)
        seen_canonical[definition.name] = name
        try:
            value = definition.parse(providers.resolve(text, origin, name), origin)
        except ConfigError as exc:
            if providers.contains_secret_reference(text):
                raise ConfigError(f"{exc} (value from a secret)") from None
            raise
        settings[definition.name] = Setting(value, origin, definition.secret)
    for key in defs:
        if key.name in settings:
            continue
        if inherited and key.name in inherited and inherited[key.name].value is not None:
            settings[key.name] = Setting(inherited[key.name].value, "worker", key.secret)
        elif key.default is REQUIRED:
            allowed = f" (allowed: {', '.join(key.choices)})" if key.choices else ""
            raise ConfigError(f"{source}: missing required key {key.name}{allowed}")
        else:
            settings[key.name] = Setting(key.default, "default", key.secret)
    return settings, passthrough


def validate_worker(raw: Mapping[str, str], source: str = "<worker>",
                    origins: Mapping[str, str] | None = None,
                    providers: ConfigProviders = DEFAULT_PROVIDERS) -> WorkerConfig:
    settings, passthrough = _apply(WORKER_KEYS, raw, origins or {}, source, WORKER_PREFIXES, WORKER_IGNORED,
                                   providers=providers)
    return WorkerConfig(source, settings, passthrough)


def connector_kind(raw: Mapping[str, str], source: str) -> str:
    cls = raw.get("connector.class")
    if cls is None:
        raise ConfigError(f"{source}: missing required key connector.class")
    kind = CONNECTOR_CLASSES.get(cls.strip())
    if kind is None:
        allowed = ", ".join(k for k in CONNECTOR_CLASSES if "." in k)
        raise ConfigError(f"{source}: connector.class={cls!r} is not supported (allowed: {allowed}, or a short alias)")
    return kind


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def validate_connector(raw: Mapping[str, str], source: str = "<connector>",
                       origins: Mapping[str, str] | None = None,
                       worker: WorkerConfig | None = None,
                       providers: ConfigProviders = DEFAULT_PROVIDERS) -> ConnectorConfig:
    kind = connector_kind(raw, source)
    inherited = {k: worker.settings[k] for k in INHERITED_BY_CONNECTORS} if worker else None
    settings, passthrough = _apply(CONNECTOR_KEYS[kind], raw, origins or {}, source, CONNECTOR_PREFIXES,
                                   inherited=inherited, providers=providers)
    config = ConnectorConfig(source, settings, passthrough, kind=kind)
    _cross_checks(config)
    return config


def _cross_checks(config: ConnectorConfig) -> None:
    """Rules that involve more than one key (Connect's sink topic rule, archive target, …)."""
    source = config.source
    if not _NAME_RE.match(config.name):
        raise ConfigError(f"{source}: name={config.name!r} must be 1-128 letters, digits, '.', '_' or '-' "
                          "(it names tables and checkpoint folders)")
    if config.is_sink:
        topics, regex = config.get("topics"), config.get("topics.regex")
        if bool(topics) == bool(regex):
            raise ConfigError(f"{source}: set exactly one of topics or topics.regex")
        if regex:
            try:
                re.compile(regex)
            except re.error as exc:
                raise ConfigError(f"{source}: topics.regex={regex!r} is not a valid pattern ({exc})") from None
    if config.kind == ARCHIVE:
        bucket, path = config.get("s3.bucket"), config.get("output.path")
        if bool(bucket) == bool(path):
            raise ConfigError(f"{source}: set exactly one of s3.bucket (S3) or output.path (local or /Volumes)")
    _registry_checks(config)
    if config.kind in (CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE):
        for key in ("gcp.credentials.file.path",):
            path = config.get(key)
            if path and not Path(path).is_file():
                raise ConfigError(f"{source}: {key}={path!r} does not name a readable file")


#: The connectors whose data model reads and writes the Schema Registry converters' data.
REGISTRY_CONNECTORS = (CPS_SINK, CPS_SOURCE, LITE_SOURCE)


def _registry_checks(config: ConnectorConfig) -> None:
    """A Schema Registry converter needs a connector that handles its data, its registry's URL, a
    converter beside it that maps in columns too, and the same registry on both sides; the sink's
    Avro message bodies need one on the value side."""
    sides = [side for side in ("key", "value") if config.get(f"{side}.converter") in REGISTRY_CONVERTERS]
    body_format = config.get("messageBodyFormat") if config.kind in (CPS_SINK, CPS_SOURCE) else "connect"
    avro_value = config.get("value.converter") in REGISTRY_AVRO_CONVERTERS
    if config.kind == CPS_SINK and body_format != "connect" and (
            "value" not in sides or (body_format == "avro" and not avro_value)):
        needed = "io.confluent.connect.avro.AvroConverter (or Apicurio's)" if body_format == "avro" else \
            "io.confluent.connect.avro.AvroConverter or io.confluent.connect.json.JsonSchemaConverter"
        raise ConfigError(f"{config.source}: messageBodyFormat={body_format} publishes each whole "
                          f"{'Avro ' if body_format == 'avro' else ''}value: it needs value.converter={needed}; to "
                          "publish other values as they are, use value.converter=ByteArrayConverter")
    if config.kind == CPS_SOURCE and body_format == "avro" and (
            not avro_value or not config.get("kafka.record.headers")):
        raise ConfigError(f"{config.source}: messageBodyFormat=avro writes each message's Avro datum as the record's "
                          "value: it needs value.converter=io.confluent.connect.avro.AvroConverter (or Apicurio's) "
                          "and kafka.record.headers=true (the attributes as headers)")
    for side in sides:
        short = config.get(f"{side}.converter").rsplit(".", 1)[-1]
        if config.kind not in REGISTRY_CONNECTORS:
            raise ConfigError(f"{config.source}: {side}.converter={short} is not supported by "
                              f"{config.get('connector.class')} (the Schema Registry converters serve the Cloud "
                              "Pub/Sub sink and source, and the Lite source)")
        json_schema = config.get(f"{side}.converter") in REGISTRY_JSON_SCHEMA_CONVERTERS
        if json_schema and config.kind not in (CPS_SINK, CPS_SOURCE):
            raise ConfigError(f"{config.source}: {side}.converter={short} serves the Cloud Pub/Sub sink and source; "
                              "the Lite source writes Schema Registry data as Avro "
                              "(io.confluent.connect.avro.AvroConverter)")
        if not any(_registry_urls(config, side)):
            raise ConfigError(f"{config.source}: {side}.converter={short} needs "
                              f"{side}.converter.schema.registry.url (the Schema Registry's URL)")
        if config.get(f"{side}.converter.basic.auth.credentials.source") == "USER_INFO" and \
                ":" not in str(config.get(f"{side}.converter.basic.auth.user.info") or ""):
            raise ConfigError(f"{config.source}: {side}.converter.basic.auth.credentials.source=USER_INFO needs "
                              f"{side}.converter.basic.auth.user.info=<user>:<password>")
        strategy = config.get(f"{side}.converter.{side}.subject.name.strategy")
        if strategy not in SUBJECT_NAME_STRATEGIES:
            raise ConfigError(f"{config.source}: {side}.converter.{side}.subject.name.strategy={strategy} is not one "
                              f"of {', '.join(s.rsplit('.', 1)[-1] for s in SUBJECT_NAME_STRATEGIES)}")
        if json_schema and config.kind == CPS_SOURCE and strategy != TOPIC_NAME_STRATEGY:
            raise ConfigError(f"{config.source}: {side}.converter.{side}.subject.name.strategy="
                              f"{strategy.rsplit('.', 1)[-1]} names subjects by a schema's title; the JSON Schemas "
                              "the Cloud Pub/Sub source writes have none (use TopicNameStrategy)")
    if not sides:
        return
    # The sink decodes in columns only: the other side must map there too. A source writes any
    # key its converters can.
    beside = {"key": COLUMN_KEY_CONVERTERS, "value": COLUMN_VALUE_CONVERTERS} if config.kind == CPS_SINK else {}
    for side, allowed in beside.items():
        if config.get(f"{side}.converter") not in allowed:
            raise ConfigError(f"{config.source}: {side}.converter={config.get(f'{side}.converter')} cannot be "
                              "combined with a Schema Registry converter (allowed beside it: "
                              f"{', '.join(dict.fromkeys(c.rsplit('.', 1)[-1] for c in allowed))})")
    if len(sides) == 2 and _registry_urls(config, "key") != _registry_urls(config, "value"):
        raise ConfigError(f"{config.source}: key.converter and value.converter name different Schema Registries; "
                          "one connector's schema ids come from one registry")


def _registry_urls(config: ConnectorConfig, side: str) -> tuple[object, object]:
    return (config.get(f"{side}.converter.schema.registry.url"), config.get(f"{side}.converter.apicurio.registry.url"))


def load(connector_files: list[str | Path], worker_file: str | Path | None = None,
         overrides: list[str] | None = None, providers: ConfigProviders = DEFAULT_PROVIDERS) -> RunConfig:
    """Read a worker file and connector files like ``connect-standalone``, then apply
    ``--set key=value`` overrides. A bare key goes to every connector (and to the worker when it
    is a worker key); ``NAME:key=value`` targets the connector named NAME. ``providers`` resolves
    the ``${provider:reference}`` values (files and overrides alike)."""
    parsed_overrides = [_parse_override(item) for item in overrides or []]
    worker_names = {k.name for k in WORKER_KEYS}
    worker = _worker_from(worker_file, [(key, value) for target, key, value in parsed_overrides
                                        if target is None and (key in worker_names or key.startswith(WORKER_PREFIXES))],
                          providers)

    connectors: list[ConnectorConfig] = []
    raws: dict[str, dict[str, str]] = {}
    if not connector_files:
        raise ConfigError("no connector .properties file given")
    for path in connector_files:
        raw = read_properties(path)
        origins: dict[str, str] = {}
        for target, key, value in parsed_overrides:
            if target is None and key in worker_names and key not in INHERITED_BY_CONNECTORS:
                continue
            if target is None or target == raw.get("name"):
                raw[key] = value
                origins[key] = "--set"
        connectors.append(validate_connector(raw, str(path), origins, worker, providers))
        raws[connectors[-1].name] = raw
    names = [c.name for c in connectors]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"connector name(s) used more than once: {', '.join(duplicates)}")
    return RunConfig(worker, connectors, raws)


def _worker_from(worker_file: str | Path | None, overrides: list[tuple[str, str]],
                 providers: ConfigProviders = DEFAULT_PROVIDERS) -> WorkerConfig:
    raw = read_properties(worker_file) if worker_file else {}
    raw.update(overrides)
    return validate_worker(raw, str(worker_file) if worker_file else "<worker defaults>",
                           {key: "--set" for key, _ in overrides}, providers)


def load_worker(worker_file: str | Path | None, overrides: list[str] | None = None) -> WorkerConfig:
    """A worker file alone (the worker and offsets commands take connectors from elsewhere),
    with ``--set key=value`` overrides of worker keys."""
    parsed = [_parse_override(item) for item in overrides or []]
    for target, key, _ in parsed:
        if target is not None:
            raise ConfigError(f"--set {target}:{key}: the worker has no connector {target} to override")
    return _worker_from(worker_file, [(key, value) for _, key, value in parsed])


def load_raw(connector: Mapping[str, str], worker: Mapping[str, str] | None = None) -> RunConfig:
    """Validate in-memory key/value maps (benchmarks, notebooks, tests) like files would be."""
    worker_config = validate_worker(dict(worker or {}), "<worker>")
    name = connector.get("name", "connector")
    return RunConfig(worker_config, [validate_connector(dict(connector), f"<{name}>", worker=worker_config)])


def _parse_override(item: str) -> tuple[str | None, str, str]:
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value or NAME:key=value")
    key, value = item.split("=", 1)
    target = None
    if ":" in key and not key.startswith("$"):
        target, key = key.split(":", 1)
    return target, key.strip(), value
