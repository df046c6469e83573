"""A client of Confluent's Schema Registry REST API (Confluent's registry, Apicurio's ``ccompat``,
Karapace, and the registries of the clouds that speak it).

Why a client of our own, over ``urllib``: the converters need four calls (a schema by id, a
subject's latest version, the id of a schema under a subject, registering one), run on the
driver only (a micro-batch's ids are looked up once, the decoding then runs in the JVM), and
must follow the settings Kafka Connect users already wrote:

- ``schema.registry.url`` is a comma-separated list: a call goes to the URL that answered last
  and moves on to the next one when a URL cannot be reached, as Confluent's client does;
- ``basic.auth.credentials.source=USER_INFO`` with ``basic.auth.user.info=user:password`` (or
  ``URL``, the credentials inside the URL) send HTTP basic authentication;
- ``schema.registry.ssl.truststore.location`` names the CA certificates (PEM) to trust.

A schema's text never changes for an id, so schemas by id are cached for the client's life:
Confluent's converters do the same, and a registry that goes away later does not stop records
whose ids were seen.
"""

from __future__ import annotations

import base64
import json
import ssl
from dataclasses import dataclass, field
from functools import cached_property
from threading import Lock
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlsplit, urlunsplit
from urllib.request import Request, urlopen

#: Confluent's content type for requests with a body.
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
#: Confluent's error code for "schema not found" (HTTP 404).
SCHEMA_NOT_FOUND = 40403
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
TIMEOUT_S = 30.0


#: A registry's code for a schema whose text it reads as another type than the one given.
NOT_OF_THE_GIVEN_TYPE = 42201
#: The JSON Schema draft a declared schema names (:func:`declared_draft`).
JSON_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"

