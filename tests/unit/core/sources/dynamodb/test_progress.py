"""A table's sync: its first generation, reading, completing the snapshot, and a gap in the stream."""

from datetime import UTC, datetime, timedelta

import pytest

from airflow_kinesis_snowflake.core.sources.dynamodb.progress import (
    STREAM_START_MARGIN,
    CompleteSnapshot,
    Gap,
    Generation,
    OnGap,
    ReadBatch,
    SnapshotMode,
    StartGeneration,
    StreamGapError,
    StreamStart,
    SyncSettings,
    checkpoint_gap,
    destination_dropped,
    lease_key,
    next_step,
    reads_from_first_record,
    shard_gap,
    stream_replaced,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import SegmentCursor, SegmentState, SnapshotStart

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
GAP = Gap("shardId-1", "position trimmed")
CURSOR = SegmentCursor({"pk": {"S": "m"}})


def generation(number: int, total: int, *, completed: bool = False) -> Generation:
    return Generation(number, NOW, SnapshotStart(number, NOW, total), completed=completed)


def test_a_first_sync_starts_generation_0_whose_stream_is_read_from_just_before_the_snapshot():
    step = next_step("orders", None, [], SyncSettings(total_segments=3), NOW)
    assert isinstance(step, StartGeneration)
    assert step.generation == generation(0, 3)
    assert step.generation.stream_not_before == NOW - STREAM_START_MARGIN


@pytest.mark.parametrize(
    ("stream_start", "not_before"),
    [(StreamStart.TRIM_HORIZON, None), (StreamStart.LATEST, NOW - STREAM_START_MARGIN)],
)
def test_a_skipped_snapshot_has_no_segments_and_reads_the_stream_from_the_configured_start(stream_start, not_before):
    settings = SyncSettings(snapshot=SnapshotMode.SKIP, stream_start=stream_start)
    step = next_step("orders", None, [], settings, NOW)
    assert isinstance(step, StartGeneration)
    assert step.generation.snapshot is None and step.generation.completed
    assert step.generation.stream_not_before == not_before
    assert next_step("orders", step.generation, [], settings, NOW) == ReadBatch(step.generation, ())


def test_a_batch_reads_the_unfinished_segments_from_their_cursors_up_to_its_bound():
    current = generation(0, 5)
    states = [SegmentState(0, CURSOR), SegmentState(1, done=True)]
    step = next_step("orders", current, states, SyncSettings(total_segments=5, max_segments_per_batch=2), NOW)
    assert isinstance(step, ReadBatch)
    assert [(t.segment.number, t.cursor) for t in step.segments] == [(0, CURSOR), (2, None)]


def test_once_every_segment_is_done_the_snapshot_is_completed_and_then_only_the_stream_is_read():
    done = [SegmentState(0, done=True), SegmentState(1, done=True)]
    assert next_step("orders", generation(0, 2), done, SyncSettings(), NOW) == CompleteSnapshot(generation(0, 2))
    completed = generation(0, 2, completed=True)
    assert next_step("orders", completed, done, SyncSettings(), NOW) == ReadBatch(completed, ())


def test_a_gap_starts_the_next_generation_with_a_new_snapshot():
    current = generation(3, 2, completed=True)
    step = next_step("orders", current, [], SyncSettings(total_segments=4), NOW + timedelta(days=2), GAP)
    assert isinstance(step, StartGeneration)
    assert step.generation.number == 4 and step.generation.snapshot == SnapshotStart(4, NOW + timedelta(days=2), 4)
    assert not step.generation.completed and "position trimmed" in step.reason


def test_a_gap_with_on_gap_fail_stops_naming_the_table_the_cause_and_the_fix():
    with pytest.raises(StreamGapError, match=r"orders: position trimmed.*on_gap: resnapshot"):
        next_step("orders", generation(0, 1, completed=True), [], SyncSettings(on_gap=OnGap.FAIL), NOW, GAP)


def test_a_shard_not_read_for_longer_than_the_safe_age_is_a_gap():
    assert checkpoint_gap("s", NOW - timedelta(hours=19), NOW) is None
    assert checkpoint_gap("s", None, NOW) is None
    gap = checkpoint_gap("s", NOW - timedelta(hours=21), NOW)
    assert gap is not None and gap.shard_id == "s" and "safe age" in gap.reason
    assert checkpoint_gap("s", NOW - timedelta(hours=3), NOW, max_age=timedelta(hours=2)) is not None


def test_a_stream_other_than_the_one_the_generation_follows_is_a_gap_naming_both():
    followed = Generation(3, NOW, None, completed=True, stream_arn="arn:table/orders/stream/2026-01-01")
    assert stream_replaced(followed, "arn:table/orders/stream/2026-01-01") is None
    gap = stream_replaced(followed, "arn:table/orders/stream/2026-11-24")
    assert gap is not None and "arn:table/orders/stream/2026-11-24" in gap.reason
    assert "not arn:table/orders/stream/2026-01-01 that generation 3 follows" in gap.reason
    unrecorded = Generation(3, NOW, None, completed=True)
    assert stream_replaced(unrecorded, "arn:table/orders/stream/2026-11-24") is None


def test_a_destination_missing_once_a_generation_is_recorded_is_a_gap_naming_it_and_undrop():
    assert destination_dropped(None, "ANALYTICS.RAW.ORDERS") is None  # the first sync creates it
    gap = destination_dropped(Generation(2, NOW, None, completed=True), "ANALYTICS.RAW.ORDERS")
    assert gap is not None and gap.shard_id == "ANALYTICS.RAW.ORDERS"
    assert "ANALYTICS.RAW.ORDERS was dropped after generation 2 started" in gap.reason
    assert "UNDROP TABLE ANALYTICS.RAW.ORDERS" in gap.reason
    step = next_step("orders", Generation(2, NOW, None, completed=True), [], SyncSettings(), NOW, gap)
    assert isinstance(step, StartGeneration) and step.generation.number == 3 and step.generation.snapshot
    with pytest.raises(StreamGapError, match=r"was dropped.*on_gap: resnapshot"):
        next_step("orders", Generation(2, NOW, None, completed=True), [], SyncSettings(on_gap=OnGap.FAIL), NOW, gap)


def test_a_shard_read_to_its_end_has_no_gap_however_long_ago_and_whether_listed_or_not():
    for listed in (True, False):
        last_read = NOW - timedelta(days=3)
        assert shard_gap("s", listed=listed, ended=True, last_read_at=last_read, now=NOW) is None


def test_a_listed_shard_has_a_gap_once_its_last_read_is_older_than_the_safe_age():
    assert shard_gap("s", listed=True, ended=False, last_read_at=NOW - timedelta(hours=19), now=NOW) is None
    assert shard_gap("s", listed=True, ended=False, last_read_at=None, now=NOW) is None
    old = shard_gap("s", listed=True, ended=False, last_read_at=NOW - timedelta(hours=21), now=NOW)
    assert old is not None and "safe age" in old.reason


@pytest.mark.parametrize("last_read", [None, NOW - timedelta(minutes=5)])
def test_a_shard_that_left_the_stream_before_it_was_read_to_its_end_is_a_gap(last_read):
    gap = shard_gap("shardId-7", listed=False, ended=False, last_read_at=last_read, now=NOW)
    assert gap is not None and gap.shard_id == "shardId-7"
    assert "left the stream" in gap.reason and "retention" in gap.reason


@pytest.mark.parametrize(
    ("age", "from_first"),
    [(timedelta(minutes=1), False), (timedelta(hours=19, minutes=59), False), (timedelta(hours=20), True)],
)
def test_a_shard_never_read_starts_at_its_first_record_once_the_generation_is_older_than_the_safe_age(age, from_first):
    current = Generation(2, NOW - age, None, completed=True)
    assert reads_from_first_record(current, NOW) is from_first
    assert reads_from_first_record(current, NOW, max_age=timedelta(minutes=1)) is True


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_checkpoint_age", timedelta(hours=24)), ("total_segments", 0), ("max_segments_per_batch", 0)],
)
def test_settings_outside_what_dynamodb_allows_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SyncSettings(**{field: value})


def test_a_generation_holds_only_its_own_snapshot():
    with pytest.raises(ValueError, match="generation 1 holds the snapshot of generation 0"):
        Generation(1, NOW, SnapshotStart(0, NOW, 2))


def test_each_table_and_generation_has_its_own_lease_keys():
    assert lease_key("orders", 0, "shardId-1") != lease_key("orders", 1, "shardId-1")
    assert lease_key("orders", 0, "shardId-1") != lease_key("users", 0, "shardId-1")
    assert lease_key("orders", 2, "segment-0-of-4") == "orders/g2/segment-0-of-4"
