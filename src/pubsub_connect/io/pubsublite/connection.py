"""Where and as whom to connect to Pub/Sub Lite, and the errors of the Lite I/O.

Credentials follow Google's connector: ``gcp.credentials.json`` > ``gcp.credentials.file.path``
> Application Default Credentials, resolved by the same code as for Cloud Pub/Sub
(``io/pubsub/credentials.py``). With a loopback ``pubsublite.endpoint`` and no explicit
credential keys the client connects anonymously: a local test server cannot verify Google
tokens, and real tokens must not be sent to whatever listens on a local port.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pubsub_connect.config.errors import ConfigError
from pubsub_connect.io.pubsub.credentials import application_default_credentials, explicit_credentials, redacted_repr
from pubsub_connect.io.pubsub.errors import PubSubIOError
from pubsub_connect.model.error_text import one_line

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class LiteIOError(PubSubIOError):
    """A Lite operation failed. ``str(err)`` is one line, safe to print."""


def _endpoint_host(endpoint: str) -> str:
    host = endpoint.split("///", 1)[-1]
    if host.startswith("["):  # [::1]:443
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(frozen=True)
class LiteConnection:
    """Project, location, endpoint and credentials of a Lite connector. Primitives only."""

    project: str
    location: str
    endpoint: str | None = None
    credentials_file: str | None = None
    credentials_json: str | None = field(default=None, repr=False)

    __repr__ = redacted_repr  # the secret must not leak through a dataclass repr
    __str__ = redacted_repr

    @property
    def region(self) -> str:
        """``europe-west1`` for the zone ``europe-west1-b`` or the region itself."""
        parts = self.location.split("-")
        if len(parts) == 3 and len(parts[2]) == 1 and all(parts):
            return f"{parts[0]}-{parts[1]}"
        if len(parts) == 2 and all(parts):
            return self.location
        raise ValueError("expected a zone like europe-west1-b or a region like europe-west1")

    @property
    def api_endpoint(self) -> str:
        """``pubsublite.endpoint``, else the regional endpoint the official clients use."""
        return self.endpoint or f"{self.region}-pubsublite.googleapis.com:443"

    @property
    def anonymous(self) -> bool:
        """A loopback endpoint without credential keys: a local (test) server."""
        return (bool(self.endpoint) and _endpoint_host(str(self.endpoint)) in _LOOPBACK_HOSTS
                and not (self.credentials_file or self.credentials_json))

    def secrets(self) -> tuple[str, ...]:
        return (self.credentials_json,) if self.credentials_json else ()

    def credentials(self) -> Any:
        if self.anonymous:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()
        creds = explicit_credentials(self.credentials_file, self.credentials_json)
        if creds is not None:
            return creds
        return application_default_credentials(f"Pub/Sub Lite project {self.project!r}")

    def client_options(self) -> Any:
        from google.api_core.client_options import ClientOptions

        return ClientOptions(api_endpoint=self.api_endpoint)

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the generated ``google.cloud.pubsublite_v1`` clients."""
        return {"credentials": self.credentials(), "client_options": self.client_options()}

    def _path(self, kind: str, name: str) -> str:
        return name if name.startswith("projects/") else \
            f"projects/{self.project}/locations/{self.location}/{kind}/{name}"

    def topic_path(self, topic: str) -> str:
        return self._path("topics", topic)

    def subscription_path(self, subscription: str) -> str:
        return self._path("subscriptions", subscription)


def lite_error(what: str, exc: BaseException, conn: LiteConnection,
               kind: type[LiteIOError] = LiteIOError) -> Exception:
    """The one-line error to raise for ``exc``; unusable credentials stay a :class:`ConfigError`."""
    if isinstance(exc, ConfigError):
        return exc
    return kind(f"{what}: {one_line(exc, conn.secrets())}")


def routing_metadata(**params: str) -> list[tuple[str, str]]:
    """The ``x-goog-request-params`` header the service routes partition streams by (what the
    official ``routing_metadata`` helpers build, without importing the whole client package)."""
    from urllib.parse import urlencode

    return [("x-goog-request-params", urlencode(params))]
