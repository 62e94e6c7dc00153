"""The snapshot: a parallel Scan of a DynamoDB table, read segment by segment, bounded and resumable.

A snapshot (INIT_SYNC) splits the table into ``TotalSegments`` segments (:class:`Segment`); each is
read as its own unit of work (one Spark task per segment) by :func:`scan_segment`, which reads
pages from the segment's :class:`SegmentCursor` (DynamoDB's ``LastEvaluatedKey``) until a batch's
bound or the segment's end and returns the items as :class:`~.model.ItemChange` values
(``SNAPSHOT``, ``Version.of_snapshot(generation)``) with the new cursor. A page is never cut: the
bound is passed as the page's ``Limit``, so the cursor is exactly the last item returned, and a
batch that resumes from it reads every item of the segment once.

Reads are eventually consistent (half the cost of strongly consistent ones; the stream, whose
position the caller fixes before the snapshot starts (:class:`SnapshotStart`), carries every change
made meanwhile, and its records win over snapshot items by :class:`~.model.Version`). Each page
reports its ``ConsumedCapacity`` to a :class:`~.rate.ReadRateLimiter`, which waits before the next
page so the table's production traffic keeps its capacity. Throttling is retried with backoff and
counted.

Which segments a batch reads, and when the snapshot is complete, is decided by the pure
:func:`plan_snapshot_batch` and :func:`snapshot_complete` over each segment's :class:`SegmentState`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.aws import error_code
from airflow_kinesis_snowflake.core.retry import Backoff, call_with_retries
from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, Item, ItemChange, Version
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateLimiter, TableCapacity

#: DynamoDB's limit on ``TotalSegments``.
MAX_TOTAL_SEGMENTS = 1_000_000
#: The error codes of a read the table or the account refused for its rate; retried with backoff
#: (doubling from the first pause up to the largest, jittered: :mod:`~airflow_kinesis_snowflake.core.retry`).
THROTTLING_ERRORS = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"})
THROTTLE_BACKOFF_SECONDS = 0.05
THROTTLE_MAX_BACKOFF_SECONDS = 5.0
THROTTLE_MAX_ATTEMPTS = 10
#: The attribute types a primary key can have.
KEY_TYPES = ("S", "N", "B")

_SEGMENT_ID = re.compile(r"segment-(\d+)-of-(\d+)")


class SnapshotThrottled(RuntimeError):
    """A segment's Scan was throttled however often it was retried."""


@dataclass(frozen=True)
class Segment:
    """One segment of one snapshot's parallel Scan.

    :param generation: the table's snapshot generation (:attr:`~.model.Version.snapshot`).
    :param number: the segment, from 0 (the Scan's ``Segment``).
    :param total: how many segments the snapshot has (the Scan's ``TotalSegments``).
    """

    generation: int
    number: int
    total: int

    def __post_init__(self) -> None:
        if self.generation < 0:
            raise ValueError(f"a snapshot generation is at least 0, got {self.generation}")
        if not 1 <= self.total <= MAX_TOTAL_SEGMENTS:
            raise ValueError(f"total segments must be from 1 to {MAX_TOTAL_SEGMENTS}, got {self.total}")
        if not 0 <= self.number < self.total:
            raise ValueError(f"segment {self.number} is not one of 0..{self.total - 1}")

    @property
    def id(self) -> str:
        """``segment-<n>-of-<total>``: the unit of work's id, and the snapshot items' ``shard_id``."""
        return f"segment-{self.number}-of-{self.total}"

    @classmethod
    def from_id(cls, generation: int, segment_id: str) -> Segment:
        match = _SEGMENT_ID.fullmatch(segment_id)
        if match is None:
            raise ValueError(f"not a snapshot segment id (segment-<n>-of-<total>): {segment_id!r}")
        return cls(generation, int(match.group(1)), int(match.group(2)))


