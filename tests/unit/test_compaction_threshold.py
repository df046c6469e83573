"""Below which size maintenance's compaction rewrites a file: a few turns' gain of its table, so
that a kept table's files are rewritten a few times at most, not on every turn up to 1 GiB."""

from __future__ import annotations

from pubsub_connect.pipelines.maintenance import (
    COMPACTION_FLOOR_BYTES,
    COMPACTION_GROWTH_FACTOR,
    compaction_threshold,
)

MIB = 1024**2


def test_the_threshold_is_a_few_turns_gain_and_never_below_the_floor() -> None:
    assert (COMPACTION_GROWTH_FACTOR, COMPACTION_FLOOR_BYTES) == (4, 4 * MIB)
    assert compaction_threshold(10 * MIB, None) is None  # no earlier compaction known: a whole one
    last = 100 * MIB
    assert [compaction_threshold(last + gained, last) for gained in (-5 * MIB, 0, MIB, 2 * MIB, 300 * MIB)] == [
        4 * MIB, 4 * MIB, 4 * MIB, 8 * MIB, 1200 * MIB]


def test_at_a_steady_gain_each_file_grows_to_four_turns_and_stays() -> None:
    """Delta's bin-packing merges every file below the threshold into one (up to 1 GiB); played
    over turns at a steady gain, the open file grows by a turn's gain to four and is then kept."""
    gain, files, written = 10 * MIB, [], 0
    for _ in range(12):
        after_last = sum(files)
        files.append(gain)  # the turn's small files, as one
        below = compaction_threshold(sum(files), after_last)
        assert below is not None
        merged = [size for size in files if size < below]
        if len(merged) > 1:
            files = [size for size in files if size >= below] + [sum(merged)]
            written += sum(merged)
    assert sorted(files) == [40 * MIB] * 3
    assert written == 27 * gain  # 2g + 3g + 4g per file: each byte rewritten 2.25 times, not on every turn
