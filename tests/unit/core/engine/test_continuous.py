"""The engine's continuous loop (core/engine/continuous.py): batches back to back, idle pauses, an end.

The loop is the same for every source; each source's run of the protocol is given as ``run_once``.
Here it is a list of scripted outcomes and a clock the test moves.
"""

from __future__ import annotations

import logging

import pytest

from airflow_kinesis_snowflake.core.engine.continuous import Pace, pause_after, run_back_to_back

PACE = Pace("dag/run/1/abcd", max_runtime_seconds=60, idle_seconds=2)


class Script:
    """Batches that take ``took`` seconds each and found something when their value is true."""

    def __init__(self, *found: bool | None, took: float = 5.0) -> None:
        self.found = list(found)
        self.took = took
        self.now = 0.0
        self.slept: list[float] = []
        self.ran = 0

    def run_once(self) -> bool | None:
        self.ran += 1
        self.now += self.took
        return self.found.pop(0) if self.found else False

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def test_a_busy_source_runs_batch_after_batch_without_a_pause_until_the_runtime_is_up() -> None:
    script = Script(*[True] * 20, took=25.0)

    outcomes = run_back_to_back(script.run_once, bool, PACE, what="orders-app", clock=script.clock, sleep=script.sleep)

    assert outcomes == [True, True, True]  # at 25 s and 50 s another starts; at 75 s none does
    assert script.slept == []


def test_a_quiet_source_is_asked_again_after_the_idle_pause_never_past_the_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = Script(took=9.0)

    with caplog.at_level(logging.INFO, logger="airflow_kinesis_snowflake.core.engine.continuous"):
        outcomes = run_back_to_back(
            script.run_once, bool, PACE, what="table Orders", clock=script.clock, sleep=script.sleep
        )

    assert len(outcomes) == script.ran == 6  # 11 s per idle round: the sixth ends at 64 s
    assert script.slept == [2, 2, 2, 2, 2]
    assert "table Orders: continuous run ends after 6 batches (max runtime reached)" in caplog.text


def test_a_batch_that_returns_none_ends_the_run_at_once() -> None:
    script = Script(True, None, True)

    outcomes = run_back_to_back(script.run_once, bool, PACE, what="orders-app", clock=script.clock, sleep=script.sleep)

    assert outcomes == [True] and script.ran == 2


def test_the_pause_after_a_batch() -> None:
    assert pause_after(True, elapsed=10, pace=PACE) == 0.0
    assert pause_after(False, elapsed=10, pace=PACE) == 2
    assert pause_after(False, elapsed=59.5, pace=PACE) == 0.5  # never past the end
    assert pause_after(True, elapsed=60, pace=PACE) is None


def test_a_pace_without_an_idle_pause_or_a_runtime_is_refused() -> None:
    with pytest.raises(ValueError, match="idle_seconds must be more than 0, not 0"):
        Pace("owner", 60, idle_seconds=0)
    with pytest.raises(ValueError, match="max_runtime_seconds must be more than 0, not -1"):
        Pace("owner", -1)
