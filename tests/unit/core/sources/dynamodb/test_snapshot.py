"""The snapshot's pure parts: segment ids, exact cursors, the read rate, the limiter's waits, the plan."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.sources.dynamodb.model import Item
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import (
    DEFAULT_READ_FRACTION,
    ReadRateError,
    ReadRateLimiter,
    ReadRateSettings,
    TableCapacity,
    segment_read_rate,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import (
    Segment,
    SegmentCursor,
    SegmentRead,
    SegmentState,
    SnapshotStart,
    SnapshotTable,
    plan_snapshot_batch,
    snapshot_complete,
)

START = SnapshotStart(generation=2, started_at=datetime(2026, 3, 1, 12, tzinfo=UTC), total_segments=4)


class FakeTime:
    """A clock that moves only when slept on, or when a test moves it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


# -- segments and cursors ----------------------------------------------------------------------


def test_a_segment_id_names_its_number_and_total_and_reads_back():
    segment = Segment(generation=3, number=7, total=16)
    assert segment.id == "segment-7-of-16"
    assert Segment.from_id(3, segment.id) == segment


@pytest.mark.parametrize(("number", "total"), [(4, 4), (-1, 4), (0, 0), (0, 1_000_001)])
def test_a_segment_outside_dynamodbs_bounds_is_refused(number, total):
    with pytest.raises(ValueError, match="segment"):
        Segment(0, number, total)


@pytest.mark.parametrize(
    "key",
    [
        {"pk": {"S": "order#42 — café"}},
        {"pk": {"N": "-12345678901234567890.123456789012345678"}},
        {"pk": {"B": bytes(range(256))}},
        {"pk": {"S": "a"}, "sk": {"N": "1E+3"}},
        {"pk": {"B": b"\x00\xff"}, "sk": {"S": ""}},
    ],
)
def test_a_cursor_with_string_number_or_binary_keys_survives_text_exactly(key):
    cursor = SegmentCursor(key)
    text = cursor.to_text()
    back = SegmentCursor.from_text(text)
    assert back == cursor
    assert back.last_evaluated_key == key
    assert all(type(v) is type(key[k]) for k in key for v in [back.last_evaluated_key[k]])
    assert back.to_text() == text


def test_a_cursors_text_is_dynamodbs_wire_format_with_binary_in_base64():
    cursor = SegmentCursor({"sk": {"N": "10.50"}, "pk": {"B": b"\x01\x02"}})
    assert cursor.to_text() == '{"pk":{"B":"AQI="},"sk":{"N":"10.50"}}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "JSON object"),
        ("[1]", "JSON object"),
        ('{"pk": {"M": {}}}', "key value"),
        ('{"pk": {"S": "a", "N": "1"}}', "key value"),
        ('{"pk": {"N": 1}}', "no string"),
        ('{"pk": {"B": "***"}}', "base64"),
        ("{}", "attributes"),
    ],
)
def test_a_text_that_is_not_a_key_is_refused_with_the_text(text, message):
    with pytest.raises(ValueError, match=message):
        SegmentCursor.from_text(text)


def test_the_snapshot_table_takes_its_keys_from_the_key_schema():
    description = {
        "TableName": "orders",
        "KeySchema": [{"AttributeName": "sk", "KeyType": "RANGE"}, {"AttributeName": "pk", "KeyType": "HASH"}],
        "ProvisionedThroughput": {"ReadCapacityUnits": 40, "WriteCapacityUnits": 5},
    }
    table = SnapshotTable.from_description(description)
    assert table.key_attributes == ("pk", "sk")
    assert table.capacity == TableCapacity("orders", "PROVISIONED", 40)
    item: Item = {"pk": {"S": "a"}, "sk": {"N": "1"}, "v": {"BOOL": True}}
    assert table.keys_of(item) == {"pk": {"S": "a"}, "sk": {"N": "1"}}
    with pytest.raises(ValueError, match=r"lacks its key attributes \['sk'\]"):
        table.keys_of({"pk": {"S": "a"}})


