"""Pub/Sub Lite I/O: the generated ``google-cloud-pubsublite`` clients, used as the Lite
connectors need them.

The only package that talks to Pub/Sub Lite. Like ``io/pubsub`` it holds no Spark code except
the data source (``data_source``), and its config object (:class:`LiteConnection`) is a frozen
dataclass of primitives, so the same code runs on the driver, in a Spark task and in the
driver-side process of a Python data source; clients are built where they are used (a gRPC
channel cannot be pickled).

What the Lite pipelines need from the service, and where each is done:

* ``connection``: project, location, endpoint and credentials (:class:`LiteConnection`), the
  base error and the one-line error form shared by the modules below.
* ``admin``: ``GetTopicPartitions`` and ``GetSubscription`` (the official ``AdminService``).
* ``offsets``: committed cursors, partition heads, range sizes and cursor commits
  (``CursorService``, ``TopicStatsService``) and the checkpoint's JSON form of offsets.
* ``publisher``: publish one micro-batch partition, all or nothing (:class:`PartitionPublisher`):
  one ordered ``Publish`` stream of the generated client per Lite partition, running on the
  client's own process-wide event loop. ``wait`` returns only when every message has been
  acknowledged with an offset and raises :class:`LitePublishError` otherwise, so the Spark task
  and with it the micro-batch fail and are retried: at-least-once. Routing is the caller's
  choice (see :func:`default_router`), which is what makes the ``KAFKA`` ordering mode
  possible. Publisher idempotence (a client id) is deliberately *not* used: a micro-batch
  retried by Spark is a new stream anyway, so at-least-once is the guarantee either way.
* ``subscriber``: read an exact offset range (:func:`read_range`): a ``Subscribe`` stream of the
  generated client, started with an explicit cursor seek at the range's start, granting
  flow-control tokens for no more than the range. The high-level subscriber cannot do this: it
  always starts at the committed cursor and acknowledges through it, while the source keeps its
  offsets in the Spark checkpoint and must be able to replay any planned range.
* ``data_source``: Lite as a Spark streaming source (the pull stage's reader), with its options
  (``read_options``) and its micro-batch reader: ``stream_reader`` on every supported Spark,
  ``admission_control`` where Spark caps Python sources' batches (4.2+).
"""
