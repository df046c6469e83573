"""``GET /connector-plugins`` and ``PUT /connector-plugins/{class}/config/validate``.

Why every key is checked on its own: Connect's validate answers with each key's errors at once
(``configs[].value.errors``, ``error_count``), so a UI can mark every bad field; loading a
config for a run stops at the first error instead. The checks are the loader's own
(:class:`pubsub_connect.config.keys.Key` and the cross-key rules), so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pubsub_connect import __version__
from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import COMMON_KEYS, CONNECTOR_CLASSES, CONNECTOR_KEYS, REQUIRED, SINK_KINDS, Key
from pubsub_connect.config.providers import DEFAULT_PROVIDERS
from pubsub_connect.model.converters import KNOWN_CONVERTERS, KNOWN_HEADER_CONVERTERS

#: Connect's ConfigDef type names for the key types of :mod:`pubsub_connect.config`.
_CONNECT_TYPES = {"string": "STRING", "password": "PASSWORD", "class": "CLASS", "int": "INT", "long": "LONG",
                  "boolean": "BOOLEAN", "enum": "STRING", "list": "LIST"}
HIDDEN = "[hidden]"


def shown(key: str, value: str) -> str:
    """A config value as every response shows it: a literal secret hidden (a ``${…}`` provider
    reference is not a secret and stays readable)."""
    return HIDDEN if cfg.is_secret_key(key) and value and not value.startswith("${") else value


class PluginError(Exception):
    """A validate request that cannot be answered (HTTP 400)."""


def connector_plugins(connectors_only: bool = True) -> list[dict[str, str]]:
    """The connector classes (full Java names, as Connect lists them), then, when asked, the
    converters the data model implements."""
    plugins = [{"class": cls, "type": "sink" if kind in SINK_KINDS else "source", "version": __version__}
               for cls, kind in CONNECTOR_CLASSES.items() if "." in cls]
    if not connectors_only:
        plugins += [{"class": c, "type": "converter", "version": __version__} for c in KNOWN_CONVERTERS]
        plugins += [{"class": c, "type": "header_converter", "version": __version__} for c in KNOWN_HEADER_CONVERTERS]
    return plugins


def plugin_kind(plugin_class: str) -> str:
    kind = CONNECTOR_CLASSES.get(plugin_class)
    if kind is None:
        raise PluginError(f"Failed to find any class that implements Connector and which name matches {plugin_class}")
    return kind


def _definition(key: Key, order: int, group: str) -> dict[str, Any]:
    required = key.default is REQUIRED
    default = None if required or key.default is None else cfg.to_text(key.default)
    return {"name": key.name, "type": _CONNECT_TYPES.get(key.type, "STRING"), "required": required,
            "default_value": default, "importance": "HIGH" if required else "MEDIUM", "documentation": key.doc,
            "group": group, "width": "NONE", "display_name": key.name, "dependents": [], "order": order}


def validate(plugin_class: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """Connect's ``ConfigInfos`` for ``raw``: every key of the plugin with its value and errors."""
    kind = plugin_kind(plugin_class)
    given = raw.get("connector.class")
    if given is not None and CONNECTOR_CLASSES.get(str(given).strip()) != kind:
        raise PluginError(f"Included connector type {given} does not match request type {plugin_class}")
    values = {str(k): str(v) for k, v in raw.items() if v is not None}  # null: not given, as in Connect
    values.setdefault("connector.class", plugin_class)
    keys = CONNECTOR_KEYS[kind]
    common = {k.name for k in COMMON_KEYS}
    errors: dict[str, list[str]] = {k.name: [] for k in keys}
    by_name = {alias: key for key in keys for alias in (key.name, *key.aliases)}
    for name, text in values.items():
        key = by_name.get(name)
        if key is None:
            continue
        try:
            key.parse(DEFAULT_PROVIDERS.resolve(text, "<config>", name), "<config>")
        except ConfigError as exc:
            errors[key.name].append(_without_source(str(exc)))
    for key in keys:
        if key.default is REQUIRED and not any(alias in values for alias in (key.name, *key.aliases)):
            errors[key.name].append(f"missing required key {key.name}")
    if not any(errors.values()):
        try:
            cfg.validate_connector(values, "<config>")
        except ConfigError as exc:
            message = _without_source(str(exc))
            named = [k.name for k in keys if k.name in message] or ["name"]
            for name in named:
                errors[name].append(message)
    configs = []
    for order, key in enumerate(keys, start=1):
        value = next((values[a] for a in (key.name, *key.aliases) if a in values), None)
        configs.append({"definition": _definition(key, order, "Common" if key.name in common else kind),
                        "value": {"name": key.name, "value": value if value is None else shown(key.name, value),
                                  "recommended_values": list(key.choices),
                                  "errors": errors[key.name], "visible": True}})
    return {"name": plugin_class, "error_count": sum(len(e) for e in errors.values()),
            "groups": ["Common", kind], "configs": configs}


def _without_source(message: str) -> str:
    """The loader's messages start with where the key came from; a validate request has no file."""
    return message.removeprefix("<config>: ")
