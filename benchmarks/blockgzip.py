"""Block-GZIP writer throughput against bare zlib on the same bytes, measured in the same run.

What it answers: does the archive format cost anything beyond compression itself? The writer
does per-record work (escaping check, block accounting, offset check) and starts a new gzip
member per block; the baseline is ``zlib.compress(data, 6)`` over exactly the bytes the writer
compresses (the records' lines). Both sides are timed alternately, several rounds, in CPU time
of this process (``time.process_time``: on a shared machine wall time mostly measures the other
tenants); the ratio of medians is the figure (target ≥ 0.9).

Two inputs: JSON events of ~360 bytes, and ~40-byte records (worst case for per-record
overhead). The writer is fed as the archive pipeline feeds it (``extend`` per slice of a
micro-batch).

Usage: ``python benchmarks/blockgzip.py [--records N] [--rounds R] [--block-size BYTES]
[--batch N] [--min-ratio 0.9]`` (exit status 1 when a ratio is below ``--min-ratio``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import zlib

from pubsub_connect.model.blockgzip.blocks import DEFAULT_BLOCK_SIZE, BlockGzipWriter
from pubsub_connect.model.blockgzip.lines import encode_value


class _CountingSink:
    """Discards output but counts it, so neither side pays for keeping compressed bytes."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)


def make_records(count: int, seed: int = 6) -> list[bytes]:
    """JSON event records of ~120-600 bytes with realistic repetition (field names, a small
    vocabulary, increasing ids/timestamps) — typical archive content."""
    rng = random.Random(seed)
    words = [f"w{n:04d}" for n in range(3000)]
    kinds = ["click", "view", "purchase", "login", "logout", "search"]
    out = []
    for i in range(count):
        doc = {
            "id": 10_000_000 + i,
            "ts": 1_700_000_000_000 + i * 37,
            "kind": rng.choice(kinds),
            "user": f"user-{rng.randrange(50_000)}",
            "text": " ".join(rng.choice(words) for _ in range(rng.randrange(10, 80))),
            "score": round(rng.random(), 6),
        }
        out.append(json.dumps(doc, separators=(",", ":")).encode())
    return out


def time_zlib(data: bytes, level: int) -> tuple[float, int]:
    start = time.process_time()
    compressed = zlib.compress(data, level)
    return time.process_time() - start, len(compressed)


def time_gzip_stream(data: bytes, level: int, piece: int = 1 << 22) -> float:
    """zlib with the gzip wrapper (CRC32 instead of Adler-32), fed in pieces: the cost of the
    gzip format itself, without any per-record work — shows how much of a gap is format."""
    start = time.process_time()
    compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
    for i in range(0, len(data), piece):
        compressor.compress(data[i:i + piece])
    compressor.flush()
    return time.process_time() - start


def make_small_records(count: int) -> list[bytes]:
    """~40-byte records: the worst case for per-record overhead."""
    return [b'{"id":%d,"k":"click","u":"user-%d"}' % (i, i * 7919 % 50_000) for i in range(count)]


def time_writer(records: list[bytes], block_size: int, batch: int) -> tuple[float, int, int]:
    """The writer fed like the archive pipeline feeds it: slices of a micro-batch via ``extend``."""
    offsets = list(range(len(records)))
    sink = _CountingSink()
    start = time.process_time()
    writer = BlockGzipWriter(sink, block_size)  # type: ignore[arg-type]
    for i in range(0, len(records), batch):
        writer.extend(offsets[i:i + batch], records[i:i + batch], assume_sorted=True)
    chunks = writer.finish()
    return time.process_time() - start, sink.size, len(chunks)


def measure(name: str, records: list[bytes], block_size: int, batch: int, rounds: int) -> float:
    """Alternate zlib and writer rounds on the same bytes; print and return the ratio of medians."""
    data = b"".join(encode_value(v) + b"\n" for v in records)
    mb = len(data) / 1e6
    zlib_times: list[float] = []
    writer_times: list[float] = []
    gzip_times: list[float] = []
    zlib_size = writer_size = blocks = 0
    for _ in range(rounds):
        elapsed, zlib_size = time_zlib(data, 6)
        zlib_times.append(elapsed)
        elapsed, writer_size, blocks = time_writer(records, block_size, batch)
        writer_times.append(elapsed)
        gzip_times.append(time_gzip_stream(data, 6))
    zlib_rate = mb / statistics.median(zlib_times)
    writer_rate = mb / statistics.median(writer_times)
    ratio = writer_rate / zlib_rate
    print(f"[{name}] {len(records):,} records of {len(data) / len(records):.0f} B avg, {mb:.1f} MB, "
          f"block size {block_size:,} B -> {blocks} block(s), {rounds} alternating rounds (medians)")
    print(f"  zlib level 6 (one stream): {zlib_rate:8.1f} MB/s -> {zlib_size / 1e6:.2f} MB")
    print(f"  gzip stream (format floor): {mb / statistics.median(gzip_times):7.1f} MB/s")
    print(f"  Block-GZIP writer:         {writer_rate:8.1f} MB/s -> {writer_size / 1e6:.2f} MB "
          f"(+{(writer_size - zlib_size) / zlib_size:.2%} size)")
    print(f"  ratio writer/zlib: {ratio:.3f} (target >= 0.9); best-round ratio "
          f"{min(zlib_times) / min(writer_times):.3f}")
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    parser.add_argument("--batch", type=int, default=10_000, help="records per extend() call")
    parser.add_argument("--min-ratio", type=float, default=0.0)
    args = parser.parse_args(argv)

    ratios = [
        measure("events", make_records(args.records), args.block_size, args.batch, args.rounds),
        measure("small", make_small_records(args.records * 3), args.block_size, args.batch, args.rounds),
    ]
    ratio = min(ratios)
    if args.min_ratio and ratio < args.min_ratio:
        print(f"FAIL: ratio {ratio:.3f} below {args.min_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
