"""What a reset means for each shard: where it stands, where it will start, what is read again or skipped.

The counts come from the stream itself: a shard iterator at the new start, counting the records
already covered by the checkpoint (read again), and one after the checkpoint, counting the records
that arrived before the new start (skipped). Each count stops at a cap, and then says "at least".
A KPL aggregate counts as one Kinesis record, however many user records it carries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition, parse_sequence_number
from airflow_kinesis_snowflake.core.sources.pacing import ShardReadPacer, page_bytes
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.leases import Lease

# Sparse shards answer empty pages (the pace of calls: pacing.py).
MAX_EMPTY_READS = 20
DEFAULT_MAX_RECORDS = 10_000

DUPLICATE_AND_LOSS_WARNING = (
    "A reset can load records twice or skip them: records between the new start and a shard's checkpoint "
    "are read and loaded again, and records between a checkpoint and a later new start are never loaded."
)


@dataclass(frozen=True)
class Count:
    """Records counted up to a cap; ``capped`` means there are at least this many."""

    records: int
    capped: bool = False

    def text(self) -> str:
        return f"at least {self.records:,}" if self.capped else f"{self.records:,}"


@dataclass(frozen=True)
class ShardImpact:
    """One shard before and after a reset.

    :param checkpoint: the last record delivered, if any.
    :param current_start: where the shard starts while it has no checkpoint (None: no lease yet).
    :param read_again: records already delivered that the new start reads again (None: not estimated).
    :param skipped: records not delivered yet that the new start passes over (None: not estimated).
    """

    shard_id: str
    new_start: StartPosition
    checkpoint: Checkpoint | None = None
    current_start: StartPosition | None = None
    shard_ended: bool = False
    in_stream: bool = True
    read_again: Count | None = None
    skipped: Count | None = None

    def describe(self) -> str:
        if not self.in_stream:
            now = "no longer in the stream (past its retention period); nothing to read"
        elif self.current_start is None:
            now = "no lease yet"
        elif self.shard_ended:
            now = "finished (SHARD_END)"
        elif self.checkpoint is not None:
            now = f"checkpoint {_checkpoint_text(self.checkpoint)}"
        else:
            now = f"no checkpoint yet (starts at {position_text(self.current_start)})"
        parts = [f"{self.shard_id}: {now}; new start {position_text(self.new_start)}"]
        if not self.in_stream:
            return parts[0]
        if self.read_again is None and self.skipped is None:
            parts.append("records read again or skipped: not estimated")
        else:
            if self.read_again is not None and self.read_again.records:
                parts.append(f"{self.read_again.text()} records already loaded will be read and loaded again")
            if self.skipped is not None and self.skipped.records:
                parts.append(f"{self.skipped.text()} records not loaded yet will be skipped and never loaded")
            if not (self.read_again and self.read_again.records) and not (self.skipped and self.skipped.records):
                parts.append("no record read again or skipped")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard_id": self.shard_id,
            "checkpoint": self.checkpoint.to_dict() if self.checkpoint else None,
            "current_start": self.current_start.to_dict() if self.current_start else None,
            "shard_ended": self.shard_ended,
            "in_stream": self.in_stream,
            "new_start": self.new_start.to_dict(),
            "read_again": _count_dict(self.read_again),
            "skipped": _count_dict(self.skipped),
        }


def _count_dict(count: Count | None) -> dict[str, Any] | None:
    return None if count is None else {"records": count.records, "at_least": count.capped}


def _checkpoint_text(checkpoint: Checkpoint) -> str:
    sub = f" (sub-sequence {checkpoint.sub_sequence_number})" if checkpoint.sub_sequence_number else ""
    return f"{checkpoint.sequence_number}{sub}"


def position_text(start: StartPosition) -> str:
    if start.position is InitialPosition.AT_TIMESTAMP and start.timestamp is not None:
        return f"AT_TIMESTAMP {start.timestamp.isoformat()}"
    return start.position.value


def totals(impacts: Sequence[ShardImpact]) -> dict[str, Any]:
    """Records read again and skipped over all shards; ``at_least`` when any count hit its cap."""
    read_again = [i.read_again for i in impacts if i.read_again is not None]
    skipped = [i.skipped for i in impacts if i.skipped is not None]
    return {
        "read_again": sum(c.records for c in read_again),
        "read_again_at_least": any(c.capped for c in read_again),
        "skipped": sum(c.records for c in skipped),
        "skipped_at_least": any(c.capped for c in skipped),
    }


def _iterator_args(start: StartPosition | None, after: Checkpoint | None) -> dict[str, Any]:
    if after is not None:
        return {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": after.sequence_number}
    if start is not None and start.position is InitialPosition.AT_TIMESTAMP:
        return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": start.timestamp}
    return {"ShardIteratorType": "TRIM_HORIZON"}


class _Reader:
    """Kinesis records of one shard from a position, within the shard's read budget (pacing.py), until
    caught up, shard end or a cap. Shards are read one after another, under one budget."""

    def __init__(
        self,
        client: Any,
        stream_name: str,
        *,
        max_records_per_call: int,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
    ) -> None:
        self.client = client
        self.stream_name = stream_name
        self.max_records_per_call = max_records_per_call
        self.sleep = sleep
        self._pacer = ShardReadPacer(clock=clock)

    def records(self, shard_id: str, args: dict[str, Any], limit: int) -> Iterator[dict[str, Any]]:
        iterator = self.client.get_shard_iterator(StreamName=self.stream_name, ShardId=shard_id, **args)[
            "ShardIterator"
        ]
        seen = empty = 0
        while iterator and seen < limit:
            wait = self._pacer.before_call()
            if wait > 0:
                self.sleep(wait)
            response = self.client.get_records(
                ShardIterator=iterator, Limit=max(1, min(self.max_records_per_call, limit - seen))
            )
            records = response.get("Records", [])
            self._pacer.page_read(page_bytes(records))
            for record in records:
                yield record
                seen += 1
            if not records:
                empty += 1
                if response.get("MillisBehindLatest", 0) == 0 or empty >= MAX_EMPTY_READS:
                    return
            else:
                empty = 0
            iterator = response.get("NextShardIterator")


def _count_while(records: Iterator[dict[str, Any]], keep: Callable[[dict[str, Any]], bool], cap: int) -> Count:
    counted = 0
    for record in records:
        if not keep(record):
            return Count(counted)
        counted += 1
        if counted >= cap:
            return Count(counted, capped=True)
    return Count(counted)


def _at_or_before(bound: int | None) -> Callable[[dict[str, Any]], bool]:
    """Records up to sequence number ``bound`` (every record when None: the shard was finished)."""
    return lambda record: bound is None or parse_sequence_number(record["SequenceNumber"]) <= bound


def _arrived_before(until: datetime) -> Callable[[dict[str, Any]], bool]:
    return lambda record: _arrival(record) < until


def _arrival(record: Mapping[str, Any]) -> datetime:
    value = record["ApproximateArrivalTimestamp"]
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def estimate_impact(
    client: Any,
    stream_name: str,
    shards: Sequence[Shard],
    leases: Mapping[str, Lease],
    new_start: StartPosition,
    *,
    max_records: int = DEFAULT_MAX_RECORDS,
    max_records_per_call: int = 10_000,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[ShardImpact]:
    """Per shard, what starting every shard at ``new_start`` reads again and skips.

    :param client: a boto3 Kinesis client.
    :param shards: the stream's shards now (a reset gives each a lease at ``new_start``).
    :param leases: the current leases by shard id.
    :param new_start: the new start, LATEST already resolved to AT_TIMESTAMP of the reset.
    :param max_records: cap on records counted per shard and direction; 0 skips the estimate.
    """
    reader = _Reader(client, stream_name, max_records_per_call=max_records_per_call, sleep=sleep, clock=clock)
    listed = {shard.shard_id for shard in shards}
    impacts: list[ShardImpact] = []
    for shard_id in sorted(listed | set(leases)):
        lease = leases.get(shard_id)
        base = ShardImpact(
            shard_id=shard_id,
            new_start=new_start,
            checkpoint=lease.checkpoint if lease else None,
            current_start=lease.start if lease else None,
            shard_ended=bool(lease and lease.shard_ended),
            in_stream=shard_id in listed,
        )
        if not base.in_stream:
            impacts.append(base)
            continue
        if max_records <= 0:
            impacts.append(base)
            continue
        if lease is None:
            # Never read: it starts at the new position whatever the reset does.
            impacts.append(replace(base, read_again=Count(0), skipped=Count(0)))
            continue
        read_again = Count(0)
        if lease.shard_ended or lease.checkpoint is not None:
            checkpoint = None if lease.shard_ended else lease.checkpoint
            bound = parse_sequence_number(checkpoint.sequence_number) if checkpoint else None
            read_again = _count_while(
                reader.records(shard_id, _iterator_args(new_start, None), max_records),
                _at_or_before(bound),
                max_records,
            )
        skipped = Count(0)
        if new_start.position is InitialPosition.AT_TIMESTAMP and not lease.shard_ended:
            until = new_start.timestamp
            assert until is not None  # AT_TIMESTAMP always carries its time
            skipped = _count_while(
                reader.records(shard_id, _iterator_args(lease.start, lease.checkpoint), max_records),
                _arrived_before(until),
                max_records,
            )
        impacts.append(replace(base, read_again=read_again, skipped=skipped))
    return impacts


def ledger_note(*, old_application: str, old_generation: str, new_application: str, new_generation: str | None) -> str:
    """What the exactly-once ledger does about a reset, in plain words."""
    new = f"{new_application!r} (generation {new_generation})" if new_generation else f"{new_application!r}"
    return (
        "The exactly-once ledger does not prevent this. Its marks are kept per application name and lease-table "
        f"generation; the marks of {old_application!r} (generation {old_generation}) do not apply to {new}, "
        "which starts with none. Records read again are loaded again as new rows, and records skipped are not "
        "loaded at all. Within the new generation, every batch is loaded exactly once as before."
    )
