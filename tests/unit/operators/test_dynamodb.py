"""The DynamoDB source's operators: what they template, and the targets they pass between tasks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_kinesis_snowflake.config import sync_target_from_dict, sync_target_to_dict
from airflow_kinesis_snowflake.core.dynamodb_sync import TableOutcome
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import KeyAttribute, SyncTarget
from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook
from airflow_kinesis_snowflake.operators.dynamodb import SyncDynamoDBTableOperator
from airflow_kinesis_snowflake.operators.dynamodb_discovery import DiscoverDynamoDBTablesOperator
from airflow_kinesis_snowflake.operators.dynamodb_provision import (
    CreateDynamoDBLeaseTableOperator,
    ProvisionDynamoDBTableOperator,
)

TARGET = SyncTarget(
    table="orders.v2",
    arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders.v2",
    stream_arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders.v2/stream/2026-01-01T00:00:00.000",
    keys=(KeyAttribute("pk", "HASH", "S"), KeyAttribute("sk", "RANGE", "N")),
    read_capacity_units=None,
    destination_table="ORDERS_V2",
)
OPTIONS = {
    "application_name": "orders-ddb",
    "database": "ANALYTICS",
    "schema": "RAW",
    "layout": "packed",
    "deletes": "hard",
    "snapshot": "initial",
    "stream_start": "TRIM_HORIZON",
    "on_gap": "resnapshot",
    "max_checkpoint_age_hours": 20,
    "total_segments": 4,
    "read_fraction": None,
    "read_units_per_second": 100.0,
    "max_items_per_segment": 1000,
    "max_snapshot_batches_per_run": 10,
    "max_records_per_shard": 10000,
    "lease_duration_seconds": 300,
}


def test_a_target_travels_as_json_and_comes_back_equal() -> None:
    value = sync_target_to_dict(TARGET)
    assert sync_target_from_dict(json.loads(json.dumps(value))) == TARGET


def test_each_operator_templates_its_connections_and_what_it_is_given_per_run() -> None:
    assert DiscoverDynamoDBTablesOperator.template_fields == ("aws_conn_id", "region_name")
    assert SyncDynamoDBTableOperator.template_fields == (
        "target",
        "aws_conn_id",
        "region_name",
        "snowflake_conn_id",
        "spark_conn_id",
        "spark_conf",
    )
    assert ProvisionDynamoDBTableOperator.template_fields == ("target", "snowflake_conn_id")
    assert CreateDynamoDBLeaseTableOperator.template_fields == ("application_name", "aws_conn_id", "region_name")


def test_the_sync_operator_refuses_a_spark_submit_argument_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="spark_submit: executor_mem not among"):
        SyncDynamoDBTableOperator(
            task_id="sync_table", target={}, sync_options=OPTIONS, spark_submit={"executor_mem": "2g"}
        )


def test_the_sync_operator_builds_the_table_sync_of_its_target_and_nothing_in_its_constructor() -> None:
    task = SyncDynamoDBTableOperator(
        task_id="sync_table", target=sync_target_to_dict(TARGET), sync_options=OPTIONS, aws_conn_id="missing"
    )
    sync = task.table_sync()
    assert (sync.table, sync.stream_arn) == (TARGET.table, TARGET.stream_arn)
    assert sync.target.table == '"ANALYTICS"."RAW"."ORDERS_V2"'
    assert [k.name for k in sync.keys] == ["pk", "sk"]
    assert sync.read_rate is not None and sync.read_rate.read_units_per_second == 100.0


@pytest.mark.usefixtures("unit_connections")
def test_with_a_spark_connection_each_batch_is_submitted_to_spark_and_the_hook_is_killed_with_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_kinesis_snowflake.operators import dynamodb as module

    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(SparkJobSubmitHook, "check_submission", lambda self: calls.append(("check", None)))

    def run_table_batch(self: Any, plan: Any, *, aws: Any, snowflake: Any) -> str:
        calls.append(("run", (plan, aws.region_name)))
        return "result"

    monkeypatch.setattr(SparkJobSubmitHook, "run_table_batch", run_table_batch)
    monkeypatch.setattr(SparkJobSubmitHook, "on_kill", lambda self: calls.append(("kill", None)))
    seen: dict[str, Any] = {}

    def fake_sync(sync: Any, **kwargs: Any) -> TableOutcome:
        seen.update(kwargs)
        return TableOutcome(sync.table)

    monkeypatch.setattr(module, "sync_table", fake_sync)

    def task(spark_conn_id: str | None) -> SyncDynamoDBTableOperator:
        return SyncDynamoDBTableOperator(
            task_id="sync_table",
            target=sync_target_to_dict(TARGET),
            sync_options=OPTIONS,
            aws_conn_id="aws_unit",
            snowflake_conn_id="snowflake_unit",
            spark_conn_id=spark_conn_id,
            spark_conf={"spark.task.maxFailures": "2"},
            spark_submit={"total_executor_cores": 1},
        )

    in_process = task(None)
    in_process.execute({})
    assert seen["submit"] is None
    in_process.on_kill()
    assert calls == []

    on_spark = task("spark_unit")
    on_spark.execute({})
    assert seen["region"] == "eu-west-1"
    submit = seen["submit"]
    assert submit is not None and submit("the plan") == "result"
    assert calls == [("check", None), ("run", ("the plan", "eu-west-1"))]
    # The connector file's spark settings are the hook's.
    hook = on_spark._spark_hook
    assert hook is not None and hook._conf == {"spark.task.maxFailures": "2"}
    assert hook._total_executor_cores == 1
    on_spark.on_kill()
    assert calls[-1] == ("kill", None)


def test_continuous_mode_needs_a_spark_connection() -> None:
    with pytest.raises(ValueError, match="max_runtime_minutes \\(continuous mode\\) needs a spark_conn_id"):
        SyncDynamoDBTableOperator(task_id="sync_table", target={}, sync_options=OPTIONS, max_runtime_minutes=5)


@pytest.mark.usefixtures("unit_connections")
def test_in_continuous_mode_the_task_submits_one_run_of_the_table_and_sums_the_batches_it_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_kinesis_snowflake import lineage
    from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchResult
    from airflow_kinesis_snowflake.core.load.dynamodb_sink import MergeResult
    from airflow_kinesis_snowflake.operators import dynamodb as module

    monkeypatch.setattr(SparkJobSubmitHook, "check_submission", lambda self: None)
    monkeypatch.setattr(module, "sync_table", lambda *a, **k: pytest.fail("a continuous task syncs in Spark only"))
    runs: list[Any] = []

    def merged(changes: int, completed: int | None = None) -> MergeResult:
        return MergeResult(changes_loaded=changes, completed_snapshot=completed)

    emitted: list[tuple[str, bool]] = []
    running = False

    def run_table_continuous(self: Any, run: Any, *, aws: Any, snowflake: Any, on_batch: Any) -> list[TableBatchResult]:
        nonlocal running
        runs.append(run)
        results = [
            TableBatchResult("b1", merged(7, completed=0), (), ()),
            TableBatchResult("b2", None, (), (), superseded="generation 1 was recorded meanwhile"),
            TableBatchResult("b3", merged(2), (), ()),
        ]
        running = True  # each batch commits while the application runs
        for result in results:
            on_batch(result)
        running = False
        return results

    def emit_table_metrics(batch: Any, application_name: str, source_table: str, *args: Any) -> None:
        emitted.append((batch.batch_id, running))

    monkeypatch.setattr(SparkJobSubmitHook, "run_table_continuous", run_table_continuous)
    monkeypatch.setattr(lineage, "emit_table_metrics", emit_table_metrics)
    task = SyncDynamoDBTableOperator(
        task_id="sync_table",
        target=sync_target_to_dict(TARGET),
        sync_options=OPTIONS,
        aws_conn_id="aws_unit",
        snowflake_conn_id="snowflake_unit",
        spark_conn_id="spark_unit",
        max_runtime_minutes=2.5,
        idle_seconds=12,
    )
    figures = task.execute({})
    [run] = runs
    assert (run.sync, run.region, run.max_runtime_seconds) == (task.table_sync(), "eu-west-1", 150)
    assert run.idle_seconds == 12  # the connector file's batch.idle_seconds
    assert "/sync_table/" in run.owner
    assert figures == {
        "table": "orders.v2",
        "destination": '"ANALYTICS"."RAW"."ORDERS_V2"',
        "batches": 2,
        "changes": 9,
        "snapshots_completed": [0],
    }
    # Each applied batch's metrics once, as it committed (the superseded one applied nothing).
    assert emitted == [("b1", True), ("b3", True)]
