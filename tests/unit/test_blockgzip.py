"""Block-GZIP format: escaping, blocks, index, names, reader, rotation rules (pure, no I/O
except the real ``gzip`` command and the checked-in fixture)."""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from pubsub_connect.model.blockgzip.blocks import (
    BlockGzipWriter,
    BlockSizer,
    BlockState,
    read_block,
    read_records,
    text_lengths,
    write_file,
)
from pubsub_connect.model.blockgzip.index import Chunk, find_chunk, parse_index, render_index
from pubsub_connect.model.blockgzip.lines import BlockGzipError, decode_line, encode_value
from pubsub_connect.model.blockgzip.names import ArchiveName, cursor_key, index_key, object_key, parse_object_key
from pubsub_connect.model.blockgzip.rotation import FileCut, FilePlanner, OpenFile, RotationPolicy
from pubsub_connect.pipelines.archive.read import archive_read, read_archive_records
from pubsub_connect.pipelines.archive.settings import ArchiveReadError

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "archive" / "2016-02-24"
FIXTURE_GZ = FIXTURE / "system-test-00000-000000000100.gz"

#: The records of the checked-in fixture (see fixtures/archive/README.md).
FIXTURE_RECORDS: list[tuple[int, bytes | None]] = [
    (100, b'{"id":1,"msg":"hello"}'),
    (101, b'{"id":2,"msg":"two\\nlines in JSON"}'),
    (102, b"raw\nnewline"),
    (103, None),
    (104, b""),
    (105, b"\x1estarts with RS"),
    (106, b"back\\slash and \r cr"),
    (107, b"\x00\xff\x10\n\x80"),
    (108, b"plain-108"),
    (109, b"plain-109"),
    (110, b"plain-110"),
    (111, b"plain-111"),
]
#: What ``gzip -dc`` prints for the fixture: one line per record.
FIXTURE_TEXT = (
    b'{"id":1,"msg":"hello"}\n'
    b'{"id":2,"msg":"two\\nlines in JSON"}\n'
    b"\x1eraw\\nnewline\n"
    b"\x1e\n"
    b"\n"
    b"\x1e\x1estarts with RS\n"
    b"\x1eback\\\\slash and \\r cr\n"
    b"\x1e\x00\xff\x10\\n\x80\n"
    b"plain-108\nplain-109\nplain-110\nplain-111\n"
)

needs_gzip = pytest.mark.skipif(shutil.which("gzip") is None, reason="the gzip command is not installed")


def _write(records: list[tuple[int, bytes | None]], block_size: int) -> tuple[bytes, list[Chunk]]:
    sink = io.BytesIO()
    chunks = write_file(records, sink, block_size)
    return sink.getvalue(), chunks


# ------------------------------------------------------------------------------------------ escaping


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (b'{"a":"x\\ny"}', b'{"a":"x\\ny"}'),  # JSON's own escapes are left alone
        (b"plain \\ backslash", b"plain \\ backslash"),  # no LF/CR: verbatim, backslash untouched
        (b"", b""),
        (None, b"\x1e"),
        (b"a\nb", b"\x1ea\\nb"),
        (b"a\r\nb", b"\x1ea\\r\\nb"),
        (b"c:\\dir\nx", b"\x1ec:\\\\dir\\nx"),
        (b"\x1e", b"\x1e\x1e"),
        (b"\x1eabc", b"\x1e\x1eabc"),
        (b"mid\x1edle", b"mid\x1edle"),  # RS only matters at the start
        (b"\n", b"\x1e\\n"),
    ],
)
def test_encode_value_exact_lines(value: bytes | None, line: bytes) -> None:
    assert encode_value(value) == line
    assert decode_line(line) == value


def test_escaping_round_trips_random_binary_values() -> None:
    rng = random.Random(6)
    alphabet = b"\n\r\\\x1enr ax\x00\xff"
    values: list[bytes | None] = [
        bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 12))) for _ in range(3000)
    ]
    values += [None, b"", b"\\", b"\\n", b"\x1e\\"]
    for value in values:
        line = encode_value(value)
        assert b"\n" not in line and b"\r" not in line
        assert decode_line(line) == value


