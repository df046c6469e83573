"""Where a Lite micro-batch's range ends under ``pubsublite.partition_flow_control.bytes``."""

from __future__ import annotations

import math
import random
from itertools import accumulate

import pytest

from pubsub_connect.io.pubsublite.offsets import _GUESSED_PROBES, bounded_end


class Sizes:
    """A partition's messages by size, as ``ComputeMessageStats`` sees them; counts look-ups."""

    def __init__(self, sizes: list[int]):
        self.prefix = [0, *accumulate(sizes)]
        self.lookups = 0

    def range_bytes(self, start: int) -> object:
        def of(end: int) -> int:
            self.lookups += 1
            return self.prefix[end] - self.prefix[start]
        return of

    def expected(self, start: int, end: int, budget: int) -> int:
        """The rule, spelled out: the last end whose range fits, never less than one message."""
        fitting = [e for e in range(start + 1, end + 1) if self.prefix[e] - self.prefix[start] <= budget]
        return max(fitting, default=start + 1)


@pytest.mark.parametrize("seed", range(40))
def test_the_end_is_the_last_that_fits_whatever_the_sizes(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randrange(1, 3000)
    shape = seed % 4
    if shape == 0:
        sizes = [1030] * n
    elif shape == 1:
        sizes = [rng.randrange(1, 5000) for _ in range(n)]
    elif shape == 2:  # mostly small, a few huge: the mean misleads
        sizes = [rng.choice([10, 10, 10, 10, 1_000_000]) for _ in range(n)]
    else:
        sizes = [rng.choice([0, 0, 7, 300]) for _ in range(n)]
    messages = Sizes(sizes)
    start = rng.randrange(0, n)
    end = rng.randrange(start, n + 1)
    budget = rng.choice([1, 250, 20_000, 1_000_000, rng.randrange(1, 1 + messages.prefix[-1] or 2)])
    expected = end if end <= start + 1 else messages.expected(start, end, budget)
    assert bounded_end(messages.range_bytes(start), start, end, budget) == expected
    assert messages.lookups <= 1 + _GUESSED_PROBES + math.ceil(math.log2(max(end - start, 2)))


def test_messages_of_one_size_take_three_lookups_not_a_bisection() -> None:
    messages = Sizes([1030] * 100_000)
    end = bounded_end(messages.range_bytes(5), 5, 100_000, 20_000_000)
    assert end == 5 + 20_000_000 // 1030 == 19_422
    assert messages.lookups == 3  # the whole range, the guess, and the message after it


def test_a_range_within_the_budget_takes_one_lookup_and_one_message_never_waits() -> None:
    within = Sizes([100] * 50)
    assert bounded_end(within.range_bytes(0), 0, 50, 5000) == 50 and within.lookups == 1
    huge = Sizes([10_000_000, 5])
    assert bounded_end(huge.range_bytes(0), 0, 2, 250) == 1
