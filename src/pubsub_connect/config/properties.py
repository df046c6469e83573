"""Java ``.properties`` syntax: what ``connect-standalone`` reads, read the same way here.

``key=value``, ``key: value`` and ``key value``, backslash escapes (``\\uXXXX`` included),
continuation lines and ``#``/``!`` comments, later keys winning, like ``java.util.Properties``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pubsub_connect.config.errors import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= len(text):
                try:
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Join continuation lines (odd number of trailing backslashes), skip comments/blank lines."""
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip()
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start = number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        yield start, (pending or "") + line
        pending = None
    if pending is not None:
        yield start, pending


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (``key=value``, ``key: value``, ``key value``, escapes,
    continuation lines). Later keys win, like ``java.util.Properties``."""
    result: dict[str, str] = {}
    for _, line in _logical_lines(text):
        i = 0
        key_chars: list[str] = []
        while i < len(line):
            ch = line[i]
            if ch == "\\" and i + 1 < len(line):
                key_chars.append(line[i : i + 2])
                i += 2
                continue
            if ch in "=: \t\f":
                break
            key_chars.append(ch)
            i += 1
        # skip whitespace, one separator, whitespace
        while i < len(line) and line[i] in " \t\f":
            i += 1
        if i < len(line) and line[i] in "=:":
            i += 1
            while i < len(line) and line[i] in " \t\f":
                i += 1
        result[_unescape("".join(key_chars))] = _unescape(line[i:])
    return result


def read_properties(path: str | Path) -> dict[str, str]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        # Java reads .properties as ISO-8859-1 when not UTF-8
        text = path.read_bytes().decode("latin-1")
    return parse_properties(text)
