"""Kinesis and lease-table hooks against the moto server."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from tests.conftest import create_stream, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def test_connection_test_and_shard_listing(aws_connections: Emulators) -> None:
    stream = unique("hook")
    create_stream(aws_connections, stream, 3)
    hook = KinesisStreamHook(aws_conn_id="aws_default")
    ok, message = hook.test_connection()
    assert ok, message
    assert [s.shard_id for s in hook.list_shards(stream)] == [f"shardId-00000000000{i}" for i in range(3)]


def test_the_retention_period_is_read_from_the_stream_summary(aws_connections: Emulators) -> None:
    stream = unique("retention")
    kinesis = create_stream(aws_connections, stream, 1)
    hook = KinesisStreamHook(aws_conn_id="aws_default")
    assert hook.retention_hours(stream) == 24  # Kinesis's default
    kinesis.increase_stream_retention_period(StreamName=stream, RetentionPeriodHours=72)
    assert hook.retention_hours(stream) == 72


def test_job_environment_carries_credentials_region_and_endpoint(aws_connections: Emulators) -> None:
    env = KinesisStreamHook(aws_conn_id="aws_default").job_environment()
    assert env["AWS_ACCESS_KEY_ID"] == "testing" and env["AWS_SECRET_ACCESS_KEY"] == "testing"
    assert env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_ENDPOINT_URL_KINESIS"] == aws_connections.aws_endpoint


def test_lease_table_hook_reaches_dynamodb(aws_connections: Emulators) -> None:
    name = unique("hook-app")
    hook = LeaseTableHook(aws_conn_id="aws_default", table_name=name)
    assert hook.lease_table.exists() is False
    assert hook.lease_table.create(stream_name="s", application_name=name) is True
    assert hook.lease_table.exists() is True
    assert hook.table(name).exists() is True


def test_lease_table_hook_without_a_table_name_names_one_per_call(aws_connections: Emulators) -> None:
    hook = LeaseTableHook(aws_conn_id="aws_default")
    name = unique("hook-any")
    assert hook.table(name).create(stream_name="s", application_name=name) is True
    assert hook.conn.describe_table(TableName=name)["Table"]["TableName"] == name
    with pytest.raises(ValueError, match="needs the table_name"):
        hook.lease_table  # noqa: B018 - the property raises
