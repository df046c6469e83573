"""Every config key, like Kafka Connect's ``ConfigDef``: name, type, default, range, allowed values.

Why one table: the loader validates files with it, ``pubsub-connect validate`` and the worker's
``/connector-plugins/…/config/validate`` answer from it, and the README's key lists follow it, so
a key means the same everywhere. Per connector kind (the four Google connectors and the
Block-GZIP archive sink): :data:`CONNECTOR_KEYS` (Connect's standard keys + the connector's own);
the worker: :data:`WORKER_KEYS`. Converter names come from the data model's own table
(:data:`~pubsub_connect.model.converters.KNOWN_CONVERTERS`), so a converter is accepted exactly
when it is implemented.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pubsub_connect.config.errors import MASK, ConfigError
from pubsub_connect.model.avro.writer import TOPIC_NAME_STRATEGY
from pubsub_connect.model.converters import (
    BYTE_ARRAY_CONVERTER,
    KNOWN_CONVERTERS,
    KNOWN_HEADER_CONVERTERS,
    REGISTRY_CONVERTERS,
    SIMPLE_HEADER_CONVERTER,
)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1



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
    #: Values users bring that are known and not taken, with why (an enum's one-line refusal).
    not_taken: tuple[tuple[str, str], ...] = ()

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
            why_not = dict(self.not_taken).get(value)
            if not match and why_not:
                raise ConfigError(f"{where} is not supported: {why_not}")
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


#: Every ``key.converter`` / ``value.converter`` a connector file may name.
CONVERTERS: tuple[str, ...] = (*KNOWN_CONVERTERS, *REGISTRY_CONVERTERS)
#: Converters Connect users have that are not taken, and why.
CONVERTERS_NOT_TAKEN: tuple[tuple[str, str], ...] = (
    ("io.confluent.connect.protobuf.ProtobufConverter",
     "the Schema Registry holds Protocol Buffers schemas as .proto text, which Spark decodes only with compiled "
     "descriptors; use ByteArrayConverter to move the bytes as they are"),
)


def registry_converter_keys(side: str, defaults: bool = True) -> tuple[Key, ...]:
    """The Schema Registry converters' own keys under ``<side>.converter.``, named and meant as
    Confluent's (``defaults=False``: the worker's keys, which only give connectors defaults)."""
    prefix = f"{side}.converter."

    def d(value: Any) -> Any:
        return value if defaults else None

    return (
        _k(prefix + "schema.registry.url", "string", None, "Schema Registry converters: the registry's URLs "
           "(comma separated; one that cannot be reached is passed over)."),
        _k(prefix + "basic.auth.credentials.source", "enum", d("URL"), "Schema Registry converters: where the "
           "registry's basic authentication comes from: USER_INFO (basic.auth.user.info) or URL (user:password@ in "
           "the URL).", choices=("URL", "USER_INFO"), case_insensitive=True),
        _k(prefix + "basic.auth.user.info", "password", None, "Schema Registry converters: <user>:<password>.",
           secret=True),
        _k(prefix + "schema.registry.ssl.truststore.location", "string", None,
           "Schema Registry converters: the CA certificates (PEM) to trust for an https registry."),
        _k(prefix + "auto.register.schemas", "boolean", d(True), "Schema Registry converters, source connectors: "
           "register the written schema under its subject (else look it up there)."),
        _k(prefix + "use.latest.version", "boolean", d(False), "Schema Registry converters, source connectors, "
           "with auto.register.schemas=false: write with the subject's latest version (which must be the record's "
           "schema)."),
        _k(prefix + f"{side}.subject.name.strategy", "class", d(TOPIC_NAME_STRATEGY),
           "Schema Registry converters: the subject a schema is registered under."),
        _k(prefix + "apicurio.registry.url", "string", None, "Apicurio's AvroConverter: the registry's "
           "/apis/registry/v2 (or v3) URL; its Confluent API (/apis/ccompat/v7) is used."),
    )


REGISTRY_CONVERTER_KEYS: tuple[Key, ...] = registry_converter_keys("key") + registry_converter_keys("value")


#: ``pipeline.mode``: how a connector's work is split into streaming queries.
PIPELINE_MODES = ("staged", "fused")
PIPELINE_MODE_DOC = ("staged: three stages per connector (ingest or pull, convert, publish or produce) handing "
                     "records on through the bronze and outbox tables; fused: one query per connector (a pull "
                     "loop for the Cloud Pub/Sub source) that lands bronze while it converts and publishes or "
                     "produces each micro-batch or pulled window (lower latency, no outbox). The archive is one "
                     "query either way.")


# Keys every connector has (Kafka Connect's ConnectorConfig / SinkConnectorConfig).
COMMON_KEYS: tuple[Key, ...] = (
    _k("name", "string", REQUIRED, "Unique connector name: names its tables and checkpoints."),
    _k("connector.class", "class", REQUIRED, "Java class name of the connector or a short alias."),
    _k("tasks.max", "int", 1, "The connector's parallelism (Connect's task count): Spark partitions of the sinks' "
       "publish, puller threads of the Cloud Pub/Sub source, and the session's shuffle partitions (convert's "
       "joins) in run and the jobs unless spark.sql.shuffle.partitions is set (largest tasks.max of a run).",
       min=1),
    _k("key.converter", "enum", BYTE_ARRAY_CONVERTER, "Converter for record keys.", choices=CONVERTERS,
       not_taken=CONVERTERS_NOT_TAKEN),
    _k("value.converter", "enum", BYTE_ARRAY_CONVERTER, "Converter for record values.", choices=CONVERTERS,
       not_taken=CONVERTERS_NOT_TAKEN),
    _k("header.converter", "enum", SIMPLE_HEADER_CONVERTER, "Converter for record headers. Pub/Sub sink: header "
       "values become attributes as their UTF-8 text under each. Lite source: SimpleHeaderConverter writes "
       "Base64 text of the attribute bytes (as Connect does), ByteArrayConverter the bytes.",
       choices=KNOWN_HEADER_CONVERTERS),
    _k("key.converter.schemas.enable", "boolean", True, "JsonConverter: keys use the schema envelope."),
    _k("value.converter.schemas.enable", "boolean", True, "JsonConverter: values use the schema envelope."),
    *REGISTRY_CONVERTER_KEYS,
    _k("errors.tolerance", "enum", "none", "none: stop at the first bad record; all: dead-letter it.",
       choices=("none", "all")),
    _k("errors.deadletterqueue.topic.name", "string", "",
       "Also produce dead-lettered records to this Kafka topic (the DLQ Delta table always gets them)."),
    _k("errors.deadletterqueue.context.headers.enable", "boolean", False,
       "Add __connect.errors.* headers (topic, partition, offset, exception) to DLQ topic records."),
    _k("errors.deadletterqueue.topic.replication.factor", "int", 3, "Accepted for compatibility (unused).",
       min=-1),
    _k("errors.log.enable", "boolean", False, "Log every dead-lettered record (without its bytes)."),
    _k("pipeline.mode", "enum", None, "How the connector runs (default: the worker's pipeline.mode). "
       + PIPELINE_MODE_DOC, choices=PIPELINE_MODES),
    _k("bronze.retention.ms", "long", -1,
       "pubsub-connect maintain: delete bronze rows ingested longer ago than this, once the convert stage has "
       "read them (-1: keep every row; bronze is what replay and trace read).", min=-1),
    _k("outbox.retention.ms", "long", 86_400_000,
       "pubsub-connect maintain: delete outbox rows committed longer ago than this, once the publish/produce "
       "stage has sent them (-1: keep). A day keeps recent messages for trace and the Pub/Sub source's "
       "redelivery check.", min=-1),
    _k("dlq.retention.ms", "long", -1,
       "pubsub-connect maintain: delete dead letters that failed longer ago than this (-1: keep every one).",
       min=-1),
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
    _k("messageBodyFormat", "enum", "connect", "connect: the value mapped as Google's connector maps it "
       "(messageBodyName); extensions for AvroConverter values: avro, the value's own Avro datum as the data, "
       "without the Schema Registry header, for a Pub/Sub topic whose schema is the records' Avro schema (BINARY "
       "encoding); json, the whole value as Kafka's JsonConverter writes it (schemas.enable=false).",
       choices=("connect", "avro", "json")),
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
    _k("messageBodyFormat", "enum", "connect", "connect: the data (or a struct of it and the attributes) as "
       "Google's connector writes it; avro (an extension): for a subscription of a topic with an Avro schema, each "
       "message's datum written with that schema (registered) by value.converter=AvroConverter, the attributes "
       "as headers.", choices=("connect", "avro")),
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
    _k("pipeline.max.bytes.per.trigger", "long", 64 * 1024 * 1024,
       "Max Delta file bytes (compressed Parquet) per convert/publish/produce micro-batch (one file at least, "
       "one commit on the fallback; 0 = no bound): a stage catching up on a long backlog takes it in parts.", min=0),
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
    _k("pipeline.mode", "enum", "staged", "Default pipeline.mode of the worker's connectors. " + PIPELINE_MODE_DOC,
       choices=PIPELINE_MODES),
    _k("pipeline.maintenance.interval.ms", "long", 3_600_000,
       "pubsub-connect run and worker: run maintain (retention, compaction, VACUUM) on each running connector's "
       "tables this often, beside its stages (0: only the maintain command and the bundle's maintain jobs).", min=0),
    _k("pipeline.offsets.topic", "string", "pubsub-connect-offsets",
       "Kafka topic where source connectors record committed produce batches (exactly-once)."),
    _k("listeners", "string", "http://127.0.0.1:8083",
       "pubsub-connect worker: where Kafka Connect's REST API listens (http://host:port). Any address but "
       "loopback requires rest.basic.auth.credentials.file."),
    _k("topic.tracking.enable", "boolean", True,
       "pubsub-connect worker: record the Kafka topics each connector uses, for GET /connectors/{name}/topics "
       "(Connect's KIP-558; when false that endpoint answers 403)."),
    _k("topic.tracking.allow.reset", "boolean", True,
       "pubsub-connect worker: whether PUT /connectors/{name}/topics/reset may clear a connector's topics."),
    _k("rest.basic.auth.credentials.file", "string", None,
       "pubsub-connect worker: user=password lines; when set, every REST request needs HTTP basic "
       "authentication as one of these users."),
    _k("key.converter", "enum", None, "Default key.converter for connectors.", choices=CONVERTERS,
       not_taken=CONVERTERS_NOT_TAKEN),
    _k("value.converter", "enum", None, "Default value.converter for connectors.", choices=CONVERTERS,
       not_taken=CONVERTERS_NOT_TAKEN),
    _k("header.converter", "enum", None, "Default header.converter for connectors.", choices=KNOWN_HEADER_CONVERTERS),
    _k("key.converter.schemas.enable", "boolean", None, "Default for connectors."),
    _k("value.converter.schemas.enable", "boolean", None, "Default for connectors."),
    *registry_converter_keys("key", defaults=False),
    *registry_converter_keys("value", defaults=False),
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
INHERITED_BY_CONNECTORS = ("pipeline.mode", "key.converter", "value.converter", "header.converter",
                           "key.converter.schemas.enable", "value.converter.schemas.enable",
                           *(key.name for key in REGISTRY_CONVERTER_KEYS))