# -- the read rate -----------------------------------------------------------------------------

PROVISIONED = TableCapacity("orders", "PROVISIONED", 400)
ON_DEMAND = TableCapacity("events", "PAY_PER_REQUEST", 0)


def test_a_provisioned_table_is_read_with_a_fraction_of_its_capacity_shared_by_the_segments_at_once():
    assert segment_read_rate(PROVISIONED, ReadRateSettings(read_fraction=0.25), 4) == 25.0
    assert segment_read_rate(PROVISIONED, ReadRateSettings(), 2) == 400 * DEFAULT_READ_FRACTION / 2


def test_an_absolute_rate_applies_to_either_billing_mode():
    settings = ReadRateSettings(read_units_per_second=90)
    assert segment_read_rate(ON_DEMAND, settings, 3) == 30.0
    assert segment_read_rate(PROVISIONED, settings, 1) == 90.0


def test_an_on_demand_table_without_an_absolute_rate_names_the_setting():
    with pytest.raises(ReadRateError, match=r"events is on demand.*set snapshot_read_units_per_second"):
        segment_read_rate(ON_DEMAND, ReadRateSettings(read_fraction=0.5), 1)


@pytest.mark.parametrize(
    ("capacity", "settings", "message"),
    [
        (PROVISIONED, ReadRateSettings(read_fraction=0.5, read_units_per_second=10), "both set"),
        (PROVISIONED, ReadRateSettings(read_fraction=1.5), r"snapshot_read_fraction must be .* got 1.5"),
        (PROVISIONED, ReadRateSettings(read_fraction=0), "snapshot_read_fraction must be"),
        (PROVISIONED, ReadRateSettings(read_units_per_second=0), "snapshot_read_units_per_second must be above 0"),
        (TableCapacity("t", "PROVISIONED", 0), ReadRateSettings(), "reports 0 provisioned"),
    ],
)
def test_settings_without_a_usable_rate_are_refused(capacity, settings, message):
    with pytest.raises(ReadRateError, match=message):
        segment_read_rate(capacity, settings, 1)


def test_the_capacity_is_read_from_describe_table_and_on_demand_from_its_billing_summary():
    on_demand = {
        "TableName": "events",
        "BillingModeSummary": {"BillingMode": "PAY_PER_REQUEST"},
        "ProvisionedThroughput": {"ReadCapacityUnits": 0, "WriteCapacityUnits": 0},
    }
    assert TableCapacity.from_description(on_demand).on_demand
    old = {"TableName": "legacy", "ProvisionedThroughput": {"ReadCapacityUnits": 7}}
    assert TableCapacity.from_description(old) == TableCapacity("legacy", "PROVISIONED", 7)


# -- the limiter -------------------------------------------------------------------------------


def test_the_limiter_waits_off_what_pages_consumed_beyond_the_burst_at_the_rate():
    time = FakeTime()
    limiter = ReadRateLimiter(10, clock=time.clock, sleep=time.sleep)
    for _ in range(10):
        limiter.wait()
        limiter.pay(5)
    limiter.wait()
    # 50 units paid; the full bucket covered 10, the other 40 at 10 units/s.
    assert sum(time.sleeps) == pytest.approx(4.0)
    assert limiter.consumed_units == 50
    assert limiter.waited_seconds == pytest.approx(4.0)
    # Never more than the burst plus the rate over the time passed, before a page.
    assert limiter.consumed_units <= limiter.burst + 10 * (time.now - 100.0) + 1e-9


def test_a_page_costlier_than_the_bucket_is_paid_after_the_fact_before_the_next_page():
    time = FakeTime()
    limiter = ReadRateLimiter(4, clock=time.clock, sleep=time.sleep)
    assert limiter.wait() == 0
    limiter.pay(128)  # one 1 MB page, eventually consistent
    assert time.sleeps == []
    assert limiter.wait() == pytest.approx((128 - 4) / 4)


