"""Config providers: ``${provider:reference}`` in a config value, replaced by what it names.

Why: secrets need not sit in the ``.properties`` files themselves (Kafka Connect's
``ConfigProvider``). One registry (:class:`ConfigProviders`, prefix → provider) parses every
reference, whichever entry point loads the config:

- ``${env:NAME}`` — an environment variable;
- ``${file:/path/to/file.properties:key}`` — a key of another ``.properties`` file;
- ``${secrets:SCOPE/KEY}`` / ``${secrets:KEY}``, and Databricks' own ``{{secrets/SCOPE/KEY}}`` —
  registered only where Databricks secrets exist (the jobs and declarative pipelines, see
  :class:`pubsub_connect.io.databricks_secrets.SecretResolver`), on top of :data:`DEFAULT_PROVIDERS`.

A reference to a prefix that is not registered stays as it is (Connect does the same).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.properties import read_properties

#: ``(reference, source, key) -> value``: ``source`` and ``key`` name where the reference stands,
#: for the one-line :class:`ConfigError` a provider raises.
Resolve = Callable[[str, str, str], str]


@dataclass(frozen=True)
class ConfigProvider:
    """One provider: the prefix it answers and how it resolves a reference."""

    prefix: str
    resolve: Resolve
    #: Its values are secrets: a value that fails validation says so (the value itself is masked
    #: by whoever registered the provider and knows the values).
    secret: bool = False
    #: Also answers Databricks' ``{{prefix/SCOPE/KEY}}`` form (reference ``SCOPE/KEY``).
    databricks_syntax: bool = False


class ConfigProviders:
    """The registry: prefix → :class:`ConfigProvider`; resolves every reference in a value."""

    def __init__(self, providers: Iterable[ConfigProvider] = ()) -> None:
        self._providers = {p.prefix: p for p in providers}
        prefixes = "|".join(re.escape(p) for p in self._providers)
        pattern = rf"\$\{{(?P<prefix>{prefixes}):(?P<ref>[^}}]*)\}}"
        databricks = "|".join(re.escape(p.prefix) for p in self._providers.values() if p.databricks_syntax)
        if databricks:
            pattern += (rf"|\{{\{{\s*(?P<db_prefix>{databricks})/"
                        r"(?P<db_ref>[^/{}\s]+/[^/{}\s]+)\s*\}\}")
        self._pattern = re.compile(pattern) if self._providers else None

    def with_provider(self, provider: ConfigProvider) -> ConfigProviders:
        """A registry with ``provider`` added (or replacing the one of its prefix)."""
        return ConfigProviders([*self._providers.values(), provider])

    def _matches(self, text: str) -> Iterable[re.Match[str]]:
        return self._pattern.finditer(text) if self._pattern else ()

    def contains_secret_reference(self, text: str) -> bool:
        return any(self._provider_of(m).secret for m in self._matches(text))

    def _provider_of(self, match: re.Match[str]) -> ConfigProvider:
        return self._providers[match.group("prefix") or match.group("db_prefix")]

    def resolve(self, text: str, source: str, key: str) -> str:
        """``text`` with every reference replaced by its provider's value."""
        if self._pattern is None:
            return text

        def replace(match: re.Match[str]) -> str:
            ref = match.group("ref") if match.group("prefix") is not None else match.group("db_ref")
            return self._provider_of(match).resolve(ref, source, key)

        return self._pattern.sub(replace, text)


def _env(ref: str, source: str, key: str) -> str:
    if ref not in os.environ:
        raise ConfigError(f"{source}: {key} refers to ${{env:{ref}}} but that variable is not set")
    return os.environ[ref]


def _file(ref: str, source: str, key: str) -> str:
    path, _, inner_key = ref.rpartition(":")
    if not path:
        raise ConfigError(f"{source}: {key} must use ${{file:/path:key}}, got ${{file:{ref}}}")
    values = read_properties(path)
    if inner_key not in values:
        raise ConfigError(f"{source}: {key} refers to key {inner_key!r} missing from {path}")
    return values[inner_key]


#: What every entry point resolves: ``${env:NAME}`` and ``${file:/path:key}``.
DEFAULT_PROVIDERS = ConfigProviders([ConfigProvider("env", _env), ConfigProvider("file", _file)])
