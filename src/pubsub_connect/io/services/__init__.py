"""Embedded local services: the "embedded default" a user runs connectors against locally.

Why: users of Kafka Connect try a connector with ``connect-standalone`` on a laptop. Our
equivalent is ``pubsub-connect services up``: Apache Kafka itself (a single-node KRaft broker,
its jars resolved once from Maven Central by :mod:`pubsub_connect.io.artifacts`), Google's own
Pub/Sub emulator (from the machine's gcloud), a Schema Registry (Apicurio Registry, whose
``ccompat`` API is Confluent's, from Maven Central) and an S3 API (moto server). Tests start the very
same processes through this package, so what the user runs locally is what CI tested.

Every server binds 127.0.0.1 only, on a free port chosen here (a Kafka broker advertises the
address it is configured with, so ``:0`` cannot be used). Each service keeps its files (logs,
the broker's data) in a directory of its own; a broker started again on the same directory is a
restart: its topics and records are still there.

One module per service (``kafka``, ``pubsub_emulator``, ``registry``, ``s3``), what they share to run a child
process (``process``), and a set of them started together or detached (``lifecycle``).
"""
