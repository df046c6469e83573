"""pubsub-connect: Google's Pub/Sub Group Kafka Connector, re-built on Spark + Delta Lake.

Layers: ``model`` (pure record/DataFrame transformations), ``io`` (external systems, one per
module), ``pipelines`` (one module per connector composing the two), ``cli`` / ``jobs`` (entry
points).
"""

__version__ = "0.1.0"
