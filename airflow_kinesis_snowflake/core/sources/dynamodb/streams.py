"""DynamoDB Streams: a table's stream shards, reading one shard's range, and its records as changes.

**Shards.** DescribeStream lists the stream's shards (paged with ``ExclusiveStartShardId``) as
:class:`~airflow_kinesis_snowflake.core.sources.shards.Shard`: a shard that has an ending sequence
number is closed, and its child names it as ``ParentShardId``. Parents come before children, so
that an item's changes are applied in their order.

**A range.** A read starts after a checkpoint (``AFTER_SEQUENCE_NUMBER``), at the shard's first
sequence number (``AT_SEQUENCE_NUMBER``: where records may have been trimmed before the first read,
so that the trimming is found, not passed over) or at the oldest record kept (``TRIM_HORIZON``).
DynamoDB Streams has no AT_TIMESTAMP: a start at a time (``snapshot: skip`` with LATEST, or the
position fixed before a snapshot) skips the records created before ``not_before``; the checkpoint
moves past what was skipped. The read stops at the first record created after the batch's cut-off
(left for the next batch), at ``max_records``, when the shard is caught up (:data:`MAX_EMPTY_READS`
empty pages in a row), or at the shard's end (a page without ``NextShardIterator``). GetRecords
takes at most :data:`MAX_RECORDS_PER_CALL` records.

**Faults.** ``LimitExceededException`` is retried after a growing pause; ``ExpiredIteratorException``
gets a new iterator after the last record read, so nothing is read twice or skipped; a
``TrimmedDataAccessException`` means records the checkpoint had not reached were trimmed: the
changes are lost, and :class:`StreamGap` says so (the batch then takes a new snapshot or fails).
A checkpoint older than the safe age is a gap too, before anything is read: :func:`gap_reason`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.aws import error_code
from airflow_kinesis_snowflake.core.retry import Backoff, call_with_retries
from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, ItemChange, Version
from airflow_kinesis_snowflake.core.sources.shards import Shard, order_by_lineage

#: GetRecords answers at most 1000 records a call.
MAX_RECORDS_PER_CALL = 1000
#: Empty pages in a row after which an open shard counts as caught up. DynamoDB Streams may answer
#: an empty page before a later part of the shard that holds records, and tells nothing like
#: Kinesis's MillisBehindLatest.
MAX_EMPTY_READS = 3
#: LimitExceededException: retries, and the pause before the first (doubling, capped, jittered).
THROTTLE_RETRIES = 8
THROTTLE_BACKOFF_SECONDS = 0.5
THROTTLE_MAX_BACKOFF_SECONDS = 10.0
THROTTLE_BACKOFF = Backoff(THROTTLE_RETRIES + 1, THROTTLE_BACKOFF_SECONDS, THROTTLE_MAX_BACKOFF_SECONDS)
#: ExpiredIteratorException in a row without a page in between before the read gives up.
MAX_ITERATOR_RENEWALS = 5
#: The safe age of a checkpoint: DynamoDB Streams keeps records 24 hours.
DEFAULT_MAX_CHECKPOINT_AGE = timedelta(hours=20)
#: The user identity of a removal made by DynamoDB's time to live.
TTL_PRINCIPAL = "dynamodb.amazonaws.com"
#: Stream view types whose records carry the item's new image.
IMAGE_VIEW_TYPES = ("NEW_IMAGE", "NEW_AND_OLD_IMAGES")


class StreamGap(Exception):
    """A shard's changes after its checkpoint are lost: trimmed, or the checkpoint is too old.

    :param table: the DynamoDB table.
    :param shard_id: the stream shard.
    :param checkpoint: the sequence number read up to (None: the shard's start).
    :param reason: what was lost, and why.
    """

    def __init__(self, table: str, shard_id: str, checkpoint: str | None, reason: str) -> None:
        self.table, self.shard_id, self.checkpoint, self.reason = table, shard_id, checkpoint, reason
        where = f"after checkpoint {checkpoint}" if checkpoint is not None else "from its start"
        super().__init__(
            f"gap in the stream of DynamoDB table {table}: shard {shard_id} cannot be read {where}: {reason}"
        )


class StreamViewTypeError(ValueError):
    """A stream record without the item's new image: the stream's view type keeps none."""


@dataclass
class StreamRead:
    """What one shard range yielded.

    :param shard_id: the shard read.
    :param changes: the changes read, in the shard's order.
    :param last_sequence_number: the checkpoint after the read: the last record read or skipped.
    :param records_read: the records converted to changes.
    :param records_skipped: the records created before ``not_before``, passed over.
    :param shard_end: the shard is closed and was read to its end.
    """

    shard_id: str
    changes: list[ItemChange] = field(default_factory=list)
    last_sequence_number: str | None = None
    records_read: int = 0
    records_skipped: int = 0
    shard_end: bool = False
    get_records_calls: int = 0
    iterator_renewals: int = 0
    throttled: int = 0


def list_stream_shards(streams_client: Any, stream_arn: str, *, page_size: int | None = None) -> list[Shard]:
    """The stream's shards, parents before children (DescribeStream, every page).

    :param streams_client: a boto3 ``dynamodbstreams`` client.
    :param stream_arn: the table's ``LatestStreamArn``.
    :param page_size: DescribeStream's ``Limit`` (default: the service's, 100).
    """
    shards: list[Shard] = []
    kwargs: dict[str, Any] = {"StreamArn": stream_arn}
    if page_size is not None:
        kwargs["Limit"] = page_size
    while True:
        description = streams_client.describe_stream(**kwargs)["StreamDescription"]
        shards.extend(Shard.from_api(s) for s in description.get("Shards", []))
        last = description.get("LastEvaluatedShardId")
        if not last:
            return order_by_lineage(shards)
        kwargs["ExclusiveStartShardId"] = last


def gap_reason(checkpoint_time: datetime, now: datetime, max_age: timedelta = DEFAULT_MAX_CHECKPOINT_AGE) -> str | None:
    """Why changes after a checkpoint may be lost, or None when it is within the safe age.

    :param checkpoint_time: when the checkpoint's record was created (or the position was fixed).
    :param now: the time of the decision.
    :param max_age: the safe age, below the stream's 24 hours of retention.
    """
    age = now - checkpoint_time
    if age <= max_age:
        return None
    return (
        f"the checkpoint is {_hours(age)} old, older than the safe age of {_hours(max_age)}; "
        "DynamoDB Streams keeps records 24 hours, so changes after it may have been trimmed"
    )


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} hours"


def is_ttl_removal(record: dict[str, Any]) -> bool:
    """Whether a stream record is a removal made by time to live (its user identity is the service).

    The API names the fields ``Type`` and ``PrincipalId``; a Lambda event ``type`` and ``principalId``.
    """
    identity = record.get("userIdentity") or {}
    kind = identity.get("Type", identity.get("type"))
    principal = identity.get("PrincipalId", identity.get("principalId"))
    return record.get("eventName") == "REMOVE" and kind == "Service" and principal == TTL_PRINCIPAL


def _creation_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(value), UTC)


def to_item_change(record: dict[str, Any], *, table: str, shard_id: str, snapshot: int) -> ItemChange:
    """One stream record (as GetRecords answers it) as the change the destination applies.

    :param record: the stream record.
    :param table: the DynamoDB table.
    :param shard_id: the shard it was read from.
    :param snapshot: the snapshot generation this stream position belongs to.
    :raises StreamViewTypeError: an INSERT or MODIFY without ``NewImage``.
    """
    data = record["dynamodb"]
    event_name = EventName(record["eventName"])
    image = None
    if event_name is not EventName.REMOVE:
        image = data.get("NewImage")
        if image is None:
            view = data.get("StreamViewType", "unknown")
            raise StreamViewTypeError(
                f"the stream of DynamoDB table {table} has the view type {view}: its {event_name} records "
                "carry no new image, so the item's state cannot be kept. Enable the stream with "
                "StreamViewType NEW_IMAGE or NEW_AND_OLD_IMAGES (disable it and enable it again with "
                "that view type; the new stream then needs a new snapshot)"
            )
    created = data.get("ApproximateCreationDateTime")
    return ItemChange(
        table=table,
        keys=data["Keys"],
        image=image,
        event_name=event_name,
        version=Version.of_stream(snapshot, data["SequenceNumber"]),
        event_id=record.get("eventID"),
        shard_id=shard_id,
        approximate_creation_time=None if created is None else _creation_time(created),
        ttl_expiry=is_ttl_removal(record),
    )


class _Reader:
    """GetShardIterator and GetRecords on one shard, with the faults a read survives."""

    def __init__(
        self,
        client: Any,
        stream_arn: str,
        table: str,
        shard_id: str,
        result: StreamRead,
        sleep: Callable[[float], None],
        first_record: str | None = None,
    ) -> None:
        self.client, self.stream_arn, self.table, self.shard_id = client, stream_arn, table, shard_id
        self.result, self.sleep, self.first_record = result, sleep, first_record

    def iterator(self) -> str:
        args: dict[str, Any] = {"StreamArn": self.stream_arn, "ShardId": self.shard_id}
        last = self.result.last_sequence_number
        if last is None and self.first_record is not None:
            args.update(ShardIteratorType="AT_SEQUENCE_NUMBER", SequenceNumber=self.first_record)
        elif last is None:
            args["ShardIteratorType"] = "TRIM_HORIZON"
        else:
            args.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=last)
        response = self._call("GetShardIterator", partial(self.client.get_shard_iterator, **args))
        iterator: str = response["ShardIterator"]
        return iterator

    def page(self, iterator: str, limit: int) -> dict[str, Any]:
        """One GetRecords page; an expired iterator is renewed after the last record read."""
        renewals = 0
        while True:
            try:
                page = self._call("GetRecords", partial(self.client.get_records, ShardIterator=iterator, Limit=limit))
            except ClientError as err:
                if error_code(err) != "ExpiredIteratorException" or renewals >= MAX_ITERATOR_RENEWALS:
                    raise
                renewals += 1
                self.result.iterator_renewals += 1
                iterator = self.iterator()
                continue
            self.result.get_records_calls += 1
            return page

    def _call(self, operation: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``call``, retried while throttled (``LimitExceededException``); trimmed records are a :class:`StreamGap`."""

        def once() -> dict[str, Any]:
            try:
                return call()
            except ClientError as err:
                code = error_code(err)
                if code == "TrimmedDataAccessException":
                    raise StreamGap(
                        self.table,
                        self.shard_id,
                        self.result.last_sequence_number,
                        "its records there were trimmed (TrimmedDataAccessException: older than the "
                        "stream's 24 hours of retention); the changes in them are lost",
                    ) from err
                if code == "LimitExceededException":
                    self.result.throttled += 1
                raise

        return call_with_retries(
            once,
            policy=THROTTLE_BACKOFF,
            retry_on=_throttled,
            what=f"{operation} on shard {self.shard_id} of the stream of table {self.table}",
            sleep=self.sleep,
        )


