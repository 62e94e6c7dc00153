"""A DynamoDB table as a :class:`~...engine.source.Source`: its snapshot segments and its stream's shards.

A thin adapter over the table's own functions, for one generation of its sync (:mod:`.progress`):

* its units are the generation's snapshot segments (``segment-<n>-of-<total>``, one per parallel
  Scan segment, no parents) and its stream's shards as :func:`~.streams.list_stream_shards` lists
  them (a shard the stream rolled over names its parent);
* a segment's position is a :class:`SegmentPosition` (the Scan's ``LastEvaluatedKey``, or done),
  written as the snapshot ledger keeps a segment's mark; a stream shard's is a
  :class:`~....model.Checkpoint` of its sequence number;
* a segment is read by :func:`~.snapshot.scan_segment`, a stream shard by
  :func:`~.streams.read_stream_shard`; both answer :class:`~.model.ItemChange` values.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from airflow_kinesis_snowflake.core.engine.source import (
    SourceUnit,
    UnitRange,
    checkpoint_from_text,
    checkpoint_to_text,
)
from airflow_kinesis_snowflake.core.model import Checkpoint
from airflow_kinesis_snowflake.core.sources.dynamodb.model import ItemChange
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateLimiter
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import (
    Segment,
    SegmentCursor,
    describe_table,
    scan_segment,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.streams import list_stream_shards, read_stream_shard
from airflow_kinesis_snowflake.registry import DYNAMODB_SOURCE

#: The kind of a snapshot segment's unit.
SNAPSHOT_SEGMENT = "snapshot-segment"
#: The kind of a stream shard's unit.
STREAM_SHARD = "stream-shard"


@dataclass(frozen=True)
class SegmentPosition:
    """How far a snapshot segment's Scan got: the last page's ``LastEvaluatedKey``, or the segment's end.

    :param cursor: where the Scan resumes; None once the segment was read to its end.
    """

    cursor: SegmentCursor | None

    @property
    def done(self) -> bool:
        return self.cursor is None


#: A position in a DynamoDB unit: a segment's, or a stream shard's sequence number.
DynamoDBPosition = SegmentPosition | Checkpoint
_P = TypeVar("_P", SegmentPosition, Checkpoint)


class StreamNotEnabledError(ValueError):
    """The table has no stream to follow."""


@dataclass(frozen=True)
class DynamoDBSource:
    """One DynamoDB table in one generation of its sync: a snapshot, then its stream.

    :param table: the table's name.
    :param dynamodb: makes a DynamoDB client (on the executor that reads).
    :param streams: makes a DynamoDB Streams client.
    :param generation: the sync generation; the changes' versions carry it (:class:`~.model.Version`).
    :param total_segments: the generation's snapshot segments; 0 when its snapshot is skipped.
    :param not_before: stream records created before this are passed over (the generation's
        :attr:`~.progress.Generation.stream_not_before`); None reads them all.
    :param read_units_per_second: the snapshot's read-rate limit per segment; None reads as fast as
        the table answers.
    :param stream_arn: the stream followed (a plan's); None: the table's ``LatestStreamArn``.
    """

    source_type: ClassVar[str] = DYNAMODB_SOURCE

    table: str
    dynamodb: Callable[[], Any] = field(repr=False)
    streams: Callable[[], Any] = field(repr=False)
    generation: int = 0
    total_segments: int = 4
    not_before: datetime | None = None
    read_units_per_second: float | None = None
    stream_arn: str | None = None

    def followed_stream(self) -> str:
        """The stream followed: :attr:`stream_arn`, else the table's ``LatestStreamArn``.

        :raises StreamNotEnabledError: the table has no stream.
        """
        if self.stream_arn is not None:
            return self.stream_arn
        description = self.dynamodb().describe_table(TableName=self.table)["Table"]
        arn = description.get("LatestStreamArn")
        if not arn or not description.get("StreamSpecification", {}).get("StreamEnabled", True):
            raise StreamNotEnabledError(
                f"DynamoDB table {self.table} has no stream: enable DynamoDB Streams on it with the view type "
                "NEW_IMAGE or NEW_AND_OLD_IMAGES"
            )
        return str(arn)

    def units(self) -> list[SourceUnit]:
        """The generation's snapshot segments, then the stream's shards (parents first)."""
        segments = [
            SourceUnit(Segment(self.generation, n, self.total_segments).id, SNAPSHOT_SEGMENT)
            for n in range(self.total_segments)
        ]
        shards = [
            SourceUnit(s.shard_id, STREAM_SHARD, s.parent_shard_ids, s.ending_sequence_number)
            for s in list_stream_shards(self.streams(), self.followed_stream())
        ]
        return [*segments, *shards]

    def read(
        self, unit: SourceUnit, start: DynamoDBPosition | None, *, cutoff: datetime, max_records: int
    ) -> UnitRange[DynamoDBPosition, ItemChange]:
        """A segment's next items (``cutoff`` does not bound a Scan), or a stream shard's changes
        created at or before ``cutoff``; at most ``max_records`` either way.

        :raises ~.streams.StreamGap: the stream's records after ``start`` were trimmed.
        """
        if unit.kind == SNAPSHOT_SEGMENT:
            return self._read_segment(unit, _expect(unit, start, SegmentPosition), max_records)
        if unit.kind != STREAM_SHARD:
            raise ValueError(f"unit {unit.unit_id} is a {unit.kind!r}, not a unit of a DynamoDB table")
        after = _expect(unit, start, Checkpoint)
        read = read_stream_shard(
            self.streams(),
            self.followed_stream(),
            unit.unit_id,
            table=self.table,
            snapshot=self.generation,
            cutoff=cutoff,
            max_records=max_records,
            after=None if after is None else after.sequence_number,
            not_before=self.not_before,
        )
        end = None if read.last_sequence_number is None else Checkpoint(read.last_sequence_number)
        return UnitRange(unit.unit_id, start, end, read.changes, read.shard_end)

    def _read_segment(
        self, unit: SourceUnit, start: SegmentPosition | None, max_records: int
    ) -> UnitRange[DynamoDBPosition, ItemChange]:
        if start is not None and start.done:
            # A Scan without a cursor starts the segment over: a finished segment has nothing more.
            return UnitRange(unit.unit_id, start, start, [], True)
        client = self.dynamodb()
        segment = Segment.from_id(self.generation, unit.unit_id)
        limiter = None if self.read_units_per_second is None else ReadRateLimiter(self.read_units_per_second)
        cursor = None if start is None else start.cursor
        read = scan_segment(client, describe_table(client, self.table), segment, cursor, max_records, limiter)
        return UnitRange(unit.unit_id, start, SegmentPosition(read.cursor), read.changes, read.done)

    def position_to_text(self, unit: SourceUnit, position: DynamoDBPosition) -> str:
        """A segment's position as the snapshot ledger's mark (``{"cursor": <key as JSON> | null,
        "done": bool}``), a stream shard's as its checkpoint's JSON."""
        if isinstance(position, SegmentPosition):
            cursor = None if position.cursor is None else position.cursor.to_text()
            return json.dumps({"cursor": cursor, "done": position.done}, sort_keys=True, separators=(",", ":"))
        return checkpoint_to_text(position)

    def position_from_text(self, unit: SourceUnit, text: str) -> DynamoDBPosition:
        if unit.kind != SNAPSHOT_SEGMENT:
            return checkpoint_from_text(unit, text)
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or set(data) != {"cursor", "done"}:
                raise ValueError("expected an object of cursor and done")
            cursor = None if data["cursor"] is None else SegmentCursor.from_text(str(data["cursor"]))
            if bool(data["done"]) != (cursor is None):
                raise ValueError("a segment has a cursor until it is done, and none after")
        except ValueError as err:
            raise ValueError(
                f"{text!r} is not a position of {unit.kind} {unit.unit_id} of table {self.table}: expected "
                f'{{"cursor": "<LastEvaluatedKey as JSON>" or null, "done": false or true}} ({err})'
            ) from None
        return SegmentPosition(cursor)


def _expect(unit: SourceUnit, start: DynamoDBPosition | None, kind: type[_P]) -> _P | None:
    """``start``, checked to be a position of ``unit``'s kind."""
    if start is not None and not isinstance(start, kind):
        raise TypeError(f"{unit.kind} {unit.unit_id} is read from a {kind.__name__}, not {start!r}")
    return start