@pytest.mark.parametrize("line", [b"\x1ebad \\t escape", b"\x1eends with \\"])
def test_decode_rejects_malformed_escapes(line: bytes) -> None:
    with pytest.raises(BlockGzipError):
        decode_line(line)


# ------------------------------------------------------------------------------------------ blocks


#: Files written by the original connector's ``BlockGZIPFileWriter`` (JDK 17, zlib 1.2.13) for
#: (records, compressed_block_size, first offset): the exact ``.gz`` bytes and ``.index.json``.
ORIGINAL_FILES: list[tuple[list[bytes], int, int, str, bytes]] = [
    # 11-character lines, 33 per block: 3 records fill a block; the 4th would pass it
    ([b"v%09d" % i for i in range(7)], 33, 0,
     "1f8b08000000000000ff2b338001ae3218cb10c134e20200279301aa21000000"
     "1f8b08000000000000ff2b33800263ae3218d304c134e50200db1f71a021000000"
     "1f8b08000000000000ff2b338002332e00e847ae0e0b000000",
     b'{"chunks":[{"byte_length_uncompressed":33,"num_records":3,"byte_length":32,"byte_offset":0,'
     b'"first_record_offset":0},{"byte_length_uncompressed":33,"num_records":3,"byte_length":33,'
     b'"byte_offset":32,"first_record_offset":3},{"byte_length_uncompressed":11,"num_records":1,'
     b'"byte_length":25,"byte_offset":65,"first_record_offset":6}]}'),
    # the file's first record is longer than a block: an empty first block, then that record alone
    ([b"x" * 50, b"a", b"b"], 10, 5,
     "1f8b08000000000000ff03000000000000000000"
     "1f8b08000000000000ffaba82015700100a33572ab33000000"
     "1f8b08000000000000ff4be44ae20200972a571804000000",
     b'{"chunks":[{"byte_length_uncompressed":0,"num_records":0,"byte_length":20,"byte_offset":0,'
     b'"first_record_offset":5},{"byte_length_uncompressed":51,"num_records":1,"byte_length":25,'
     b'"byte_offset":20,"first_record_offset":5},{"byte_length_uncompressed":4,"num_records":2,'
     b'"byte_length":24,"byte_offset":45,"first_record_offset":6}]}'),
    # lengths are Java String lengths: "héllo😀" is 7 UTF-16 units (8 with LF) in 11 bytes
    (["héllo😀".encode(), b"abc", "ü".encode() * 5, b"z"], 10, 40,
     "1f8b08000000000000ffcb38bc322727ffc3fc190d5c00dc50aeed0b000000"
     "1f8b08000000000000ff4b4c4ae63abc0706b900b84099e60f000000"
     "1f8b08000000000000ffabe202009d6adc7402000000",
     b'{"chunks":[{"byte_length_uncompressed":8,"num_records":1,"byte_length":31,"byte_offset":0,'
     b'"first_record_offset":40},{"byte_length_uncompressed":10,"num_records":2,"byte_length":28,'
     b'"byte_offset":31,"first_record_offset":41},{"byte_length_uncompressed":2,"num_records":1,'
     b'"byte_length":22,"byte_offset":59,"first_record_offset":43}]}'),
    # UTF-8 without astral characters: one unit per character ("Zürich €5" is 9, in 12 bytes);
    # "ñ" * 11 fills a 12-unit block exactly (22 bytes)
    (["Zürich €5".encode(), "ééé".encode(), b"abc", "ñ".encode() * 11], 12, 200,
     "1f8b08000000000000ff8b3abca728333943e151d31a532e006456252a0d000000"
     "1f8b08000000000000ff3bbcf23010722526257301006f9a53dd0b000000"
     "1f8b08000000000000ff3bbcf13016c80500be5646cf17000000",
     b'{"chunks":[{"byte_length_uncompressed":10,"num_records":1,"byte_length":33,"byte_offset":0,'
     b'"first_record_offset":200},{"byte_length_uncompressed":8,"num_records":2,"byte_length":30,'
     b'"byte_offset":33,"first_record_offset":201},{"byte_length_uncompressed":12,"num_records":1,'
     b'"byte_length":26,"byte_offset":63,"first_record_offset":203}]}'),
]


