"""Read one shard range with GetRecords (shared throughput).

Reading resumes AT_SEQUENCE_NUMBER of the checkpoint and drops what the checkpoint covers, so a
checkpoint inside a KPL aggregate resumes at the next sub-record. The read stops at the record
cap, at the first record that arrived after the batch cut-off, when the shard is caught up, or at
shard end (a null NextShardIterator on AWS; an empty, caught-up read of a closed shard otherwise).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.positions import Checkpoint, InitialPosition
from airflow_kinesis_snowflake.core.records import KinesisRecord
from airflow_kinesis_snowflake.core.transform import deaggregate

# Kinesis allows 5 GetRecords calls per second per shard.
MIN_SECONDS_BETWEEN_CALLS = 0.2
# Sparse shards can answer several empty pages while still behind the tip; don't spin forever.
MAX_EMPTY_READS = 50


@dataclass
class RangeRead:
    """What one shard range yielded."""

    shard_id: str
    records: list[KinesisRecord] = field(default_factory=list)
    last: Checkpoint | None = None
    shard_end: bool = False
    get_records_calls: int = 0
    iterator_renewals: int = 0
    # How far the last GetRecords page was from the shard's tip, as Kinesis reports it.
    millis_behind_latest: int | None = None


def _iterator_args(stream_name: str, shard_range: ShardRange, position: Checkpoint | None) -> dict[str, Any]:
    args: dict[str, Any] = {"StreamName": stream_name, "ShardId": shard_range.shard_id}
    if position is not None:
        args.update(ShardIteratorType="AT_SEQUENCE_NUMBER", StartingSequenceNumber=position.sequence_number)
    elif shard_range.start_position.position is InitialPosition.AT_TIMESTAMP:
        args.update(ShardIteratorType="AT_TIMESTAMP", Timestamp=shard_range.start_position.timestamp)
    else:
        args.update(ShardIteratorType="TRIM_HORIZON")
    return args


def read_shard_range(
    client: Any,
    stream_name: str,
    shard_range: ShardRange,
    *,
    cutoff: datetime,
    max_records_per_call: int,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> RangeRead:
    """Read the records of ``shard_range`` that arrived at or before ``cutoff``."""
    result = RangeRead(shard_id=shard_range.shard_id, last=shard_range.start)
    iterator = client.get_shard_iterator(**_iterator_args(stream_name, shard_range, result.last))["ShardIterator"]
    last_call = float("-inf")
    empty_reads = 0
    while True:
        wait = MIN_SECONDS_BETWEEN_CALLS - (clock() - last_call)
        if wait > 0:
            sleep(wait)
        limit = min(max_records_per_call, shard_range.max_records - len(result.records))
        last_call = clock()
        try:
            response = client.get_records(ShardIterator=iterator, Limit=max(1, limit))
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") != "ExpiredIteratorException":
                raise
            # Resume right after the last record delivered; nothing is read twice or skipped.
            result.iterator_renewals += 1
            iterator = client.get_shard_iterator(**_iterator_args(stream_name, shard_range, result.last))[
                "ShardIterator"
            ]
            continue
        result.get_records_calls += 1
        if "MillisBehindLatest" in response:
            result.millis_behind_latest = int(response["MillisBehindLatest"])

        stopped = False
        for record in deaggregate(shard_range.shard_id, response.get("Records", [])):
            if result.last is not None and result.last.covers(record.sequence_number, record.sub_sequence_number):
                continue
            if record.approximate_arrival > cutoff:
                stopped = True
                break
            result.records.append(record)
            result.last = record.checkpoint
            if len(result.records) >= shard_range.max_records:
                stopped = True
                break
        if stopped:
            return result

        next_iterator = response.get("NextShardIterator")
        if next_iterator is None:
            result.shard_end = True
            return result
        if not response.get("Records"):
            caught_up = response.get("MillisBehindLatest", 0) == 0
            empty_reads += 1
            if caught_up or empty_reads >= MAX_EMPTY_READS:
                # A closed shard read to its tip has nothing more to give: that is its end.
                result.shard_end = caught_up and shard_range.ending_sequence_number is not None
                return result
        else:
            empty_reads = 0
        iterator = next_iterator
