"""What ``pubsub-connect trace`` names, by connector kind: a sink's Kafka record, a Cloud Pub/Sub
source's message id, a Lite source's Lite partition and offset. Checked before a Spark session
starts, so that a wrong option is one line at once."""

from __future__ import annotations

from collections.abc import Callable

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_SOURCE, LITE_SOURCE
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.explore.source_trace import cps_message, lite_message, trace_message
from pubsub_connect.explore.trace import Journey, message_maker, trace
from pubsub_connect.io.tables import TableStore


def journey_finder(config: ConnectorConfig, topic: str | None, partition: int | None, offset: int | None,
                   message_id: str | None) -> Callable[[TableStore], Journey]:
    """How ``trace`` finds what the command line names, checked before Spark starts: a sink's
    Kafka record, a Cloud Pub/Sub source's message id, a Lite source's partition and offset."""
    if config.kind == CPS_SOURCE:
        if message_id is None or topic or partition is not None or offset is not None:
            raise ConfigError(f"{config.name}: trace a Cloud Pub/Sub source's message by --message-id alone")
        return lambda store: trace_message(store, config.name, cps_message(message_id))
    if config.kind == LITE_SOURCE:
        if partition is None or offset is None or topic or message_id is not None:
            raise ConfigError(f"{config.name}: trace a Lite source's message by --partition and --offset "
                              "(its Lite partition) alone")
        return lambda store: trace_message(store, config.name, lite_message(partition, offset))
    remake = message_maker(config)  # one line for a connector without bronze (the archive)
    if topic is None or partition is None or offset is None or message_id is not None:
        raise ConfigError(f"{config.name}: trace a sink's Kafka record by --topic, --partition and --offset")
    return lambda store: trace(store, config.name, topic, partition, offset, remake)
