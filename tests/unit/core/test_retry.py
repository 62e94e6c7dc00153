"""The one retry policy: growing jittered waits, a bounded number of attempts, a log line each."""

from __future__ import annotations

import logging
import re

import pytest

from airflow_kinesis_snowflake.core.retry import Backoff, call_with_retries

POLICY = Backoff(attempts=5, first_wait=1.0, max_wait=4.0)
WHAT = "GetRecords on shard shardId-0 of table T"


class Throttled(Exception):
    """The error the calls below retry."""


class Denied(Exception):
    """An error they do not retry."""


class Flaky:
    """Fails with ``errors`` in turn, then answers ``"done"``; counts its calls."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def throttled(err: BaseException) -> bool:
    return isinstance(err, Throttled)


def run(fn: Flaky, waits: list[float], policy: Backoff = POLICY) -> str:
    return call_with_retries(fn, policy=policy, retry_on=throttled, what=WHAT, sleep=waits.append)


def test_the_listed_errors_are_retried_after_waits_that_grow_with_jitter() -> None:
    fn = Flaky(Throttled("1"), Throttled("2"), Throttled("3"), Throttled("4"))
    waits: list[float] = []

    assert run(fn, waits) == "done"

    assert fn.calls == 5 and len(waits) == 4
    # Equal jitter: the wait before retry n is drawn from [b/2, b], b = min(1 * 2**(n-1), 4).
    ceilings = [1.0, 2.0, 4.0, 4.0]
    assert [POLICY.ceiling(n) for n in range(1, 5)] == ceilings
    for wait, ceiling in zip(waits, ceilings, strict=True):
        assert ceiling / 2 <= wait <= ceiling
    # Below the cap each wait is at least the one before it.
    assert waits[0] <= waits[1] <= waits[2]
    # Jitter: the waits are drawn, not the bare exponential, and another run draws others.
    assert waits[:3] != [0.5, 1.0, 2.0] and waits[:3] != ceilings[:3]
    again: list[float] = []
    run(Flaky(Throttled("1"), Throttled("2"), Throttled("3"), Throttled("4")), again)
    assert again != waits


def test_after_the_last_attempt_the_root_cause_is_raised_as_it_was() -> None:
    errors = [Throttled(f"throttled {n}") for n in range(1, 8)]
    fn = Flaky(*errors)
    waits: list[float] = []

    with pytest.raises(Throttled) as raised:
        run(fn, waits)

    assert raised.value is errors[POLICY.attempts - 1]
    assert fn.calls == POLICY.attempts and len(waits) == POLICY.attempts - 1


def test_other_errors_are_raised_at_once_without_a_wait_or_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    denied = Denied("AccessDeniedException")
    fn = Flaky(Throttled("throttled"), denied)
    waits: list[float] = []

    with caplog.at_level(logging.DEBUG, logger="airflow_kinesis_snowflake.core.retry"):
        with pytest.raises(Denied) as raised:
            run(fn, waits)

    assert raised.value is denied
    assert fn.calls == 2 and len(waits) == 1
    assert len(caplog.records) == 1  # the throttle's line, none for the refusal


def test_a_single_attempt_policy_never_waits() -> None:
    fn = Flaky(Throttled("throttled"))
    waits: list[float] = []
    with pytest.raises(Throttled):
        run(fn, waits, Backoff(attempts=1, first_wait=1.0, max_wait=1.0))
    assert fn.calls == 1 and waits == []


def test_each_failed_attempt_logs_what_failed_the_attempt_the_error_and_the_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fn = Flaky(*(Throttled(f"LimitExceededException {n}") for n in range(1, 6)))
    waits: list[float] = []

    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.retry"):
        with pytest.raises(Throttled):
            run(fn, waits)

    lines = [r.getMessage() for r in caplog.records]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    assert len(lines) == POLICY.attempts
    for n, (line, wait) in enumerate(zip(lines, waits, strict=False), start=1):
        assert line == f"{WHAT} failed (attempt {n} of 5): LimitExceededException {n}; retrying in {wait:.2f} s"
    assert lines[-1] == f"{WHAT} failed (attempt 5 of 5): LimitExceededException 5; giving up"


def test_a_call_that_succeeds_at_once_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="airflow_kinesis_snowflake.core.retry"):
        assert run(Flaky(), []) == "done"
    assert caplog.records == []


def test_waits_at_the_cap_stay_jittered_within_it() -> None:
    policy = Backoff(attempts=40, first_wait=0.5, max_wait=2.0)
    waits: list[float] = []
    run(Flaky(*(Throttled("t") for _ in range(39))), waits, policy)
    capped = waits[2:]
    assert all(1.0 <= w <= 2.0 for w in capped)
    assert len(set(capped)) > 1
    assert sum(waits) <= 0.5 + 1.0 + 2.0 * 37


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"attempts": 0, "first_wait": 1.0, "max_wait": 1.0}, "at least 1 attempt, got attempts=0"),
        ({"attempts": 3, "first_wait": 0.0, "max_wait": 1.0}, "first wait is a positive number of seconds, got 0.0"),
        ({"attempts": 3, "first_wait": 2.0, "max_wait": 1.0}, "max_wait (1.0) is a number of seconds at least its"),
        ({"attempts": 3, "first_wait": 1.0, "max_wait": float("inf")}, "max_wait (inf)"),
    ],
)
def test_a_policy_out_of_bounds_is_refused_naming_the_setting(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Backoff(**kwargs)  # type: ignore[arg-type]