@dataclass(frozen=True)
class SegmentCursor:
    """Where a segment's Scan resumes: the ``LastEvaluatedKey`` of the page read last.

    The key is held as boto3's client passes it (binary values as bytes); :meth:`to_text` is the
    key in DynamoDB's wire format (JSON, binary values in base64), which :meth:`from_text` reads
    back to an equal cursor, for the lease table and for Snowflake.

    :param last_evaluated_key: the primary key attributes of the last item read, e.g.
        ``{"pk": {"S": "a"}, "sk": {"N": "1.50"}}``.
    """

    last_evaluated_key: Item

    def __post_init__(self) -> None:
        if not self.last_evaluated_key:
            raise ValueError("a segment cursor needs the last evaluated key's attributes")
        for name, value in self.last_evaluated_key.items():
            if not (isinstance(value, Mapping) and len(value) == 1 and next(iter(value)) in KEY_TYPES):
                raise ValueError(f"key attribute {name!r} is not a DynamoDB key value (S, N or B): {value!r}")
            kind, raw = next(iter(value.items()))
            expected: tuple[type, ...] = (bytes, bytearray) if kind == "B" else (str,)
            if not isinstance(raw, expected):
                raise ValueError(f"key attribute {name!r} of type {kind} holds a {type(raw).__name__}: {raw!r}")

    def to_text(self) -> str:
        """The key as DynamoDB's JSON wire format, with sorted attribute names."""
        wire = {
            name: {kind: base64.b64encode(raw).decode("ascii") if kind == "B" else raw for kind, raw in value.items()}
            for name, value in self.last_evaluated_key.items()
        }
        return json.dumps(wire, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_text(cls, text: str) -> SegmentCursor:
        """Read :meth:`to_text`'s form back; a text that is not such a key is a :class:`ValueError`."""
        try:
            wire = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"a segment cursor is a JSON object of key attributes, got {text!r}: {err}") from err
        if not isinstance(wire, dict):
            raise ValueError(f"a segment cursor is a JSON object of key attributes, got {text!r}")
        key: Item = {}
        for name, value in wire.items():
            if not (isinstance(value, dict) and len(value) == 1 and next(iter(value)) in KEY_TYPES):
                raise ValueError(f"key attribute {name!r} in cursor {text!r} is not a DynamoDB key value (S, N or B)")
            kind, raw = next(iter(value.items()))
            if not isinstance(raw, str):
                raise ValueError(f"key attribute {name!r} in cursor {text!r} holds no string")
            if kind == "B":
                try:
                    key[name] = {"B": base64.b64decode(raw, validate=True)}
                except binascii.Error as err:
                    raise ValueError(f"key attribute {name!r} in cursor {text!r} is not base64: {err}") from err
            else:
                key[name] = {kind: raw}
        return cls(key)


@dataclass(frozen=True)
class SnapshotTable:
    """What a snapshot needs to know of its table, from one DescribeTable.

    :param name: the table's name.
    :param key_attributes: its partition key attribute, then its sort key attribute if it has one.
    :param capacity: its billing mode and read capacity, for the read rate (:mod:`.rate`).
    """

    name: str
    key_attributes: tuple[str, ...]
    capacity: TableCapacity

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> SnapshotTable:
        """From DescribeTable's ``Table``."""
        schema = {k["KeyType"]: k["AttributeName"] for k in description["KeySchema"]}
        keys = (schema["HASH"], schema["RANGE"]) if "RANGE" in schema else (schema["HASH"],)
        return cls(str(description["TableName"]), keys, TableCapacity.from_description(description))

    def keys_of(self, item: Item) -> Item:
        """The item's primary key."""
        missing = [a for a in self.key_attributes if a not in item]
        if missing:
            raise ValueError(f"an item of table {self.name} lacks its key attributes {missing}")
        return {a: item[a] for a in self.key_attributes}


def describe_table(client: Any, table_name: str) -> SnapshotTable:
    """DescribeTable, as :class:`SnapshotTable`."""
    return SnapshotTable.from_description(client.describe_table(TableName=table_name)["Table"])


@dataclass
class SegmentRead:
    """What :func:`scan_segment` read from one segment in one batch.

    :param segment: the segment.
    :param changes: the items read, as SNAPSHOT changes, in the Scan's order.
    :param cursor: where the next batch resumes; None when the segment was read to its end.
    :param pages: Scan calls answered.
    :param scanned: items the pages evaluated (``ScannedCount``).
    :param consumed_units: read capacity units the pages consumed.
    :param throttled: calls refused for their rate and retried.
    :param waited_seconds: seconds waited for the read-rate limit.
    """

    segment: Segment
    changes: list[ItemChange] = field(default_factory=list)
    cursor: SegmentCursor | None = None
    pages: int = 0
    scanned: int = 0
    consumed_units: float = 0.0
    throttled: int = 0
    waited_seconds: float = 0.0

    @property
    def done(self) -> bool:
        """The segment was read to its end."""
        return self.cursor is None


