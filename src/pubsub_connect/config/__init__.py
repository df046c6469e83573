"""Configuration: Kafka Connect's files, keys and providers, read the way Connect reads them.

One concern per module, lowest first:

- :mod:`~pubsub_connect.config.errors` — :class:`ConfigError` (one printable line) and the mask
  of secret values;
- :mod:`~pubsub_connect.config.properties` — Java ``.properties`` syntax;
- :mod:`~pubsub_connect.config.providers` — ``${provider:reference}`` values (``env``, ``file``;
  ``secrets`` where Databricks secrets exist), one registry;
- :mod:`~pubsub_connect.config.keys` — every key's definition (Connect's ``ConfigDef``) and the
  connector kinds;
- :mod:`~pubsub_connect.config.loader` — files + overrides → validated config objects.
"""
