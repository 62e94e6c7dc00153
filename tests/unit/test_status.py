"""A connector's shards for `status` and the lag page, from its leases and its recent batch outcomes."""

from __future__ import annotations

import dataclasses
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow_kinesis_snowflake.core.dynamodb_job import SegmentOutcome, ShardOutcome, TableBatchResult
from airflow_kinesis_snowflake.core.lag import LagLevel
from airflow_kinesis_snowflake.core.load.dynamodb_sink import MergeResult, SegmentMark, SegmentRow
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, InitialPosition, ShardResult, StartPosition
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation, lease_key
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import SnapshotStart
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot_progress import SnapshotProgress, TableSize
from airflow_kinesis_snowflake.core.state.leases import STATE_ACTIVE, STATE_SHARD_END, Lease
from airflow_kinesis_snowflake.status import (
    ConnectorStatus,
    DynamoDBConnectorStatus,
    ShardStatus,
    TableStatus,
    connector_configs,
    shard_statuses,
    table_status,
)
from tests.emulators.servers import REPO_ROOT

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _batch(batch_id: str, minute: int, *shards: tuple[str, int, int, int]) -> BatchResult:
    results = tuple(
        ShardResult(sid, None, Checkpoint(str(rows)), rows + dead, rows, dead, 0, False, millis_behind_latest=lag)
        for sid, rows, dead, lag in shards
    )
    rows = sum(s.rows_staged for s in results)
    dead = sum(s.dead_letters_staged for s in results)
    return BatchResult(batch_id, "stage", True, rows, dead, results, T0 + timedelta(minutes=minute), {})


def test_each_shard_shows_its_checkpoint_and_the_newest_batch_that_took_it_with_its_lag_history() -> None:
    newest_first = [
        _batch("b3", 10, ("s0", 4, 0, 100)),  # s1 not taken
        _batch("b2", 5, ("s0", 7, 1, 2000), ("s1", 3, 2, 60_000)),
        _batch("b1", 0, ("s0", 1, 0, 9000)),
    ]
    start = StartPosition(InitialPosition.TRIM_HORIZON)
    leases = {
        "s0": Lease("s0", 5, start, checkpoint=Checkpoint("104"), checkpointed_at=1000.0),
        "s1": Lease("s1", 2, start, checkpoint=Checkpoint("33"), checkpointed_at=700.0),
        "s2": Lease("s2", 0, start),  # a child no batch took yet
    }

    s0, s1, s2 = shard_statuses(leases, newest_first, now=1300.0)

    assert (s0.checkpoint, s0.checkpoint_age_seconds, s0.last_batch_id, s0.rows, s0.dead_letters) == (
        Checkpoint("104"),
        300.0,
        "b3",
        4,
        0,
    )
    assert s0.millis_behind_latest == 100
    assert s0.history == ((T0, 9000), (T0 + timedelta(minutes=5), 2000), (T0 + timedelta(minutes=10), 100))
    assert (s1.last_batch_id, s1.rows, s1.dead_letters, s1.millis_behind_latest) == ("b2", 3, 2, 60_000)
    assert s1.checkpoint_age_seconds == 600.0
    assert (s2.checkpoint, s2.checkpoint_age_seconds, s2.last_batch_id, s2.history) == (None, None, None, ())

    text = ConnectorStatus("orders", "app", "orders", "A.B.C", 24, (s0, s1, s2)).text().splitlines()
    assert text[0] == "connector orders: stream orders -> A.B.C, application app, retention 24 h"
    assert text[3].split() == ["s0", "104", "5m00s", "0s", "b3", "2026-01-05", "12:10:00", "4", "0"]
    assert text[5].split() == ["s2", "-", "-", "-", "-", "-", "-", "-"]


def test_a_shard_near_the_retention_is_named_under_the_table() -> None:
    (shard,) = shard_statuses({}, [_batch("b1", 0, ("s0", 1, 0, 22 * 3_600_000))], now=0.0)
    status = ConnectorStatus("orders", "app", "orders", "A.B.C", 24, (shard,))
    page = "https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/lag/#near-the-retention-warning-and-error"
    assert status.text().splitlines()[-1] == f"  error: shard s0 is near the stream's retention ({page})"
    assert status.to_dict()["shards"][0]["level"] == "error"


# -- DynamoDB connectors ------------------------------------------------------------------------------

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
HOURS = 3600.0


