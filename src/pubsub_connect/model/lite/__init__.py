"""Pub/Sub Lite data model: Kafka record → Lite message (sink) and Lite message → Kafka record (source).

Why this exists: Google's ``PubSubLiteSinkConnector`` / ``PubSubLiteSourceConnector`` define how
Connect values become Lite bytes and back (README "Pub/Sub Lite turn-down and migration"). This module
states that mapping once, as pure functions, so the convert stages of both Lite pipelines and
their tests share it. No I/O; protobuf message classes are only *built* here.

Per-record reference functions (``encoding``, ``sink``, ``source``):

* :func:`encode_to_bytes` — a key, value or header value by its Connect schema (``Schemas.
  encodeToBytes``): null schema → STRING; BYTES unchanged; STRING UTF-8; integers
  ``Long.toString``; floats ``Double.toString`` of the value widened to double (FLOAT32 is first
  rounded to float32, so 1.1 → ``1.100000023841858``); booleans ``true``/``false``;
  ARRAY/MAP/STRUCT → a serialized ``google.protobuf.Value`` (:func:`encode_value`).
* :func:`sink_message` — a :class:`LiteSinkRecord` (converted Kafka record) → :class:`LiteMessage`
  with the ``x-goog-pubsublite-source-kafka-*`` attributes and ``event_time``.
* :func:`source_record` — a :class:`LiteReceived` (SequencedMessage) → :class:`KafkaSourceRecord`,
  serialized the way Kafka Connect's worker serializes what Google's source task returns
  (:class:`LiteSourceConverters`: ``key.converter`` on an OPTIONAL_BYTES key, ``value.converter``
  on a BYTES value, ``header.converter`` on BYTES headers: Base64 text by default).
* :class:`KafkaPartitioner` — same non-empty key → same Kafka partition (murmur2, like Kafka's
  Java producer), null keys round-robin.

Arrow-batched versions for the convert stages (``arrow``): :func:`sink_outbox_batch` (bronze Kafka rows →
Lite outbox) and :func:`kafka_outbox_batch` (Lite bronze → Kafka outbox), with the table schemas
:data:`LITE_OUTBOX_SCHEMA`, :data:`LITE_BRONZE_SCHEMA`, :data:`KAFKA_OUTBOX_SCHEMA` (derived
from ``model.schemas``); :func:`bronze_batch` and :func:`outbox_messages` serve the pull and publish stages.

Decisions where Google's connector crashes or is silent (so the pipeline neither stops nor
publishes garbage):

* A null inside an ARRAY/MAP/STRUCT (Java: ``NullPointerException``, the task dies) is a
  :class:`LiteEncodingError` → dead-letter row, unless ``nested_null="null_value"`` is passed,
  which encodes it as ``NullValue``.
* A header whose value is null (Java: exception) is skipped and counted
  (:attr:`LiteSinkResult.skipped_headers`), like the Pub/Sub sink does.
* A schemaless value that is not a string is rendered with
  :func:`pubsub_connect.model.converters.java_text` (the project's ``toString``: numbers as Java
  prints them, containers as compact JSON); a schemaless ``bytes`` value is kept unchanged
  (Java would print an identity hash such as ``[B@1b6d3586``).
* Kafka timestamps < 0 mean "no timestamp" (Connect turns ``-1`` into null).
* Serialized ``Value`` bytes use deterministic (sorted-key) map order; Java's order differs, so
  compare such payloads parsed, never as raw bytes.
* Source with ``StringConverter`` for keys or values: Java writes ``byte[].toString()`` (an
  identity hash such as ``[B@6d06d69c``: the data is lost); ours writes the bytes as UTF-8 text.
  The number and boolean converters, which fail every record in the original, are refused at
  start-up (:meth:`LiteSourceConverters.check`).
"""
