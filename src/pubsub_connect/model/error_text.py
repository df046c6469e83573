"""How an error is told in one line: every user-facing error of the product goes through here.

Errors reach users as one line (the CLI's ``error:`` line, a connector's ``FAILED`` trace, a dead
letter's reason), whatever produced them: a client library's exception that may quote a secret,
a traceback that crossed Spark from a Python worker through the JVM, or a message decorated with
Spark's error class and SQL state. One module keeps those rules together, so every layer cuts
errors the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: How long a quoted client error may get before it is cut.
MAX_QUOTED_CHARS = 300

_PY_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")
_WRAPPER_PREFIXES = ("org.", "java.", "py4j.", "pyspark.", "scala.")
#: The product's own error types: their message is the one a user needs, wherever it is wrapped.
_OUR_ERRORS = frozenset({"ConnectorError", "DataError", "PublishError", "PubSubIOError", "AckError",
                         "KafkaUnreachableError",
                         "KafkaProduceError", "KafkaDataLossError", "KafkaOptionsError", "ConfigError"})
#: Spark's error class in front of a message and the SQL state behind it: not for users' eyes.
_SPARK_DECORATION = re.compile(r"^\[[A-Z_.]+\]\s*|\s*SQLSTATE: \w+\.?$")


def collapse(text: str) -> str:
    """``text`` with every run of white space (newlines included) as one blank."""
    return " ".join(text.split())


def first_line(text: str) -> str:
    """The first non-empty-trimmed line of ``text`` (``""`` for an empty text)."""
    text = text.strip()
    return text.splitlines()[0] if text else ""


def one_line(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """``Type: message`` of a client error on one line, secrets scrubbed and length bounded."""
    text = collapse(str(exc)) or repr(exc)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "********")
    if len(text) > MAX_QUOTED_CHARS:
        text = text[:MAX_QUOTED_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}"


def error_line(exc: BaseException | str) -> str:
    """The one line worth showing from an error that crossed Spark (Python worker → JVM →
    foreachBatch → query): our own exception's message when present, else the innermost
    Python error line, else the first line."""
    text = str(exc).strip()
    ours: list[str] = []
    others: list[str] = []
    for line in text.splitlines():
        match = _PY_ERROR_LINE.match(line.strip())
        if not match or match.group(1).startswith(_WRAPPER_PREFIXES):
            continue
        (ours if match.group(1).startswith("pubsub_connect.") or match.group(1) in _OUR_ERRORS else others).append(
            f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2)}")
    if ours:
        # the innermost of ours: ConnectorError wraps the worker's PublishError etc.
        return ours[0].split(": ", 1)[1] if ours[0].startswith("ConnectorError: ") else ours[0]
    if others:
        return others[-1]
    return text.splitlines()[0] if text else type(exc).__name__


def clean_error(message: str) -> str:
    """A Spark error message as one plain line: no error class, no SQL state."""
    return _SPARK_DECORATION.sub("", first_line(message)).strip()
