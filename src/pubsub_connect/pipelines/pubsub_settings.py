"""Connector properties → the typed settings of the Pub/Sub and Pub/Sub Lite I/O.

The I/O packages (``io/pubsub``, ``io/pubsublite``) know nothing of connector property names;
this module is where a connector's keys (``cps.topic``, ``maxBufferSize``, ``pubsublite.location``…,
named as in Google's connectors) become their settings objects. Call these on the driver: the
user's environment (``PUBSUB_EMULATOR_HOST``) is read here and captured in the settings, which
then pickle into Spark workers.
"""

from __future__ import annotations

import json

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_ENDPOINT
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.pubsub.credentials import EMULATOR_ENV, Connection, emulator_host_from_env
from pubsub_connect.io.pubsub.publisher import PublisherConfig
from pubsub_connect.io.pubsub.subscriber import SubscriberConfig
from pubsub_connect.io.pubsublite.connection import LiteConnection


def cps_connection(config: ConnectorConfig) -> Connection:
    """Resolve the endpoint/emulator/credentials keys of a Cloud Pub/Sub connector.

    ``cps.useEmulator=true`` without ``PUBSUB_EMULATOR_HOST`` is a config error. Setting
    ``PUBSUB_EMULATOR_HOST`` alone also selects the emulator, the same rule the Google
    client libraries apply.
    """
    env_host = emulator_host_from_env()
    if config.get("cps.useEmulator") and not env_host:
        raise ConfigError(f"{config.source}: cps.useEmulator=true but {EMULATOR_ENV} is not set "
                          f"(start the emulator, e.g. `pubsub-connect services up`, and export "
                          f"{EMULATOR_ENV}=host:port)")
    creds_json = config.get("gcp.credentials.json")
    if creds_json:
        try:
            parsed = json.loads(creds_json)
        except ValueError:
            raise ConfigError(f"{config.source}: gcp.credentials.json is not valid JSON (expected "
                              "the content of a Google credentials file)") from None
        if not isinstance(parsed, dict):
            raise ConfigError(f"{config.source}: gcp.credentials.json must be a JSON object")
    return Connection(
        project=str(config.get("cps.project")),
        endpoint=str(config.get("cps.endpoint") or CPS_ENDPOINT),
        emulator_host=env_host,
        credentials_file=config.get("gcp.credentials.file.path") or None,
        credentials_json=creds_json or None,
    )


def cps_publisher_config(config: ConnectorConfig) -> PublisherConfig:
    """The publisher settings of a ``CloudPubSubSinkConnector`` config."""
    return PublisherConfig(
        connection=cps_connection(config),
        topic=str(config.get("cps.topic")),
        max_messages=int(config.get("maxBufferSize")),
        max_bytes=int(config.get("maxBufferBytes")),
        max_latency_ms=int(config.get("delayThresholdMs")),
        flow_control_messages=int(config.get("maxOutstandingMessages")),
        flow_control_bytes=int(config.get("maxOutstandingRequestBytes")),
        request_timeout_ms=int(config.get("maxRequestTimeoutMs")),
        total_timeout_ms=int(config.get("maxTotalTimeoutMs")),
        shutdown_timeout_ms=int(config.get("maxShutdownTimeoutMs")),
        enable_message_ordering=config.get("orderingKeySource") != "none",
        enable_compression=bool(config.get("enableCompression")),
        compression_bytes_threshold=int(config.get("compressionBytesThreshold")),
    )


def cps_subscriber_config(config: ConnectorConfig) -> SubscriberConfig:
    """The subscription settings of a ``CloudPubSubSourceConnector`` config."""
    return SubscriberConfig(
        connection=cps_connection(config),
        subscription=str(config.get("cps.subscription")),
        max_batch_size=int(config.get("cps.maxBatchSize")),
        streaming=bool(config.get("cps.streamingPull.enabled")),
        flow_control_messages=int(config.get("cps.streamingPull.flowControlMessages")),
        flow_control_bytes=int(config.get("cps.streamingPull.flowControlBytes")),
        parallel_streams=int(config.get("cps.streamingPull.parallelStreams")),
        max_ack_extension_ms=int(config.get("cps.streamingPull.maxAckExtensionMs")),
        max_ms_per_ack_extension=int(config.get("cps.streamingPull.maxMsPerAckExtension")),
    )


def lite_connection(config: ConnectorConfig) -> LiteConnection:
    """The ``pubsublite.*`` and credential keys of a Lite connector, validated."""
    location = str(config.get("pubsublite.location")).strip()
    conn = LiteConnection(
        project=str(config.get("pubsublite.project")).strip(),
        location=location,
        endpoint=(config.get("pubsublite.endpoint") or "").strip() or None,
        credentials_file=config.get("gcp.credentials.file.path") or None,
        credentials_json=config.get("gcp.credentials.json") or None,
    )
    try:
        conn.region  # noqa: B018 - validates the location
    except ValueError as exc:
        raise ConfigError(f"{config.source}: pubsublite.location={location!r}: {exc}") from None
    return conn
