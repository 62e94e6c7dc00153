"""Continuous mode (core/continuous.py): micro-batches back to back, each the whole protocol.

The decisions are checked with plain values; the loop runs the real protocol against the session's
moto and fakesnow servers with the job of tests/unit/core/test_batch.py (no Spark) and a clock the
test moves.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from airflow_kinesis_snowflake.core.batch import BatchOutcome, BatchSettings
from airflow_kinesis_snowflake.core.continuous import ContinuousRun, idle, run_continuously
from airflow_kinesis_snowflake.core.engine.continuous import pause_after
from airflow_kinesis_snowflake.core.engine.wire import decode, encode
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.model import BatchResult, Destination
from airflow_kinesis_snowflake.core.planning import BatchPlan
from airflow_kinesis_snowflake.core.state.marks import set_reset_mark
from airflow_kinesis_snowflake.core.state.metadata import ResetMark
from tests.conftest import put_json
from tests.emulators import Emulators
from tests.unit.core.test_batch import RECORDS, BotoStream, Connector, Submit, batch_result, outcome_of

SETTINGS = BatchSettings(
    stream_name="orders",
    application_name="orders-app",
    destination=Destination("ANALYTICS", "RAW", "ORDERS"),
    connector_id="orders",
    on_unknown_key=UnknownKeys.FAIL,
    max_shards_per_batch=4,
)
RUN = ContinuousRun(SETTINGS, "eu-west-1", "dag/run/1/abcd", max_runtime_seconds=60, idle_seconds=2)


def test_a_run_travels_as_one_argument_and_comes_back_the_same() -> None:
    text = encode(RUN)

    assert ContinuousRun.from_work(decode(text)) == RUN
    assert " " not in text and "orders-app" not in text  # one opaque argument
    with pytest.raises(ValueError, match="not a job's encoded work"):
        decode("not base64!")


def test_the_next_micro_batch_starts_at_once_after_records_and_after_a_short_sleep_when_idle() -> None:
    busy, quiet, nothing = outcome_of(batch_result(False)), outcome_of(replace_records(0)), outcome_of(None)

    assert not idle(busy) and idle(quiet) and idle(nothing)
    assert pause_after(not idle(busy), elapsed=10, pace=RUN.pace) == 0.0
    assert pause_after(not idle(quiet), elapsed=10, pace=RUN.pace) == 2  # idle_seconds
    assert pause_after(not idle(nothing), elapsed=59.5, pace=RUN.pace) == 0.5  # never past the end
    assert pause_after(not idle(busy), elapsed=60, pace=RUN.pace) is None  # no micro-batch starts after max_runtime
    assert pause_after(not idle(nothing), elapsed=61, pace=RUN.pace) is None


def test_a_run_without_an_idle_pause_or_a_runtime_is_refused() -> None:
    with pytest.raises(ValueError, match="idle_seconds must be more than 0, not 0"):
        replace(RUN, idle_seconds=0)
    with pytest.raises(ValueError, match="max_runtime_seconds must be more than 0, not -1"):
        replace(RUN, max_runtime_seconds=-1)


def replace_records(records: int) -> BatchResult:
    result = batch_result(False)
    return replace(result, shards=tuple(replace(s, records_read=records) for s in result.shards))


class Clock:
    """A monotonic clock that moves ``step`` seconds per reading, and by what the loop sleeps."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step
        self.slept: list[float] = []

    def __call__(self) -> float:
        self.now += self.step
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def connector(emulators: Emulators) -> Connector:
    return Connector(emulators)


def run(connector: Connector, clock: Clock, submit: Submit | None = None, max_runtime: float = 6) -> list[BatchOutcome]:
    spec = ContinuousRun(connector.settings, "us-east-1", "tests/continuous", max_runtime, idle_seconds=1)
    return run_continuously(
        spec,
        dynamodb=connector.dynamodb,
        stream=BotoStream(connector.kinesis),
        connect_snowflake=connector.emulators.snowflake_connect,
        submit=submit or connector.job,
        clock=clock,
        sleep=clock.sleep,
    )


def test_micro_batches_run_back_to_back_each_with_its_own_cut_off_and_batch(connector: Connector) -> None:
    clock = Clock(step=1)
    later = list(range(RECORDS, RECORDS + 10))

    def job(plan: BatchPlan) -> BatchResult:
        result = connector.job(plan)
        if len(connector.plans) == 1:  # records arrive while the first micro-batch runs
            time.sleep(0.01)
            put_json(connector.kinesis, connector.stream, [{"id": i} for i in later])
        return result

    outcomes = run(connector, clock, job)

    # The first loads what was there, the second what arrived meanwhile, then idle until the end.
    loaded = [sum(s.records_read for s in o.result.shards) if o.result else 0 for o in outcomes]
    assert loaded[:2] == [RECORDS, len(later)] and set(loaded[2:]) == {0}
    cutoffs = [plan.cutoff for plan in connector.plans]
    assert cutoffs == sorted(cutoffs) and len(set(cutoffs)) == len(cutoffs)  # cut-off = now, each time
    assert len({plan.batch_id for plan in connector.plans}) == len(connector.plans)
    assert connector.ids() == list(range(RECORDS + len(later)))  # each record once
    # A short sleep after each idle micro-batch, but the last: max_runtime ended the run there.
    assert len(clock.slept) == len(outcomes) - 2 - 1
    assert set(clock.slept) <= {1} and clock.now >= 6  # ... and no micro-batch after max_runtime
    assert connector.checkpoints() == connector.tips() == connector.ledger()
    assert set(connector.owners().values()) == {None}  # every lease released between micro-batches
    workers = [i for i in connector.dynamodb.scan(TableName=connector.app)["Items"] if i["item_type"]["S"] == "WORKER"]
    # One owner for the application: at most one worker item, not one per micro-batch.
    assert {w["worker_id"]["S"] for w in workers} <= {"tests/continuous"}


def test_a_reset_starting_ends_the_run_after_the_micro_batch_that_committed(connector: Connector) -> None:
    def job(plan: BatchPlan) -> BatchResult:
        result = connector.job(plan)
        now = time.time()
        set_reset_mark(connector.dynamodb, connector.app, ResetMark("reset/elsewhere", "delete_table", now, now + 600))
        return result

    outcomes = run(connector, Clock(step=1), job, max_runtime=600)

    assert len(outcomes) == 1 and len(connector.plans) == 1
    assert connector.ids() == list(range(RECORDS))