def _consumed_units(response: Mapping[str, Any]) -> float:
    consumed = response.get("ConsumedCapacity") or {}
    return float(consumed.get("CapacityUnits", 0.0))


def _throttled(err: BaseException) -> bool:
    return isinstance(err, ClientError) and error_code(err) in THROTTLING_ERRORS


def _scan_page(
    client: Any, request: dict[str, Any], read: SegmentRead, sleep: Callable[[float], None], max_attempts: int
) -> dict[str, Any]:
    def scan() -> dict[str, Any]:
        try:
            response: dict[str, Any] = client.scan(**request)
        except ClientError as err:
            if _throttled(err):
                read.throttled += 1
            raise
        return response

    policy = Backoff(max_attempts, THROTTLE_BACKOFF_SECONDS, THROTTLE_MAX_BACKOFF_SECONDS)
    what = f"the Scan of table {request['TableName']}, {read.segment.id},"
    try:
        return call_with_retries(scan, policy=policy, retry_on=_throttled, what=what, sleep=sleep)
    except ClientError as err:
        if not _throttled(err):
            raise
        raise SnapshotThrottled(
            f"{what} was throttled {max_attempts} times in a row ({error_code(err)}); lower "
            "snapshot_read_fraction or snapshot_read_units_per_second, or read fewer segments at once"
        ) from err


def scan_segment(
    client: Any,
    table: SnapshotTable,
    segment: Segment,
    cursor: SegmentCursor | None,
    max_items: int,
    limiter: ReadRateLimiter | None,
    *,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    max_throttle_attempts: int = THROTTLE_MAX_ATTEMPTS,
) -> SegmentRead:
    """Read one segment of a parallel Scan, from ``cursor``, for one batch.

    Pages are read with ``ExclusiveStartKey``, eventually consistent, until ``max_items`` items were
    read (the last page's ``Limit`` is what is left, so the batch ends at a page boundary and the
    cursor is exact) or the segment ends. A page that answers exactly at the segment's end may still
    carry a ``LastEvaluatedKey``; the next batch then reads one empty page and finds the end.

    :param client: a boto3 DynamoDB client (its own retries hide throttles from the count: give it
        ``retries={"total_max_attempts": 1}`` to have them counted here).
    :param table: the described table (:func:`describe_table`).
    :param segment: the segment to read.
    :param cursor: where the segment's previous batch stopped; None to start at its beginning.
    :param max_items: the most items this batch reads from the segment (at least 1).
    :param limiter: the segment's read-rate limit; None reads as fast as the table answers.
    :param sleep: waits between retries of a throttled call.
    :param now: the time a page was read, each item's ``approximate_creation_time``.
    :param max_throttle_attempts: calls of one page before :class:`SnapshotThrottled` is raised.
    :returns: the items read, the new cursor (None at the segment's end) and the counts.
    """
    if max_items < 1:
        raise ValueError(f"a batch reads at least 1 item from a segment, got max_items={max_items}")
    read = SegmentRead(segment, cursor=cursor)
    waited_before = limiter.waited_seconds if limiter is not None else 0.0
    while len(read.changes) < max_items:
        request: dict[str, Any] = {
            "TableName": table.name,
            "Segment": segment.number,
            "TotalSegments": segment.total,
            "ConsistentRead": False,
            "ReturnConsumedCapacity": "TOTAL",
            "Limit": max_items - len(read.changes),
        }
        if read.cursor is not None:
            request["ExclusiveStartKey"] = read.cursor.last_evaluated_key
        if limiter is not None:
            limiter.wait()
        response = _scan_page(client, request, read, sleep, max_throttle_attempts)
        units = _consumed_units(response)
        if limiter is not None:
            limiter.pay(units)
        read.pages += 1
        read.scanned += int(response.get("ScannedCount", 0))
        read.consumed_units += units
        read_at = now()
        for item in response.get("Items", []):
            read.changes.append(
                ItemChange(
                    table=table.name,
                    keys=table.keys_of(item),
                    image=item,
                    event_name=EventName.SNAPSHOT,
                    version=Version.of_snapshot(segment.generation),
                    shard_id=segment.id,
                    approximate_creation_time=read_at,
                )
            )
        last_key = response.get("LastEvaluatedKey")
        read.cursor = SegmentCursor(last_key) if last_key else None
        if read.cursor is None:
            break
    if limiter is not None:
        read.waited_seconds = limiter.waited_seconds - waited_before
    return read


