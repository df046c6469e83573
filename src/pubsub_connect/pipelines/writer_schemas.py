"""The writer schemas of a connector's Schema Registry converters: its ``*.converter.*`` keys as
a client of the registry (:mod:`pubsub_connect.io.schema_registry`), and that client as the
lookup by id the data model's JVM path asks (:class:`~pubsub_connect.model.cps_sink.batch.CpsSinkConversion`),
or, for a source, as the ids its records are written with (:func:`written_schema_ids`).

What the lookup raises says who is at fault: an id the registry does not know, or a schema that
is not Avro, is the record's (:class:`~pubsub_connect.model.avro.wire.UnknownSchemaIdError`, a
dead letter); a registry that cannot be reached is nobody's (``SchemaRegistryUnreachableError``, a
``ConnectionError``: the stage restarts, as when Kafka is away); a registry that refuses the
connector (401, 403) stops it with the registry's one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.loader import ConnectorConfig
from pubsub_connect.io.pubsub.schemas import schema_revision, topic_schema
from pubsub_connect.io.schema_registry import (
    RegistrySettings,
    SchemaRegistryClient,
    SchemaRegistryError,
    UnknownSchemaError,
    settings_from,
)
from pubsub_connect.model.avro.schema import AvroSchemaError, parsing_canonical_form
from pubsub_connect.model.avro.wire import UnknownSchemaIdError
from pubsub_connect.model.avro.writer import SchemaIds, SchemaRegistrationError
from pubsub_connect.model.converters import REGISTRY_CONVERTERS, registry_schema_type
from pubsub_connect.model.cps_sink.settings import AVRO_BODY, BodySchemaCheck
from pubsub_connect.model.cps_source.settings import MessageSchemaError, MessageSchemas
from pubsub_connect.pipelines.pubsub_settings import cps_publisher_config, cps_subscriber_config

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
    sides = [side for side in ("key", "value") if config.get(f"{side}.converter") in REGISTRY_CONVERTERS]
    if not sides:
        return None
    client = SchemaRegistryClient(registry_settings(config, sides[0]))
    readable = {str(registry_schema_type(config.get(f"{side}.converter"))) for side in sides}

    def lookup(schema_id: int) -> str:
        try:
            found = client.schema(schema_id)
        except UnknownSchemaError as exc:
            raise UnknownSchemaIdError(str(exc)) from None
        if found.schema_type not in readable:
            reads = " and ".join(sorted(readable))
            raise UnknownSchemaIdError(f"schema {schema_id} is a {found.schema_type} schema; the connector's "
                                       f"converters read {reads} only")
        return found.text

    return lookup


#: Statuses with which a registry refuses the connector itself (not one schema): they stop it.
_REFUSES_CONNECTOR = (401, 403)


def written_schema_ids(config: ConnectorConfig) -> SchemaIds | None:
    """The ids a source's registry converters write (None without one), as Confluent's
    serializer gets them with each side's settings: registered under the subject
    (``auto.register.schemas=true``, the default); else the subject's latest version
    (``use.latest.version=true``), which must be the record's schema here; else looked up.

    A schema the registry refuses, or does not have, fails the records written with it (a
    :class:`SchemaRegistrationError`: dead letters with the registry's line). Each call asks the
    registry: the conversion that calls this remembers what it resolved, and asks again only
    about refused schemas."""
    sides = [side for side in ("key", "value") if config.get(f"{side}.converter") in REGISTRY_CONVERTERS]
    if not sides:
        return None
    client = SchemaRegistryClient(registry_settings(config, sides[0]))

    def schema_id(side: str, subject: str, text: str) -> int:
        schema_type = str(registry_schema_type(config.get(f"{side}.converter")))
        try:
            if config.get(f"{side}.converter.auto.register.schemas"):
                return client.register(subject, text, schema_type)
            if config.get(f"{side}.converter.use.latest.version"):
                return _latest_if_same(client, subject, text)
            return client.lookup(subject, text, schema_type)
        except SchemaRegistryError as exc:
            if exc.status in _REFUSES_CONNECTOR:
                raise
            raise SchemaRegistrationError(str(exc)) from None

    return schema_id


def _without_draft(node: object) -> object:
    """A parsed schema without a declared JSON Schema draft (the client declares one where a
    registry would not take the schema otherwise: :func:`~pubsub_connect.io.schema_registry.declared_draft`)."""
    return {k: v for k, v in node.items() if k != "$schema"} if isinstance(node, dict) else node


def _latest_if_same(client: SchemaRegistryClient, subject: str, text: str) -> int:
    """``use.latest.version``: the latest version's id when it is the record's schema. Confluent's
    serializer also writes a record with a later, compatible version; a source here writes the
    schema its record has (the README lists the difference)."""
    latest = client.latest(subject)
    if _without_draft(json.loads(latest.text)) != _without_draft(json.loads(text)):
        raise SchemaRegistrationError(f"use.latest.version: the latest version of subject {subject} (id "
                                      f"{latest.schema_id}) is not this record's schema {text}")
    return latest.schema_id


def body_schema_check(config: ConnectorConfig) -> BodySchemaCheck | None:
    """With ``messageBodyFormat=avro``, which writer schemas the Pub/Sub topic takes (None: any,
    the topic has no schema): those whose canonical form is one of its schema's revisions. A
    topic whose schema is not Avro, or takes JSON, refuses every datum: one line at start-up."""
    if config.get("messageBodyFormat") != AVRO_BODY:
        return None
    publisher = cps_publisher_config(config)
    found = topic_schema(publisher.connection, publisher.topic_path)
    if found is None:
        return None
    if found.type != "AVRO" or found.encoding != "BINARY":
        raise ConfigError(f"{config.source}: messageBodyFormat=avro publishes Avro's binary encoding, but topic "
                          f"{publisher.topic_path} takes {found.type} messages in {found.encoding} encoding "
                          f"(schema {found.name})")
    forms = {parsing_canonical_form(text) for text in found.definitions}

    def check(writer: str) -> str | None:
        try:
            form = parsing_canonical_form(writer)
        except AvroSchemaError:
            return None  # the writer schema itself is refused where it is read
        if form in forms:
            return None
        return f"not a revision of the topic's schema {found.name}, which Pub/Sub checks every message against"

    return check


def message_schema_definitions(config: ConnectorConfig) -> MessageSchemas | None:
    """With the source's ``messageBodyFormat=avro``, the schema revisions its messages name, read
    from Pub/Sub's schema service (None: the extension is off; the conversion asks once per
    revision and remembers the frame it made). A revision that no
    longer exists fails the messages that name it (dead letters); a service that cannot be reached
    raises its client's error (a restart)."""
    if config.get("messageBodyFormat") != AVRO_BODY:
        return None
    from google.api_core import exceptions as gexc

    connection = cps_subscriber_config(config).connection

    def definition(name: str, revision: str) -> tuple[str, str]:
        try:
            return schema_revision(connection, name, revision)
        except gexc.NotFound:
            raise MessageSchemaError(f"schema {name}@{revision} is not in Pub/Sub's schema service") from None

    return definition
