"""A shard's GetRecords budget: 5 calls and 2 MiB per second, a page paid for once it arrives."""

from __future__ import annotations

import itertools
import random

import pytest

from airflow_kinesis_snowflake.core.sources.pacing import (
    SHARD_READ_BYTES_PER_SECOND,
    ShardReadPacer,
    TokenBucket,
    page_bytes,
)

MIB = 1 << 20


class Clock:
    """Seconds that move only when the test moves them."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_first_call_does_not_wait() -> None:
    assert ShardReadPacer(clock=Clock()).before_call() == 0


def test_calls_are_spaced_a_fifth_of_a_second_apart() -> None:
    pacer = ShardReadPacer(clock=Clock())  # the clock stands still: every wait counts as elapsed
    waits = []
    for _ in range(6):
        waits.append(pacer.before_call())
        pacer.page_read(100)
    assert waits == [0.0] + [0.2] * 5


def test_a_call_made_after_the_interval_does_not_wait() -> None:
    clock = Clock()
    pacer = ShardReadPacer(clock=clock)
    pacer.before_call()
    pacer.page_read(1000)
    clock.now += 0.25
    assert pacer.before_call() == 0


def test_after_a_10_mib_page_the_next_call_waits_5_seconds() -> None:
    clock = Clock()
    pacer = ShardReadPacer(clock=clock)
    assert pacer.before_call() == 0
    clock.now += 0.5  # the page takes half a second to arrive
    pacer.page_read(10 * MIB)
    assert pacer.before_call() == pytest.approx(5.0)


def test_a_1_mib_page_makes_the_next_call_wait_half_a_second_not_a_fifth() -> None:
    clock = Clock()
    pacer = ShardReadPacer(clock=clock)
    pacer.before_call()
    pacer.page_read(MIB)
    clock.now += 0.1
    assert pacer.before_call() == pytest.approx(0.4)


def test_an_idle_spell_saves_up_no_burst() -> None:
    clock = Clock()
    pacer = ShardReadPacer(clock=clock)
    pacer.before_call()
    pacer.page_read(0)
    clock.now += 60
    assert pacer.before_call() == 0
    pacer.page_read(4 * MIB)
    assert pacer.before_call() == pytest.approx(2.0)
    pacer.page_read(0)
    assert pacer.before_call() == pytest.approx(0.2)


@pytest.mark.parametrize("seed", range(5))
def test_before_every_call_the_bytes_read_stay_within_2_mib_per_second_and_calls_within_5(seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    pacer = ShardReadPacer(clock=clock)
    calls: list[float] = []
    read = 0
    first: float | None = None
    for _ in range(200):
        clock.now += rng.choice([0.0, 0.01, 0.3, 2.0])  # the caller's own work between calls
        clock.now += pacer.before_call()
        first = clock.now if first is None else first
        assert read <= SHARD_READ_BYTES_PER_SECOND * (clock.now - first) + 1e-6
        calls.append(clock.now)
        clock.now += rng.uniform(0.0, 0.3)  # the page on its way
        size = rng.choice([0, 1000, 300_000, 2 * MIB, 10 * MIB])
        pacer.page_read(size)
        read += size
    assert all(later - earlier >= 0.2 - 1e-9 for earlier, later in itertools.pairwise(calls))


def test_a_clock_that_goes_back_does_not_shorten_a_wait() -> None:
    clock = Clock()
    pacer = ShardReadPacer(clock=clock)
    pacer.before_call()
    pacer.page_read(2 * MIB)
    clock.now -= 5
    assert pacer.before_call() == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"calls_per_second": 0}, "calls_per_second"), ({"bytes_per_second": -1.0}, "bytes_per_second")],
)
def test_a_pace_without_a_positive_rate_is_refused_naming_it(kwargs: dict[str, float], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        ShardReadPacer(clock=Clock(), **kwargs)


def test_a_page_cannot_have_a_negative_size() -> None:
    with pytest.raises(ValueError, match="negative size"):
        ShardReadPacer(clock=Clock()).page_read(-1)


def test_a_token_bucket_fills_at_its_rate_up_to_its_capacity_and_may_go_into_debt() -> None:
    bucket = TokenBucket(rate=10, capacity=5, at=0.0)
    assert bucket.level(0.0) == 5
    bucket.take(8, 0.0)
    assert bucket.level(0.0) == -3
    assert bucket.seconds_until(0, 0.0) == pytest.approx(0.3)
    assert bucket.level(100.0) == 5
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(rate=0, capacity=1)
    with pytest.raises(ValueError, match="capacity"):
        TokenBucket(rate=1, capacity=-1)


def test_a_page_counts_each_records_data_and_partition_key() -> None:
    records = [{"Data": b"12345", "PartitionKey": "ab"}, {"Data": b"", "PartitionKey": "\u00e9"}]
    assert page_bytes(records) == 5 + 2 + 0 + 2
    assert page_bytes([]) == 0
