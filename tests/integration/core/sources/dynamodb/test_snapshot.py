"""The snapshot's segment reads against a moto server: every item exactly once, keys and images exact."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.config import Config

from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, Item, Version
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateLimiter
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import (
    Segment,
    SegmentCursor,
    SegmentState,
    SnapshotStart,
    SnapshotTable,
    SnapshotThrottled,
    describe_table,
    plan_snapshot_batch,
    scan_segment,
    snapshot_complete,
)
from tests.conftest import unique
from tests.emulators import Emulators
from tests.emulators.servers import AWS_KEY, REGION

# The retry helper's logger: its lines, one per attempt (other loggers may write to the same capture).
RETRY_LOGGER = "airflow_kinesis_snowflake.core.retry"

pytestmark = pytest.mark.integration

ITEMS = 2000
SEGMENTS = 4
MAX_ITEMS = 230
SET_TYPES = ("SS", "NS", "BS")


@dataclass
class ScannedTable:
    name: str
    items: dict[tuple[Any, ...], Item]  # by primary key, as written


def key_of(item: Item) -> tuple[Any, ...]:
    return (item["pk"]["S"], item["sk"]["N"])


def item(i: int) -> Item:
    """An item of every attribute type; the sort key's text is kept as written (DynamoDB would normalize it)."""
    value: Item = {
        "pk": {"S": f"customer#{i % 97}"},
        "sk": {"N": str(i)},
        "name": {"S": f"ordér {i}"},
        "amount": {"N": f"{i}.{i % 100:02d}"},
        "raw": {"B": bytes([i % 256, (i * 7) % 256])},
        "paid": {"BOOL": i % 2 == 0},
        "gone": {"NULL": True},
        "lines": {"L": [{"N": "1"}, {"S": "x"}, {"M": {"deep": {"N": "12345678901234567890.5"}}}]},
        "address": {"M": {"city": {"S": "Zürich"}, "zip": {"N": "8001"}}},
    }
    if i % 3 == 0:
        value["tags"] = {"SS": ["a", "b", f"t{i}"]}
        value["sizes"] = {"NS": ["1", "2.5"]}
        value["blobs"] = {"BS": [b"\x00", b"\x01"]}
    return value


def comparable(image: Item) -> Item:
    """Sets have no order in DynamoDB: compare them sorted."""
    return {
        name: {kind: sorted(raw) if kind in SET_TYPES else raw for kind, raw in value.items()}
        for name, value in image.items()
    }


def client(emulators: Emulators) -> Any:
    """A DynamoDB client without retries of its own, so every throttle reaches scan_segment."""
    return boto3.client(
        "dynamodb",
        region_name=REGION,
        endpoint_url=emulators.aws_endpoint,
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )


@pytest.fixture(scope="module")
def scanned_table(emulators: Emulators) -> ScannedTable:
    dynamodb = emulators.boto3_client("dynamodb")
    name = unique("snapshot")
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        ProvisionedThroughput={"ReadCapacityUnits": 100, "WriteCapacityUnits": 100},
    )
    items = [item(i) for i in range(ITEMS)]
    for start in range(0, ITEMS, 25):
        requests = [{"PutRequest": {"Item": it}} for it in items[start : start + 25]]
        assert not dynamodb.batch_write_item(RequestItems={name: requests}).get("UnprocessedItems")
    return ScannedTable(name, {key_of(it): it for it in items})


@pytest.fixture
def faults(emulators: Emulators) -> Iterator[Emulators]:
    yield emulators
    emulators.inject_kinesis_faults([])


def test_four_segments_resumed_from_each_cursor_read_every_item_exactly_once(emulators, scanned_table):
    dynamodb = client(emulators)
    table = describe_table(dynamodb, scanned_table.name)
    assert table.key_attributes == ("pk", "sk")
    start = SnapshotStart.from_dict({"generation": 1, "started_at": "2026-03-01T00:00:00+00:00", "total_segments": 4})
    states: dict[int, SegmentState] = {}
    seen: Counter[tuple[Any, ...]] = Counter()
    per_segment: Counter[str] = Counter()
    batches = 0
    while not snapshot_complete(start, states.values()):
        for task in plan_snapshot_batch(start, states.values(), max_segments=2):
            read = scan_segment(dynamodb, table, task.segment, task.cursor, MAX_ITEMS, None)
            batches += 1
            assert len(read.changes) <= MAX_ITEMS
            assert read.pages >= 1 and read.consumed_units > 0 and read.throttled == 0
            for change in read.changes:
                seen[key_of(change.image or {})] += 1
                per_segment[task.segment.id] += 1
                assert change.table == scanned_table.name
                assert change.event_name is EventName.SNAPSHOT
                assert change.version == Version.of_snapshot(1)
                assert change.shard_id == task.segment.id
                assert change.keys == {"pk": change.image["pk"], "sk": change.image["sk"]}  # type: ignore[index]
                assert comparable(change.image or {}) == comparable(scanned_table.items[key_of(change.image or {})])
            # The cursor is kept as text between batches, as the lease table keeps it.
            cursor = SegmentCursor.from_text(read.cursor.to_text()) if read.cursor else None
            if cursor is not None:
                assert cursor.last_evaluated_key == table.keys_of(read.changes[-1].image or {})
            states[task.segment.number] = SegmentState(task.segment.number, cursor, cursor is None)
    assert set(seen) == set(scanned_table.items)
    assert set(seen.values()) == {1}
    assert sorted(per_segment) == [s.id for s in start.segments()]
    assert batches >= ITEMS // MAX_ITEMS


