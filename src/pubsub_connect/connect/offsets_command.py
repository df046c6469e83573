"""``pubsub-connect offsets show|alter|reset NAME``: the REST offsets endpoints from a shell.

Why it takes the connector's lock: moving a position under a running connector would be undone
by its next batch, so these commands only act on a connector no process runs (the lock of
:mod:`pubsub_connect.connect.locks`) and, when a worker knows the connector, whose target state
is STOPPED, the same rule as ``PATCH /connectors/{name}/offsets``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.properties import read_properties
from pubsub_connect.connect import offsets as connect_offsets
from pubsub_connect.connect.config_store import STOPPED, ConfigStore
from pubsub_connect.connect.locks import ConnectorBusyError, ConnectorLock


def connector_config(worker: cfg.WorkerConfig, name: str, connector_file: str | None,
                     must_be_stopped: bool) -> cfg.ConnectorConfig:
    """The connector named ``name``: from ``connector_file``, else from the worker's store."""
    stored = None if "://" in worker.storage_root else ConfigStore(worker.storage_root).get(name)
    if stored is not None and must_be_stopped and stored.target_state != STOPPED:
        raise ConfigError(f"connector {name} is {stored.target_state} in the worker: stop it first "
                              f"(PUT /connectors/{name}/stop)")
    if connector_file:
        config = cfg.validate_connector(read_properties(connector_file), connector_file, worker=worker)
        if config.name != name:
            raise ConfigError(f"{connector_file}: name={config.name!r}, not {name!r}")
        return config
    if stored is None:
        raise ConfigError(f"no connector {name} in the worker's store under {worker.storage_root}: give its "
                              ".properties file with --connector")
    return cfg.validate_connector(dict(stored.config), name, worker=worker)


def read_request(text: str) -> Any:
    """``alter``'s argument: Connect's JSON itself, a file holding it, or ``-`` for stdin."""
    if text == "-":
        text = sys.stdin.read()
    elif not text.lstrip().startswith("{"):
        try:
            text = Path(text).read_text()
        except OSError as exc:
            raise ConfigError(f"{text}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the offsets are not JSON: {exc}") from None


def offsets_command(worker: cfg.WorkerConfig, action: str, name: str, connector_file: str | None = None,
                    request: str | None = None) -> str:
    """Run one offsets action; returns what to print (JSON for ``show``, the message otherwise)."""
    config = connector_config(worker, name, connector_file, must_be_stopped=action != "show")
    try:
        if action == "show":  # a running connector's position can be read, not moved
            return json.dumps({"offsets": connect_offsets.read_offsets(worker, config)}, indent=2)
        position = connect_offsets.POSITION_STAGE.get(config.kind)
        with ConnectorLock(worker.storage_root, name, [position] if position else []):
            if action == "alter":
                return connect_offsets.alter_offsets(worker, config, read_request(request or "-"))
            return connect_offsets.reset_offsets(worker, config)
    except (connect_offsets.OffsetsError, ConnectorBusyError) as exc:
        raise ConfigError(str(exc)) from None
