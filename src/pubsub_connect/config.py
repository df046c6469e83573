"""Kafka Connect style configuration: ``.properties`` files → typed, validated config objects.

Why: users move from ``connect-standalone worker.properties connector.properties …`` and must
be able to bring the same files, keys and defaults. So this module follows Kafka Connect's
``ConfigDef`` semantics (types, defaults, ranges, required keys) and Java's ``.properties``
syntax, and reports a bad file as one line naming the file, the key, the value and what is
allowed — never a traceback.

Layout:
- :data:`CONNECTOR_KEYS` — definitions per connector kind (the four Google connectors and the
  Block-GZIP archive sink) plus the Connect-standard keys every connector has;
- :data:`WORKER_KEYS` — worker keys (``bootstrap.servers``, ``storage.root``, ``spark.*`` …);
- :func:`load` — parse worker + connector files + ``--set`` overrides into a :class:`RunConfig`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pubsub_connect.model.converters import (
    BYTE_ARRAY_CONVERTER,
    KNOWN_CONVERTERS,
    KNOWN_HEADER_CONVERTERS,
    SIMPLE_HEADER_CONVERTER,
)

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
MASK = "********"


class ConfigError(ValueError):
    """A user-fixable configuration problem. ``str(err)`` is the one-line message to print."""


# --------------------------------------------------------------------------------------------
# Java .properties syntax
# --------------------------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                try:
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Join continuation lines (odd number of trailing backslashes), skip comments/blank lines."""
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip()
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        yield start, (pending or "") + line
        pending = None
    if pending is not None:
        yield start, pending


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (``key=value``, ``key: value``, ``key value``, escapes,
    continuation lines). Later keys win, like ``java.util.Properties``."""
    result: dict[str, str] = {}
    for _, line in _logical_lines(text):
        i = 0
        key_chars: list[str] = []
        while i < len(line):
            ch = line[i]
            if ch == "\\" and i + 1 < len(line):
                key_chars.append(line[i : i + 2])
                i += 2
                continue
            if ch in "=: \t\f":
                break
            key_chars.append(ch)
            i += 1
        # skip whitespace, one separator, whitespace
        while i < len(line) and line[i] in " \t\f":
            i += 1
        if i < len(line) and line[i] in "=:":
            i += 1
            while i < len(line) and line[i] in " \t\f":
                i += 1
        result[_unescape("".join(key_chars))] = _unescape(line[i:])
    return result


def read_properties(path: str | Path) -> dict[str, str]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        # Java reads .properties as ISO-8859-1 when not UTF-8
        text = path.read_bytes().decode("latin-1")
    return parse_properties(text)


# Kafka Connect config providers: ${env:NAME} and ${file:/path/to/file.properties:key}
_PROVIDER_RE = re.compile(r"\$\{(env|file):([^}]*)\}")


def resolve_providers(value: str, source: str, key: str) -> str:
    """Resolve Connect-style externalized secrets so secrets need not sit in the file itself."""

    def replace(match: re.Match[str]) -> str:
        provider, ref = match.group(1), match.group(2)
        if provider == "env":
            if ref not in os.environ:
                raise ConfigError(f"{source}: {key} refers to ${{env:{ref}}} but that variable is not set")
            return os.environ[ref]
        path, _, inner_key = ref.rpartition(":")
        if not path:
            raise ConfigError(f"{source}: {key} must use ${{file:/path:key}}, got ${{file:{ref}}}")
        values = read_properties(path)
        if inner_key not in values:
            raise ConfigError(f"{source}: {key} refers to key {inner_key!r} missing from {path}")
        return values[inner_key]

    return _PROVIDER_RE.sub(replace, value)


# --------------------------------------------------------------------------------------------
# Key definitions
# --------------------------------------------------------------------------------------------


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Key:
    """One config key, like a ``ConfigDef`` entry."""

    name: str
    type: str  # string | int | long | boolean | enum | list | password | class
    default: Any = None
    doc: str = ""
    choices: tuple[str, ...] = ()
    min: int | None = None
    max: int | None = None
    aliases: tuple[str, ...] = ()
    secret: bool = False
    case_insensitive: bool = False

    def parse(self, raw: str, source: str) -> Any:
        value = raw.strip()
        where = f"{source}: {self.name}={MASK if self.secret else raw!r}"
        if self.type in ("string", "password", "class"):
            parsed: Any = raw.strip() if self.type == "class" else raw
        elif self.type == "boolean":
            low = value.lower()
            if low not in ("true", "false"):
                raise ConfigError(f"{where} is not a boolean (allowed: true, false)")
            parsed = low == "true"
        elif self.type in ("int", "long"):
            try:
                parsed = int(value.replace("_", ""))
            except ValueError:
                raise ConfigError(f"{where} is not an integer") from None
            hi = INT_MAX if self.type == "int" else LONG_MAX
            lo = -INT_MAX - 1 if self.type == "int" else -LONG_MAX - 1
            if not lo <= parsed <= hi:
                raise ConfigError(f"{where} does not fit a Java {self.type}")
        elif self.type == "enum":
            match = [c for c in self.choices if (c.lower() == value.lower() if self.case_insensitive else c == value)]
            if not match:
                raise ConfigError(f"{where} is not allowed (allowed: {', '.join(self.choices)})")
            parsed = match[0]
        elif self.type == "list":
            parsed = [item.strip() for item in value.split(",") if item.strip()]
        else:  # pragma: no cover - definitions are static
            raise AssertionError(self.type)
        if isinstance(parsed, int) and not isinstance(parsed, bool):
            if self.min is not None and parsed < self.min:
                raise ConfigError(f"{where} is below the minimum {self.min} (allowed: {self.range_text()})")
            if self.max is not None and parsed > self.max:
                raise ConfigError(f"{where} is above the maximum {self.max} (allowed: {self.range_text()})")
        return parsed

    def range_text(self) -> str:
        lo = "" if self.min is None else str(self.min)
        hi = "" if self.max is None else str(self.max)
        return f"[{lo}..{hi}]"


def _k(name: str, type_: str, default: Any = None, doc: str = "", **kw: Any) -> Key:
    return Key(name, type_, default, doc, **kw)


#: The converters the data model implements (one table for validation and conversion).
CONVERTERS = KNOWN_CONVERTERS
#: The header converters accepted (one table with the data model).
HEADER_CONVERTERS = KNOWN_HEADER_CONVERTERS

# Keys every connector has (Kafka Connect's ConnectorConfig / SinkConnectorConfig).
COMMON_KEYS: tuple[Key, ...] = (
    _k("name", "string", REQUIRED, "Unique connector name: names its tables and checkpoints."),
    _k("connector.class", "class", REQUIRED, "Java class name of the connector or a short alias."),
    _k("tasks.max", "int", 1, "Parallelism: Spark partitions for convert/publish, pullers for sources.", min=1),
    _k("key.converter", "enum", BYTE_ARRAY_CONVERTER, "Converter for record keys.", choices=CONVERTERS),
    _k("value.converter", "enum", BYTE_ARRAY_CONVERTER, "Converter for record values.", choices=CONVERTERS),
    _k("header.converter", "enum", SIMPLE_HEADER_CONVERTER, "Converter for record headers. Pub/Sub sink: header "
       "values become attributes as their UTF-8 text under each. Lite source: SimpleHeaderConverter writes "
       "Base64 text of the attribute bytes (as Connect does), ByteArrayConverter the bytes.",
       choices=HEADER_CONVERTERS),
    _k("key.converter.schemas.enable", "boolean", True, "JsonConverter: keys use the schema envelope."),
    _k("value.converter.schemas.enable", "boolean", True, "JsonConverter: values use the schema envelope."),
    _k("errors.tolerance", "enum", "none", "none: stop at the first bad record; all: dead-letter it.",
       choices=("none", "all")),
    _k("errors.deadletterqueue.topic.name", "string", "",
       "Also produce dead-lettered records to this Kafka topic (the DLQ Delta table always gets them)."),
    _k("errors.deadletterqueue.context.headers.enable", "boolean", False,
       "Add __connect.errors.* headers (topic, partition, offset, exception) to DLQ topic records."),
    _k("errors.deadletterqueue.topic.replication.factor", "int", 3, "Accepted for compatibility (unused).",
       min=-1),
    _k("errors.log.enable", "boolean", False, "Log every dead-lettered record (without its bytes)."),
)

SINK_TOPIC_KEYS: tuple[Key, ...] = (
    _k("topics", "list", None, "Kafka topics to consume (exactly one of topics / topics.regex)."),
    _k("topics.regex", "string", None, "Pattern of Kafka topics to consume."),
)

GCP_CREDENTIAL_KEYS: tuple[Key, ...] = (
    _k("gcp.credentials.file.path", "string", None,
       "Service-account key file; default: GOOGLE_APPLICATION_CREDENTIALS / ADC.",
       aliases=("gcp.sa.credentials.file.path",)),
    _k("gcp.credentials.json", "password", None, "Service-account key JSON blob.",
       aliases=("gcp.sa.credentials.json",), secret=True),
)

CPS_ENDPOINT = "pubsub.googleapis.com:443"

CPS_SINK_KEYS: tuple[Key, ...] = (
    _k("cps.topic", "string", REQUIRED, "Pub/Sub topic ID."),
    _k("cps.project", "string", REQUIRED, "Project of the Pub/Sub topic."),
    _k("cps.endpoint", "string", CPS_ENDPOINT, "Pub/Sub endpoint."),
    _k("cps.useEmulator", "boolean", False, "Use PUBSUB_EMULATOR_HOST (no credentials, plaintext)."),
    _k("maxBufferSize", "int", 100, "Messages per publish request (batch size).", min=1, max=1000),
    _k("maxBufferBytes", "long", 9_500_000, "Bytes per publish request.", min=1, max=9_500_000),
    _k("maxOutstandingRequestBytes", "long", LONG_MAX, "Flow control: outstanding bytes before blocking.", min=1),
    _k("maxOutstandingMessages", "long", LONG_MAX, "Flow control: outstanding messages before blocking.", min=1),
    _k("delayThresholdMs", "int", 100, "Max wait to fill a publish batch.", min=0,
       aliases=("maxDelayThresholdMs",)),
    _k("maxRequestTimeoutMs", "int", 10_000, "Timeout of one publish RPC.", min=1),
    _k("maxTotalTimeoutMs", "int", 60_000, "Total timeout of a publish incl. retries.", min=1),
    _k("maxShutdownTimeoutMs", "int", 60_000, "Max wait for outstanding publishes at shutdown.", min=0),
    _k("enableCompression", "boolean", False, "gzip-compress publish requests."),
    _k("compressionBytesThreshold", "long", 240, "Compress requests at least this large.", min=0),
    _k("metadata.publish", "boolean", False, "Add kafka.topic/partition/offset/timestamp attributes."),
    _k("headers.publish", "boolean", False, "Add Kafka headers as attributes (within Pub/Sub limits)."),
    _k("orderingKeySource", "enum", "none", "Ordering key from: none, key, partition.",
       choices=("none", "key", "partition")),
    _k("messageBodyName", "string", "cps_message_body", "Struct field / map key that becomes the body."),
    *GCP_CREDENTIAL_KEYS,
)

CPS_SOURCE_KEYS: tuple[Key, ...] = (
    _k("cps.subscription", "string", REQUIRED, "Pub/Sub subscription ID."),
    _k("cps.project", "string", REQUIRED, "Project of the subscription."),
    _k("cps.endpoint", "string", CPS_ENDPOINT, "Pub/Sub endpoint."),
    _k("cps.useEmulator", "boolean", False, "Use PUBSUB_EMULATOR_HOST (no credentials, plaintext)."),
    _k("kafka.topic", "string", REQUIRED, "Kafka topic receiving the messages."),
    _k("cps.maxBatchSize", "int", 100, "Messages per synchronous pull request.", min=1),
    _k("cps.makeOrderingKeyAttribute", "boolean", False, "Copy the ordering key into the attributes."),
    _k("kafka.key.attribute", "string", None, "Attribute used as Kafka key ('orderingKey' = ordering key)."),
    _k("kafka.timestamp.attribute", "string", None, "Attribute (epoch ms) used as Kafka timestamp."),
    _k("kafka.partition.count", "int", 1, "Partitions of kafka.topic.", min=1),
    _k("kafka.partition.scheme", "enum", "round_robin", "How messages are assigned to Kafka partitions.",
       choices=("round_robin", "hash_key", "hash_value", "kafka_partitioner", "ordering_key")),
    _k("kafka.record.headers", "boolean", False, "Carry attributes as Kafka headers instead of a struct."),
    _k("cps.streamingPull.enabled", "boolean", False, "Use streaming pull."),
    _k("cps.streamingPull.flowControlMessages", "long", 1000, "Outstanding messages per task.", min=1),
    _k("cps.streamingPull.flowControlBytes", "long", 100 * 1024 * 1024, "Outstanding bytes per task.", min=1),
    _k("cps.streamingPull.parallelStreams", "int", 1, "Streaming pull streams per task.", min=1),
    _k("cps.streamingPull.maxAckExtensionMs", "long", 0, "Max total ack extension (0 = library default).",
       min=0),
    _k("cps.streamingPull.maxMsPerAckExtension", "long", 0, "Max single ack extension (0 = default).", min=0),
    *GCP_CREDENTIAL_KEYS,
)

LITE_COMMON: tuple[Key, ...] = (
    _k("pubsublite.project", "string", REQUIRED, "Project of the Lite resource."),
    _k("pubsublite.location", "string", REQUIRED, "Location (zone or region) of the Lite resource."),
    _k("pubsublite.endpoint", "string", None, "Override the regional Lite endpoint (host:port)."),
)

LITE_SINK_KEYS: tuple[Key, ...] = (
    _k("pubsublite.topic", "string", REQUIRED, "Lite topic ID."),
    *LITE_COMMON,
    _k("pubsublite.ordering.mode", "enum", "DEFAULT", "DEFAULT: key-hash routing; KAFKA: same partition number.",
       choices=("DEFAULT", "KAFKA"), case_insensitive=True),
    *GCP_CREDENTIAL_KEYS,
)

LITE_SOURCE_KEYS: tuple[Key, ...] = (
    _k("pubsublite.subscription", "string", REQUIRED, "Lite subscription ID."),
    *LITE_COMMON,
    _k("kafka.topic", "string", REQUIRED, "Kafka topic receiving the messages."),
    _k("pubsublite.partition_flow_control.messages", "long", LONG_MAX, "Outstanding messages per partition.",
       min=1),
    _k("pubsublite.partition_flow_control.bytes", "long", 20_000_000, "Outstanding bytes per partition.", min=1),
    *GCP_CREDENTIAL_KEYS,
)

ARCHIVE_KEYS: tuple[Key, ...] = (
    _k("s3.bucket", "string", None, "Target bucket (or use output.path for local / Volumes targets)."),
    _k("s3.prefix", "string", "", "Prefix of every object key."),
    _k("s3.endpoint", "string", None, "S3 endpoint URL (tests, S3-compatible stores)."),
    _k("s3.path_style", "boolean", False, "Path-style bucket addressing."),
    _k("s3.region", "string", None, "AWS region (default: the AWS credential chain's)."),
    _k("output.path", "string", None, "Local directory or /Volumes/... path instead of S3."),
    _k("local.buffer.dir", "string", REQUIRED,
       "Existing directory, on every executor host, where a complete file is compressed before upload."),
    _k("compressed_block_size", "long", 67_108_864,
       "Uncompressed length per gzip block (Java String length: bytes for ASCII).", min=0),
    _k("flush.size", "long", 0, "Records per file (0 = no count rotation).", min=0),
    _k("rotate.interval.ms", "long", 0, "Record-time span per file (0 = no time rotation).", min=0),
    _k("chunks.per.file", "int", 16, "Blocks per file before the file closes.", min=1),
)

CPS_SINK = "cps_sink"
CPS_SOURCE = "cps_source"
LITE_SINK = "lite_sink"
LITE_SOURCE = "lite_source"
ARCHIVE = "archive"

CONNECTOR_CLASSES: dict[str, str] = {
    "com.google.pubsub.kafka.sink.CloudPubSubSinkConnector": CPS_SINK,
    "com.google.pubsub.kafka.source.CloudPubSubSourceConnector": CPS_SOURCE,
    "com.google.pubsublite.kafka.sink.PubSubLiteSinkConnector": LITE_SINK,
    "com.google.pubsublite.kafka.source.PubSubLiteSourceConnector": LITE_SOURCE,
    "com.deviantart.kafka_connect_s3.S3SinkConnector": ARCHIVE,
    # short aliases (Connect also accepts the simple class name)
    "CloudPubSubSinkConnector": CPS_SINK,
    "CloudPubSubSourceConnector": CPS_SOURCE,
    "PubSubLiteSinkConnector": LITE_SINK,
    "PubSubLiteSourceConnector": LITE_SOURCE,
    "S3SinkConnector": ARCHIVE,
    "cps-sink": CPS_SINK,
    "cps-source": CPS_SOURCE,
    "lite-sink": LITE_SINK,
    "lite-source": LITE_SOURCE,
    "archive": ARCHIVE,
    "s3-sink": ARCHIVE,
}

SINK_KINDS = (CPS_SINK, LITE_SINK, ARCHIVE)

CONNECTOR_KEYS: dict[str, tuple[Key, ...]] = {
    CPS_SINK: COMMON_KEYS + SINK_TOPIC_KEYS + CPS_SINK_KEYS,
    CPS_SOURCE: COMMON_KEYS + CPS_SOURCE_KEYS,
    LITE_SINK: COMMON_KEYS + SINK_TOPIC_KEYS + LITE_SINK_KEYS,
    LITE_SOURCE: COMMON_KEYS + LITE_SOURCE_KEYS,
    ARCHIVE: COMMON_KEYS + SINK_TOPIC_KEYS + ARCHIVE_KEYS,
}

# Prefixes passed through untouched (Connect's client overrides).
CONNECTOR_PREFIXES = ("consumer.override.", "producer.override.", "admin.override.")

WORKER_KEYS: tuple[Key, ...] = (
    _k("bootstrap.servers", "string", "127.0.0.1:9092", "Kafka brokers (host:port, comma separated)."),
    _k("storage.root", "string", "./.pubsub-connect", "Where bronze/outbox/dlq tables and checkpoints live."),
    _k("storage.catalog", "string", None, "Unity Catalog catalog for tables (Databricks)."),
    _k("storage.schema", "string", None, "Unity Catalog schema for tables (Databricks)."),
    _k("pipeline.kafka.implementation", "enum", "auto", "Kafka source/sink: auto, native, python.",
       choices=("auto", "native", "python")),
    _k("pipeline.tables.implementation", "enum", "auto", "Tables: auto, delta-spark, delta-rs.",
       choices=("auto", "delta-spark", "delta-rs")),
    _k("pipeline.trigger.interval.ms", "long", 1000, "Micro-batch interval in continuous mode.", min=0),
    _k("pipeline.max.records.per.batch", "long", 100_000, "Max Kafka records per ingest micro-batch.", min=1),
    _k("pipeline.max.files.per.trigger", "long", 0,
       "Max Delta files per convert/publish micro-batch (0 = all available).", min=0),
    _k("pipeline.restart.timeout.ms", "long", 300_000,
       "How long a stage that failed on an unreachable service (Kafka broker, Pub/Sub) is restarted from its "
       "checkpoint before the connector gives up (-1 = forever, 0 = never).", min=-1),
    _k("pipeline.restart.backoff.max.ms", "long", 30_000,
       "Longest wait between two restarts of a failing stage (the wait doubles from 1 s).", min=1),
    _k("pipeline.batch.timeout.ms", "long", 900_000,
       "A micro-batch still running after this long is taken as stuck (a wedged client or Python worker): "
       "its stage is stopped and restarted from its checkpoint like after a transient failure (0 = never).", min=0),
    _k("offset.flush.interval.ms", "long", 60_000,
       "Continuous mode: the archive writes an open file at most this long after its first record arrived "
       "(Connect commits, and the original archive sink uploads, at this interval).", min=0),
    _k("pipeline.offsets.topic", "string", "pubsub-connect-offsets",
       "Kafka topic where source connectors record committed produce batches (exactly-once)."),
    _k("listeners", "string", "http://127.0.0.1:8083",
       "pubsub-connect worker: where Kafka Connect's REST API listens (http://host:port). Any address but "
       "loopback requires rest.basic.auth.credentials.file."),
    _k("rest.basic.auth.credentials.file", "string", None,
       "pubsub-connect worker: user=password lines; when set, every REST request needs HTTP basic "
       "authentication as one of these users."),
    _k("key.converter", "enum", None, "Default key.converter for connectors.", choices=CONVERTERS),
    _k("value.converter", "enum", None, "Default value.converter for connectors.", choices=CONVERTERS),
    _k("header.converter", "enum", None, "Default header.converter for connectors.", choices=HEADER_CONVERTERS),
    _k("key.converter.schemas.enable", "boolean", None, "Default for connectors."),
    _k("value.converter.schemas.enable", "boolean", None, "Default for connectors."),
)

WORKER_PREFIXES = ("spark.", "consumer.", "producer.", "admin.")

# Connect worker keys that have no meaning here; accepted quietly (the file came from Connect).
WORKER_IGNORED = frozenset({
    "offset.storage.file.filename", "plugin.path", "rest.port", "rest.host.name",
    "group.id", "offset.storage.topic", "config.storage.topic", "status.storage.topic",
    "offset.storage.replication.factor", "config.storage.replication.factor",
    "status.storage.replication.factor", "internal.key.converter", "internal.value.converter",
    "internal.key.converter.schemas.enable", "internal.value.converter.schemas.enable",
    "config.providers", "config.providers.file.class", "config.providers.env.class",
})

# Keys a worker may give connectors as defaults (Kafka Connect semantics).
INHERITED_BY_CONNECTORS = ("key.converter", "value.converter", "header.converter", "key.converter.schemas.enable",
                           "value.converter.schemas.enable")


# --------------------------------------------------------------------------------------------
# Config objects
# --------------------------------------------------------------------------------------------


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
           inherited: Mapping[str, Setting] | None = None) -> tuple[dict[str, Setting], dict[str, str]]:
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
                passthrough[name] = resolve_providers(text, origin, name)
            elif name not in ignored:
                log.warning("%s: unknown key %s (ignored)", origin, name)
            continue
        if definition.name in seen_canonical and seen_canonical[definition.name] != name:
            log.warning("%s: both %s and %s are set; using %s", origin, seen_canonical[definition.name], name, name)
        seen_canonical[definition.name] = name
        value = definition.parse(resolve_providers(text, origin, name), origin)
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
                    origins: Mapping[str, str] | None = None) -> WorkerConfig:
    settings, passthrough = _apply(WORKER_KEYS, raw, origins or {}, source, WORKER_PREFIXES, WORKER_IGNORED)
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
                       worker: WorkerConfig | None = None) -> ConnectorConfig:
    kind = connector_kind(raw, source)
    inherited = {k: worker.settings[k] for k in INHERITED_BY_CONNECTORS} if worker else None
    settings, passthrough = _apply(CONNECTOR_KEYS[kind], raw, origins or {}, source, CONNECTOR_PREFIXES,
                                   inherited=inherited)
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
    if config.kind in (CPS_SINK, CPS_SOURCE, LITE_SINK, LITE_SOURCE):
        for key in ("gcp.credentials.file.path",):
            path = config.get(key)
            if path and not Path(path).is_file():
                raise ConfigError(f"{source}: {key}={path!r} does not name a readable file")


def load(connector_files: list[str | Path], worker_file: str | Path | None = None,
         overrides: list[str] | None = None) -> RunConfig:
    """Read a worker file and connector files like ``connect-standalone``, then apply
    ``--set key=value`` overrides. A bare key goes to every connector (and to the worker when it
    is a worker key); ``NAME:key=value`` targets the connector named NAME."""
    parsed_overrides = [_parse_override(item) for item in overrides or []]
    worker_names = {k.name for k in WORKER_KEYS}
    worker = _worker_from(worker_file, [(key, value) for target, key, value in parsed_overrides
                                        if target is None and (key in worker_names or key.startswith(WORKER_PREFIXES))])

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
        connectors.append(validate_connector(raw, str(path), origins, worker))
        raws[connectors[-1].name] = raw
    names = [c.name for c in connectors]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"connector name(s) used more than once: {', '.join(duplicates)}")
    return RunConfig(worker, connectors, raws)


def _worker_from(worker_file: str | Path | None, overrides: list[tuple[str, str]]) -> WorkerConfig:
    raw = read_properties(worker_file) if worker_file else {}
    raw.update(overrides)
    return validate_worker(raw, str(worker_file) if worker_file else "<worker defaults>",
                           {key: "--set" for key, _ in overrides})


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