def test_a_segment_read_stops_at_its_bound_on_a_page_boundary_and_ends_with_no_cursor(emulators, scanned_table):
    dynamodb = client(emulators)
    table = describe_table(dynamodb, scanned_table.name)
    segment = Segment(0, 2, SEGMENTS)
    whole = scan_segment(dynamodb, table, segment, None, ITEMS, None)
    assert whole.done and whole.cursor is None
    first = scan_segment(dynamodb, table, segment, None, 7, None)
    assert len(first.changes) == 7 and first.pages == 1 and not first.done
    rest = scan_segment(dynamodb, table, segment, first.cursor, ITEMS, None)
    assert rest.done
    assert [c.keys for c in first.changes + rest.changes] == [c.keys for c in whole.changes]


def test_throttled_pages_are_retried_with_backoff_and_counted(faults, scanned_table, caplog):
    dynamodb = client(faults)
    table = describe_table(dynamodb, scanned_table.name)
    # Each fault counts the calls it is asked about: the three fire on the first three calls.
    codes = ["ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"]
    faults.inject_kinesis_faults(
        [{"operation": "DynamoDB.Scan", "table": scanned_table.name, "error": code} for code in codes]
    )
    sleeps: list[float] = []
    segment = Segment(0, 1, SEGMENTS)
    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.retry"):
        read = scan_segment(dynamodb, table, segment, None, ITEMS, None, sleep=sleeps.append)
    assert read.throttled == 3
    assert len(sleeps) == 3 and sleeps[0] < sleeps[1]
    # Exponential backoff from 0.05 s with jitter: each pause in [b/2, b] of b = 0.05, 0.1, 0.2.
    assert 0.025 <= sleeps[0] <= 0.05 <= sleeps[1] <= 0.1 <= sleeps[2] <= 0.2
    lines = [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER]
    assert len(lines) == 3
    for n, (line, code, pause) in enumerate(zip(lines, codes, sleeps, strict=True), start=1):
        assert line.startswith(f"the Scan of table {scanned_table.name}, segment-1-of-{SEGMENTS}, failed ")
        assert f"(attempt {n} of 10)" in line and code in line and line.endswith(f"; retrying in {pause:.2f} s")
    assert len(faults.served_kinesis_faults()) == 3
    faults.inject_kinesis_faults([])
    unthrottled = scan_segment(dynamodb, table, segment, None, ITEMS, None)
    assert [c.image for c in read.changes] == [c.image for c in unthrottled.changes]


def test_a_segment_throttled_on_every_attempt_fails_naming_the_table_segment_and_settings(
    faults, scanned_table, caplog
):
    dynamodb = client(faults)
    table = SnapshotTable.from_description(dynamodb.describe_table(TableName=scanned_table.name)["Table"])
    faults.inject_kinesis_faults(
        [{"operation": "DynamoDB.Scan", "error": "ProvisionedThroughputExceededException", "times": 3}]
    )
    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.retry"):
        with pytest.raises(
            SnapshotThrottled, match=rf"{scanned_table.name}, segment-0-of-4, was throttled 3 times"
        ) as err:
            scan_segment(
                dynamodb, table, Segment(0, 0, SEGMENTS), None, 10, None, sleep=lambda _: None, max_throttle_attempts=3
            )
    assert "snapshot_read_units_per_second" in str(err.value)
    assert err.value.__cause__ is not None
    lines = [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER]
    assert len(lines) == 3 and "(attempt 3 of 3)" in lines[-1] and lines[-1].endswith("; giving up")


def test_the_limiter_is_paid_each_pages_consumed_capacity_and_asks_for_waits_accordingly(emulators, scanned_table):
    dynamodb = client(emulators)
    table = describe_table(dynamodb, scanned_table.name)
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    limiter = ReadRateLimiter(0.5, burst=1, clock=lambda: now[0], sleep=sleep)
    read = scan_segment(dynamodb, table, Segment(0, 3, SEGMENTS), None, 50, limiter)
    # One page of 50, then batches of 10 items (a page each) with the same limiter, as one task goes on.
    reads = [read]
    while not reads[-1].done and len(reads) < 6:
        reads.append(scan_segment(dynamodb, table, read.segment, reads[-1].cursor, 10, limiter))
    consumed = sum(r.consumed_units for r in reads)
    assert consumed == limiter.consumed_units > 0
    # Each page waits off what the pages before it paid beyond the one-unit burst, at 0.5 units/s.
    pages = sum(r.pages for r in reads)
    assert sum(sleeps) == pytest.approx((consumed - consumed / pages - 1) / 0.5)
    assert sum(r.waited_seconds for r in reads) == pytest.approx(sum(sleeps))
