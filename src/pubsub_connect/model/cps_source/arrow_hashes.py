"""Java's ``Arrays.hashCode(byte[])`` vectorised with numpy over Arrow buffers, for the
``hash_value`` partition scheme on Spark workers (same results as ``reference.java_bytes_hash``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pubsub_connect.model.cps_source.settings import MASK32

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

# ---------------------------------------------------------------------------------------------
# Vectorised Java hashes (numpy over Arrow buffers; used on Spark workers for hash_value)
# ---------------------------------------------------------------------------------------------

#: Units hashed per numpy pass: bounds temporary memory (~6 uint64 arrays of this length).
_CHUNK_UNITS = 1 << 22
_INV31 = pow(31, -1, 1 << 32)


def _powers(base: int, n: int) -> np.ndarray:
    """``base**k mod 2**32`` for k in 0..n-1 (uint64; cumprod wraps mod 2**64, a multiple)."""
    import numpy as np

    factors = np.full(n, base, dtype=np.uint64)
    factors[0] = 1
    return np.cumprod(factors, dtype=np.uint64) & np.uint64(MASK32)


def _poly_hash_chunk(units: np.ndarray, starts: np.ndarray, ends: np.ndarray, initial: int) -> np.ndarray:
    """Java-style polynomial hash of each segment ``units[starts[i]:ends[i]]`` (mod 2**32).

    ``h = initial; for u in segment: h = 31*h + u``, i.e. ``initial*31**n + Σ u_i 31**(n-1-i)``.
    Computed without a Python loop: weight every unit by ``31**(T-1-i)`` for the whole chunk,
    take prefix sums, and rescale each segment by the inverse power (31 is odd, so invertible
    mod 2**32).
    """
    import numpy as np

    mask = np.uint64(MASK32)
    total = len(units)
    pw = _powers(31, total + 1)
    inv = _powers(_INV31, total + 1)
    weighted = (units * pw[:total][::-1]) & mask
    prefix = np.zeros(total + 1, dtype=np.uint64)
    np.cumsum(weighted, dtype=np.uint64, out=prefix[1:])
    seg = ((prefix[ends] - prefix[starts]) & mask) * inv[total - ends] & mask
    if initial:
        seg = (seg + np.uint64(initial) * pw[ends - starts]) & mask
    return seg


def _segment_hashes(units: np.ndarray, offsets: np.ndarray, initial: int) -> np.ndarray:
    """Hashes of consecutive segments delimited by ``offsets`` (len n+1, from 0), as int32."""
    import numpy as np

    n = len(offsets) - 1
    out = np.zeros(n, dtype=np.uint64)
    i = 0
    while i < n:
        j = int(np.searchsorted(offsets, offsets[i] + _CHUNK_UNITS, side="right")) - 1
        j = min(max(j, i + 1), n)
        base = int(offsets[i])
        if offsets[j] - base > _CHUNK_UNITS:  # one segment larger than a chunk: Horner over blocks
            h = initial
            for lo in range(base, int(offsets[j]), _CHUNK_UNITS):
                block = units[lo : min(lo + _CHUNK_UNITS, int(offsets[j]))]
                part = int(_poly_hash_chunk(block, np.array([0]), np.array([len(block)]), 0)[0])
                h = (h * pow(31, len(block), 1 << 32) + part) & MASK32
            out[i] = h
        else:
            chunk = units[base : int(offsets[j])]
            rel = offsets[i : j + 1] - base
            out[i:j] = _poly_hash_chunk(chunk, rel[:-1], rel[1:], initial)
        i = j
    return out.astype(np.uint32).view(np.int32)


def java_bytes_hash_array(values: pa.Array) -> np.ndarray:
    """``Arrays.hashCode(byte[])`` of every element of an Arrow binary array (null → as empty)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        values = pc.fill_null(values, pa.scalar(b"", values.type))
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    offset_type = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[values.offset : values.offset + n + 1].astype(np.int64)
    data = (
        np.frombuffer(buffers[2], dtype=np.int8)[offsets[0] : offsets[-1]]
        if buffers[2] is not None
        else np.zeros(0, dtype=np.int8)
    )
    units = data.astype(np.int64).astype(np.uint64) & np.uint64(MASK32)
    return _segment_hashes(units, offsets - offsets[0], 1)
