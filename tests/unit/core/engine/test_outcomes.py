"""A continuous submission's batches reported as each commits (core/engine/outcomes.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from airflow_kinesis_snowflake.core.engine.outcomes import OutcomeWatcher


def test_each_outcome_is_handed_on_once_in_order_and_the_last_ones_after_the_submission_ends() -> None:
    recorded: list[str] = []
    handed: list[str] = []
    watcher = OutcomeWatcher(lambda: recorded, handed.append, interval=3600)  # only the polls below

    with watcher:
        recorded += ["b1", "b2"]
        assert watcher.poll() == 2
        assert watcher.poll() == 0  # nothing new: nothing handed twice
        recorded.append("b3")  # committed just before the application ended

    assert handed == ["b1", "b2", "b3"] and watcher.handed == 3


def test_outcomes_recorded_while_the_submission_runs_are_handed_on_before_it_ends() -> None:
    recorded: list[str] = []
    seen = threading.Event()

    def on_outcome(outcome: str) -> None:
        seen.set()

    with OutcomeWatcher(lambda: list(recorded), on_outcome, interval=0.01):
        recorded.append("b1")
        # The submission is still running: the watcher's own thread reads the outcome meanwhile.
        assert seen.wait(timeout=30), "the committed batch was not reported while the submission ran"


def test_a_failed_read_is_tried_again_and_a_failed_report_neither_fails_nor_repeats(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reads: Iterator[Exception | list[str]] = iter([RuntimeError("warehouse suspended"), ["b1", "b2"], ["b1", "b2"]])
    handed: list[str] = []

    def read() -> list[str]:
        got = next(reads)
        if isinstance(got, Exception):
            raise got
        return got

    def on_outcome(outcome: str) -> None:
        handed.append(outcome)
        if outcome == "b1":
            raise ValueError("metrics backend down")

    watcher = OutcomeWatcher(read, on_outcome, interval=3600)
    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.engine.outcomes"):
        assert watcher.poll() == 0
        assert watcher.poll() == 2
        assert watcher.poll() == 0

    assert handed == ["b1", "b2"]
    assert "Could not read the submission's batch outcomes" in caplog.text
    assert "Could not report a committed batch" in caplog.text
