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
    lease_key,
    next_step,
)

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
GAP = Gap("shardId-1", "position trimmed")


def test_a_first_sync_starts_generation_0_whose_stream_is_read_from_just_before_the_snapshot():
    step = next_step("orders", None, SyncSettings(total_segments=3), NOW)
    assert isinstance(step, StartGeneration)
    assert step.generation == Generation(0, NOW, 3)
    assert step.generation.stream_not_before == NOW - STREAM_START_MARGIN
    assert step.generation.unfinished_segments() == [0, 1, 2]


@pytest.mark.parametrize(
    ("stream_start", "not_before"),
    [(StreamStart.TRIM_HORIZON, None), (StreamStart.LATEST, NOW - STREAM_START_MARGIN)],
)
def test_a_skipped_snapshot_has_no_segments_and_reads_the_stream_from_the_configured_start(stream_start, not_before):
    settings = SyncSettings(snapshot=SnapshotMode.SKIP, stream_start=stream_start)
    step = next_step("orders", None, settings, NOW)
    assert isinstance(step, StartGeneration)
    assert step.generation.total_segments == 0 and step.generation.completed
    assert step.generation.stream_not_before == not_before
    assert next_step("orders", step.generation, settings, NOW) == ReadBatch(step.generation, ())


def test_a_batch_reads_the_unfinished_segments_up_to_its_bound():
    current = Generation(0, NOW, 5, segments_done=frozenset({1}))
    step = next_step("orders", current, SyncSettings(total_segments=5, max_segments_per_batch=2), NOW)
    assert step == ReadBatch(current, (0, 2))


def test_once_every_segment_is_done_the_snapshot_is_completed_and_then_only_the_stream_is_read():
    done = Generation(0, NOW, 2, segments_done=frozenset({0, 1}))
    assert next_step("orders", done, SyncSettings(), NOW) == CompleteSnapshot(done)
    completed = Generation(0, NOW, 2, segments_done=frozenset({0, 1}), completed=True)
    assert next_step("orders", completed, SyncSettings(), NOW) == ReadBatch(completed, ())


def test_a_gap_starts_the_next_generation_with_a_new_snapshot():
    current = Generation(3, NOW - timedelta(days=2), 2, segments_done=frozenset({0, 1}), completed=True)
    step = next_step("orders", current, SyncSettings(total_segments=4), NOW, GAP)
    assert isinstance(step, StartGeneration)
    assert step.generation == Generation(4, NOW, 4)
    assert "position trimmed" in step.reason


def test_a_gap_with_on_gap_fail_stops_naming_the_table_the_cause_and_the_fix():
    current = Generation(0, NOW, 1, segments_done=frozenset({0}), completed=True)
    with pytest.raises(StreamGapError, match=r"orders: position trimmed.*on_gap: resnapshot"):
        next_step("orders", current, SyncSettings(on_gap=OnGap.FAIL), NOW, GAP)


def test_a_shard_not_read_for_longer_than_the_safe_age_is_a_gap():
    assert checkpoint_gap("s", NOW - timedelta(hours=19), NOW) is None
    assert checkpoint_gap("s", None, NOW) is None
    gap = checkpoint_gap("s", NOW - timedelta(hours=21), NOW)
    assert gap is not None and "21.0 hours ago" in gap.reason and "safe age of 20 hours" in gap.reason
    assert checkpoint_gap("s", NOW - timedelta(hours=3), NOW, max_age=timedelta(hours=2)) is not None


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_checkpoint_age", timedelta(hours=24)), ("total_segments", 0), ("max_segments_per_batch", 0)],
)
def test_settings_outside_what_dynamodb_allows_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        SyncSettings(**{field: value})


def test_each_generation_has_its_own_lease_keys():
    assert lease_key(0, "shardId-1") != lease_key(1, "shardId-1")
    assert lease_key(2, "segment-0-of-4") == "g2/segment-0-of-4"