@pytest.mark.parametrize(("values", "block_size", "first", "gz_hex", "index"), ORIGINAL_FILES)
def test_writer_makes_the_original_connectors_exact_bytes(values: list[bytes], block_size: int, first: int,
                                                          gz_hex: str, index: bytes) -> None:
    records = [(first + i, v) for i, v in enumerate(values)]
    data, chunks = _write(records, block_size)
    assert data.hex() == gz_hex
    assert render_index(chunks) == index
    assert parse_index(index) == chunks
    # the bulk path and the record-at-a-time path agree; the sizer cuts the same blocks
    writer = BlockGzipWriter(io.BytesIO(), block_size)
    assert writer.extend([o for o, _ in records], values) == len(values)
    assert writer.finish() == chunks
    sizer = BlockSizer(block_size)
    sizer.extend([o for o, _ in records], values)
    assert sizer.finish() == writer.state
    assert read_records(data) == values


def test_a_block_closes_before_the_record_that_would_take_it_past_the_size() -> None:
    # 11-byte lines: 33 holds exactly 3 records (the block stays open at 33 until a 4th comes)
    records = [(o, b"v%09d" % o) for o in range(7)]
    data, chunks = _write(records, block_size=33)
    assert [(c.byte_length_uncompressed, c.num_records, c.first_record_offset) for c in chunks] == [
        (33, 3, 0),
        (33, 3, 3),
        (11, 1, 6),
    ]
    # one byte less: only 2 records fit
    _, smaller = _write(records, block_size=32)
    assert [(c.byte_length_uncompressed, c.num_records) for c in smaller] == [(22, 2)] * 3 + [(11, 1)]
    # byte ranges tile the file exactly
    lengths = [c.byte_length for c in chunks]
    assert [c.byte_offset for c in chunks] == [0, lengths[0], lengths[0] + lengths[1]]
    assert chunks[-1].byte_end == len(data)
    # each range decompresses alone to its records
    for chunk, expected in zip(chunks, [records[0:3], records[3:6], records[6:7]], strict=True):
        assert read_block(data[chunk.byte_offset : chunk.byte_end]) == [v for _, v in expected]
    assert read_records(data) == [v for _, v in records]


def test_a_record_longer_than_a_block_is_alone_in_its_block_never_split() -> None:
    records = [(0, b"a" * 5), (1, b"b" * 100), (2, b"c")]
    _, chunks = _write(records, block_size=8)
    assert [(c.byte_length_uncompressed, c.num_records) for c in chunks] == [(6, 1), (101, 1), (2, 1)]
    # first record of the file too long: the original's empty first block (a 20-byte member)
    data, chunks = _write([(9, b"b" * 100), (10, b"c")], block_size=8)
    assert [(c.byte_length_uncompressed, c.num_records, c.byte_length, c.first_record_offset) for c in chunks] == [
        (0, 0, 20, 9), (101, 1, chunks[1].byte_length, 9), (2, 1, chunks[2].byte_length, 10)]
    assert read_block(data[:20]) == []
    assert find_chunk(chunks, 9) == 1
    # compressed_block_size=0 (the original accepts it): one record per block after the empty one
    _, zero = _write([(0, b"a"), (1, b""), (2, b"c")], block_size=0)
    assert [(c.byte_length_uncompressed, c.num_records) for c in zero] == [(0, 0), (2, 1), (1, 1), (2, 1)]


