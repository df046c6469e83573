"""A Cloud Pub/Sub topic's schema: what a topic with a schema takes, read from Pub/Sub's schema
service (the emulator keeps and enforces schemas too)."""

from __future__ import annotations

from dataclasses import dataclass

from pubsub_connect.io.pubsub.credentials import Connection

#: What Pub/Sub puts in a topic's schema settings once its schema was deleted.
DELETED_SCHEMA = "_deleted-schema_"


@dataclass(frozen=True)
class TopicSchema:
    """A topic's schema: its name, type (``AVRO`` or ``PROTOCOL_BUFFER``), message encoding
    (``BINARY`` or ``JSON``) and the definitions of the revisions the topic takes."""

    name: str
    type: str
    encoding: str
    definitions: tuple[str, ...]


def topic_schema(connection: Connection, topic_path: str) -> TopicSchema | None:
    """The schema of ``topic_path`` (None: the topic has none, or its schema was deleted).

    The revisions the topic takes are those between its settings' first and last revision ids
    (every revision when they are unset). The client's errors are raised as they are: their
    classes tell a stage runner whether a restart can help (``ServiceUnavailable``) or not
    (``NotFound``, ``PermissionDenied``)."""
    from google.cloud.pubsub import SchemaServiceClient
    from google.cloud.pubsub_v1 import PublisherClient
    from google.pubsub_v1.services.publisher.transports.grpc import PublisherGrpcTransport
    from google.pubsub_v1.services.schema_service.transports.grpc import SchemaServiceGrpcTransport
    from google.pubsub_v1.types import Encoding, Schema, SchemaView

    topic = PublisherClient(**connection.client_kwargs(PublisherGrpcTransport)).get_topic(request={"topic": topic_path})
    settings = topic.schema_settings
    if not settings.schema or settings.schema == DELETED_SCHEMA:
        return None
    schemas = SchemaServiceClient(**connection.client_kwargs(SchemaServiceGrpcTransport))
    revisions = list(schemas.list_schema_revisions(request={"name": settings.schema, "view": SchemaView.FULL}))
    # listed newest first; keep the range the topic's settings name
    first, last = settings.first_revision_id, settings.last_revision_id
    ids = [r.revision_id for r in revisions]
    newest = ids.index(last) if last in ids else 0
    oldest = ids.index(first) if first in ids else len(ids) - 1
    taken = revisions[newest:oldest + 1]
    kind = Schema.Type(taken[0].type_).name if taken else "AVRO"
    return TopicSchema(settings.schema, kind, Encoding(settings.encoding).name, tuple(r.definition for r in taken))


def schema_revision(connection: Connection, name: str, revision_id: str) -> tuple[str, str]:
    """``(type, definition)`` of one revision of a Pub/Sub schema (``AVRO`` or
    ``PROTOCOL_BUFFER``): what the messages a topic validated with it carry. Errors as in
    :func:`topic_schema`."""
    from google.cloud.pubsub import SchemaServiceClient
    from google.pubsub_v1.services.schema_service.transports.grpc import SchemaServiceGrpcTransport
    from google.pubsub_v1.types import Schema, SchemaView

    schemas = SchemaServiceClient(**connection.client_kwargs(SchemaServiceGrpcTransport))
    found = schemas.get_schema(request={"name": f"{name}@{revision_id}", "view": SchemaView.FULL})
    return Schema.Type(found.type_).name, found.definition
