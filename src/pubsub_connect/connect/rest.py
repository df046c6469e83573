"""Kafka Connect's REST API over the herder: same paths, JSON shapes and status codes.

Why the standard library's HTTP server: the API is a handful of small JSON requests from
operators' scripts, with no need for a framework; every request is answered on its own thread so
a slow one (stopping a connector waits for its batch) does not block status reads.

Security: the server binds to the address of ``listeners`` (``http://127.0.0.1:8083`` by
default). Any address other than loopback requires HTTP basic authentication from
``rest.basic.auth.credentials.file`` (``user=password`` lines, as in the property file of
Connect's basic-auth REST extension); the worker refuses to start otherwise.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pubsub_connect import __version__
from pubsub_connect.config import loader as cfg
from pubsub_connect.config.errors import ConfigError
from pubsub_connect.config.properties import read_properties
from pubsub_connect.connect.config_store import PAUSED, STARTED, STOPPED
from pubsub_connect.connect.herder import Herder, HerderError
from pubsub_connect.connect.plugins import PluginError, connector_plugins, validate
from pubsub_connect.model.error_text import first_line

log = logging.getLogger(__name__)

DEFAULT_LISTENER = "http://127.0.0.1:8083"


@dataclass(frozen=True)
class Listener:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def worker_id(self) -> str:
        return f"{self.host}:{self.port}"


def parse_listener(value: str) -> Listener:
    """``listeners`` (Connect's key): one ``http://host:port``."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if len(items) != 1:
        raise ConfigError(f"listeners={value!r}: give exactly one listener, like {DEFAULT_LISTENER}")
    parts = urlsplit(items[0])
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ConfigError(f"listeners={value!r}: expected http://host:port (put a TLS proxy in front for https)")
    return Listener(parts.hostname, parts.port)


def read_credentials(path: str) -> dict[str, str]:
    """``user=password`` lines (a Java properties file)."""
    try:
        users = read_properties(path)
    except OSError as exc:
        raise ConfigError(f"rest.basic.auth.credentials.file={path!r}: {exc.strerror}") from None
    if not users:
        raise ConfigError(f"rest.basic.auth.credentials.file={path!r} holds no user=password line")
    return users


class BasicAuth:
    """Checks ``Authorization: Basic …`` against the credentials file's users."""

    def __init__(self, users: dict[str, str]):
        self.users = users

    def allows(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        expected = self.users.get(user)
        return expected is not None and hmac.compare_digest(expected.encode(), password.encode())


def security_for(listener: Listener, credentials_file: str | None) -> BasicAuth | None:
    """No open admin API on a network: off loopback, basic authentication is required."""
    if credentials_file:
        return BasicAuth(read_credentials(credentials_file))
    if not listener.loopback:
        raise ConfigError(f"listeners=http://{listener.worker_id} is reachable from the network: set "
                              "rest.basic.auth.credentials.file (user=password lines) to require authentication, "
                              "or listen on 127.0.0.1")
    return None


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


Route = tuple[str, re.Pattern[str], Callable[..., tuple[int, Any]]]


class ConnectRestApi:
    """The resources: root, connectors, connector plugins."""

    def __init__(self, herder: Herder, kafka_cluster_id: Callable[[], str | None] = lambda: None):
        self.herder = herder
        self.kafka_cluster_id = kafka_cluster_id
        name = r"(?P<name>[^/]+)"
        self.routes: list[Route] = [
            ("GET", re.compile(r"/"), self.root),
            ("GET", re.compile(r"/connectors"), self.list_connectors),
            ("POST", re.compile(r"/connectors"), self.create),
            ("GET", re.compile(rf"/connectors/{name}"), lambda q, b, name: (200, self.herder.info(name))),
            ("DELETE", re.compile(rf"/connectors/{name}"), self.delete),
            ("GET", re.compile(rf"/connectors/{name}/config"), lambda q, b, name: (200, self.herder.config(name))),
            ("PUT", re.compile(rf"/connectors/{name}/config"), self.put_config),
            ("GET", re.compile(rf"/connectors/{name}/status"), lambda q, b, name: (200, self.herder.status(name))),
            ("GET", re.compile(rf"/connectors/{name}/tasks"), lambda q, b, name: (200, self.herder.tasks(name))),
            ("GET", re.compile(rf"/connectors/{name}/tasks/(?P<task>\d+)/status"), self.task_status),
            ("POST", re.compile(rf"/connectors/{name}/tasks/(?P<task>\d+)/restart"), self.restart_task),
            ("PUT", re.compile(rf"/connectors/{name}/pause"), self.target(PAUSED, 202)),
            ("PUT", re.compile(rf"/connectors/{name}/resume"), self.target(STARTED, 202)),
            ("PUT", re.compile(rf"/connectors/{name}/stop"), self.target(STOPPED, 204)),
            ("POST", re.compile(rf"/connectors/{name}/restart"), self.restart),
            ("GET", re.compile(rf"/connectors/{name}/topics"), lambda q, b, name: (200, self.herder.topics(name))),
            ("PUT", re.compile(rf"/connectors/{name}/topics/reset"), self.reset_topics),
            ("GET", re.compile(rf"/connectors/{name}/offsets"), lambda q, b, name: (200, self.herder.offsets(name))),
            ("PATCH", re.compile(rf"/connectors/{name}/offsets"),
             lambda q, b, name: (200, self.herder.alter_offsets(name, b))),
            ("DELETE", re.compile(rf"/connectors/{name}/offsets"),
             lambda q, b, name: (200, self.herder.reset_offsets(name))),
            ("GET", re.compile(r"/connector-plugins"), self.plugins),
            ("PUT", re.compile(r"/connector-plugins/(?P<plugin>[^/]+)/config/validate"), self.validate),
        ]

    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        path = path.rstrip("/") or "/"
        allowed = False
        for verb, pattern, handler in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            allowed = True
            if verb == method:
                return handler(query, body, **{k: unquote(v) for k, v in match.groupdict().items()})
        if allowed:
            raise HttpError(405, f"HTTP {method} is not allowed on {path}")
        raise HttpError(404, f"Unknown endpoint {path}")

    # resources -------------------------------------------------------------------------------

    def root(self, query: dict, body: Any) -> tuple[int, Any]:
        return 200, {"version": __version__, "commit": "pubsub-connect", "kafka_cluster_id": self.kafka_cluster_id()}

    def list_connectors(self, query: dict, body: Any) -> tuple[int, Any]:
        expand = [e for values in query.get("expand", []) for e in values.split(",")]
        names = self.herder.names()
        if not expand:
            return 200, names
        result: dict[str, Any] = {}
        for name in names:
            entry: dict[str, Any] = {}
            try:
                if "status" in expand:
                    entry["status"] = self.herder.status(name)
                if "info" in expand:
                    entry["info"] = self.herder.info(name)
            except HerderError:  # deleted meanwhile
                continue
            result[name] = entry
        return 200, result

    def create(self, query: dict, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("config"), dict):
            raise HttpError(400, 'expected {"name": …, "config": {…}}')
        config = {str(k): str(v) for k, v in body["config"].items()}
        name = body.get("name") or config.get("name")
        if not name:
            raise HttpError(400, "Connector name configuration (name) is missing")
        initial = str(body.get("initial_state", "RUNNING")).upper()
        target = {"RUNNING": STARTED, "PAUSED": PAUSED, "STOPPED": STOPPED}.get(initial)
        if target is None:
            raise HttpError(400, f"initial_state must be RUNNING, PAUSED or STOPPED, not {initial}")
        return 201, self.herder.create(str(name), config, target)

    def delete(self, query: dict, body: Any, name: str) -> tuple[int, Any]:
        self.herder.delete(name)
        return 204, None

    def put_config(self, query: dict, body: Any, name: str) -> tuple[int, Any]:
        if not isinstance(body, dict):
            raise HttpError(400, "expected the connector config as a JSON object")
        created, info = self.herder.put_config(name, {str(k): str(v) for k, v in body.items()})
        return (201 if created else 200), info

    def target(self, state: str, status: int) -> Callable[..., tuple[int, Any]]:
        def change(query: dict, body: Any, name: str) -> tuple[int, Any]:
            self.herder.set_target(name, state)
            return status, None
        return change

    def reset_topics(self, query: dict, body: Any, name: str) -> tuple[int, Any]:
        self.herder.reset_topics(name)
        return 202, None

    def restart(self, query: dict, body: Any, name: str) -> tuple[int, Any]:
        include_tasks = _flag(query, "includeTasks")
        only_failed = _flag(query, "onlyFailed")
        self.herder.restart(name, only_failed=only_failed)
        if include_tasks or only_failed:
            return 202, self.herder.status(name)
        return 204, None

    def task_status(self, query: dict, body: Any, name: str, task: str) -> tuple[int, Any]:
        tasks = self.herder.status(name)["tasks"]
        if int(task) >= len(tasks):
            raise HttpError(404, f"Task {name}-{task} not found")
        return 200, tasks[int(task)]

    def restart_task(self, query: dict, body: Any, name: str, task: str) -> tuple[int, Any]:
        if int(task) >= len(self.herder.status(name)["tasks"]):
            raise HttpError(404, f"Task {name}-{task} not found")
        self.herder.restart(name)  # a connector's stages restart together
        return 204, None

    def plugins(self, query: dict, body: Any) -> tuple[int, Any]:
        return 200, connector_plugins(connectors_only=not query.get("connectorsOnly") or _flag(query, "connectorsOnly"))

    def validate(self, query: dict, body: Any, plugin: str) -> tuple[int, Any]:
        if not isinstance(body, dict):
            raise HttpError(400, "expected the connector config as a JSON object")
        try:
            return 200, validate(plugin, body)
        except PluginError as exc:
            raise HttpError(400, str(exc)) from None


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return any(v.lower() == "true" for v in query.get(name, []))


def _handler_class(api: ConnectRestApi, auth: BasicAuth | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = f"pubsub-connect/{__version__}"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

        def _respond(self, status: int, payload: Any) -> None:
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            if payload is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="pubsub-connect"')
            self.end_headers()
            self.wfile.write(data)

        def _serve(self) -> None:
            if auth is not None and not auth.allows(self.headers.get("Authorization")):
                self._respond(401, {"error_code": 401, "message": "Authentication required"})
                return
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                try:
                    body = json.loads(raw) if raw.strip() else None
                except json.JSONDecodeError as exc:
                    raise HttpError(400, f"the request body is not JSON: {exc}") from None
                status, payload = api.handle(self.command, parts.path, parse_qs(parts.query), body)
            except HttpError as exc:
                status, payload = exc.status, {"error_code": exc.status, "message": str(exc)}
            except HerderError as exc:
                status, payload = exc.status, {"error_code": exc.status, "message": str(exc)}
            except Exception as exc:  # one line for the client; the trace in the debug log
                log.debug("%s %s failed", self.command, self.path, exc_info=True)
                status = HTTPStatus.INTERNAL_SERVER_ERROR
                first = first_line(str(exc))
                payload = {"error_code": 500, "message": f"{type(exc).__name__}: {first}"}
            self._respond(int(status), payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return Handler


class RestServer:
    """The HTTP server on its own thread; :meth:`close` stops it and frees the port."""

    def __init__(self, listener: Listener, api: ConnectRestApi, auth: BasicAuth | None):
        self.listener = listener
        try:
            self.httpd = ThreadingHTTPServer((listener.host, listener.port), _handler_class(api, auth))
        except OSError as exc:  # e.g. another worker (or Kafka Connect) already on the port
            raise ConfigError(f"listeners=http://{listener.worker_id}: cannot listen there: {exc.strerror}") \
                from None
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="connect-rest", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> RestServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def credentials_file(worker: cfg.WorkerConfig) -> str | None:
    path = worker.get("rest.basic.auth.credentials.file")
    return str(Path(path).expanduser()) if path else None
