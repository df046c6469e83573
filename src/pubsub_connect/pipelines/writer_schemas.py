"""The writer schemas of a connector's Schema Registry converters: its ``*.converter.*`` keys as
a client of the registry (:mod:`pubsub_connect.io.schema_registry`), and that client as the
lookup by id the data model's JVM path asks (:class:`~pubsub_connect.model.cps_sink.batch.CpsSinkConversion`).

What the lookup raises says who is at fault: an id the registry does not know, or a schema that
is not Avro, is the record's (:class:`~pubsub_connect.model.avro.wire.UnknownSchemaIdError`, a
dead letter); a registry that cannot be reached is nobody's (``SchemaRegistryUnreachableError``, a
``ConnectionError``: the stage restarts, as when Kafka is away); a registry that refuses the
connector (401, 403) stops it with the registry's one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.schema_registry import RegistrySettings, SchemaRegistryClient, UnknownSchemaError, settings_from
from pubsub_connect.model.avro.wire import UnknownSchemaIdError
from pubsub_connect.model.converters import REGISTRY_AVRO_CONVERTERS

#: Apicurio's own API roots, whose Confluent API is ``/apis/ccompat/v7`` beside them.
_APICURIO_API = re.compile(r"/apis/registry/v[23]/?$")


def registry_settings(config: ConnectorConfig, side: str) -> RegistrySettings:
    """The registry of ``<side>.converter`` (``key`` or ``value``): its keys as the client reads
    them, Apicurio's converter URL given as its Confluent API."""
    prefix = f"{side}.converter."
    keys = {name[len(prefix):]: setting.value for name, setting in config.settings.items()
            if name.startswith(prefix) and setting.value is not None}
    if not keys.get("schema.registry.url") and keys.get("apicurio.registry.url"):
        keys["schema.registry.url"] = ",".join(_APICURIO_API.sub("/apis/ccompat/v7", u.strip().rstrip("/"))
                                               for u in str(keys["apicurio.registry.url"]).split(","))
    return settings_from(keys)


def writer_schema_lookup(config: ConnectorConfig) -> Callable[[int], str] | None:
    """The writer schema's text by id for the connector's registry converters (None without one).
    One registry serves the key and the value (checked with the configuration): their ids are
    the registry's."""
    sides = [side for side in ("key", "value") if config.get(f"{side}.converter") in REGISTRY_AVRO_CONVERTERS]
    if not sides:
        return None
    client = SchemaRegistryClient(registry_settings(config, sides[0]))

    def lookup(schema_id: int) -> str:
        try:
            found = client.schema(schema_id)
        except UnknownSchemaError as exc:
            raise UnknownSchemaIdError(str(exc)) from None
        if found.schema_type != "AVRO":
            raise UnknownSchemaIdError(f"schema {schema_id} is a {found.schema_type} schema; the AvroConverter "
                                       "reads Avro only")
        return found.text

    return lookup
