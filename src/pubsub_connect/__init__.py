"""pubsub-connect: Google's Pub/Sub Group Kafka Connector, re-built on Spark + Delta Lake.

Layers, lowest first: ``model`` (pure record/DataFrame transformations), ``config`` (Kafka
Connect's files and keys), ``io`` (one external system per module or package), ``pipelines``
(one module per connector, and the stage runner), ``lakeflow`` / ``connect`` / ``explore``, and
the thin entry points ``cli`` / ``jobs`` / ``quickstart``. ``docs/architecture.md`` in the
repository maps every module; ``tests/unit/test_architecture.py`` keeps the layering true.
"""

__version__ = "0.1.0"
