"""How often, and how much, one shard may be read with GetRecords: a token bucket over calls and bytes.

A Kinesis shard serves at most 5 GetRecords calls per second and 2 MiB of reads per second to all
its shared-throughput consumers together; a single call may return up to 10 MiB, after which the
shard throttles that shard's calls until the reads are back within the rate (AWS: "if a call
returns 10 MB, subsequent calls made within the next 5 seconds throw
ProvisionedThroughputExceededException"). :class:`ShardReadPacer` says how long to wait before the
next call so that neither limit is passed, and is told the size of each page once it arrives.

It is pure: it takes a clock and returns the seconds to wait, and the caller sleeps. Its time
never goes backwards and counts the waits it asked for as elapsed, so a clock that a test holds
still gives the same waits as one that moves with the sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: GetRecords calls a shard serves per second.
SHARD_READ_CALLS_PER_SECOND = 5.0
#: Bytes a shard serves to GetRecords per second (2 MiB).
SHARD_READ_BYTES_PER_SECOND = float(2 << 20)


@dataclass
class TokenBucket:
    """Tokens that flow in at ``rate`` per second up to ``capacity``; taking may leave a debt.

    :param rate: tokens per second, above 0.
    :param capacity: the most tokens the bucket holds (what an idle spell can save up), at least 0.
    :param tokens: the tokens in the bucket now (default: full); negative is a debt.
    :param at: the time of ``tokens``, in the clock's seconds.
    """

    rate: float
    capacity: float
    tokens: float | None = None
    at: float = 0.0

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"a token bucket's rate must be above 0 per second, got {self.rate}")
        if not self.capacity >= 0:
            raise ValueError(f"a token bucket's capacity must be at least 0, got {self.capacity}")
        if self.tokens is None:
            self.tokens = self.capacity

    def level(self, now: float) -> float:
        """The tokens at ``now`` (not before the bucket's own time)."""
        assert self.tokens is not None
        return min(self.capacity, self.tokens + max(0.0, now - self.at) * self.rate)

    def seconds_until(self, needed: float, now: float) -> float:
        """How long after ``now`` the bucket holds ``needed`` tokens (0 if it does)."""
        return max(0.0, (needed - self.level(now)) / self.rate)

    def take(self, amount: float, now: float) -> None:
        """Take ``amount`` tokens at ``now``; the bucket may go into debt."""
        self.tokens, self.at = self.level(now) - amount, max(self.at, now)


@dataclass
class ShardReadPacer:
    """The read budget of one shard: :meth:`before_call` says how long to wait, :meth:`page_read` charges a page.

    Calls are spaced ``1 / calls_per_second`` apart (a bucket of one call: an idle spell saves up
    no burst of calls). Bytes are charged when a page arrives, as their size is known only then;
    the next call waits until the bytes read so far are paid back at ``bytes_per_second`` (a
    bucket of no bytes: no call is made while the shard would still count the reads as over its
    rate). So, before every call, the bytes of all earlier pages are at most ``bytes_per_second``
    times the time since the first call.

    :param calls_per_second: GetRecords calls per second (default: the shard's limit).
    :param bytes_per_second: bytes of pages per second (default: the shard's limit).
    :param clock: monotonic seconds.
    """

    calls_per_second: float = SHARD_READ_CALLS_PER_SECOND
    bytes_per_second: float = SHARD_READ_BYTES_PER_SECOND
    clock: Callable[[], float] = time.monotonic
    _calls: TokenBucket = field(init=False, repr=False)
    _bytes: TokenBucket = field(init=False, repr=False)
    _now: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("calls_per_second", "bytes_per_second"):
            if not getattr(self, name) > 0:
                raise ValueError(f"a shard's read pace needs {name} above 0, got {getattr(self, name)}")
        self._now = self.clock()
        self._calls = TokenBucket(self.calls_per_second, capacity=1.0, at=self._now)
        self._bytes = TokenBucket(self.bytes_per_second, capacity=0.0, at=self._now)

    def _time(self) -> float:
        self._now = max(self._now, self.clock())
        return self._now

    def before_call(self) -> float:
        """The seconds to wait before the next call; the call is counted as made after that wait."""
        now = self._time()
        wait = max(self._calls.seconds_until(1.0, now), self._bytes.seconds_until(0.0, now))
        self._now = now + wait
        # The wait was worked out to fill the bucket to one call: a rounding error is no debt.
        self._calls.tokens, self._calls.at = max(1.0, self._calls.level(self._now)), self._now
        self._calls.take(1.0, self._now)
        return wait

    def page_read(self, size: int) -> None:
        """Charge a page of ``size`` bytes, as it arrives."""
        if size < 0:
            raise ValueError(f"a page cannot have a negative size, got {size}")
        self._bytes.take(float(size), self._time())


def page_bytes(records: Iterable[Mapping[str, Any]]) -> int:
    """The bytes a GetRecords page counts against its shard: each record's data and partition key."""
    return sum(len(r["Data"]) + len(str(r.get("PartitionKey", "")).encode()) for r in records)
