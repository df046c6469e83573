"""Where and as whom to connect to Cloud Pub/Sub: endpoint, emulator and Google credentials.

Credential resolution lives here once for both Google services: :class:`Connection` uses it for
Cloud Pub/Sub and ``io/pubsublite/connection.py`` for Pub/Sub Lite. Precedence follows Google's
connectors: ``gcp.credentials.json`` > ``gcp.credentials.file.path`` > Application Default
Credentials (which include ``GOOGLE_APPLICATION_CREDENTIALS``). Credentials are resolved by this
code and not inside the clients, so that a missing or broken setup is reported as one actionable
line (:class:`ConfigError`) rather than google-auth's multi-line message, with the secret kept
out of it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.keys import CPS_ENDPOINT
from pubsub_connect.model.error_text import one_line

EMULATOR_ENV = "PUBSUB_EMULATOR_HOST"
_REDACTED = "********"


def redacted_repr(config: Any) -> str:
    """``Name(field=value, …)`` of a dataclass, with each field declared ``repr=False`` (a secret)
    shown as ``'********'`` when set. The connection configs carry secrets into Spark workers, and
    a default dataclass repr would print them into logs and errors."""
    parts = []
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if not item.repr:
            value = _REDACTED if value else None
        parts.append(f"{item.name}={value!r}")
    return f"{type(config).__name__}({', '.join(parts)})"


def explicit_credentials(credentials_file: str | None, credentials_json: str | None) -> Any:
    """The credentials named by ``gcp.credentials.json`` (first) or ``gcp.credentials.file.path``,
    or ``None`` when neither is set. Unusable ones are a one-line :class:`ConfigError`."""
    import google.auth
    from google.auth import exceptions as auth_exceptions

    if credentials_json:
        try:
            creds, _ = google.auth.load_credentials_from_dict(json.loads(credentials_json))
        except (auth_exceptions.DefaultCredentialsError, ValueError, KeyError) as exc:
            raise ConfigError("gcp.credentials.json does not hold usable Google credentials "
                              f"({one_line(exc, (credentials_json,))})") from None
        return creds
    if credentials_file:
        try:
            creds, _ = google.auth.load_credentials_from_file(credentials_file)
        except (auth_exceptions.DefaultCredentialsError, ValueError, KeyError, OSError) as exc:
            raise ConfigError(f"gcp.credentials.file.path={credentials_file!r} does not hold usable "
                              f"Google credentials ({one_line(exc)})") from None
        return creds
    return None


def application_default_credentials(whose: str, hint: str = "") -> Any:
    """Application Default Credentials; when there are none, a one-line :class:`ConfigError`
    saying how to provide them (``whose`` names the project, ``hint`` is appended)."""
    import google.auth
    from google.auth import exceptions as auth_exceptions

    try:
        creds, _ = google.auth.default()
    except auth_exceptions.DefaultCredentialsError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(
            f"no Google Cloud credentials found for {whose} ({first}): set "
            "gcp.credentials.file.path or gcp.credentials.json, export GOOGLE_APPLICATION_CREDENTIALS, "
            f"or run `gcloud auth application-default login`{hint}") from None
    return creds


def emulator_host_from_env() -> str | None:
    """``$PUBSUB_EMULATOR_HOST`` if set and not blank. Read on the driver: a Spark worker does
    not necessarily see variables exported after the JVM started."""
    return os.environ.get(EMULATOR_ENV, "").strip() or None


@dataclass(frozen=True)
class Connection:
    """Where and as whom to connect. Primitives only, so it can be pickled into Spark workers.

    With an emulator host, no credentials are used at all.
    """

    project: str
    endpoint: str = CPS_ENDPOINT
    emulator_host: str | None = None
    credentials_file: str | None = None
    credentials_json: str | None = field(default=None, repr=False)

    __repr__ = redacted_repr  # explicit: the secret must not leak via a default dataclass repr
    __str__ = redacted_repr

    @classmethod
    def for_emulator(cls, project: str, host: str | None = None) -> Connection:
        """A connection to a local emulator (default: ``$PUBSUB_EMULATOR_HOST``), for tests/quickstart."""
        host = host or os.environ.get(EMULATOR_ENV)
        if not host:
            raise ConfigError(f"no emulator host given and {EMULATOR_ENV} is not set")
        return cls(project=project, emulator_host=host)

    @property
    def uses_emulator(self) -> bool:
        return bool(self.emulator_host)

    def secrets(self) -> tuple[str, ...]:
        return (self.credentials_json,) if self.credentials_json else ()

    def topic_path(self, topic: str) -> str:
        return topic if topic.startswith("projects/") else f"projects/{self.project}/topics/{topic}"

    def subscription_path(self, subscription: str) -> str:
        if subscription.startswith("projects/"):
            return subscription
        return f"projects/{self.project}/subscriptions/{subscription}"

    def credentials(self) -> Any:
        """Google credentials for this connection, or ``None`` for the emulator."""
        if self.uses_emulator:
            return None
        creds = explicit_credentials(self.credentials_file, self.credentials_json)
        if creds is not None:
            return creds
        return application_default_credentials(
            f"project {self.project!r}",
            f"; for the local emulator set cps.useEmulator=true and {EMULATOR_ENV}")

    def client_kwargs(self, transport_cls: Any) -> dict[str, Any]:
        """Keyword arguments for a Pub/Sub client class whose gRPC transport is ``transport_cls``."""
        if self.uses_emulator:
            import grpc

            # Plaintext channel to the emulator with unlimited message sizes, like the client
            # would build from PUBSUB_EMULATOR_HOST. Pub/Sub messages go up to 10 MB, gRPC's
            # default receive limit is 4 MB.
            channel = grpc.insecure_channel(
                self.emulator_host,
                options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
            )
            return {"transport": transport_cls(channel=channel, host=self.emulator_host)}
        kwargs: dict[str, Any] = {"credentials": self.credentials()}
        if self.endpoint and self.endpoint != CPS_ENDPOINT:
            kwargs["client_options"] = {"api_endpoint": self.endpoint}
        return kwargs
