"""Cloud Pub/Sub message → Kafka record: the source connector's data model.

Two implementations of one mapping, kept side by side so they can be checked against each other
(``settings`` holds what both share: options, record types, errors):

* a **per-record reference** (``reference``: :func:`message_to_record`, :func:`reference_outbox`)
  written to read like the behaviour of Google's ``CloudPubSubSourceTask``;
* a **batch implementation** (``batch``: :func:`to_kafka_outbox`) in Spark column expressions,
  with Java's hashes vectorised over Arrow buffers (``arrow_hashes``), used by the convert stage
  (bronze → outbox). Unit tests assert both give identical rows.

Behaviour, as Google's connector unless marked *divergence*:

* **Key**: the value of attribute ``kafka.key.attribute``, or the ordering key when that option is
  ``orderingKey`` (Pub/Sub reports a missing ordering key as ``""``, so the key is then ``""``, not
  null, as in the original), else null. The original hands the worker an ``OPTIONAL_STRING`` key,
  serialized by ``key.converter`` (:func:`serialize_key`): ``StringConverter`` writes UTF-8,
  ``JsonConverter`` a JSON string (``null`` for no key; with schemas inside the envelope
  ``{"schema":{"type":"string","optional":true},"payload":…}``). *Divergences*:
  ``ByteArrayConverter`` (Connect's default) rejects every STRING key, null included, which fails
  the original's task on its first record; here it writes UTF-8 like ``StringConverter``. The
  number and boolean converters cannot write a string either (the original's task fails on the
  first keyed record; ``BooleanConverter`` on every record): here a null key stays null and a
  message with a key becomes a dead-letter row (:class:`KeyConverterError`).
* **Timestamp**: attribute ``kafka.timestamp.attribute`` parsed like Java ``Long.valueOf`` (any
  Unicode decimal digit counts: ``"١٢٣"`` is 123); when it is missing or not a long, the publish
  time in ms. ``-1`` is Kafka's "no timestamp": Connect then lets the producer stamp the record
  with its clock, and so does this (a null outbox timestamp). *Divergence*: any other value outside
  ``0 ≤ ts ≤ 253402300799999`` (9999-12-31T23:59:59.999Z) makes the message a dead-letter row
  (:class:`InvalidTimestampError`): Connect rejects negative timestamps, which crashes the original
  task, and later years cannot be represented by Spark/Python readers of the outbox. *Limitation*:
  a timestamp of exactly 0 reaches Kafka as the produce time, because the transactional producer
  (librdkafka) reads 0 as "now"; the original writes 0.
* **Custom attributes** exist when an attribute other than the key and timestamp attributes is
  present, or the ordering key is non-empty and ``cps.makeOrderingKeyAttribute=true``.
  Without them the value is the data bytes. With them and ``kafka.record.headers=true`` the value is
  the data bytes and every attribute except the key attribute becomes a string header (UTF-8), plus
  ``orderingKey``. Otherwise the value is a Connect STRUCT: ``message`` (BYTES) then one STRING
  field per attribute except the key attribute, then ``orderingKey``, serialized by the configured
  ``value.converter``. As in the original, the timestamp attribute is not excluded.
* **Ordering of attributes** (*divergence*, deterministic by design): the original follows the
  protobuf map's iteration order, which is not specified. Here headers and struct fields are sorted
  by attribute name (code point order, equal to Spark's UTF-8 byte order), ``orderingKey`` last.
* **Field name collisions** (*divergence*): an attribute named ``message`` (or ``orderingKey`` when
  the ordering key is added too) cannot become a second struct field of that name. The original
  throws inside ``poll()``, logs "treating as an empty poll" and never acks, so the message is
  redelivered forever; here it becomes a dead-letter row (:class:`DuplicateFieldError`). Headers
  may repeat, so headers mode has no such error.
* **BYTES values go through the value converter** like every value the original's worker writes
  (:func:`serialize_bytes_value`): ``ByteArrayConverter`` writes the data as is, ``JsonConverter``
  a base64 JSON string (with schemas inside ``{"schema":{"type":"bytes","optional":false},
  "payload":…}``). *Divergence*: ``StringConverter`` writes Java's ``byte[].toString()`` there
  (``[B@`` and an identity hash: the data is lost); here the data bytes are written as is. The
  number and boolean converters cannot write BYTES or STRUCT values (the original's task fails on
  the first record): rejected at start-up (:func:`check_value_converter`). ``ByteArrayConverter``
  and ``StringConverter`` write no STRUCT: with ``kafka.record.headers=false`` a message with
  custom attributes is a dead-letter row (:class:`StructConverterError`; *divergence*: the
  original fails its task, or writes ``Struct{message=[B@…}``), the others are written as there.
* **JSON text** (JsonConverter keys and struct values) is byte for byte Kafka's: Jackson's string
  escaping, and a character outside the BMP (an emoji) as its two escaped UTF-16 halves
  (``\uD83D\uDE00``), not as 4 UTF-8 bytes.
* **Headers** are what Connect's default ``header.converter`` (``SimpleHeaderConverter``) writes
  for the original's STRING headers: the UTF-8 bytes of the value.
* **Partitions** (``kafka.partition.scheme``): see :func:`select_partition` and
  :func:`partition_for_hash`; ``hash_value`` hashes the data bytes (*divergence*: the original
  hashes a JVM identity, i.e. is random).

Batch specifics: a batch is first de-duplicated on ``message_id`` (Pub/Sub redelivers; the earliest
``ingest_time`` wins; across batches is the caller's job) and round-robin partitions are handed
out in (publish time in ms, message_id) order starting at ``start_counter``, so a replayed batch
yields identical partitions. Dead-letter rows do not consume the round-robin counter.
"""
