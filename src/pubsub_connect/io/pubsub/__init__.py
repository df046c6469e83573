"""Cloud Pub/Sub I/O: the official ``google-cloud-pubsub`` clients, configured for the connectors.

The only package that talks to Cloud Pub/Sub. It contains no Spark code, so the pipelines can
call it from a driver *or* from inside a Spark Python worker. That one constraint shapes most
of the design:

- Config objects (:class:`~pubsub_connect.io.pubsub.credentials.Connection`,
  :class:`~pubsub_connect.io.pubsub.publisher.PublisherConfig`,
  :class:`~pubsub_connect.io.pubsub.subscriber.SubscriberConfig`) are frozen dataclasses of
  primitives. They pickle into a worker, and the gRPC clients are built lazily on the worker
  side (a channel cannot be pickled). They know nothing of connector property names: the
  pipeline layer maps a connector's properties to them (``pipelines/pubsub_settings.py``).
- The emulator host is captured when the config is built on the driver. A Spark worker does not
  necessarily see environment variables exported after the JVM started, so the worker must not
  rely on ``PUBSUB_EMULATOR_HOST``. The clients are always given an explicit plaintext channel.
- Secrets (``gcp.credentials.json``) travel inside the pickled config (the worker needs them to
  authenticate), but they never show up in ``repr``/``str``, logs or error messages.

Modules, one concern each:

- ``errors``: the base error and the one-line, secret-free form every error message takes;
- ``credentials``: endpoint, emulator and credentials (:class:`Connection`), shared with Lite;
- ``publisher``: publisher settings and :class:`BatchPublisher` (one micro-batch, all or error);
- ``publish_rpc``: the official publisher client with the connector's Publish RPC (compression,
  bounded retry, reserved attribute names), isolated because it overrides a private method;
- ``request_sender``: pre-encoded ``PublishRequest``s (``model.pubsub_wire``) sent on the client's
  channel with the publisher keys' batching, retry, timeouts and compression: unordered publishing;
- ``subscriber``: synchronous pull and streaming pull, both handing out messages unacked;
- ``leases``: acknowledge / modify-ack-deadline / nack and the :class:`LeaseExtender`;
- ``admin``: create topics and subscriptions (quickstart, tests).

Delivery guarantees the pipelines build on:

- **Publish (sink)**: :meth:`BatchPublisher.publish_all` and :meth:`BatchPublisher.publish_batches`
  return only when *every* message was accepted, and raise :class:`PublishError` otherwise.
  The Spark task then fails and the micro-batch is not committed. It is retried, so delivery
  is at-least-once and nothing is lost. Failed ordering keys are resumed before raising, so
  the retried batch is not stuck behind a paused key.
- **Pull (source)**: nothing here acks on its own. :func:`pull_batch` and
  :meth:`StreamingPuller.collect` return messages *unacked*. While the caller stages and commits
  them to Delta, their deadlines are extended: by a :class:`LeaseExtender` (synchronous pull) or
  by the client's lease management (streaming pull). The caller acks with :func:`ack` /
  :meth:`StreamingPuller.ack` only after the commit. A crash before that point means the
  messages are redelivered, never lost. Acks that come back ``INVALID_ACK_ID`` (exactly-once
  subscriptions, an expired lease) are *reported*, not raised. The message was committed, its
  redelivery gives a duplicate ``message_id``, and the convert stage drops it.
"""
