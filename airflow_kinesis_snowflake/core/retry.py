"""One retry policy: exponential back-off with jitter, a bounded number of attempts, a log line each.

Every call the provider retries itself goes through :func:`call_with_retries`, built on tenacity: throttled
DynamoDB Streams reads (``LimitExceededException``), throttled snapshot Scans, a fan-out
subscription to a shard another subscription still holds (``ResourceInUseException``), the keys
and writes a batch call on a lease table left unprocessed, and a schema change that failed and is
not on the table. Each caller names its :class:`Backoff` (how many calls, the first and the
largest wait) and which errors are worth another call; any other error is raised at once.

Before call ``n + 1`` the wait is drawn uniformly from ``[b / 2, b]``, where
``b = min(first_wait * 2 ** (n - 1), max_wait)`` ("equal jitter"): the waits double up to the cap,
never fall below half the exponential, and calls that failed together (say, the Spark tasks of one
batch throttled at once) come back at different times. Each failed call logs one line at WARNING
with what failed, the attempt ("attempt 2 of 7"), the error and the wait (or "giving up"). When
the attempts run out the last error is raised as it was, so the caller still sees the root cause.

AWS errors botocore can retry itself are left to botocore's ``standard`` retry mode (exponential
back-off with full jitter, a bounded number of attempts), set on the clients
(``Config(retries={"mode": "standard", ...})``): it covers throttling and transient errors of
every call, which no code of ours would do better. The calls above are those it cannot cover: an
error code it does not retry (``ResourceInUseException``), a partial answer rather than an error
(``UnprocessedKeys``), a count of throttles that its silent retries would hide (the snapshot's
Scan runs on a client with one attempt), or a statement whose outcome the table decides.

This module has no Airflow import: it runs on Spark executors too, where tenacity is one of the
job's libraries (``docs/install.md``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_base, wait_exponential, wait_random_exponential

T = TypeVar("T")

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backoff:
    """How often a call is made and how long is waited in between.

    :param attempts: the most calls, the first included (at least 1).
    :param first_wait: the upper bound of the wait before the second call, in seconds (above 0).
    :param max_wait: the most any wait lasts, in seconds (at least ``first_wait``).
    """

    attempts: int
    first_wait: float
    max_wait: float

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"a retry policy makes at least 1 attempt, got attempts={self.attempts}")
        if not (math.isfinite(self.first_wait) and self.first_wait > 0):
            raise ValueError(f"a retry policy's first wait is a positive number of seconds, got {self.first_wait}")
        if not (math.isfinite(self.max_wait) and self.max_wait >= self.first_wait):
            raise ValueError(
                f"a retry policy's max_wait ({self.max_wait}) is a number of seconds at least its "
                f"first_wait ({self.first_wait})"
            )

    def ceiling(self, retry: int) -> float:
        """The upper bound of the wait before retry ``retry`` (1: the second call); the lower is half of it."""
        if retry < 1:
            raise ValueError(f"retries are counted from 1, got {retry}")
        return min(self.first_wait * 2.0 ** min(retry - 1, 1023), self.max_wait)

    def wait(self) -> wait_base:
        """The tenacity wait strategy: half the exponential, plus a uniform draw up to the other half."""
        half, half_max = self.first_wait / 2, self.max_wait / 2
        return wait_exponential(multiplier=half, max=half_max) + wait_random_exponential(multiplier=half, max=half_max)


def call_with_retries(
    fn: Callable[[], T],
    *,
    policy: Backoff,
    retry_on: Callable[[BaseException], bool],
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    log: logging.Logger = LOG,
) -> T:
    """Call ``fn`` until it returns, retrying the errors ``retry_on`` accepts, at most ``policy.attempts`` times.

    :param fn: the call; it takes no argument (close over what it needs).
    :param policy: the number of calls and the waits.
    :param retry_on: whether an error ``fn`` raised is worth another call.
    :param what: what is called, for the log lines ("GetRecords on shard X of table T").
    :param sleep: waits the given seconds between calls.
    :param log: where the line of each failed call goes.
    :returns: what ``fn`` returned.
    :raises BaseException: ``fn``'s error: at once when ``retry_on`` refuses it, the last one when
        every attempt failed.
    """

    def before_sleep(state: RetryCallState) -> None:
        log.warning(
            "%s failed (attempt %d of %d): %s; retrying in %.2f s",
            what,
            state.attempt_number,
            policy.attempts,
            _error(state),
            state.upcoming_sleep,
        )

    def give_up(state: RetryCallState) -> T:
        log.warning(
            "%s failed (attempt %d of %d): %s; giving up", what, state.attempt_number, policy.attempts, _error(state)
        )
        assert state.outcome is not None
        result: T = state.outcome.result()  # raises the last error, with its traceback
        return result

    retrying = Retrying(
        stop=stop_after_attempt(policy.attempts),
        wait=policy.wait(),
        retry=retry_if_exception(retry_on),
        before_sleep=before_sleep,
        retry_error_callback=give_up,
        sleep=sleep,
        reraise=True,
    )
    return retrying(fn)


def _error(state: RetryCallState) -> str:
    error = state.outcome.exception() if state.outcome is not None else None
    if error is None:
        return "no error"
    return str(error) or type(error).__name__
