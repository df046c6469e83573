"""Kafka record -> Cloud Pub/Sub message: the data model of Google's ``CloudPubSubSinkConnector``.

Two implementations of one mapping (``settings`` holds what both share: options, record types,
errors and Pub/Sub's limits):

* ``reference``: :func:`map_record` / :func:`record_to_message` — the per-record *reference*,
  written to read like the original's behaviour ( ``CloudPubSubSinkTask.put``/``handleValue``).
* ``batch``: :func:`to_outbox` — the batch version used by the convert stage (bronze -> outbox). With
  byte/string/number converters every step is a Spark column expression (no Python per row);
  when a converter must parse (JSON, or a float key that needs Java's text) the rows go through
  ``mapInArrow`` in Arrow batches, each batch mapped with the reference code. Tests hold the two
  to identical output on the fixtures.

Decisions where the mapping is not specified or Java's behaviour is a crash (each keeps the pipeline from
publishing garbage or getting stuck on a message Pub/Sub will reject):

* Pub/Sub rejects a publish whose attributes break its limits, so besides the 10 MB size check
  (specified), an attribute key > 256 bytes, an attribute value > 1024 bytes, > 100 attributes from a
  struct/map, or an ordering key > 1024 bytes make the record a dead-letter row
  (:class:`PubsubLimitError`). Headers are different: over-limit headers are specified as
  silently skipped, and they are (and counted).
* Size limit: the official Python publisher refuses (``MessageTooLargeError``) any message whose
  ``PublishRequest`` would exceed 10,000,000 bytes (``_SERVER_PUBLISH_MAX_BYTES``), so 10 MiB
  would let through messages the publisher then rejects. We bound the *payload* — data +
  attribute keys and values + ordering key, in UTF-8 bytes — by ``10,000,000 - 4,000``; 4,000
  bytes covers the request's protobuf framing for the largest topic path and 100 attributes.
* Null header values (Java: ``NullPointerException``) are skipped and counted like over-limit
  ones. Header values are published as their UTF-8 text (malformed bytes become U+FFFD, as in the
  original), not re-parsed by Connect's ``SimpleHeaderConverter``: the original publishes Java's
  ``toString`` of the parsed value (``1.50`` → ``1.5``, ``007`` → ``7``, ``{"a": 1}`` → ``{a=1}``,
  ``2024-02-29`` → a date in the JVM's time zone) and stops on a header whose text is ``null``.
* A MAP entry with a null value is skipped (like a null optional struct field); a null map key or
  a null array element is an :class:`UnsupportedValueError` (Java: ``NullPointerException``).
* A record whose data would be empty *and* that has no attributes publishes nothing, like a null
  value: Pub/Sub rejects such a message (Java would crash the task on it).
* Kafka timestamps < 0 mean "no timestamp" (Connect turns ``-1`` into ``null``).
* Text of a BYTES key/field is its UTF-8 decoding with U+FFFD replacement, and arrays/maps render
  as compact JSON (see :func:`pubsub_connect.model.converters.java_text`).
"""
