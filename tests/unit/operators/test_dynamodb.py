"""The DynamoDB source's operators: what they template, and the targets they pass between tasks."""

from __future__ import annotations

import json

from airflow_kinesis_snowflake.config import sync_target_from_dict, sync_target_to_dict
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import KeyAttribute, SyncTarget
from airflow_kinesis_snowflake.operators.dynamodb import (
    DiscoverDynamoDBTablesOperator,
    SyncDynamoDBTableOperator,
)
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
    "max_records_per_shard": 10000,
    "lease_duration_seconds": 300,
}


def test_a_target_travels_as_json_and_comes_back_equal() -> None:
    value = sync_target_to_dict(TARGET)
    assert sync_target_from_dict(json.loads(json.dumps(value))) == TARGET


def test_each_operator_templates_its_connections_and_what_it_is_given_per_run() -> None:
    assert DiscoverDynamoDBTablesOperator.template_fields == ("aws_conn_id", "region_name")
    assert SyncDynamoDBTableOperator.template_fields == ("target", "aws_conn_id", "region_name", "snowflake_conn_id")
    assert ProvisionDynamoDBTableOperator.template_fields == ("target", "snowflake_conn_id")
    assert CreateDynamoDBLeaseTableOperator.template_fields == ("application_name", "aws_conn_id", "region_name")


def test_the_sync_operator_builds_the_table_sync_of_its_target_and_nothing_in_its_constructor() -> None:
    task = SyncDynamoDBTableOperator(
        task_id="sync_table", target=sync_target_to_dict(TARGET), sync_options=OPTIONS, aws_conn_id="missing"
    )
    sync = task.table_sync()
    assert (sync.table, sync.stream_arn) == (TARGET.table, TARGET.stream_arn)
    assert sync.target.table == '"ANALYTICS"."RAW"."ORDERS_V2"'
    assert [k.name for k in sync.keys] == ["pk", "sk"]
    assert sync.read_rate is not None and sync.read_rate.read_units_per_second == 100.0
