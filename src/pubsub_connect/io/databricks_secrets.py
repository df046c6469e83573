"""Databricks secret scopes as the ``secrets`` config provider.

Why here and not in an entry point: the bundle's jobs and its declarative pipelines both read
connector files that may say ``${secrets:SCOPE/KEY}``, ``${secrets:KEY}`` or Databricks' own
``{{secrets/SCOPE/KEY}}``; both register this one provider on top of the default ``env`` and
``file`` providers (:mod:`pubsub_connect.config.providers`). Secrets are read with
``dbutils.secrets.get`` only when a key the configuration uses refers to one, and every value
read is remembered so that it can be masked wherever it would be printed or logged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pubsub_connect.config.errors import MASK, ConfigError
from pubsub_connect.config.providers import DEFAULT_PROVIDERS, ConfigProvider, ConfigProviders
from pubsub_connect.model.error_text import first_line

SECRET_SCOPE_ENV = "PUBSUB_CONNECT_SECRET_SCOPE"

#: The config provider prefix of Databricks secrets: ``${secrets:SCOPE/KEY}``, ``${secrets:KEY}``
#: and Databricks' ``{{secrets/SCOPE/KEY}}``.
SECRETS_PREFIX = "secrets"

#: ``(scope, key) -> value``; the default reads Databricks secrets (see :func:`dbutils_secret_getter`).
SecretGetter = Callable[[str, str], str]


def databricks_dbutils() -> Any:
    """The Databricks runtime's dbutils on a cluster; databricks-sdk's (Secrets API, same
    ``secrets.get`` signature) elsewhere, e.g. when a job is tried from a laptop."""
    from pubsub_connect.io.spark import running_on_databricks

    if running_on_databricks():
        try:
            from pyspark.dbutils import DBUtils  # type: ignore[import-not-found]  # Databricks runtime only
            from pyspark.sql import SparkSession

            return DBUtils(SparkSession.builder.getOrCreate())
        except ImportError:
            pass
    from databricks.sdk import WorkspaceClient

    return WorkspaceClient().dbutils


def dbutils_secret_getter() -> SecretGetter:
    """A getter over ``dbutils.secrets.get``; dbutils is only created on the first secret read."""
    holder: list[Any] = []

    def get(scope: str, key: str) -> str:
        if not holder:
            holder.append(databricks_dbutils())
        return str(holder[0].secrets.get(scope=scope, key=key))

    return get


class SecretResolver:
    """The ``secrets`` config provider: reads Databricks secrets, and remembers what it resolved,
    so that the values can be redacted from anything printed or logged afterwards.

    Registered on top of the default providers (:data:`providers`), so the config loader
    resolves ``${secrets:…}`` like ``${env:…}`` and ``${file:…}``: one syntax, one registry."""

    def __init__(self, getter: SecretGetter | None = None, default_scope: str | None = None):
        self._getter = getter
        self.default_scope = default_scope or None
        self._cache: dict[tuple[str, str], str] = {}
        self.provider = ConfigProvider(SECRETS_PREFIX, self.resolve_reference, secret=True, databricks_syntax=True)
        #: The registry the jobs load with: ``env``, ``file`` and this ``secrets`` provider.
        self.providers = DEFAULT_PROVIDERS.with_provider(self.provider)
        self._secrets_only = ConfigProviders([self.provider])

    @property
    def values(self) -> list[str]:
        """Resolved secret values (non-empty), longest first so redaction never leaves a tail."""
        return sorted({v for v in self._cache.values() if v}, key=lambda v: (-len(v), v))

    def resolve(self, text: str, source: str, key: str) -> str:
        """``text`` with every secret reference (and only those) replaced by the secret's value."""
        return self._secrets_only.resolve(text, source, key)

    def resolve_reference(self, ref: str, source: str, key: str) -> str:
        """One reference: ``SCOPE/KEY``, or ``KEY`` in the default scope."""
        ref = ref.strip()
        scope, _, name = ref.rpartition("/")
        scope = scope or self.default_scope or ""
        if not scope:
            raise ConfigError(
                f"{source}: {key} refers to ${{secrets:{ref}}} but no secret scope is set "
                f"(write ${{secrets:SCOPE/KEY}}, or pass --secret-scope / set {SECRET_SCOPE_ENV})")
        if not name:
            raise ConfigError(f"{source}: {key} has a secret reference without a key")
        return self.get(scope, name, source, key)

    def get(self, scope: str, name: str, source: str, key: str) -> str:
        cached = self._cache.get((scope, name))
        if cached is not None:
            return cached
        getter = self._getter or dbutils_secret_getter()
        self._getter = getter
        try:
            value = getter(scope, name)
        except Exception as exc:  # the exception text never contains the value (there is none)
            raise ConfigError(f"{source}: {key} refers to secret {scope}/{name}, which cannot be read "
                                  f"({type(exc).__name__}: {first_line(str(exc))})") from None
        self._cache[(scope, name)] = value
        return value

    def redact(self, text: str) -> str:
        """``text`` with every resolved value — also in its JSON-escaped and repr forms, as an
        error may quote a value either way — replaced by the config module's mask."""
        for value in self.values:
            for form in {value, json.dumps(value)[1:-1], repr(value)[1:-1]}:
                if form:
                    text = text.replace(form, MASK)
        return text
