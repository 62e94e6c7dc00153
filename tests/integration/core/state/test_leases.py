"""The lease table against DynamoDB (moto server)."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.core.engine.leases import take_leases
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import eligible_leases
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.errors import LeaseLostError, LeaseTableError
from airflow_kinesis_snowflake.core.state.holding import hold_leases
from airflow_kinesis_snowflake.core.state.leases import (
    TTL_ATTRIBUTE,
    WORKER_ITEM_RETENTION_SECONDS,
    LeaseOwner,
    LeaseTable,
    lease_keys,
    task_key,
)
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


def test_a_lease_is_removed_only_as_it_was_read(emulators: Emulators) -> None:
    table = make_table(emulators)
    leases = table.sync_shards([Shard("shardId-1"), Shard("shardId-2")], TRIM)
    # Taken since it was read: its counter moved, so the read copy removes nothing.
    assert table.take(leases["shardId-1"], "worker-a", 60) is not None
    assert table.remove_unchanged(leases["shardId-1"]) is False
    assert table.leases()["shardId-1"].lease_owner == "worker-a"
    # Unchanged: removed, once; a second try finds it gone.
    assert table.remove_unchanged(leases["shardId-2"]) is True
    assert table.remove_unchanged(leases["shardId-2"]) is False
    assert set(table.leases()) == {"shardId-1"}


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


# -- a retry takes over; the table's cost does not grow with history --------------------------------

RUN = task_key("kinesis_snowflake_orders_ingest", "ingest", "scheduled__2026-01-01T00:05:00+00:00")


def test_a_retry_takes_over_its_earlier_try_at_once_and_the_earlier_try_is_fenced(emulators: Emulators) -> None:
    table = make_table(emulators)
    shards = [Shard("shardId-1"), Shard("shardId-2")]
    leases = table.sync_shards(shards, TRIM)
    first_try, retry = str(LeaseOwner(RUN, 1, "aaaa")), str(LeaseOwner(RUN, 2, "bbbb"))
    other = str(LeaseOwner(task_key("kinesis_snowflake_orders_ingest", "ingest", "manual__x"), 1, "cccc"))
    mine = take_leases(table, {"shardId-1": leases["shardId-1"]}, first_try, 300)
    theirs = take_leases(table, {"shardId-2": leases["shardId-2"]}, other, 300)
    assert [lease.lease_owner for lease in mine + theirs] == [first_try, other]

    # The retry takes what its first try holds at once; another run's lease waits for its expiry.
    taken = take_leases(table, table.leases_of(["shardId-1", "shardId-2"]), retry, 300)
    assert [(lease.shard_id, lease.lease_owner) for lease in taken] == [("shardId-1", retry)]
    now = table.leases()
    assert now["shardId-1"].lease_owner == retry and now["shardId-2"].lease_owner == other
    # An earlier try never takes back from a later one.
    assert take_leases(table, now, first_try, 300) == []

    # The first try, still running somewhere, is fenced: no renewal, no checkpoint, no release.
    (held,) = mine
    with pytest.raises(LeaseLostError):
        table.renew(held, 300)
    with pytest.raises(LeaseLostError):
        table.checkpoint(held, Checkpoint("5"))
    table.release(held)
    after = table.leases()["shardId-1"]
    assert after.lease_owner == retry and after.checkpoint is None
    (kept,) = taken
    table.checkpoint(kept, Checkpoint("7"))
    assert table.leases()["shardId-1"].checkpoint == Checkpoint("7")


def test_maintenance_of_a_retried_task_takes_over_its_earlier_try(emulators: Emulators) -> None:
    table = make_table(emulators)
    table.sync_shards([Shard("shardId-1")], TRIM)
    first_try, retry = LeaseOwner(RUN, 1, "aaaa"), LeaseOwner(RUN, 3, "bbbb")
    assert table.take(table.leases()["shardId-1"], str(first_try), 300) is not None
    held = hold_leases(table, str(retry), hold_seconds=60, timeout_seconds=0, sleep=lambda _: None)
    assert held["shardId-1"].lease_owner == str(retry)


def test_leases_are_read_by_key_through_parents_past_retention(emulators: Emulators) -> None:
    table = make_table(emulators)
    # A lineage: the grandparent and parent are past retention (no longer listed), their leases kept.
    old = [Shard("shardId-0"), Shard("shardId-1", parent_shard_ids=("shardId-0",))]
    table.sync_shards(old, TRIM)
    listed = [Shard("shardId-2", parent_shard_ids=("shardId-1",))]
    table.sync_shards([*old, *listed], TRIM)
    table.heartbeat("worker", 60)
    read = table.leases_of(lease_keys(listed))
    assert sorted(read) == ["shardId-0", "shardId-1", "shardId-2"]
    assert read == {k: v for k, v in table.leases().items() if k in read}
    # The child waits for its parent as it did when the parent was listed.
    assert [lease.shard_id for lease in eligible_leases(table.sync_shards(listed, TRIM), 0)] == ["shardId-0"]
    # Unknown keys read as no lease; over 100 keys take several requests.
    many = [Shard(f"shardId-{i:03d}") for i in range(150)]
    assert len(table.sync_shards(many, TRIM)) == 150
    assert len(table.leases_of([*lease_keys(many), "shardId-none"])) == 150


def test_worker_items_carry_a_time_to_live_and_are_deleted_when_the_try_ends(emulators: Emulators) -> None:
    table = make_table(emulators)
    client = emulators.boto3_client("dynamodb")
    ttl = client.describe_time_to_live(TableName=table.table_name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)
    table.heartbeat("try-1", 300, now=1_000.0)
    item = client.get_item(TableName=table.table_name, Key={"lease_key": {"S": "#worker#try-1"}})["Item"]
    assert int(item[TTL_ATTRIBUTE]["N"]) == 1_000 + 300 + WORKER_ITEM_RETENTION_SECONDS
    assert table.workers() == {"try-1": 1_000.0}
    table.stop_heartbeat("try-1")
    assert table.workers() == {}


def test_creating_an_existing_table_turns_its_time_to_live_on(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    name = unique("old")
    table = LeaseTable(client, name)
    # A table made before worker items had a time to live.
    table.items.create({CREATED_BY_TAG: CREATED_BY})
    table.items.wait_until_exists(30)
    assert client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]["TimeToLiveStatus"] == "DISABLED"
    assert table.create(stream_name="s", application_name=name) is False
    ttl = client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)
    assert table.items.enable_time_to_live(TTL_ATTRIBUTE) is False  # already on: nothing to do


def test_a_refused_table_gets_no_time_to_live(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    name = unique("foreign")
    table = LeaseTable(client, name)
    table.items.create({})
    table.items.wait_until_exists(30)
    client.put_item(TableName=name, Item={"lease_key": {"S": "someone-elses"}})
    with pytest.raises(LeaseTableError, match="not created by"):
        table.create(stream_name="s", application_name=name)
    assert client.describe_time_to_live(TableName=name)["TimeToLiveDescription"]["TimeToLiveStatus"] == "DISABLED"
