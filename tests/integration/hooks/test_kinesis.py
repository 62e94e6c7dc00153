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


def test_job_environment_carries_credentials_region_and_endpoint(aws_connections: Emulators) -> None:
    env = KinesisStreamHook(aws_conn_id="aws_default").job_environment()
    assert env["AWS_ACCESS_KEY_ID"] == "testing" and env["AWS_SECRET_ACCESS_KEY"] == "testing"
    assert env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_ENDPOINT_URL_KINESIS"] == aws_connections.aws_endpoint


def test_lease_table_hook_reaches_dynamodb(aws_connections: Emulators) -> None:
    hook = LeaseTableHook(aws_conn_id="aws_default", table_name=unique("hook-app"))
    assert hook.lease_table.exists() is False
    assert hook.lease_table.create(stream_name="s", application_name=hook.table_name) is True
    assert hook.lease_table.exists() is True