class SchemaRegistryError(RuntimeError):
    """The registry answered with an error; ``str()`` is one line with its message and code."""

    def __init__(self, message: str, status: int, code: int | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class UnknownSchemaError(SchemaRegistryError):
    """No schema has this id (or no version of this subject matches): a record's fault, not the
    registry's, so it is dead-lettered rather than retried."""


class SchemaRegistryUnreachableError(ConnectionError):
    """No URL of ``schema.registry.url`` could be reached: transient, like a broker that is away."""


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it: ``schema_type`` is ``AVRO``, ``JSON`` or ``PROTOBUF``."""

    schema_id: int
    schema_type: str
    text: str
    subject: str | None = None
    version: int | None = None


@dataclass(frozen=True)
class RegistrySettings:
    """What the client needs of a converter's ``schema.registry.*`` and ``basic.auth.*`` keys."""

    urls: tuple[str, ...]
    user_info: str | None = None
    ca_file: str | None = None

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("schema.registry.url is empty")


def settings_from(config: dict[str, Any]) -> RegistrySettings:
    """:class:`RegistrySettings` from a converter's own keys (the prefix removed): Confluent's
    names and meanings."""
    urls = tuple(u.strip().rstrip("/") for u in str(config.get("schema.registry.url") or "").split(",") if u.strip())
    if not urls:
        raise ValueError("schema.registry.url is required by the Schema Registry converters")
    source = str(config.get("basic.auth.credentials.source") or "URL").upper()
    user_info: str | None = None
    if source == "USER_INFO":
        user_info = str(config.get("basic.auth.user.info") or "") or None
        if user_info is None or ":" not in user_info:
            raise ValueError("basic.auth.credentials.source=USER_INFO needs basic.auth.user.info=<user>:<password>")
    elif source != "URL":
        raise ValueError(f"basic.auth.credentials.source={source} is not supported here; use USER_INFO or URL")
    ca_file = config.get("schema.registry.ssl.truststore.location") or None
    return RegistrySettings(urls, user_info, str(ca_file) if ca_file else None)


@dataclass
class SchemaRegistryClient:
    """Confluent's REST API over ``settings.urls``, with schemas by id cached."""

    settings: RegistrySettings
    timeout_s: float = TIMEOUT_S
    _by_id: dict[int, RegisteredSchema] = field(default_factory=dict, repr=False)
    _current: int = field(default=0, repr=False)
    _lock: Lock = field(default_factory=Lock, repr=False)

    @cached_property
    def _tls(self) -> ssl.SSLContext | None:
        """The truststore's context, read once (None: the system's, for https)."""
        return ssl.create_default_context(cafile=self.settings.ca_file) if self.settings.ca_file else None

    def schema(self, schema_id: int) -> RegisteredSchema:
        """The writer schema of ``schema_id`` (``GET /schemas/ids/{id}``)."""
        cached = self._by_id.get(schema_id)
        if cached is not None:
            return cached
        answer = self._call("GET", f"/schemas/ids/{schema_id}")
        found = RegisteredSchema(schema_id, answer.get("schemaType") or "AVRO", answer["schema"])
        with self._lock:
            self._by_id[schema_id] = found
        return found

    def register(self, subject: str, text: str, schema_type: str = "AVRO") -> int:
        """The id of ``text`` under ``subject``, registered as a new version when it is new."""
        return self._post_schema(f"/subjects/{quote(subject, safe='')}/versions", text, schema_type)

    def lookup(self, subject: str, text: str, schema_type: str = "AVRO") -> int:
        """The id of ``text`` if ``subject`` has it (``auto.register.schemas=false``)."""
        return self._post_schema(f"/subjects/{quote(subject, safe='')}", text, schema_type)

    def _post_schema(self, path: str, text: str, schema_type: str) -> int:
        """A schema posted to ``path``, its id. Apicurio Registry infers a schema's type from its
        text and refuses a JSON Schema without properties (``{"type":"string",…}``, a ``oneOf``)
        as not JSON (422, error 42201); with its draft declared (:func:`declared_draft`) it takes
        it. Confluent's registry takes the text as it is, so that is only the second try."""
        try:
            answer = self._call("POST", path, _body(text, schema_type))
        except SchemaRegistryError as exc:
            if not (schema_type == "JSON" and exc.code == NOT_OF_THE_GIVEN_TYPE):
                raise
            text = declared_draft(text)
            answer = self._call("POST", path, _body(text, schema_type))
        return self._remember(int(answer["id"]), schema_type, text)

    def latest(self, subject: str) -> RegisteredSchema:
        """The newest version of ``subject`` (``use.latest.version=true``)."""
        answer = self._call("GET", f"/subjects/{quote(subject, safe='')}/versions/latest")
        found = RegisteredSchema(int(answer["id"]), answer.get("schemaType") or "AVRO", answer["schema"],
                                 answer.get("subject"), answer.get("version"))
        self._remember(found.schema_id, found.schema_type, found.text)
        return found

    def _remember(self, schema_id: int, schema_type: str, text: str) -> int:
        with self._lock:
            self._by_id.setdefault(schema_id, RegisteredSchema(schema_id, schema_type, text))
        return schema_id

    def _call(self, method: str, path: str, body: bytes | None = None) -> dict[str, Any]:
        """One request, to the URL that answered last, then to the others in turn."""
        urls = self.settings.urls
        failures: list[str] = []
        for step in range(len(urls)):
            index = (self._current + step) % len(urls)
            try:
                answer = self._request(urls[index], method, path, body)
            except (URLError, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                failures.append(f"{_without_credentials(urls[index])}: {reason}")
                continue
            except SchemaRegistryError as exc:
                if exc.status < 500:
                    raise
                failures.append(f"{_without_credentials(urls[index])}: {exc}")  # a server in trouble: as away
                continue
            self._current = index
            return answer
        raise SchemaRegistryUnreachableError(f"Schema Registry unreachable ({'; '.join(failures)})")

    def _request(self, url: str, method: str, path: str, body: bytes | None) -> dict[str, Any]:
        target, credentials = _split_credentials(url)
        headers = {"Accept": CONTENT_TYPE}
        if body is not None:
            headers["Content-Type"] = CONTENT_TYPE
        user_info = self.settings.user_info or credentials
        if user_info:
            headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode("ascii")
        request = Request(target + path, data=body, method=method, headers=headers)
        try:
            with urlopen(request, timeout=self.timeout_s, context=self._tls) as response:
                return json.loads(response.read() or b"{}")
        except HTTPError as exc:
            raise _registry_error(exc, method, path) from None


def declared_draft(text: str) -> str:
    """A JSON Schema with the draft it is written in declared (``$schema``, draft-07: the one
    Confluent's library assumes)."""
    return json.dumps({"$schema": JSON_SCHEMA_DRAFT, **json.loads(text)}, separators=(",", ":"), ensure_ascii=False)


def _body(text: str, schema_type: str) -> bytes:
    payload: dict[str, Any] = {"schema": text}
    if schema_type != "AVRO":  # Confluent's default type: older registries refuse the field
        payload["schemaType"] = schema_type
    return json.dumps(payload).encode()


def _registry_error(exc: HTTPError, method: str, path: str) -> SchemaRegistryError:
    try:
        answer = json.loads(exc.read() or b"{}")
    except ValueError:
        answer = {}
    code = answer.get("error_code") if isinstance(answer, dict) else None
    message = (answer.get("message") if isinstance(answer, dict) else None) or exc.reason
    line = f"Schema Registry {method} {path}: {message} (HTTP {exc.code}{f', error {code}' if code else ''})"
    not_found = exc.code == 404 and code in (SCHEMA_NOT_FOUND, SUBJECT_NOT_FOUND, VERSION_NOT_FOUND)
    kind = UnknownSchemaError if not_found else SchemaRegistryError
    return kind(" ".join(line.split()), exc.code, code)


def _split_credentials(url: str) -> tuple[str, str | None]:
    """``https://user:pw@host/x`` → (``https://host/x``, ``user:pw``): urllib sends no userinfo."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), \
        f"{parts.username}:{parts.password or ''}"


def _without_credentials(url: str) -> str:
    return _split_credentials(url)[0]

