"""Kafka: the one place this product talks to Kafka brokers.

See each module's docstring; nothing is re-exported here, so an import names the module that
owns the concern.
"""