def _throttled(err: BaseException) -> bool:
    return isinstance(err, ClientError) and error_code(err) == "LimitExceededException"


def read_stream_shard(
    client: Any,
    stream_arn: str,
    shard_id: str,
    *,
    table: str,
    snapshot: int,
    cutoff: datetime,
    max_records: int,
    after: str | None = None,
    not_before: datetime | None = None,
    first_record: str | None = None,
    records_per_call: int = MAX_RECORDS_PER_CALL,
    sleep: Callable[[float], None] = time.sleep,
) -> StreamRead:
    """Read one shard's changes created at or before ``cutoff``, at most ``max_records`` of them.

    :param client: a boto3 ``dynamodbstreams`` client.
    :param stream_arn: the table's stream.
    :param shard_id: the shard to read.
    :param table: the DynamoDB table (named in the changes and in errors).
    :param snapshot: the snapshot generation the changes' versions carry.
    :param cutoff: records created after it are left for the next batch.
    :param max_records: the most records a read converts.
    :param after: the checkpoint: the read starts after this sequence number; None: at the start.
    :param not_before: with no checkpoint, records created before this time are skipped.
    :param first_record: with no checkpoint, the read starts at this sequence number (the shard's
        first) rather than at TRIM_HORIZON, so that records trimmed before it are a gap
        (:func:`.progress.reads_from_first_record` says when).
    :param records_per_call: GetRecords' ``Limit`` (at most :data:`MAX_RECORDS_PER_CALL`).
    :param sleep: how the read pauses when throttled.
    :raises StreamGap: the records after the checkpoint (or from ``first_record``) were trimmed.
    :raises StreamViewTypeError: the stream keeps no new images.
    """
    if max_records < 1:
        raise ValueError(f"max_records must be at least 1, got {max_records}")
    per_call = max(1, min(records_per_call, MAX_RECORDS_PER_CALL))
    result = StreamRead(shard_id=shard_id, last_sequence_number=after)
    reader = _Reader(client, stream_arn, table, shard_id, result, sleep, first_record)
    skip_before = not_before if after is None else None
    iterator: str | None = reader.iterator()
    empty = 0
    while iterator is not None:
        page = reader.page(iterator, min(per_call, max_records - result.records_read))
        iterator = page.get("NextShardIterator")
        records = page.get("Records", [])
        for index, record in enumerate(records, start=1):
            data = record["dynamodb"]
            created = _creation_time(data["ApproximateCreationDateTime"])
            if created > cutoff:
                return result
            if skip_before is not None and created < skip_before:
                result.records_skipped += 1
            else:
                result.changes.append(to_item_change(record, table=table, shard_id=shard_id, snapshot=snapshot))
                result.records_read += 1
            result.last_sequence_number = data["SequenceNumber"]
            if result.records_read >= max_records:
                # The iterator does not outlive the read: the next one starts after the checkpoint.
                result.shard_end = iterator is None and index == len(records)
                return result
        if iterator is None:
            result.shard_end = True
            return result
        empty = 0 if records else empty + 1
        if empty >= MAX_EMPTY_READS:
            return result
    return result
