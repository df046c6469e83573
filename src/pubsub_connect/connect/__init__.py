"""Kafka Connect's runtime around the connectors: a worker with Connect's REST API.

Parts, with Connect's names: the herder (``herder``: connectors, target and live states), the
REST resources (``rest``), the connector plugins and config validation (``plugins``), config
storage (``config_store``), offsets (``offsets``, KIP-875, and ``offsets_command`` for the
shell), and the one-process-per-connector lock (``locks``).
"""
