"""Read one shard range with GetRecords (shared throughput) or SubscribeToShard (enhanced fan-out).

Reading resumes AT_SEQUENCE_NUMBER of the checkpoint and drops what the checkpoint covers, so a
checkpoint inside a KPL aggregate resumes at the next sub-record. The read stops at the record
cap, at the byte cap (after the user record whose payload reaches it: a read takes at least one
record, and may stop inside an aggregate like the record cap), at the first record that arrived
after the batch cut-off, when the shard is caught up, or at shard end (a null NextShardIterator on
AWS; an empty, caught-up read of a closed shard otherwise; with fan-out, an event naming the
ChildShards without a ContinuationSequenceNumber).

Records are held in :attr:`RangeRead.records` until the read ends, or, given ``on_chunk``, handed
on in chunks of about ``chunk_bytes`` of payload as pages arrive, so that a caller that converts and
writes them as they come holds one chunk at a time rather than the whole range.

While one page is de-aggregated, the next is already being fetched (and parsed by botocore) in a
background thread, unless the page looks like the last: then the next call, if any, waits for it.
A fan-out subscription pushes its events instead; both readers take records through the same
filter, so they yield the same records for the same range.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError, HTTPClientError, ResponseStreamingError
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from airflow_kinesis_snowflake.core.aws import error_code
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, parse_sequence_number
from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.retry import Backoff, call_with_retries
from airflow_kinesis_snowflake.core.sources.pacing import SHARD_READ_CALLS_PER_SECOND, ShardReadPacer, page_bytes
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord, _arrival, deaggregate

# Kinesis allows 5 GetRecords calls per second per shard (and 2 MiB of reads: see pacing.py).
MIN_SECONDS_BETWEEN_CALLS = 1 / SHARD_READ_CALLS_PER_SECOND
# Sparse shards can answer several empty pages while still behind the tip; don't spin forever.
MAX_EMPTY_READS = 50
# SubscribeToShard answers ResourceInUseException while another subscription of the consumer
# holds the shard, and for 5 seconds after one started: wait longer than that before giving up.
RESOURCE_IN_USE_RETRIES = 6
RESOURCE_IN_USE_BACKOFF_SECONDS = 1.0
RESOURCE_IN_USE_MAX_BACKOFF_SECONDS = 8.0
# Doubling waits, jittered, each at least half of the doubling: the retries outlast those 5 seconds.
RESOURCE_IN_USE_BACKOFF = Backoff(
    RESOURCE_IN_USE_RETRIES + 1, RESOURCE_IN_USE_BACKOFF_SECONDS, RESOURCE_IN_USE_MAX_BACKOFF_SECONDS
)
# Subscriptions in a row that end (AWS ends each after 5 minutes) or break without delivering
# anything new.
MAX_IDLE_SUBSCRIPTIONS = 10
# A subscription's connection breaking while events stream: subscribe again from the continuation.
_BROKEN_STREAM = (ProtocolError, ReadTimeoutError, ResponseStreamingError, HTTPClientError)


# Payload bytes of the records a read hands on at a time (``on_chunk``); a chunk ends at a page's end.
CHUNK_BYTES = 16 << 20

# Takes the records of one chunk of a read (in order); the read goes on once it returns.
ChunkConsumer = Callable[[list[KinesisRecord]], None]


@dataclass
class RangeRead:
    """What one shard range yielded.

    ``records`` holds the records read, but for those already handed on in chunks (``on_chunk``);
    ``records_read`` and ``bytes_read`` count all of them.
    """

    shard_id: str
    records: list[KinesisRecord] = field(default_factory=list)
    last: Checkpoint | None = None
    records_read: int = 0
    # Bytes of the user records' payloads read, the figure the byte cap applies to.
    bytes_read: int = 0
    shard_end: bool = False
    # GetRecords calls that returned a page, a fetched-ahead page the read did not need included.
    get_records_calls: int = 0
    iterator_renewals: int = 0
    # How far the last GetRecords page (or fan-out event) was from the shard's tip, as Kinesis reports it.
    millis_behind_latest: int | None = None
    # SubscribeToShard calls that opened a subscription (enhanced fan-out reads only).
    subscriptions: int = 0


def arrival_timestamp(value: Any) -> datetime:
    """A timestamp of a Kinesis (JSON protocol) response: epoch seconds, as an aware UTC datetime.

    botocore's default parser makes the same instant in the local zone through dateutil, which
    costs about 20 times more; paid for every record read, that is a good part of a read's time.
    Anything but a number is left to botocore's parser.
    """
    if type(value) is float or type(value) is int:
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):
            pass
    from botocore.utils import parse_timestamp

    parsed: datetime = parse_timestamp(value)
    return parsed


def kinesis_client(**client_kwargs: Any) -> Any:
    """``boto3.client("kinesis", **client_kwargs)`` that parses timestamps with :func:`arrival_timestamp`.

    botocore takes the timestamp parser from its session when the client is made, so the client
    gets a session of its own rather than changing the default one that other clients share.
    """
    import boto3
    import botocore.session

    core = botocore.session.get_session()
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=arrival_timestamp)
    return boto3.session.Session(botocore_session=core).client("kinesis", **client_kwargs)


def _starting_position(shard_range: ShardRange, position: Checkpoint | None) -> dict[str, Any]:
    """Where a read starts: at the checkpoint, else at the range's initial position."""
    if position is not None:
        return {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": position.sequence_number}
    if shard_range.start_position.position is InitialPosition.AT_TIMESTAMP:
        return {"Type": "AT_TIMESTAMP", "Timestamp": shard_range.start_position.timestamp}
    return {"Type": "TRIM_HORIZON"}


def _iterator_args(stream_name: str, shard_range: ShardRange, position: Checkpoint | None) -> dict[str, Any]:
    start = _starting_position(shard_range, position)
    args: dict[str, Any] = {
        "StreamName": stream_name,
        "ShardId": shard_range.shard_id,
        "ShardIteratorType": start["Type"],
    }
    if "SequenceNumber" in start:
        args["StartingSequenceNumber"] = start["SequenceNumber"]
    if "Timestamp" in start:
        args["Timestamp"] = start["Timestamp"]
    return args


class _Pages:
    """GetRecords calls, one at a time, in a background thread, within the shard's read budget
    (5 calls and 2 MiB per second: after a large page the next call waits until its bytes are paid back)."""

    def __init__(
        self, client: Any, result: RangeRead, sleep: Callable[[float], None], clock: Callable[[], float]
    ) -> None:
        self._client, self._result, self._sleep = client, result, sleep
        self._pacer = ShardReadPacer(clock=clock)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"get-records-{result.shard_id}")

    def fetch(self, iterator: str, limit: int) -> Future[dict[str, Any]]:
        return self._pool.submit(self._get_records, iterator, max(1, limit))

    def _get_records(self, iterator: str, limit: int) -> dict[str, Any]:
        wait = self._pacer.before_call()
        if wait > 0:
            self._sleep(wait)
        response: dict[str, Any] = self._client.get_records(ShardIterator=iterator, Limit=limit)
        self._pacer.page_read(page_bytes(response.get("Records", ())))
        self._result.get_records_calls += 1
        return response

    def close(self) -> None:
        # Waits for a page fetched ahead that the read did not need: no call outlives the read.
        self._pool.shutdown(wait=True)