def _ddb_batch(
    batch_id: str,
    minutes_ago: int,
    changes: int,
    *,
    shards: tuple[ShardOutcome, ...] = (),
    segments: tuple[SegmentOutcome, ...] = (),
) -> BatchResult:
    merge = MergeResult(changes_loaded=changes)
    result = TableBatchResult(batch_id, merge, tuple(segments), tuple(shards)).as_batch_result(f"stage/{batch_id}")
    return dataclasses.replace(result, finished_at=NOW - timedelta(minutes=minutes_ago))


def _stream_lease(key: str, hours_ago: float, *, ended: bool = False) -> Lease:
    return Lease(
        key,
        1,
        StartPosition(InitialPosition.TRIM_HORIZON),
        checkpoint=Checkpoint("900"),
        checkpointed_at=NOW.timestamp() - hours_ago * HOURS,
        state=STATE_SHARD_END if ended else STATE_ACTIVE,
    )


def test_a_dynamodb_table_shows_its_generation_snapshot_progress_stream_shards_and_its_own_last_batch() -> None:
    generation = Generation(2, NOW - timedelta(hours=1), SnapshotStart(2, NOW - timedelta(hours=1), 4))
    segments = [
        SegmentRow(0, 4, SegmentMark(None, True, 120), "snap-1"),
        SegmentRow(1, 4, SegmentMark('{"pk": "k9"}', False, 40), "snap-1"),
    ]
    shard = lease_key("orders", 2, "shardId-1")
    batches = [
        # Newest first: another table's batch (its shard keys name it), a Kinesis batch of the same
        # application, then this table's stream batch and the snapshot batch its ledger names.
        _ddb_batch(
            "other", 1, 9, shards=(ShardOutcome(lease_key("users", 0, "shardId-1"), "shardId-1", 9, "5", False),)
        ),
        BatchResult("kinesis", "stage/k", True, 3, 0, (), NOW, {}),
        _ddb_batch("stream-1", 5, 7, shards=(ShardOutcome(shard, "shardId-1", 7, "900", False),)),
        _ddb_batch("snap-1", 10, 160, segments=(SegmentOutcome(0, 120, None), SegmentOutcome(1, 40, '{"pk": "k9"}'))),
    ]

    status = table_status(
        "orders",
        "ANALYTICS.RAW.ORDERS",
        generation,
        segments,
        {"shardId-1": _stream_lease(shard, 0.5)},
        batches,
        NOW.timestamp(),
    )

    assert (status.generation, status.generation_started_at) == (2, NOW - timedelta(hours=1))
    assert status.snapshot is not None
    assert (status.snapshot.total_segments, status.snapshot.segments_done, status.snapshot.items) == (4, 1, 160)
    # No ItemCount read: the done segment's 120 items, extrapolated to the four; 160 items in an hour.
    assert status.snapshot.text() == "1/4 segments done, 160 of ~480 items (33%), ETA 2h00m"
    assert (status.last_batch_id, status.last_batch_changes) == ("stream-1", 7)
    assert status.last_batch_at == NOW - timedelta(minutes=5)
    (shard_status,) = status.shards
    assert shard_status.shard_id == "shardId-1" and shard_status.checkpoint == Checkpoint("900")
    assert shard_status.checkpoint_age_seconds == 0.5 * HOURS
    assert (shard_status.last_batch_id, shard_status.rows) == ("stream-1", 7)


def test_a_running_snapshot_shows_its_percentage_of_the_tables_item_count_and_an_eta_then_complete() -> None:
    started = NOW - timedelta(minutes=10)
    generation = Generation(0, started, SnapshotStart(0, started, 2))
    segments = [SegmentRow(0, 2, SegmentMark('{"pk": "k1"}', False, 3000), "snap-1")]

    running = table_status(
        "orders", "A.B.ORDERS", generation, segments, {}, [], NOW.timestamp(), TableSize(12_000, 9_000_000)
    )

    assert running.snapshot == SnapshotProgress(
        total_segments=2,
        segments_done=0,
        items=3000,
        completed=False,
        estimated_items=12_000,
        percent=25,
        eta=timedelta(minutes=30),
        items_per_second=5.0,
        size_bytes=9_000_000,
    )
    row = DynamoDBConnectorStatus("c", "app", 20, (running,)).text().splitlines()[3]
    assert "0/2 segments done, 3,000 of ~12,000 items (25%), ETA 30m00s" in row
    as_json = DynamoDBConnectorStatus("c", "app", 20, (running,)).to_dict()["tables"][0]["snapshot"]
    assert (as_json["percent"], as_json["eta_seconds"], as_json["estimated_items"]) == (25, 1800, 12_000)

    done = [
        SegmentRow(0, 2, SegmentMark(None, True, 6100), "snap-2"),
        SegmentRow(1, 2, SegmentMark(None, True, 5900), "snap-2"),
    ]
    completed = dataclasses.replace(generation, completed=True)
    finished = table_status("orders", "A.B.ORDERS", completed, done, {}, [], NOW.timestamp())
    assert finished.snapshot is not None and finished.snapshot.text() == "complete (12,000 items)"
    assert (finished.snapshot.percent, finished.snapshot.eta) == (100, timedelta(0))


