"""The lease table against DynamoDB (moto server)."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.errors import LeaseLostError, LeaseTableError
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.metadata import CREATED_BY, CREATED_BY_TAG, TableIdentity
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


ORDERS = TableIdentity(
    "orders", "ANALYTICS.RAW.ORDERS", "arn:aws:kinesis:us-east-1:1:stream/s", "2026-01-01T00:00:00+00:00"
)


def test_a_new_table_records_its_identity_and_the_generation_it_was_given(emulators: Emulators) -> None:
    name = unique("app")
    table = LeaseTable(emulators.boto3_client("dynamodb"), name)
    assert table.create(stream_name="s", application_name=name, identity=ORDERS, generation_id="g-chosen")
    metadata = table.metadata()
    assert metadata is not None
    assert (metadata.identity, metadata.generation_id, metadata.last_ingest_at) == (ORDERS, "g-chosen", None)


def test_identity_is_recorded_once_on_a_table_that_lacks_it_and_ingest_runs_are_stamped(emulators: Emulators) -> None:
    table = make_table(emulators)
    assert table.metadata().identity == TableIdentity()  # type: ignore[union-attr]
    table.record_identity(ORDERS)
    table.record_identity(TableIdentity("other", "ANALYTICS.RAW.OTHER", "arn:other", "2026-02-01T00:00:00+00:00"))
    table.record_ingest(now=1_700_000_000.5)
    metadata = table.metadata()
    assert metadata is not None
    assert metadata.identity == ORDERS  # recorded values are kept
    assert metadata.last_ingest_at == 1_700_000_000.5
    item = emulators.boto3_client("dynamodb").get_item(
        TableName=table.table_name, Key={"lease_key": {"S": "#metadata"}}, ConsistentRead=True
    )["Item"]
    assert {
        k: item[k] for k in ("connector_id", "destination", "stream_arn", "stream_created_at", "last_ingest_at")
    } == {
        "connector_id": {"S": "orders"},
        "destination": {"S": "ANALYTICS.RAW.ORDERS"},
        "stream_arn": {"S": "arn:aws:kinesis:us-east-1:1:stream/s"},
        "stream_created_at": {"S": "2026-01-01T00:00:00+00:00"},
        "last_ingest_at": {"N": "1700000000.5"},
    }