def test_time_spent_reading_counts_towards_the_rate_and_idle_time_does_not_bank_beyond_the_burst():
    time = FakeTime()
    limiter = ReadRateLimiter(10, burst=20, clock=time.clock, sleep=time.sleep)
    limiter.pay(40)  # 20 units beyond the full bucket
    time.now += 1.5  # the page took 1.5 s to answer: 15 of them earned back
    assert limiter.wait() == pytest.approx(0.5)
    time.now += 3600  # an hour idle earns no more than the burst
    limiter.pay(50)
    assert limiter.wait() == pytest.approx((50 - 20) / 10)
    assert limiter.consumed_units == 90


def test_pages_that_consume_nothing_never_wait():
    time = FakeTime()
    limiter = ReadRateLimiter(1, burst=0, clock=time.clock, sleep=time.sleep)
    for _ in range(5):
        limiter.wait()
        limiter.pay(0)
    assert time.sleeps == []


# -- the plan ----------------------------------------------------------------------------------

CURSOR = SegmentCursor({"pk": {"S": "m"}})


def test_a_fresh_snapshot_reads_its_first_segments_from_their_beginnings():
    tasks = plan_snapshot_batch(START, [], max_segments=3)
    assert [(t.segment.id, t.cursor) for t in tasks] == [
        ("segment-0-of-4", None),
        ("segment-1-of-4", None),
        ("segment-2-of-4", None),
    ]
    assert all(t.segment.generation == 2 for t in tasks)
    assert not snapshot_complete(START, [])


def test_a_batch_skips_done_segments_and_resumes_the_others_from_their_cursors():
    states = [SegmentState(0, done=True), SegmentState(1, CURSOR), SegmentState(3, CURSOR)]
    tasks = plan_snapshot_batch(START, states, max_segments=2)
    assert [(t.segment.number, t.cursor) for t in tasks] == [(1, CURSOR), (2, None)]
    assert plan_snapshot_batch(START, states, max_segments=2) == tasks  # a retry plans the same
    assert [t.segment.number for t in plan_snapshot_batch(START, states, max_segments=10)] == [1, 2, 3]


def test_the_snapshot_is_complete_when_every_segment_is_done_and_then_plans_nothing():
    states = [SegmentState(n, done=True) for n in range(4)]
    assert snapshot_complete(START, states)
    assert plan_snapshot_batch(START, states, max_segments=4) == []
    assert not snapshot_complete(START, states[:3])


def test_a_segment_state_advances_by_a_read_of_that_segment():
    segment = Segment(2, 1, 4)
    state = SegmentState(1)
    moved = state.after(SegmentRead(segment, cursor=CURSOR))
    assert moved == SegmentState(1, CURSOR, done=False)
    assert moved.after(SegmentRead(segment, cursor=None)) == SegmentState(1, None, done=True)
    with pytest.raises(ValueError, match="does not advance segment 0"):
        SegmentState(0).after(SegmentRead(segment))


@pytest.mark.parametrize(
    ("states", "max_segments", "message"),
    [
        ([SegmentState(4)], 1, "not one of the snapshot's 4"),
        ([SegmentState(1), SegmentState(1, CURSOR)], 1, "two states"),
        ([], 0, "at least 1 segment"),
    ],
)
def test_states_that_do_not_fit_the_snapshot_are_refused(states, max_segments, message):
    with pytest.raises(ValueError, match=message):
        plan_snapshot_batch(START, states, max_segments)


def test_a_done_segment_has_no_cursor():
    with pytest.raises(ValueError, match="done but still has a cursor"):
        SegmentState(0, CURSOR, done=True)


def test_the_snapshots_start_survives_a_dict_and_needs_a_timezone():
    assert SnapshotStart.from_dict(START.to_dict()) == START
    assert START.to_dict()["started_at"] == "2026-03-01T12:00:00+00:00"
    with pytest.raises(ValueError, match="timezone"):
        SnapshotStart(0, datetime(2026, 3, 1), 4)
    with pytest.raises(ValueError, match="total segments"):
        SnapshotStart(0, datetime(2026, 3, 1, tzinfo=UTC), 0)