def test_text_lengths_are_java_string_lengths() -> None:
    assert text_lengths("héllo😀\nabc\n\n".encode()) == [8, 4, 1]
    # bytes that are not UTF-8 count as the U+FFFD characters a decoder makes of them
    assert text_lengths(b"\xff\xfe\n\xe2\x82\n") == [3, 2]


def test_offset_gap_closes_the_block_so_positions_map_to_offsets() -> None:
    records = [(10, b"a"), (11, b"b"), (15, b"c"), (16, b"d"), (20, b"e")]
    data, chunks = _write(records, block_size=1000)
    assert [(c.first_record_offset, c.num_records, c.byte_length_uncompressed) for c in chunks] == [
        (10, 2, 4),
        (15, 2, 4),
        (20, 1, 2),
    ]
    assert find_chunk(chunks, 13) is None
    assert read_block(data[chunks[1].byte_offset : chunks[1].byte_end]) == [b"c", b"d"]


def test_offsets_must_increase() -> None:
    writer = BlockGzipWriter(io.BytesIO(), 100)
    writer.append(5, b"x")
    with pytest.raises(BlockGzipError, match="offsets must increase"):
        writer.append(5, b"y")


def test_output_is_deterministic_and_has_no_timestamp() -> None:
    records = [(o, b"record %d" % o) for o in range(50)]
    first, _ = _write(records, 64)
    second, _ = _write(records, 64)
    assert first == second
    assert first[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # Java's: no flags, mtime 0, OS 255


def test_large_blocks_are_fed_in_pieces_without_changing_the_output() -> None:
    # 3 MiB of records with a 2 MiB block: the 1 MiB feed path runs several times per block.
    value = bytes(range(32, 127)) * 10
    records = [(o, value + b"%d" % o) for o in range(3300)]
    data, chunks = _write(records, block_size=2 * 1024 * 1024)
    assert len(chunks) == 2
    assert sum(c.num_records for c in chunks) == 3300
    assert sum(c.byte_length_uncompressed for c in chunks) == sum(len(v) + 1 for _, v in records)
    assert read_records(data) == [v for _, v in records]


# ------------------------------------------------------------------------------------------ index


def test_index_json_has_the_seed_keys_in_the_seed_order() -> None:
    chunks = [Chunk(2890, 100, 275, 0, 0), Chunk(3121, 123, 325, 275, 100)]
    assert render_index(chunks) == (
        b'{"chunks":[{"byte_length_uncompressed":2890,"num_records":100,"byte_length":275,'
        b'"byte_offset":0,"first_record_offset":0},{"byte_length_uncompressed":3121,"num_records":123,'
        b'"byte_length":325,"byte_offset":275,"first_record_offset":100}]}'
    )
    assert parse_index(render_index(chunks)) == chunks


def test_parse_index_accepts_pretty_printed_json_and_rejects_holes() -> None:
    pretty = (
        '{\n  "chunks": [\n    {"first_record_offset": 7, "byte_offset": 0, "byte_length": 9,\n'
        '     "num_records": 2, "byte_length_uncompressed": 12}\n  ]\n}'
    )
    assert parse_index(pretty) == [Chunk(12, 2, 9, 0, 7)]
    hole = render_index([Chunk(10, 1, 5, 0, 0), Chunk(10, 1, 5, 6, 1)])
    with pytest.raises(BlockGzipError, match="not contiguous at byte 5"):
        parse_index(hole)
    with pytest.raises(BlockGzipError, match="not a Block-GZIP index"):
        parse_index(b'{"blocks": []}')


def test_find_chunk() -> None:
    chunks = [Chunk(1, 3, 1, 0, 100), Chunk(1, 2, 1, 1, 103), Chunk(1, 1, 1, 2, 110)]
    assert [find_chunk(chunks, o) for o in (99, 100, 102, 103, 104, 105, 109, 110, 111)] == [
        None,
        0,
        0,
        1,
        1,
        None,
        None,
        2,
        None,
    ]


# ------------------------------------------------------------------------------------------ names


def test_object_key_uses_the_first_record_date_in_utc() -> None:
    assert (
        object_key("", "system-test", 0, 0, 1456272000000)
        == "2016-02-24/system-test-00000-000000000000.gz"
    )
    # the last millisecond of a day stays in that day; the next one starts the next folder
    assert (
        object_key("archive/", "t", 12, 100, 1456358399999) == "archive/2016-02-24/t-00012-000000000100.gz"
    )
    assert object_key("p/", "t", 3, 7, 1456358400000) == "p/2016-02-25/t-00003-000000000007.gz"
    # Kafka's "no timestamp" (-1)
    assert object_key("", "t", 0, 0, -1) == "1969-12-31/t-00000-000000000000.gz"
    assert (
        index_key("p/2016-02-25/t-00003-000000000007.gz") == "p/2016-02-25/t-00003-000000000007.index.json"
    )


@pytest.mark.parametrize(("prefix", "gz", "cursor"), [
    ("systest", "systest/2016-02-24/t-00001-000000000100.gz", "systest/last_chunk_index.t-00001.txt"),
    ("systest/", "systest/2016-02-24/t-00001-000000000100.gz", "systest/last_chunk_index.t-00001.txt"),
    ("", "2016-02-24/t-00001-000000000100.gz", "last_chunk_index.t-00001.txt"),
    ("a//", "a//2016-02-24/t-00001-000000000100.gz", "a//last_chunk_index.t-00001.txt"),
    ("a/b", "a/b/2016-02-24/t-00001-000000000100.gz", "a/b/last_chunk_index.t-00001.txt"),
])
def test_prefix_joins_the_date_with_one_slash_like_the_original(prefix: str, gz: str, cursor: str) -> None:
    assert object_key(prefix, "t", 1, 100, 1456272000000) == gz
    assert cursor_key(prefix, "t", 1) == cursor
    name = parse_object_key(gz, prefix)
    assert name is not None and (name.gz_key, name.topic, name.partition, name.first_offset) == (gz, "t", 1, 100)
    assert parse_object_key(cursor, prefix) is None


def test_a_prefix_without_slash_does_not_match_longer_names() -> None:
    assert parse_object_key("systest2/2016-02-24/t-00001-000000000100.gz", "systest") is None
    assert parse_object_key("systest2016-02-24/t-00001-000000000100.gz", "systest") is None


def test_parse_object_key() -> None:
    name = parse_object_key("arch/2016-02-24/my-topic-v2-00007-000000001234.index.json", "arch/")
    assert name == ArchiveName("arch/", "2016-02-24", "my-topic-v2", 7, 1234, ".index.json")
    assert name.gz_key == "arch/2016-02-24/my-topic-v2-00007-000000001234.gz"
    assert parse_object_key("2016-02-24/t-123456-1000000000000.gz") == ArchiveName(
        "", "2016-02-24", "t", 123456, 1000000000000, ".gz"
    )
    assert parse_object_key("other/2016-02-24/t-00000-000000000000.gz", "arch/") is None
    assert parse_object_key("arch/x/2016-02-24/t-00000-000000000000.gz", "arch/") is None
    assert parse_object_key("arch/2016-02-24/t-0-0.gz", "arch/") is None
    assert parse_object_key("arch/2016-02-24/t-00000-000000000000.gz.part", "arch/") is None


# ------------------------------------------------------------------------------------------ fixture


@needs_gzip
def test_gzip_command_reads_the_fixture_as_one_stream_of_lines() -> None:
    out = subprocess.run(["gzip", "-dc", str(FIXTURE_GZ)], capture_output=True, check=True).stdout
    assert out == FIXTURE_TEXT
    assert out.count(b"\n") == len(FIXTURE_RECORDS)


@needs_gzip
def test_gzip_command_reads_each_index_range_alone(tmp_path: Path) -> None:
    data = FIXTURE_GZ.read_bytes()
    chunks = parse_index((FIXTURE / "system-test-00000-000000000100.index.json").read_bytes())
    assert [(c.first_record_offset, c.num_records) for c in chunks] == [
        (100, 1), (101, 1), (102, 4), (106, 2), (108, 4)]
    lines = FIXTURE_TEXT.splitlines(keepends=True)
    for chunk in chunks:
        part = tmp_path / f"block-{chunk.first_record_offset}.gz"
        part.write_bytes(data[chunk.byte_offset : chunk.byte_end])
        out = subprocess.run(["gzip", "-dc", str(part)], capture_output=True, check=True).stdout
        start = chunk.first_record_offset - 100
        assert out == b"".join(lines[start : start + chunk.num_records])
        assert len(out) == chunk.byte_length_uncompressed


def test_python_reader_decodes_the_fixture_records() -> None:
    assert read_records(FIXTURE_GZ.read_bytes()) == [v for _, v in FIXTURE_RECORDS]


def test_writer_reproduces_the_fixture() -> None:
    data, chunks = _write(FIXTURE_RECORDS, block_size=40)
    assert render_index(chunks) == (FIXTURE / "system-test-00000-000000000100.index.json").read_bytes()
    # Compressed bytes are zlib's (the same deflate for every zlib 1.2.x/1.3.x; not for zlib-ng).
    assert data == FIXTURE_GZ.read_bytes()


@needs_gzip
def test_gzip_command_reads_a_large_multi_block_file(tmp_path: Path) -> None:
    rng = random.Random(7)
    records = [(o, bytes(rng.randrange(32, 127) for _ in range(rng.randrange(0, 200)))) for o in range(5000)]
    data, chunks = _write(records, block_size=16 * 1024)
    assert len(chunks) > 20
    path = tmp_path / "f.gz"
    path.write_bytes(data)
    out = subprocess.run(["gzip", "-dc", str(path)], capture_output=True, check=True).stdout
    assert out == b"".join(v + b"\n" for _, v in records)


# ------------------------------------------------------------------------------------------ seek


def test_archive_read_returns_the_block_holding_the_offset() -> None:
    # offset 104 is in the block 102-105: the rest of that block
    assert archive_read(str(FIXTURE_GZ), 104) == [b"", b"\x1estarts with RS"]
    assert archive_read(str(FIXTURE_GZ), 100) == [b'{"id":1,"msg":"hello"}']
    # the index path works too; tombstones are b"" in archive_read and None in read_archive_records
    assert archive_read(str(FIXTURE / "system-test-00000-000000000100.index.json"), 103, 1) == [b""]
    assert read_archive_records(str(FIXTURE_GZ), 103, 1) == [(103, None)]


def test_archive_read_count_spans_blocks_and_stops_at_the_file_end() -> None:
    assert read_archive_records(str(FIXTURE_GZ), 105, 4) == [
        (105, b"\x1estarts with RS"),
        (106, b"back\\slash and \r cr"),
        (107, b"\x00\xff\x10\n\x80"),
        (108, b"plain-108"),
    ]
    assert [o for o, _ in read_archive_records(str(FIXTURE_GZ), 109, 100)] == [109, 110, 111]
    assert archive_read(str(FIXTURE_GZ), 111, 0) == []


def test_archive_read_outside_the_file_names_its_range() -> None:
    with pytest.raises(ArchiveReadError, match=r"offset 112 is not in .* \(it holds offsets 100\.\.111\)"):
        archive_read(str(FIXTURE_GZ), 112)


# ------------------------------------------------------------------------------------------ rotation


def test_rotation_policy_rules() -> None:
    policy = RotationPolicy(block_size=10, chunks_per_file=3, flush_size=5, rotate_interval_ms=1000)
    assert not policy.rotate_before(10_000, 10_999)
    assert policy.rotate_before(10_000, 11_000)
    assert not policy.rotate_before(10_000, 9_000)  # timestamps going backwards never rotate
    assert not policy.full(4, 2)
    assert policy.full(5, 0)
    assert policy.full(1, 3)
    off = RotationPolicy(chunks_per_file=16)
    assert not off.rotate_before(0, 10**12)
    assert not off.full(10**9, 15)


# ------------------------------------------------------------------------------------------ bulk path


def _random_records(rng: random.Random, count: int) -> list[tuple[int, bytes | None]]:
    # ASCII with the bytes that need escaping, UTF-8 (2 and 4 bytes, an astral one counts 2) and
    # bytes that are not UTF-8
    tokens = [b"a", b"b", b"c", b" ", b"\n", b"\r", b"\\", b"\x1e", "é".encode(), "😀".encode(), b"\xff", b"\xe2\x82"]
    records: list[tuple[int, bytes | None]] = []
    offset = rng.randrange(0, 1000)
    for _ in range(count):
        offset += 1 if rng.random() < 0.9 else rng.randrange(2, 5)  # some gaps
        roll = rng.random()
        if roll < 0.05:
            value: bytes | None = None
        elif roll < 0.2:
            value = b"".join(rng.choice(tokens) for _ in range(rng.randrange(0, 30)))
        else:
            value = b"x" * rng.randrange(0, 60)
        records.append((offset, value))
    return records


@pytest.mark.parametrize("seed", range(8))
def test_extend_matches_append_byte_for_byte(seed: int) -> None:
    rng = random.Random(seed)
    records = _random_records(rng, 2000)
    block_size = rng.choice([1, 7, 100, 1000, 10_000])
    reference, ref_chunks = _write(records, block_size)

    sink = io.BytesIO()
    writer = BlockGzipWriter(sink, block_size)
    position = 0
    while position < len(records):  # random batch sizes, sometimes mixed with single appends
        step = rng.randrange(1, 300)
        batch = records[position:position + step]
        if rng.random() < 0.2:
            for offset, value in batch:
                writer.append(offset, value)
            consumed = len(batch)
        else:
            consumed = writer.extend([o for o, _ in batch], [v for _, v in batch],
                                     assume_sorted=rng.random() < 0.5)
        assert consumed == len(batch)
        position += consumed
    assert writer.finish() == ref_chunks
    assert sink.getvalue() == reference


def test_extend_stops_when_the_file_has_its_blocks() -> None:
    records = [(o, b"v%09d" % o) for o in range(10)]  # 11-byte lines
    writer = BlockGzipWriter(io.BytesIO(), 22)
    consumed = writer.extend([o for o, _ in records], [v for _, v in records], max_chunks=3)
    assert consumed == 6
    assert [(c.first_record_offset, c.num_records) for c in writer.chunks] == [(0, 2), (2, 2), (4, 2)]
    assert writer.open_block_records == 0 and writer.next_offset == 6


@pytest.mark.parametrize("offsets", [[3, 2], [1, 1], [1, 2, 5, 4]])
def test_extend_rejects_offsets_that_do_not_increase(offsets: list[int]) -> None:
    writer = BlockGzipWriter(io.BytesIO(), 100)
    with pytest.raises(BlockGzipError, match="offsets must increase"):
        writer.extend(offsets, [b"v"] * len(offsets))


def test_archive_read_of_a_missing_file_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "2016-02-24" / "t-00000-000000000000.gz"
    with pytest.raises(ArchiveReadError) as info:
        archive_read(str(missing), 0)
    assert str(info.value) == f"{missing}: {missing.with_suffix('').with_suffix('.index.json')} does not exist"


# ------------------------------------------------------------------------------------------ planning


def _absolute(cuts: list[FileCut], base: int) -> list[tuple[int, int, int, int, int, int]]:
    return [(c.first_offset, c.first_timestamp_ms, c.end_offset, c.num_records, c.num_chunks, base + c.stop)
            for c in cuts]


@pytest.mark.parametrize("seed", range(12))
def test_sizer_cuts_blocks_exactly_like_the_writer(seed: int) -> None:
    rng = random.Random(seed)
    records = _random_records(rng, 1500)
    block_size = rng.choice([1, 9, 120, 2000])
    max_chunks = rng.choice([None, 3, 40])
    writer = BlockGzipWriter(io.BytesIO(), block_size)
    sizer = BlockSizer(block_size)
    position = 0
    while position < len(records):
        batch = records[position:position + rng.randrange(1, 200)]
        offsets, values = [o for o, _ in batch], [v for _, v in batch]
        consumed = writer.extend(offsets, values, max_chunks)
        assert sizer.extend(offsets, values, max_chunks) == consumed
        # the sizer survives a trip through its state (another process, another batch)
        state = BlockState.from_json(json.loads(json.dumps(sizer.state.to_json())))
        sizer = BlockSizer(block_size, state)
        assert sizer.state == writer.state
        position += consumed
        if consumed < len(batch):
            break
    chunks = writer.finish()
    assert sizer.finish() == writer.state
    assert sizer.num_chunks == len(chunks)


@pytest.mark.parametrize("seed", range(12))
def test_planner_resumes_from_its_open_file_anywhere(seed: int) -> None:
    """Planning in pieces, with the planner rebuilt from its serialised open file between
    pieces (as each micro-batch's task does), cuts the same files as planning in one go; and
    the writer, given exactly a planned file's records, makes exactly its blocks."""
    rng = random.Random(seed)
    records = _random_records(rng, 1200)
    timestamps = []
    clock = 1_000
    for _ in records:
        clock += rng.choice([0, 1, 5, 50, -30])  # mostly forward, sometimes backwards
        timestamps.append(clock)
    policy = RotationPolicy(block_size=rng.choice([1, 40, 300]), chunks_per_file=rng.choice([1, 2, 5]),
                               flush_size=rng.choice([0, 7, 90]), rotate_interval_ms=rng.choice([0, 200, 1000]))
    offsets, values = [o for o, _ in records], [v for _, v in records]

    whole = FilePlanner(policy)
    expected = _absolute(whole.feed(offsets, timestamps, values), 0)
    tail = whole.close()

    got: list[tuple[int, int, int, int, int, int]] = []
    open_file: OpenFile | None = None
    position = 0
    while position < len(records):
        stop = min(len(records), position + rng.randrange(1, 150))
        planner = FilePlanner(policy, open_file)
        got += _absolute(planner.feed(offsets[position:stop], timestamps[position:stop], values[position:stop]),
                         position)
        state = planner.open_file
        open_file = None if state is None else OpenFile.from_json(json.loads(json.dumps(state.to_json())))
        position = stop
    assert got == expected
    assert FilePlanner(policy, open_file).close() == tail

    start = 0
    for first, _, end_offset, count, blocks, stop in expected:
        assert offsets[start] == first and stop - start == count and offsets[stop - 1] + 1 == end_offset
        writer = BlockGzipWriter(io.BytesIO(), policy.block_size)
        assert writer.extend(offsets[start:stop], values[start:stop]) == count
        assert len(writer.finish()) == blocks
        start = stop
    assert tail is None or tail.num_records == len(records) - start


def test_rotation_before_the_first_new_record_closes_the_carried_file() -> None:
    policy = RotationPolicy(block_size=100, rotate_interval_ms=1000)
    planner = FilePlanner(policy)
    assert planner.feed([5, 6], [10_000, 10_500], [b"a", b"b"]) == []
    carried = planner.open_file
    assert carried == OpenFile(5, 10_000, BlockState(2, 0, 4, 2, 5, 7))
    cuts = FilePlanner(policy, carried).feed([7, 8], [11_000, 11_001], [b"c", b"d"])
    assert cuts == [FileCut(5, 10_000, 7, 2, 1, stop=0)]
