"""A snapshot's progress: segments and items done, the table's items estimated, a percentage and an ETA."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot_progress import (
    SegmentCount,
    TableSize,
    after_batch,
    estimate_total_items,
    snapshot_progress,
)

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def test_the_percentage_is_of_the_tables_item_count_and_the_eta_is_at_the_rate_observed_since_the_start() -> None:
    segments = [SegmentCount(0, 1500, False), SegmentCount(1, 500, False)]

    progress = snapshot_progress(
        4, segments, started_at=T0, now=T0 + timedelta(minutes=20), table_size=TableSize(10_000, 4_000_000)
    )

    assert (progress.items, progress.segments_done, progress.estimated_items) == (2000, 0, 10_000)
    assert progress.percent == 20
    assert progress.items_per_second == 2000 / 1200
    assert progress.eta == timedelta(minutes=80)  # 8,000 items left at 100 a minute
    assert progress.size_bytes == 4_000_000
    assert progress.text() == "0/4 segments done, 2,000 of ~10,000 items (20%), ETA 1h20m"


def test_without_an_item_count_the_done_segments_are_extrapolated_to_every_segment() -> None:
    # A table counted before it was filled (ItemCount is updated about every six hours): 0 is unknown.
    segments = [SegmentCount(0, 300, True), SegmentCount(1, 100, True), SegmentCount(2, 250, False)]
    # 200 per done segment: 300 + 100 + max(250, 200) for the one under way + 200 for the unread one.
    assert estimate_total_items(4, segments, TableSize(0, 0)) == 850
    assert estimate_total_items(4, segments, None) == 850


def test_nothing_known_gives_no_estimate_no_percentage_and_no_eta() -> None:
    progress = snapshot_progress(4, [SegmentCount(0, 40, False)], started_at=T0, now=T0 + timedelta(minutes=1))
    assert (progress.estimated_items, progress.percent, progress.eta) == (None, None, None)
    assert progress.text() == "0/4 segments done, 40 items (total not known yet)"
    before_any_read = snapshot_progress(4, [], started_at=T0, now=T0, table_size=TableSize(500, 1))
    assert (before_any_read.percent, before_any_read.eta, before_any_read.items_per_second) == (0, None, None)


def test_a_stale_item_count_below_what_was_read_never_shows_100_percent_before_every_segment_is_done() -> None:
    segments = [SegmentCount(0, 700, False), SegmentCount(1, 900, True)]
    progress = snapshot_progress(2, segments, started_at=T0, now=T0 + timedelta(hours=1), table_size=TableSize(1000, 1))
    assert (progress.estimated_items, progress.percent, progress.eta) == (1600, 99, None)
    assert progress.text() == "1/2 segments done, 1,600 of ~1,600 items (99%)"


def test_every_segment_read_is_100_percent_then_complete() -> None:
    segments = [SegmentCount(0, 700, True), SegmentCount(1, 900, True)]
    read = snapshot_progress(2, segments, started_at=T0, now=T0 + timedelta(hours=1), table_size=TableSize(9000, 1))
    assert (read.estimated_items, read.percent, read.eta) == (1600, 100, timedelta(0))
    assert read.text() == "2/2 segments done, 1,600 of ~1,600 items (100%), completing"
    done = snapshot_progress(2, segments, started_at=T0, now=T0 + timedelta(hours=1), completed=True)
    assert done.text() == "complete (1,600 items)"
    assert done.to_dict()["eta_seconds"] == 0


def test_a_batch_adds_its_items_to_the_ledgers_counts_and_marks_the_segments_it_finished() -> None:
    before = [SegmentCount(0, 100, False), SegmentCount(1, 50, True)]
    assert after_batch(before, {0: 30, 3: 12}, [3]) == [
        SegmentCount(0, 130, False),
        SegmentCount(1, 50, True),
        SegmentCount(3, 12, True),
    ]


def test_the_figures_of_describe_table_are_read_missing_ones_as_zero() -> None:
    assert TableSize.from_description({"ItemCount": 12, "TableSizeBytes": 3400}) == TableSize(12, 3400)
    assert TableSize.from_description({"TableName": "t"}) == TableSize(0, 0)
