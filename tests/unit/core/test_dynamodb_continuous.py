"""Continuous mode of a DynamoDB table (core/dynamodb_continuous.py): sync runs back to back, each a whole run.

The decisions are checked with plain values; the loop runs the real sync against the session's moto
and fakesnow servers, in this process (no Spark), with a clock the test moves: the workload changes
the table while the loop waits, and the Snowflake table ends equal to a full Scan.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_kinesis_snowflake.core.dynamodb_continuous import (
    TableContinuousRun,
    did_something,
    summary_of_results,
    sync_continuously,
)
from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchResult
from airflow_kinesis_snowflake.core.dynamodb_sync import TableOutcome, TableSync
from airflow_kinesis_snowflake.core.engine.continuous import Pace, pause_after
from airflow_kinesis_snowflake.core.engine.wire import decode, encode
from airflow_kinesis_snowflake.core.load.dynamodb_rows import KeyAttribute, Layout
from airflow_kinesis_snowflake.core.load.dynamodb_sink import Deletes, DynamoDBTarget, KeyColumn, MergeResult
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import OnGap, SnapshotMode, StreamStart, SyncSettings
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateSettings
from tests.emulators import Emulators
from tests.integration.core.test_dynamodb_sync import client, destination_rows, make_source, source_items

SYNC = TableSync(
    application_name="orders-ddb",
    table="orders.v2",
    stream_arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders.v2/stream/2026-01-01T00:00:00.000",
    target=DynamoDBTarget(
        Destination("ANALYTICS", "RAW", "ORDERS_V2"),
        "orders.v2",
        (KeyColumn("PK", "VARCHAR"), KeyColumn("SK", "NUMBER(38, 0)")),
        Layout.UNPACKED,
        Deletes.SOFT,
    ),
    keys=(KeyAttribute("pk", "S"), KeyAttribute("sk", "N")),
    settings=SyncSettings(
        snapshot=SnapshotMode.SKIP,
        stream_start=StreamStart.LATEST,
        on_gap=OnGap.FAIL,
        max_checkpoint_age=timedelta(hours=6, seconds=1),
        total_segments=8,
        max_segments_per_batch=3,
        max_snapshot_batches_per_run=2,
    ),
    read_rate=ReadRateSettings(None, 150.0),
    max_items_per_segment=100,
    max_records_per_shard=250,
    lease_duration_seconds=45.0,
)
RUN = TableContinuousRun(SYNC, "eu-west-1", "dag/sync_table/run/0/try-1/ab12", max_runtime_seconds=90, idle_seconds=3)


def test_a_run_travels_as_one_argument_and_comes_back_the_same() -> None:
    text = encode(RUN)

    assert TableContinuousRun.from_work(decode(text)) == RUN
    assert " " not in text and "orders" not in text  # one opaque argument
    with pytest.raises(ValueError, match="not a job's encoded work"):
        decode("not base64!")


def test_a_run_that_applied_started_or_completed_something_is_followed_at_once_else_after_a_sleep() -> None:
    merged = TableOutcome("orders.v2")
    assert not did_something(merged)
    merged.generations_started.append("the first generation")
    assert did_something(merged)
    assert did_something(TableOutcome("orders.v2", snapshots_completed=[0]))

    pace = Pace("dag/sync_table/run/0/try-1/ab12", max_runtime_seconds=90, idle_seconds=3)
    assert pause_after(True, elapsed=10, pace=pace) == 0.0
    assert pause_after(False, elapsed=10, pace=pace) == 3
    assert pause_after(False, elapsed=89, pace=pace) == 1  # never past the end
    assert pause_after(True, elapsed=90, pace=pace) is None  # none starts after


def test_a_table_s_run_without_an_idle_pause_is_refused() -> None:
    with pytest.raises(ValueError, match="idle_seconds must be more than 0, not 0"):
        TableContinuousRun(SYNC, "eu-west-1", "dag/sync_table/run/0/try-1/ab12", 90, idle_seconds=0)


def test_the_figures_count_the_batches_that_applied_changes_not_those_refused() -> None:
    results = [
        TableBatchResult("b1", MergeResult(changes_loaded=5, completed_snapshot=None), (), ()),
        TableBatchResult("b2", None, (), (), superseded="generation 1 was recorded meanwhile"),
        TableBatchResult("b3", MergeResult(changes_loaded=4, completed_snapshot=1), (), ()),
    ]
    assert summary_of_results(SYNC, results) == {
        "table": "orders.v2",
        "destination": '"ANALYTICS"."RAW"."ORDERS_V2"',
        "batches": 2,
        "changes": 9,
        "snapshots_completed": [1],
    }


def test_the_loop_syncs_run_after_run_and_takes_in_what_changed_while_it_slept(emulators: Emulators) -> None:
    workload, sync = make_source(emulators)
    workload.put(30, start=0)
    # Each sync run takes one second by this clock; sleeping moves it on, and changes the table.
    now = [0.0]
    sleeps: list[float] = []

    def clock() -> float:
        now[0] += 1
        return now[0]

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds
        if len(sleeps) == 1:  # puts, updates (a type changing), deletes and expiries meanwhile
            workload.churn(15)
            workload.put(6, start=100)

    run = TableContinuousRun(sync, "us-east-1", "ddb/sync/continuous/-1/try-1/cafe", 40, idle_seconds=4)
    outcomes = sync_continuously(
        run,
        lease_dynamodb=client(emulators, "dynamodb"),
        source_dynamodb=client(emulators, "dynamodb"),
        streams=client(emulators, "dynamodbstreams"),
        connect_snowflake=emulators.snowflake_connect,
        submit=None,
        clock=clock,
        sleep=sleep,
    )

    items, deleted = destination_rows(emulators, sync)
    assert items == source_items(workload) and not deleted
    # The snapshot took several runs (one snapshot batch each), the changes made during the first
    # sleep arrived in the run after it, and the loop ended at its runtime, having slept when idle.
    assert [o.snapshots_completed for o in outcomes].count([0]) == 1
    first_sleep = next(i for i, o in enumerate(outcomes) if not did_something(o))
    assert outcomes[first_sleep + 1].changes > 0
    assert not did_something(outcomes[-1])
    assert sleeps[0] == 4 and len(sleeps) >= 2 and now[0] >= 40
    assert sum(o.changes for o in outcomes) >= 30 + 6
