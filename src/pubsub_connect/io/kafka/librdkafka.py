"""What every confluent-kafka client of this product shares: its log sink and its connection keys.

Why a module of its own: librdkafka clients are made in several places (admin lookups, the
transactional producer, group offsets, the fallback engine's tasks) and all must log the same way
and, where they only talk to the cluster, carry only the settings about reaching and logging in to
the brokers. The translation of users' settings into librdkafka's lives in
:mod:`pubsub_connect.io.kafka.options`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

_client_log = logging.getLogger("pubsub_connect.kafka.client")


class _DebugLog:
    """Where librdkafka's own log lines go: the project's logger, at debug level (``--debug``
    shows them). Errors reach the connector through the clients' return values and exceptions;
    printed as they happened, one unreachable broker made ~20 lines a second on the console.
    A module-level object, so client settings holding it still pickle for Spark tasks."""

    def log(self, level: int, msg: str, *args: object) -> None:
        _client_log.debug(msg, *args)


CLIENT_LOGGER = _DebugLog()


#: librdkafka settings about reaching and logging in to the brokers (what an admin client, or a
#: consumer that only reads and commits group offsets, needs; an AdminClient warns about every
#: consumer- or producer-only key).
CONNECTION_PREFIXES = (
    "bootstrap.servers", "security.protocol", "ssl.", "sasl.", "client.id", "socket.", "broker.",
    "metadata.", "reconnect.", "retry.", "api.version", "client.dns.lookup", "debug", "log_level",
    "connections.max.idle.ms", "topic.metadata",
)


def connection_settings(client: Mapping[str, str]) -> dict[str, str]:
    """Only the settings of a librdkafka client that say how to reach and log in to the brokers."""
    return {k: v for k, v in client.items() if k.startswith(CONNECTION_PREFIXES)}


def with_client_logger(settings: Mapping[str, object]) -> dict[str, object]:
    """``settings`` plus the logger every confluent-kafka client of this project uses."""
    return {**settings, "logger": CLIENT_LOGGER}