def read_shard_range(
    client: Any,
    stream_name: str,
    shard_range: ShardRange,
    *,
    cutoff: datetime,
    max_records_per_call: int,
    on_chunk: ChunkConsumer | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> RangeRead:
    """Read the records of ``shard_range`` that arrived at or before ``cutoff``.

    :param on_chunk: when given, called with the records read so far once they hold
        ``chunk_bytes`` of payload (at the end of a page) and with the rest at the end, in order;
        the result's ``records`` is then empty. The next page is fetched while it runs.
    """
    result = RangeRead(shard_id=shard_range.shard_id, last=shard_range.start)
    iterator = client.get_shard_iterator(**_iterator_args(stream_name, shard_range, result.last))["ShardIterator"]
    pages = _Pages(client, result, sleep, clock)
    chunks = _Chunks(result, on_chunk, chunk_bytes)
    try:
        _read(client, stream_name, shard_range, cutoff, max_records_per_call, result, pages, iterator, chunks)
    finally:
        pages.close()
    chunks.flush()
    return result


class _Chunks:
    """Hands a read's records on once they hold ``chunk_bytes`` of payload (with no consumer: never)."""

    def __init__(self, result: RangeRead, consumer: ChunkConsumer | None, chunk_bytes: int) -> None:
        self._result, self._consumer, self._chunk_bytes = result, consumer, chunk_bytes
        self._handed_bytes = 0  # payload bytes of the records already handed on

    def page_taken(self) -> None:
        if self._result.bytes_read - self._handed_bytes >= self._chunk_bytes:
            self.flush()

    def flush(self) -> None:
        result = self._result
        if self._consumer is None or not result.records:
            return
        records, result.records = result.records, []
        self._handed_bytes = result.bytes_read
        self._consumer(records)


def _read(
    client: Any,
    stream_name: str,
    shard_range: ShardRange,
    cutoff: datetime,
    max_records_per_call: int,
    result: RangeRead,
    pages: _Pages,
    iterator: str,
    chunks: _Chunks,
) -> None:
    empty_reads = 0
    pending = pages.fetch(iterator, min(max_records_per_call, shard_range.max_records))
    while True:
        try:
            response = pending.result()
        except ClientError as err:
            if error_code(err) != "ExpiredIteratorException":
                raise
            # Resume right after the last record delivered; nothing is read twice or skipped.
            result.iterator_renewals += 1
            iterator = client.get_shard_iterator(**_iterator_args(stream_name, shard_range, result.last))[
                "ShardIterator"
            ]
            pending = pages.fetch(iterator, min(max_records_per_call, shard_range.max_records - result.records_read))
            continue
        if "MillisBehindLatest" in response:
            result.millis_behind_latest = int(response["MillisBehindLatest"])
        api_records = response.get("Records", [])
        next_iterator = response.get("NextShardIterator")

        fetched_ahead = False
        if api_records and next_iterator is not None:
            # Fetch the next page meanwhile, unless this one probably ends the read: each record
            # gives at least one user record, and arrival times grow along a shard. Were it wrong,
            # a fetched page goes unused, or the next call is made after the page, not during it.
            room = shard_range.max_records - result.records_read - len(api_records)
            if (
                room > 0
                and _bytes_left(shard_range, result) > sum(len(r["Data"]) for r in api_records)
                and _arrival(api_records[-1]["ApproximateArrivalTimestamp"]) <= cutoff
            ):
                pending = pages.fetch(next_iterator, min(max_records_per_call, room))
                fetched_ahead = True

        if _take_page(result, shard_range, api_records, cutoff):
            return
        chunks.page_taken()
        if next_iterator is None:
            result.shard_end = True
            return
        if not api_records:
            caught_up = response.get("MillisBehindLatest", 0) == 0
            empty_reads += 1
            if caught_up or empty_reads >= MAX_EMPTY_READS:
                # A closed shard read to its tip has nothing more to give: that is its end.
                result.shard_end = caught_up and shard_range.ending_sequence_number is not None
                return
        else:
            empty_reads = 0
        if not fetched_ahead:
            limit = min(max_records_per_call, shard_range.max_records - result.records_read)
            pending = pages.fetch(next_iterator, limit)


def _bytes_left(shard_range: ShardRange, result: RangeRead) -> float:
    """Payload bytes the range may still read: what is left under its byte cap, if it has one."""
    return float("inf") if shard_range.max_bytes is None else shard_range.max_bytes - result.bytes_read


def read_shard_range_fan_out(
    client: Any,
    consumer_arn: str,
    shard_range: ShardRange,
    *,
    cutoff: datetime,
    on_chunk: ChunkConsumer | None = None,
    chunk_bytes: int = CHUNK_BYTES,
    sleep: Callable[[float], None] = time.sleep,
) -> RangeRead:
    """Read the records of ``shard_range`` that arrived at or before ``cutoff``, through the enhanced
    fan-out consumer ``consumer_arn`` (SubscribeToShard).

    The first subscription starts where :func:`read_shard_range` would; when one ends (AWS ends each
    after 5 minutes) or its connection breaks, the next starts AT_SEQUENCE_NUMBER of the last
    ContinuationSequenceNumber. Records the range already took, delivered again, are dropped like
    those the checkpoint covers. ``on_chunk`` and ``chunk_bytes`` are :func:`read_shard_range`'s.
    """
    result = RangeRead(shard_id=shard_range.shard_id, last=shard_range.start)
    chunks = _Chunks(result, on_chunk, chunk_bytes)
    _read_fan_out(client, consumer_arn, shard_range, cutoff, result, chunks, sleep)
    chunks.flush()
    return result


def _read_fan_out(
    client: Any,
    consumer_arn: str,
    shard_range: ShardRange,
    cutoff: datetime,
    result: RangeRead,
    chunks: _Chunks,
    sleep: Callable[[float], None],
) -> None:
    position = _starting_position(shard_range, result.last)
    idle = 0
    while True:
        taken, before = result.records_read, position
        event_stream = _subscribe(client, consumer_arn, shard_range.shard_id, position, result, sleep)
        try:
            for event in event_stream:
                shard_event = event.get("SubscribeToShardEvent")
                if shard_event is None:
                    continue
                if "MillisBehindLatest" in shard_event:
                    result.millis_behind_latest = int(shard_event["MillisBehindLatest"])
                api_records = shard_event.get("Records", [])
                if _take_page(result, shard_range, api_records, cutoff):
                    return
                chunks.page_taken()
                continuation = shard_event.get("ContinuationSequenceNumber")
                if continuation is None:
                    # The last event of a closed shard: it names the children instead.
                    result.shard_end = True
                    return
                # AT, not AFTER: should the continuation be the next record rather than the last
                # one delivered, nothing is skipped; a record delivered again is dropped.
                position = {"Type": "AT_SEQUENCE_NUMBER", "SequenceNumber": continuation}
                if not api_records and shard_event.get("MillisBehindLatest") == 0:
                    # Caught up. Only an empty event says so: on a closed shard, the event that
                    # names the children may still follow the last records.
                    return
        except _BROKEN_STREAM:
            pass  # only whole events are ever parsed: go on from the last one
        finally:
            # Leaving mid-subscription drops the connection; the service ends the subscription.
            event_stream.close()
        idle = 0 if result.records_read > taken or position != before else idle + 1
        if idle >= MAX_IDLE_SUBSCRIPTIONS:
            raise RuntimeError(
                f"{idle} subscriptions to shard {shard_range.shard_id} through {consumer_arn} "
                "ended or broke without delivering anything new"
            )


def _subscribe(
    client: Any,
    consumer_arn: str,
    shard_id: str,
    position: dict[str, Any],
    result: RangeRead,
    sleep: Callable[[float], None],
) -> Any:
    """A subscription's event stream; retries while another subscription holds the shard."""
    response = call_with_retries(
        lambda: client.subscribe_to_shard(ConsumerARN=consumer_arn, ShardId=shard_id, StartingPosition=position),
        policy=RESOURCE_IN_USE_BACKOFF,
        retry_on=_in_use,
        what=f"SubscribeToShard on shard {shard_id} through {consumer_arn}",
        sleep=sleep,
    )
    result.subscriptions += 1
    return response["EventStream"]


def _in_use(err: BaseException) -> bool:
    return isinstance(err, ClientError) and error_code(err) == "ResourceInUseException"


def _take_page(result: RangeRead, shard_range: ShardRange, api_records: list[dict[str, Any]], cutoff: datetime) -> bool:
    """De-aggregate one page (or event) of Kinesis records and take them; True when the read stops here."""
    if not api_records:
        return False
    return _take(
        result, deaggregate(shard_range.shard_id, api_records), cutoff, shard_range.max_records, shard_range.max_bytes
    )


def caps_reached(records_read: int, bytes_read: int, max_records: int, max_bytes: int | None) -> bool:
    """Whether a range that took ``records_read`` records of ``bytes_read`` payload bytes stops here.

    Checked after each record taken, so a read stops at a record boundary: the record that reaches
    the byte cap is the last one taken, and one record larger than the cap is still read (alone).
    """
    return records_read >= max_records or (max_bytes is not None and bytes_read >= max_bytes)


def _take(
    result: RangeRead, records: list[KinesisRecord], cutoff: datetime, max_records: int, max_bytes: int | None = None
) -> bool:
    """Add the page's records the last one taken does not cover; True when the read stops in this page."""
    covered = result.last.key if result.last is not None else None
    taken = result.records
    last: KinesisRecord | None = None
    parsed: str | None = None
    number = 0
    stopped = False
    count, size = result.records_read, result.bytes_read
    for record in records:
        sequence = record.sequence_number
        if sequence is not parsed:  # the user records of an aggregate share their sequence number
            parsed, number = sequence, parse_sequence_number(sequence)
        key = (number, record.sub_sequence_number)
        if covered is not None and key <= covered:
            continue
        if record.approximate_arrival > cutoff:
            stopped = True
            break
        taken.append(record)
        count += 1
        size += len(record.data)
        last, covered = record, key
        if caps_reached(count, size, max_records, max_bytes):
            stopped = True
            break
    result.records_read, result.bytes_read = count, size
    if last is not None:
        result.last = last.checkpoint
    return stopped