def test_a_dynamodb_table_before_its_first_batch_has_no_generation() -> None:
    status = table_status("orders", "ANALYTICS.RAW.ORDERS", None, [], {}, [], NOW.timestamp())
    assert status == TableStatus("orders", "ANALYTICS.RAW.ORDERS")
    row = DynamoDBConnectorStatus("c", "app", 20, (status,)).text().splitlines()[3]
    assert row.split() == ["orders", "ANALYTICS.RAW.ORDERS", "-", "-", "-", "-", "-"]


def test_a_stream_shard_is_a_warning_past_half_of_the_safe_age_and_an_error_past_90_percent() -> None:
    def shard(hours_ago: float, *, ended: bool = False) -> ShardStatus:
        return ShardStatus("s", Checkpoint("1"), hours_ago * HOURS, None, None, None, None, None, ended=ended)

    table = TableStatus("orders", "A.B.ORDERS", 0, shards=(shard(9), shard(11), shard(19), shard(30, ended=True)))
    status = DynamoDBConnectorStatus("orders", "orders-app", 20, (table,))

    assert [status.level(s) for s in table.shards] == [LagLevel.OK, LagLevel.WARNING, LagLevel.ERROR, LagLevel.OK]
    assert status.worst_level() is LagLevel.ERROR
    text = status.text()
    assert text.splitlines()[0] == "connector orders: DynamoDB tables, application orders-app, safe age 20 h"
    assert "error: orders shard s was last read 19h00m ago; at the safe age of 20 h the next run finds a gap" in text
    assert "s (ended)" in text
    levels = [s["level"] for s in status.to_dict()["tables"][0]["shards"]]
    assert levels == ["ok", "warning", "error", "ok"]


def test_items_set_aside_are_counted_and_named_with_their_table() -> None:
    table = TableStatus("orders", "A.B.ORDERS", 0, items_set_aside=3, set_aside_table="A.B.ORDERS_DYNAMODB_FAILURES")
    status = DynamoDBConnectorStatus("orders", "orders-app", 20, (table,))
    assert (
        "  warning: orders: 3 item(s) set aside in A.B.ORDERS_DYNAMODB_FAILURES: an attribute cannot be a column"
        in status.text()
    )
    assert status.to_dict()["tables"][0]["items_set_aside"] == 3
    assert "set aside" not in DynamoDBConnectorStatus("o", "app", 20, (TableStatus("orders", "A.B.O"),)).text()


def test_a_dynamodb_connector_that_could_not_be_read_says_why_and_names_the_tables_it_skips() -> None:
    failed = DynamoDBConnectorStatus("orders", "orders-app", 20, error="AccessDeniedException: no Scan")
    assert failed.text().splitlines()[1] == "  error: AccessDeniedException: no Scan"
    assert failed.worst_level() is LagLevel.OK
    skipping = DynamoDBConnectorStatus("orders", "orders-app", 20, skipped=("keys: stream view type KEYS_ONLY",))
    assert "  not synced: keys: stream view type KEYS_ONLY" in skipping.text()
    assert skipping.to_dict()["skipped"] == ["keys: stream view type KEYS_ONLY"]


def test_a_dags_folder_with_connectors_of_both_sources_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "connectors").mkdir()
    shutil.copy(REPO_ROOT / "airflow_kinesis_snowflake/templates/connectors/example.yaml", tmp_path / "connectors")
    shutil.copy(REPO_ROOT / "demo/connectors/customers.yaml", tmp_path / "connectors")

    configs = connector_configs(tmp_path)

    assert sorted(type(c).__name__ for c in configs) == ["ConnectorConfig", "DynamoDBConnectorConfig"]