# -- the plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotStart:
    """A snapshot as started: recorded once, before its first segment is read.

    The caller fixes the stream position first, then records this, so every change made after the
    snapshot's first read is in the stream.

    :param generation: the table's snapshot generation.
    :param started_at: when the snapshot started (timezone-aware).
    :param total_segments: how many segments its Scan has.
    """

    generation: int
    started_at: datetime
    total_segments: int

    def __post_init__(self) -> None:
        if self.started_at.tzinfo is None:
            raise ValueError(f"a snapshot's start time needs a timezone, got {self.started_at.isoformat()}")
        Segment(self.generation, 0, self.total_segments)  # validates both

    def segments(self) -> list[Segment]:
        return [Segment(self.generation, n, self.total_segments) for n in range(self.total_segments)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "started_at": self.started_at.isoformat(),
            "total_segments": self.total_segments,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SnapshotStart:
        return cls(int(data["generation"]), datetime.fromisoformat(data["started_at"]), int(data["total_segments"]))


@dataclass(frozen=True)
class SegmentState:
    """How far one segment of a snapshot was read.

    :param number: the segment.
    :param cursor: where it resumes; None before its first read, or once done.
    :param done: read to its end.
    """

    number: int
    cursor: SegmentCursor | None = None
    done: bool = False

    def __post_init__(self) -> None:
        if self.done and self.cursor is not None:
            raise ValueError(f"segment {self.number} is done but still has a cursor")

    def after(self, read: SegmentRead) -> SegmentState:
        """The state once ``read`` (a batch of this segment) is committed."""
        if read.segment.number != self.number:
            raise ValueError(f"a read of {read.segment.id} does not advance segment {self.number}")
        return SegmentState(self.number, read.cursor, read.done)


@dataclass(frozen=True)
class SegmentTask:
    """One segment a batch reads, and where it starts."""

    segment: Segment
    cursor: SegmentCursor | None


def _states(start: SnapshotStart, states: Iterable[SegmentState]) -> dict[int, SegmentState]:
    by_number: dict[int, SegmentState] = {}
    for state in states:
        if not 0 <= state.number < start.total_segments:
            raise ValueError(f"segment {state.number} is not one of the snapshot's {start.total_segments} segments")
        if state.number in by_number:
            raise ValueError(f"segment {state.number} has two states")
        by_number[state.number] = state
    return by_number


def plan_snapshot_batch(start: SnapshotStart, states: Iterable[SegmentState], max_segments: int) -> list[SegmentTask]:
    """The segments one batch reads: the first ``max_segments`` not done, by number, each from its cursor.

    A segment without a state has not been read yet. By taking the lowest numbers first, a batch
    goes on with the segments earlier batches started before it starts others, so few segments are
    in progress at once; the same states give the same plan, so a retried batch reads the same.

    :param start: the snapshot.
    :param states: the segments' states (any subset; missing ones are unread).
    :param max_segments: the most segments one batch reads (at least 1).
    """
    if max_segments < 1:
        raise ValueError(f"a batch reads at least 1 segment, got max_segments={max_segments}")
    by_number = _states(start, states)
    tasks = []
    for segment in start.segments():
        state = by_number.get(segment.number, SegmentState(segment.number))
        if not state.done:
            tasks.append(SegmentTask(segment, state.cursor))
            if len(tasks) == max_segments:
                break
    return tasks


def snapshot_complete(start: SnapshotStart, states: Iterable[SegmentState]) -> bool:
    """Every segment of the snapshot was read to its end."""
    by_number = _states(start, states)
    return all(by_number.get(n, SegmentState(n)).done for n in range(start.total_segments))
