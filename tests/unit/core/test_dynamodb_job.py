"""A DynamoDB table batch's plan and result: exact JSON round trips, no credential, one unit per segment and shard."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.dynamodb_job import (
    LEGACY_RESULT_KEY,
    GapFound,
    SegmentOutcome,
    SegmentUnit,
    ShardOutcome,
    ShardUnit,
    TableBatchPlan,
    TableBatchResult,
    join_widenings,
)
from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync, _Batch
from airflow_kinesis_snowflake.core.engine.wire import PlanTooLargeError, decode, encode
from airflow_kinesis_snowflake.core.load.dynamodb_rows import KeyAttribute, Layout, Widening
from airflow_kinesis_snowflake.core.load.dynamodb_sink import (
    Deletes,
    DynamoDBTarget,
    KeyColumn,
    MergeResult,
    SegmentMark,
)
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateSettings
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import Segment, SegmentCursor, SegmentTask, SnapshotStart
from airflow_kinesis_snowflake.registry import DYNAMODB_SOURCE, KINESIS_SOURCE

# A cursor holding what must survive exactly: a number's digits and trailing zeros, binary in base64.
CURSOR = '{"pk":{"S":"a\\u00e9"},"sk":{"N":"10.50"},"b":{"B":"AAE="}}'
SEQ = "000000000000000000012345678901234567890"
STARTED = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def target(layout: Layout = Layout.UNPACKED, deletes: Deletes = Deletes.SOFT) -> DynamoDBTarget:
    return DynamoDBTarget(
        Destination("DB", "RAW", "ORDERS_V2"),
        "orders-v2",
        (KeyColumn("PK", "VARCHAR"), KeyColumn("SK", "VARCHAR")),
        layout,
        deletes,
    )


def plan(**changes: Any) -> TableBatchPlan:
    base = TableBatchPlan(
        application_name="orders-ddb",
        table="orders-v2",
        region="eu-west-1",
        stream_arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders-v2/stream/2030-01-01T00:00:00.000",
        generation=2,
        stream_not_before=STARTED - timedelta(minutes=2),
        total_segments=3,
        cutoff=datetime(2030, 1, 2, 4, 0, tzinfo=UTC),
        batch_id="b" * 24,
        segments=(
            SegmentUnit(0, None, None),
            SegmentUnit(2, CURSOR, SegmentMark(CURSOR, done=False, items=7)),
        ),
        shards=(
            ShardUnit("orders-v2/g2/shardId-1", "shardId-1", None),
            ShardUnit("orders-v2/g2/shardId-2", "shardId-2", Checkpoint(SEQ)),
            ShardUnit("orders-v2/g2/shardId-3", "shardId-3", None, first_record="4200000000000000000001"),
        ),
        max_items_per_segment=500,
        max_records_per_shard=1000,
        read_rate=ReadRateSettings(read_fraction=0.25),
        target=target(),
        keys=(KeyAttribute("pk", "S"), KeyAttribute("sk", "N")),
    )
    return replace(base, **changes)


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"stream_not_before": None, "read_rate": None, "total_segments": 0, "segments": ()},
        {"read_rate": ReadRateSettings(read_units_per_second=12.5), "shards": ()},
        {"target": target(Layout.PACKED, Deletes.HARD)},
    ],
    ids=["full", "stream-only-from-trim-horizon", "absolute-rate-snapshot-only", "packed-hard"],
)
def test_the_plan_round_trips_through_json_and_its_argument_exactly(variant: dict[str, Any]) -> None:
    original = plan(**variant)
    assert TableBatchPlan.from_json(original.to_json()) == original
    again = TableBatchPlan.from_work(decode(encode(original)))
    assert again == original
    assert again.to_json() == original.to_json()
    if original.segments:
        # The cursor reads back to the same key, digit for digit.
        assert SegmentCursor.from_text(again.segments[-1].cursor or "") == SegmentCursor.from_text(CURSOR)


def _names(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [str(k) for k in value] + [n for v in value.values() for n in _names(v)]
    if isinstance(value, list):
        return [n for v in value for n in _names(v)]
    return []


SECRET_LIKE = re.compile(r"secret|password|passphrase|token|credential|private|access|auth|session", re.IGNORECASE)


def test_the_plan_holds_no_field_that_looks_like_a_secret() -> None:
    names = _names(plan().to_dict())
    assert "cursor" in names and "read_rate" in names  # the walk reaches the nested fields
    assert [n for n in names if SECRET_LIKE.search(n)] == []


def test_a_plan_too_large_for_one_argument_is_refused_naming_the_setting_to_lower() -> None:
    with pytest.raises(PlanTooLargeError, match="snapshot_total_segments"):
        encode(plan(), limit=100)


def test_each_segment_and_each_shard_is_one_unit_of_work() -> None:
    p = plan()
    assert p.units == [*p.segments, *p.shards]
    assert [type(u).__name__ for u in p.units] == ["SegmentUnit", "SegmentUnit", *["ShardUnit"] * 3]


def test_the_control_plane_plans_each_segment_from_its_cursor_and_each_shard_after_its_mark_or_first_record() -> None:
    generation = Generation(2, STARTED, SnapshotStart(2, STARTED, 3))
    cursor = SegmentCursor.from_text(CURSOR)
    sync = TableSync(
        application_name="orders-ddb",
        table="orders-v2",
        stream_arn="arn:stream",
        target=target(),
        keys=(KeyAttribute("pk", "S"), KeyAttribute("sk", "N")),
        max_items_per_segment=11,
        max_records_per_shard=22,
    )
    marks = {1: SegmentMark(CURSOR, items=4)}
    batch = _Batch(
        sync,
        generation,
        segments=[SegmentTask(Segment(2, 0, 3), None), SegmentTask(Segment(2, 1, 3), cursor)],
        shards={"orders-v2/g2/shardId-9": "shardId-9", "orders-v2/g2/shardId-a": "shardId-a"},
        segment_marks=marks,
        marks={"orders-v2/g2/shardId-9": Checkpoint(SEQ)},
        first_records={"orders-v2/g2/shardId-a": "77"},
    )
    cutoff = STARTED + timedelta(hours=1)
    got = batch.plan(cutoff, "eu-west-1")
    assert got.segments == (SegmentUnit(0, None, None), SegmentUnit(1, cursor.to_text(), marks[1]))
    assert got.shards == (
        ShardUnit("orders-v2/g2/shardId-9", "shardId-9", Checkpoint(SEQ)),
        ShardUnit("orders-v2/g2/shardId-a", "shardId-a", None, first_record="77"),  # never read: from its first
    )
    assert (got.generation, got.total_segments, got.batch_id, got.cutoff) == (2, 3, batch.batch_id, cutoff)
    assert got.stream_not_before == generation.stream_not_before
    assert (got.max_items_per_segment, got.max_records_per_shard) == (11, 22)
    assert got.generation_id == "orders-v2/g2"
    assert TableBatchPlan.from_work(decode(encode(got))) == got


def test_the_result_round_trips_through_the_batch_outcomes_table_form() -> None:
    result = TableBatchResult(
        "b" * 24,
        MergeResult(changes_loaded=9, rows_inserted=5, rows_updated=2, rows_deleted=1, completed_snapshot=2),
        segments=(SegmentOutcome(0, 4, None), SegmentOutcome(2, 3, CURSOR)),
        shards=(ShardOutcome("orders-v2/g2/shardId-1", "shardId-1", 2, SEQ, True),),
    )
    recorded = result.as_batch_result("app/orders-v2/b/x")
    assert (recorded.committed, recorded.rows_loaded) == (True, 9)
    stored = BatchResult.from_dict(recorded.to_dict())  # as read back from the outcomes table's JSON
    assert TableBatchResult.from_batch_result(stored) == result
    assert [s.done for s in result.segments] == [True, False]


def test_a_gap_travels_back_with_nothing_applied() -> None:
    result = TableBatchResult("b" * 24, None, gap=GapFound("shardId-1", SEQ, "trimmed"))
    recorded = result.as_batch_result("d")
    assert recorded.committed is False
    assert TableBatchResult.from_json(result.to_json()) == result
    assert TableBatchResult.from_batch_result(BatchResult.from_dict(recorded.to_dict())).gap == result.gap


def test_an_outcome_of_a_kinesis_batch_is_not_read_as_a_dynamodb_result() -> None:
    kinesis = BatchResult("b", "d", True, 1, 0, (), STARTED, {"evolution": True})
    assert LEGACY_RESULT_KEY not in kinesis.schema and kinesis.source == KINESIS_SOURCE
    with pytest.raises(ValueError, match="no DynamoDB batch result"):
        TableBatchResult.from_batch_result(kinesis)


def test_an_outcome_names_its_source_and_carries_the_sources_result_as_its_detail() -> None:
    result = TableBatchResult("b" * 24, MergeResult(changes_loaded=3), segments=(SegmentOutcome(0, 3, None),))

    stored = result.as_batch_result("d").to_dict()  # the outcomes table's JSON

    assert (stored["source"], stored["detail"], stored["schema"]) == (DYNAMODB_SOURCE, result.to_dict(), {})
    # An outcome recorded by an earlier release (the result inside ``schema``, no source) still reads.
    legacy = {k: v for k, v in stored.items() if k not in ("source", "detail")}
    legacy["schema"] = {LEGACY_RESULT_KEY: result.to_dict()}
    earlier = BatchResult.from_dict(legacy)
    assert earlier.source == KINESIS_SOURCE  # what an unnamed outcome defaults to ...
    assert TableBatchResult.from_batch_result(earlier) == result  # ... and DynamoDB's still reads back


def test_an_outcome_defaults_to_the_registrys_kinesis_source() -> None:
    assert BatchResult("b", "d", True, 0, 0, (), STARTED, {}).source == KINESIS_SOURCE


def test_the_units_widenings_join_to_the_widest_per_column_in_column_order() -> None:
    columns = [TableColumn("A", "NUMBER(38,0)"), TableColumn("B", "NUMBER(38,0)"), TableColumn("C", "BOOLEAN")]
    per_unit = [
        [Widening("B", "VARCHAR"), Widening("C", "VARCHAR")],
        [Widening("A", "VARCHAR"), Widening("B", "VARIANT")],
        [Widening("B", "VARCHAR")],
    ]
    assert join_widenings(per_unit, columns) == [
        Widening("A", "VARCHAR"),
        Widening("B", "VARIANT"),
        Widening("C", "VARCHAR"),
    ]
    assert join_widenings([[], []], columns) == []
