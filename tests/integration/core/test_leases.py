"""The lease table against DynamoDB (moto server)."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.core.leases import (
    CREATED_BY,
    CREATED_BY_TAG,
    LeaseLostError,
    LeaseTable,
    LeaseTableError,
    StartPosition,
)
from airflow_kinesis_snowflake.core.positions import Checkpoint, InitialPosition
from airflow_kinesis_snowflake.core.shards import Shard
from tests.conftest import unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)


def make_table(emulators: Emulators) -> LeaseTable:
    name = unique("app")
    table = LeaseTable(emulators.boto3_client("dynamodb"), name)
    assert table.create(stream_name="s", application_name=name) is True
    return table


def test_create_is_tagged_on_demand_and_idempotent(emulators: Emulators) -> None:
    table = make_table(emulators)
    client = emulators.boto3_client("dynamodb")
    description = client.describe_table(TableName=table.table_name)["Table"]
    assert description["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    tags = client.list_tags_of_resource(ResourceArn=description["TableArn"])["Tags"]
    assert {"Key": CREATED_BY_TAG, "Value": CREATED_BY} in tags
    generation = table.metadata()
    assert generation is not None
    assert table.create(stream_name="s", application_name=table.table_name) is False
    assert table.metadata() == generation  # the second run changed nothing


def test_foreign_table_is_refused(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    name = unique("kcl")
    client.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "leaseKey", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.put_item(TableName=name, Item={"leaseKey": {"S": "shardId-000000000000"}})
    with pytest.raises(LeaseTableError, match="not created by"):
        LeaseTable(client, name).create(stream_name="s", application_name=name)


def test_table_of_another_stream_is_refused(emulators: Emulators) -> None:
    table = make_table(emulators)
    with pytest.raises(LeaseTableError, match="tracks stream 's'"):
        table.create(stream_name="other", application_name=table.table_name)


def test_only_one_worker_takes_a_lease_and_a_fenced_worker_cannot_checkpoint(emulators: Emulators) -> None:
    table = make_table(emulators)
    leases = table.sync_shards([Shard("shardId-1"), Shard("shardId-2", parent_shard_ids=("shardId-1",))], TRIM)
    assert leases["shardId-2"].parent_shard_ids == ("shardId-1",)
    seen = leases["shardId-1"]

    first = table.take(seen, "worker-a", 60)
    second = table.take(seen, "worker-b", 60)  # same stale counter: must lose
    assert first is not None and second is None

    moved = table.checkpoint(first, Checkpoint("10", 2))
    assert table.leases()["shardId-1"].checkpoint == Checkpoint("10", 2)

    # worker-b takes over with the current counter (as after expiry); worker-a is fenced out.
    current = table.leases()["shardId-1"]
    stolen = table.take(current, "worker-b", 60)
    assert stolen is not None
    with pytest.raises(LeaseLostError):
        table.checkpoint(moved, Checkpoint("20"))
    assert table.leases()["shardId-1"].checkpoint == Checkpoint("10", 2)
    table.release(moved)  # a lost lease is left to its new owner
    assert table.leases()["shardId-1"].lease_owner == "worker-b"

    done = table.checkpoint(stolen, Checkpoint("30"), shard_end=True)
    table.release(done)
    after = table.leases()["shardId-1"]
    assert after.shard_ended and after.lease_owner is None and after.checkpoint == Checkpoint("30")


def test_sync_keeps_existing_checkpoints(emulators: Emulators) -> None:
    table = make_table(emulators)
    lease = table.sync_shards([Shard("shardId-1")], TRIM)["shardId-1"]
    held = table.take(lease, "w", 60)
    assert held is not None
    table.checkpoint(held, Checkpoint("99"))
    later = StartPosition(InitialPosition.LATEST)
    again = table.sync_shards([Shard("shardId-1"), Shard("shardId-9")], later)
    assert again["shardId-1"].checkpoint == Checkpoint("99")
    assert again["shardId-1"].start == TRIM
    assert again["shardId-9"].start == later
