"""A DynamoDB table's batch runs on Spark (a real ``spark-submit --master local[2]``) and the table converges.

One spark-submit: :func:`~.core.dynamodb_sync.sync_table` plans the batch (3 snapshot segments and
the stream's shard) and hands it to :meth:`~.hooks.spark.SparkJobSubmitHook.run_table_batch`,
which runs one Spark task per unit against the moto server and fakesnow, and reads the result back
from Snowflake. The stream holds the items' puts, an update that changes an attribute's type and a
delete; the ``unpacked`` table evolves on the driver before staging.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import closing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.admin.dynamodb_reset import plan_table_reset
from airflow_kinesis_snowflake.core.dynamodb_job import AwsAccess, TableBatchPlan, TableBatchResult, read_unit
from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync, _Batch, sync_table
from airflow_kinesis_snowflake.core.engine.credentials import JobCredentials
from airflow_kinesis_snowflake.core.load.dynamodb_rows import Layout
from airflow_kinesis_snowflake.core.load.dynamodb_sink import Deletes, DynamoDBSink
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation, SyncSettings, lease_key
from airflow_kinesis_snowflake.core.sources.dynamodb.streams import list_stream_shards
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook
from tests.emulators import Emulators
from tests.emulators.dynamodb_streams import trim
from tests.emulators.servers import AWS_KEY, REGION
from tests.emulators.spark_env import spark_env
from tests.integration.core.test_dynamodb_sync import (
    Workload,
    client,
    column_types,
    destination_rows,
    key_text,
    make_source,
    source_items,
)

pytestmark = pytest.mark.integration


def source_on_spark(
    emulators: Emulators, monkeypatch: pytest.MonkeyPatch, layout: Layout, *, total_segments: int
) -> tuple[Workload, TableSync]:
    """A source table whose batches run through spark-submit (every segment in one batch, 100 items or records each)."""
    for name, value in spark_env().items():
        monkeypatch.setenv(name, value)
    settings = SyncSettings(total_segments=total_segments, max_segments_per_batch=total_segments)
    workload, sync = make_source(emulators, layout, Deletes.HARD, settings)
    return workload, replace(sync, max_items_per_segment=100, max_records_per_shard=100)


def test_a_snapshot_of_three_segments_and_a_stream_batch_run_as_spark_tasks_and_the_table_equals_a_scan(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload, sync = source_on_spark(aws_connections, monkeypatch, Layout.UNPACKED, total_segments=3)
    workload.put(12, start=0)
    updated = {**workload.item(5, 3), "sk": {"N": "5.0"}}  # qty becomes text: its column must hold N and S
    workload.put_item(updated)
    deleted = {"pk": {"S": "user#4"}, "sk": {"N": "4.0"}}
    workload.dynamodb.delete_item(TableName=workload.table, Key=deleted)

    spark = SparkJobSubmitHook(conn_id="spark_default")
    aws, snowflake = KinesisStreamHook(aws_conn_id="aws_default"), KinesisSnowflakeHook()
    plans: list[TableBatchPlan] = []
    results: list[TableBatchResult] = []

    def submit(plan: TableBatchPlan) -> TableBatchResult:
        plans.append(plan)
        results.append(spark.run_table_batch(plan, aws=aws, snowflake=snowflake))
        return results[-1]

    outcome = sync_table(
        sync,
        lease_dynamodb=client(aws_connections, "dynamodb"),
        source_dynamodb=None,  # the data plane runs on Spark: this process reads no item
        streams=client(aws_connections, "dynamodbstreams"),  # the control plane lists the stream's shards
        connect_snowflake=aws_connections.snowflake_connect,
        owner=f"ddb/spark/run/-1/try-1/{os.getpid()}",
        now=lambda: datetime.now(UTC),
        submit=submit,
        region=REGION,
    )

    # One spark-submit: one batch of one unit per segment and per stream shard.
    assert len(plans) == 1
    assert [u.number for u in plans[0].segments] == [0, 1, 2]
    assert len(plans[0].shards) == 1
    result = results[0]
    assert sorted(s.number for s in result.segments) == [0, 1, 2]
    assert all(s.done for s in result.segments)
    assert sum(s.items for s in result.segments) == 11  # 12 put, 1 deleted before the Scan
    # The stream's shard: 12 inserts, the update and the delete.
    assert [s.records_read for s in result.shards] == [14]
    assert result.merge is not None and result.merge.completed_snapshot == 0
    assert [b.batch_id for b in outcome.batches] == [plans[0].batch_id]
    assert outcome.snapshots_completed == [0]

    columns = column_types(aws_connections, sync)
    assert columns["QTY"].startswith(("VARCHAR", "TEXT")), columns
    expected = source_items(workload, columns)
    actual, tombstoned = destination_rows(aws_connections, sync)
    assert "user#4|4" not in actual
    assert actual["user#5|5"]["qty"] == "5 pieces"
    assert actual == expected
    assert not tombstoned


def test_on_spark_a_batch_refused_by_a_reset_and_a_gap_found_by_a_task_apply_nothing_and_the_run_resnapshots(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload, sync = source_on_spark(aws_connections, monkeypatch, Layout.PACKED, total_segments=2)
    spark = SparkJobSubmitHook(conn_id="spark_default")
    aws, snowflake = KinesisStreamHook(aws_conn_id="aws_default"), KinesisSnowflakeHook()
    results: list[TableBatchResult] = []
    before_submit: list[Callable[[TableBatchPlan], None]] = []

    def submit(plan: TableBatchPlan) -> TableBatchResult:
        if before_submit:
            before_submit.pop()(plan)
        results.append(spark.run_table_batch(plan, aws=aws, snowflake=snowflake))
        return results[-1]

    def run_on_spark(attempt: int) -> Any:
        return sync_table(
            sync,
            lease_dynamodb=client(aws_connections, "dynamodb"),
            source_dynamodb=None,
            streams=client(aws_connections, "dynamodbstreams"),
            connect_snowflake=aws_connections.snowflake_connect,
            owner=f"ddb/spark/run/-1/try-{attempt}/{os.getpid()}",
            now=lambda: datetime.now(UTC),
            submit=submit,
            region=REGION,
        )

    workload.put(10, start=0)
    first = run_on_spark(1)
    assert first.snapshots_completed == [0]

    # A reset recorded after the batch was planned, before Spark applies it: the job's transaction
    # refuses it, and the run goes on in the new generation, whose snapshot it takes.
    def reset(plan: TableBatchPlan) -> None:
        with closing(aws_connections.snowflake_connect()) as conn:
            sink = DynamoDBSink(conn, sync.target)
            start = plan_table_reset(
                sync.table, sink.current_generation(sync.application_name), 2, datetime.now(UTC), "test"
            )
            assert start.start is not None
            assert sink.record_generation(sync.application_name, start.start.generation, start.start.reason)

    workload.churn(4)
    before_submit.append(reset)
    results.clear()
    second = run_on_spark(2)
    refused = results[0]
    assert refused.superseded and "generation 1" in refused.superseded and refused.merge is None
    assert second.generations_superseded == [0]
    assert second.snapshots_completed == [1]
    assert destination_rows(aws_connections, sync)[0] == source_items(workload)

    # Items deleted, then every record of the stream trimmed: a Spark task's read finds the gap,
    # nothing is applied, and the run starts generation 2 whose snapshot removes the deleted rows.
    deleted = sorted(workload.scan(), key=key_text)[:2]
    gone = {key_text(item) for item in deleted}
    for item in deleted:
        workload.dynamodb.delete_item(TableName=workload.table, Key={"pk": item["pk"], "sk": item["sk"]})
    trim(aws_connections.aws_endpoint, workload.table, before=datetime.now(UTC) + timedelta(seconds=2))
    results.clear()
    third = run_on_spark(3)
    found = results[0]
    assert found.gap is not None and found.merge is None and "trim" in found.gap.reason.lower()
    assert any("gap" in reason for reason in third.generations_started), third.generations_started
    assert third.snapshots_completed == [2]
    actual, _ = destination_rows(aws_connections, sync)
    assert actual == source_items(workload)
    assert not gone & set(actual)


def test_a_task_reads_a_shard_never_read_from_its_first_record_so_a_trimmed_start_is_its_gap(
    emulators: Emulators,
) -> None:
    workload, sync = make_source(emulators)
    workload.put(3, start=0)
    (shard,) = list_stream_shards(client(emulators, "dynamodbstreams"), sync.stream_arn)
    trim(emulators.aws_endpoint, workload.table, before=datetime.now(UTC) + timedelta(seconds=2))
    # A generation that began 21 hours ago, whose shard no batch read.
    generation = Generation(0, datetime.now(UTC) - timedelta(hours=21), None, completed=True)
    key = lease_key(sync.table, 0, shard.shard_id)
    batch = _Batch(
        sync,
        generation,
        segments=[],
        shards={key: shard.shard_id},
        segment_marks={},
        marks={},
        first_records={key: shard.starting_sequence_number},
    )
    plan = TableBatchPlan.from_json(batch.plan(datetime.now(UTC) + timedelta(minutes=1), REGION).to_json())
    credentials = JobCredentials(aws={"AWS_ACCESS_KEY_ID": AWS_KEY, "AWS_SECRET_ACCESS_KEY": AWS_KEY}, snowflake={})
    access = AwsAccess(credentials, REGION, streams_endpoint=emulators.aws_endpoint)

    (unit,) = plan.shards
    found = read_unit(unit, plan, access, None, None)
    passed_over = read_unit(replace(unit, first_record=None), plan, access, None, None)

    assert found.gap is not None and found.gap.checkpoint is None and found.changes == []
    assert "TrimmedDataAccessException" in found.gap.reason
    assert passed_over.gap is None and passed_over.changes == []  # what TRIM_HORIZON would have loaded
