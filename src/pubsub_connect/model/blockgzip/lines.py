"""Block-GZIP records ↔ lines: the newline escaping rule (see the package docstring), and the
format's error.
"""

from __future__ import annotations

import re

RS = b"\x1e"
NULL_LINE = RS
LF = b"\n"
CR = b"\r"


class BlockGzipError(ValueError):
    """Malformed archive data (bad index, truncated block, out-of-order offsets)."""


# --------------------------------------------------------------------------------------------
# Records ↔ lines
# --------------------------------------------------------------------------------------------


def encode_value(value: bytes | None) -> bytes:
    """The line for ``value`` (without its LF), following the escaping rule in the package docstring."""
    if value is None:
        return NULL_LINE
    if LF in value or CR in value or value[:1] == RS:
        return RS + value.replace(b"\\", b"\\\\").replace(LF, b"\\n").replace(CR, b"\\r")
    return bytes(value)


_UNESCAPE = {b"\\": b"\\", b"n": LF, b"r": CR}
_ESCAPE_RE = re.compile(rb"\\(.)", re.DOTALL)


def _unescape_match(match: re.Match[bytes]) -> bytes:
    try:
        return _UNESCAPE[match.group(1)]
    except KeyError:
        raise BlockGzipError(f"invalid escape sequence {match.group(0)!r} in an escaped record") from None


def decode_line(line: bytes) -> bytes | None:
    """The value a line (without its LF) stands for; ``None`` for a tombstone."""
    if line[:1] != RS:
        return line
    if len(line) == 1:
        return None
    body = line[1:]
    if b"\\" not in body:
        return body
    if body.endswith(b"\\") and (len(body) - len(body.rstrip(b"\\"))) % 2 == 1:
        raise BlockGzipError("escaped record ends with a lone backslash")
    return _ESCAPE_RE.sub(_unescape_match, body)


def split_lines(data: bytes) -> list[bytes]:
    """Decompressed block bytes → lines without LF. Every record line ends with LF."""
    if not data:
        return []
    if not data.endswith(LF):
        raise BlockGzipError("block does not end with a newline (truncated or not Block-GZIP)")
    return data[:-1].split(LF)
