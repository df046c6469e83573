"""The Lite source's options: what the pull stage passes to Spark and each reader parses back.

Why a module of its own: both readers of the source (:mod:`~pubsub_connect.io.pubsublite.stream_reader`
on every Spark, :mod:`~pubsub_connect.io.pubsublite.admission_control` where Spark has admission
control) and the data source that picks between them read the same options.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pubsub_connect.config.keys import LONG_MAX
from pubsub_connect.io.pubsublite.connection import LiteConnection
from pubsub_connect.io.pubsublite.offsets import offsets_from_json, offsets_to_json

_DEFAULT_READ_TIMEOUT_MS = 120_000


class LiteOptionsError(ValueError):
    """A source option is missing or malformed (one-line message)."""


@dataclass(frozen=True)
class LiteReadOptions:
    """The source's options, parsed once. Options are strings (Spark's data source contract);
    :meth:`to_options` and :meth:`parse` are inverses. The credentials JSON travels under a key
    containing ``secret`` so Spark's default redaction hides it in plans and logs."""

    connection: LiteConnection
    subscription: str
    flow_messages: int = LONG_MAX
    flow_bytes: int = 20_000_000
    max_messages_per_trigger: int | None = None
    starting: dict[int, int] = field(default_factory=dict)
    read_timeout_ms: int = _DEFAULT_READ_TIMEOUT_MS
    #: The query runs under ``availableNow``. Spark before 4.2 asks a Python source for its end
    #: only once then, so that one batch must reach the partition heads for ``--once`` to drain.
    until_heads: bool = False

    def to_options(self) -> dict[str, str]:
        conn = self.connection
        options = {
            "project": conn.project, "location": conn.location, "subscription": self.subscription,
            "flowControlMessages": str(self.flow_messages), "flowControlBytes": str(self.flow_bytes),
            "startingOffsets": json.dumps(offsets_to_json(self.starting)),
            "readTimeoutMs": str(self.read_timeout_ms),
        }
        if conn.endpoint:
            options["endpoint"] = conn.endpoint
        if conn.credentials_file:
            options["credentialsFile"] = conn.credentials_file
        if conn.credentials_json:
            options["credentialsSecret"] = conn.credentials_json
        if self.max_messages_per_trigger:
            options["maxMessagesPerTrigger"] = str(self.max_messages_per_trigger)
        if self.until_heads:
            options["untilHeads"] = "true"
        return options

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> LiteReadOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        missing = [k for k in ("project", "location", "subscription") if not opts.get(k.lower())]
        if missing:
            raise LiteOptionsError(f"Lite source option(s) {', '.join(missing)} must be set")

        def number(key: str, default: int | None) -> int | None:
            raw = opts.get(key.lower())
            if raw is None:
                return default
            try:
                value = int(raw)
            except ValueError:
                raise LiteOptionsError(f"Lite source option {key} must be an integer, got {raw!r}") from None
            if value < 1:
                raise LiteOptionsError(f"Lite source option {key} must be at least 1, got {value}")
            return value

        conn = LiteConnection(project=opts["project"], location=opts["location"],
                              endpoint=opts.get("endpoint") or None,
                              credentials_file=opts.get("credentialsfile") or None,
                              credentials_json=opts.get("credentialssecret") or None)
        try:
            starting = offsets_from_json(opts.get("startingoffsets"))
        except (ValueError, TypeError, AttributeError):
            raise LiteOptionsError("Lite source option startingOffsets must be JSON like {\"0\": 12}") from None
        return cls(
            connection=conn,
            subscription=conn.subscription_path(opts["subscription"]),
            flow_messages=number("flowControlMessages", LONG_MAX) or LONG_MAX,
            flow_bytes=number("flowControlBytes", 20_000_000) or 20_000_000,
            max_messages_per_trigger=number("maxMessagesPerTrigger", None),
            starting=starting,
            read_timeout_ms=number("readTimeoutMs", _DEFAULT_READ_TIMEOUT_MS) or _DEFAULT_READ_TIMEOUT_MS,
            until_heads=opts.get("untilheads", "false").lower() == "true",
        )
