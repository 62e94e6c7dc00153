"""Translating KCL lease items into this provider's leases (no services)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.state.leases import STATE_ACTIVE, STATE_SHARD_END, Lease
from airflow_kinesis_snowflake.core.state.migration import (
    MigrationError,
    MigrationResult,
    MigrationState,
    diff_items,
    is_kcl_key_schema,
    lease_agrees,
    migration_table_name,
    parse_kcl_item,
    split_lease_key,
    translate_items,
)

MIGRATED_AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SEQ = "49590338271490256608559692538361571095921575989136588898"


def kcl_item(lease_key: str, checkpoint: str, **extra: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "leaseKey": {"S": lease_key},
        "checkpoint": {"S": checkpoint},
        "checkpointSubSequenceNumber": {"N": "0"},
        "leaseCounter": {"N": "42"},
        "ownerSwitchesSinceCheckpoint": {"N": "1"},
    }
    item.update(extra)
    return item


def translate(*items: dict[str, Any], stream: str = "orders", **kwargs: Any) -> dict[str, Lease]:
    result = translate_items(items, stream_name=stream, migrated_at=MIGRATED_AT, **kwargs)
    return {lease.shard_id: lease for lease in result.leases}


def test_sequence_checkpoint_keeps_sub_sequence_and_parents() -> None:
    item = kcl_item(
        "shardId-000000000003",
        SEQ,
        checkpointSubSequenceNumber={"N": "7"},
        leaseOwner={"S": "worker-a"},
        parentShardId={"SS": ["shardId-000000000002", "shardId-000000000001"]},
        pendingCheckpoint={"S": "49590338271490256608559692538361571095921575989136588999"},
        startingHashKey={"S": "0"},
        endingHashKey={"S": "170141183460469231731687303715884105727"},
    )
    lease = translate(item)["shardId-000000000003"]
    assert lease.checkpoint == Checkpoint(SEQ, 7)
    assert lease.checkpoint.sequence_number == SEQ  # all 56 digits, not a float
    assert lease.parent_shard_ids == ("shardId-000000000001", "shardId-000000000002")
    # Migrated leases are free and start a fresh counter; the pending checkpoint was never committed.
    assert (lease.lease_owner, lease.lease_counter, lease.state) == (None, 0, STATE_ACTIVE)


def test_shard_end_needs_no_read() -> None:
    lease = translate(kcl_item("shardId-000000000000", "SHARD_END", childShardIds={"SS": ["shardId-1", "shardId-2"]}))[
        "shardId-000000000000"
    ]
    assert lease.state == STATE_SHARD_END and lease.shard_ended
    assert lease.checkpoint is None


def test_sentinels_become_start_positions() -> None:
    at = datetime(2026, 1, 31, tzinfo=UTC)
    leases = translate(
        kcl_item("shardId-1", "TRIM_HORIZON"),
        kcl_item("shardId-2", "LATEST"),
        kcl_item("shardId-3", "AT_TIMESTAMP"),
        at_timestamp=at,
    )
    assert all(lease.checkpoint is None and not lease.shard_ended for lease in leases.values())
    assert leases["shardId-1"].start == StartPosition(InitialPosition.TRIM_HORIZON)
    # KCL stores no time for LATEST: it becomes the moment of the migration.
    assert leases["shardId-2"].start == StartPosition(InitialPosition.AT_TIMESTAMP, MIGRATED_AT)
    assert leases["shardId-3"].start == StartPosition(InitialPosition.AT_TIMESTAMP, at)


def test_at_timestamp_without_the_time_is_refused() -> None:
    with pytest.raises(MigrationError, match=r"AT_TIMESTAMP.*initial timestamp"):
        translate(kcl_item("shardId-1", "AT_TIMESTAMP"))


def test_naive_at_timestamp_is_utc() -> None:
    lease = translate(kcl_item("shardId-1", "AT_TIMESTAMP"), at_timestamp=datetime(2026, 1, 31))["shardId-1"]
    assert lease.start.timestamp == datetime(2026, 1, 31, tzinfo=UTC)


@pytest.mark.parametrize("checkpoint", ["", "12a", "-5", "AFTER_SEQUENCE_NUMBER"])
def test_unknown_checkpoint_is_refused(checkpoint: str) -> None:
    with pytest.raises(MigrationError):
        translate(kcl_item("shardId-1", checkpoint))


def test_multi_stream_keys_of_the_stream_are_translated() -> None:
    leases = translate(
        kcl_item(
            "123456789012:orders:1700000000:shardId-000000000001",
            "17",
            checkpointSubSequenceNumber={"N": "2"},
            parentShardId={"SS": ["shardId-000000000000"]},
            streamName={"S": "123456789012:orders:1700000000"},
            shardId={"S": "shardId-000000000001"},
        ),
        kcl_item("123456789012:orders:1700000000:shardId-000000000000", "SHARD_END"),
    )
    assert sorted(leases) == ["shardId-000000000000", "shardId-000000000001"]
    assert leases["shardId-000000000001"].checkpoint == Checkpoint("17", 2)
    assert leases["shardId-000000000001"].parent_shard_ids == ("shardId-000000000000",)


def test_stream_name_prefixed_keys_are_translated() -> None:
    assert list(translate(kcl_item("orders:shardId-000000000004", "5"))) == ["shardId-000000000004"]


def test_multi_stream_table_of_another_stream_is_refused() -> None:
    with pytest.raises(MigrationError, match="stream '123456789012:payments:1700000000', not of 'orders'"):
        translate(kcl_item("123456789012:payments:1700000000:shardId-1", "5"))


def test_multi_stream_table_with_several_streams_is_refused() -> None:
    with pytest.raises(MigrationError, match="several streams"):
        translate(
            kcl_item("123456789012:orders:1700000000:shardId-1", "5"),
            kcl_item("123456789012:payments:1700000000:shardId-1", "5"),
        )
    # Two incarnations of the same stream name are two streams too.
    with pytest.raises(MigrationError, match="several streams"):
        translate(
            kcl_item("123456789012:orders:1600000000:shardId-1", "5"),
            kcl_item("123456789012:orders:1700000000:shardId-1", "5"),
        )
    with pytest.raises(MigrationError, match="single-stream keys"):
        translate(kcl_item("orders:shardId-1", "5"), kcl_item("shardId-2", "5"))


def test_malformed_lease_key_is_refused() -> None:
    assert split_lease_key("shardId-1") == (None, "shardId-1")
    assert split_lease_key("1:orders:2:shardId-1") == ("1:orders:2", "shardId-1")
    for key in ("a:b:shardId-1", "orders:", ":shardId-1", "arn:aws:kinesis:us-east-1:1:stream/orders:shardId-1"):
        with pytest.raises(MigrationError, match="neither a shard id"):
            split_lease_key(key)


def test_non_lease_entities_are_skipped_and_unknown_items_refused() -> None:
    result = translate_items(
        [kcl_item("shardId-1", "5"), {"leaseKey": {"S": "worker-7"}, "entityType": {"S": "WORKER_METRICS"}}],
        stream_name="orders",
        migrated_at=MIGRATED_AT,
    )
    assert [lease.shard_id for lease in result.leases] == ["shardId-1"]
    assert result.skipped_keys == ("worker-7",)
    assert parse_kcl_item({"leaseKey": {"S": "x"}, "entityType": {"S": "WORKER_METRICS"}}) is None
    with pytest.raises(MigrationError, match="no checkpoint"):
        translate_items([{"leaseKey": {"S": "shardId-1"}}], stream_name="orders", migrated_at=MIGRATED_AT)
    with pytest.raises(MigrationError, match="without a string leaseKey"):
        translate_items([{"lease_key": {"S": "shardId-1"}}], stream_name="orders", migrated_at=MIGRATED_AT)
    with pytest.raises(MigrationError, match="leaseCounter is not a number"):
        translate_items(
            [kcl_item("shardId-1", "5", leaseCounter={"S": "x"})], stream_name="orders", migrated_at=MIGRATED_AT
        )


def test_translation_is_deterministic_whatever_the_scan_order() -> None:
    items = [
        kcl_item("shardId-2", "9", parentShardId={"SS": ["shardId-1", "shardId-0"]}),
        kcl_item("shardId-1", "SHARD_END"),
        kcl_item("shardId-0", "SHARD_END"),
    ]
    forward = translate_items(items, stream_name="s", migrated_at=MIGRATED_AT)
    backward = translate_items(items[::-1], stream_name="s", migrated_at=MIGRATED_AT)
    assert forward == backward
    assert [lease.shard_id for lease in forward.leases] == ["shardId-0", "shardId-1", "shardId-2"]


def test_diff_items_ignores_set_order_and_finds_differences() -> None:
    a = kcl_item("shardId-1", "5", parentShardId={"SS": ["p1", "p2"]})
    b = kcl_item("shardId-1", "5", parentShardId={"SS": ["p2", "p1"]})
    assert diff_items([a], [b]) == []
    assert diff_items([a, kcl_item("shardId-2", "1")], [b]) == ["shardId-2"]  # missing from the copy
    assert diff_items([a], [b, kcl_item("shardId-3", "1")]) == ["shardId-3"]  # extra in the copy
    assert diff_items([a], [kcl_item("shardId-1", "6")]) == ["shardId-1"]  # changed


def test_lease_agrees_only_when_no_progress_is_lost() -> None:
    trim = StartPosition(InitialPosition.TRIM_HORIZON)
    migrated = Lease("s", 0, trim, checkpoint=Checkpoint("10", 2))
    assert lease_agrees(Lease("s", 3, trim, checkpoint=Checkpoint("10", 2)), migrated)
    assert lease_agrees(Lease("s", 3, trim, checkpoint=Checkpoint("11")), migrated)
    assert lease_agrees(Lease("s", 3, trim, state=STATE_SHARD_END), migrated)
    assert not lease_agrees(Lease("s", 3, trim, checkpoint=Checkpoint("10", 1)), migrated)
    assert not lease_agrees(Lease("s", 0, trim), migrated)  # a fresh lease would re-read from TRIM_HORIZON
    ended = Lease("s", 0, trim, state=STATE_SHARD_END)
    assert not lease_agrees(Lease("s", 0, trim), ended)
    latest = Lease("s", 0, StartPosition(InitialPosition.AT_TIMESTAMP, MIGRATED_AT))
    assert lease_agrees(latest, latest)
    assert not lease_agrees(Lease("s", 0, trim), latest)


def test_names_and_key_schema() -> None:
    assert migration_table_name("orders-app") == "orders-app_migration"
    assert is_kcl_key_schema({"KeySchema": [{"AttributeName": "leaseKey", "KeyType": "HASH"}]})
    assert not is_kcl_key_schema({"KeySchema": [{"AttributeName": "lease_key", "KeyType": "HASH"}]})
    assert not is_kcl_key_schema(
        {"KeySchema": [{"AttributeName": "leaseKey", "KeyType": "HASH"}, {"AttributeName": "x", "KeyType": "RANGE"}]}
    )
    assert MigrationState.LEGACY.needs_migration and MigrationState.COPIED.needs_migration
    assert not MigrationState.ABSENT.needs_migration and not MigrationState.CURRENT.needs_migration


def test_summary_is_json_and_lists_progress() -> None:
    leases = translate(
        kcl_item("shardId-0", "SHARD_END"),
        kcl_item("shardId-1", SEQ, checkpointSubSequenceNumber={"N": "3"}, parentShardId={"SS": ["shardId-0"]}),
        kcl_item("shardId-2", "LATEST"),
    )
    result = MigrationResult(
        "app", "orders", MigrationState.LEGACY, dry_run=False, migrated_at=MIGRATED_AT, leases=tuple(leases.values())
    )
    summary = json.loads(json.dumps(result.to_dict()))
    assert summary["migrated"] is True and summary["shard_count"] == 3
    assert summary["checkpoints"] == {
        "shardId-0": None,
        "shardId-1": {"sequence_number": SEQ, "sub_sequence_number": 3},
        "shardId-2": None,
    }
    assert summary["shard_end"] == ["shardId-0"]
    assert summary["start_positions"] == {
        "shardId-2": {"position": "AT_TIMESTAMP", "timestamp": MIGRATED_AT.isoformat()}
    }
    assert summary["parent_shard_ids"]["shardId-1"] == ["shardId-0"]
    dry = MigrationResult("app", "orders", MigrationState.LEGACY, dry_run=True)
    assert dry.to_dict()["migrated"] is False
