"""Where one table's sync stands, and what its next batch does: pure decisions over recorded facts.

A table's sync lives in generations. Generation ``g`` starts by fixing a stream position, *then*
scanning the table (the snapshot), while the stream is read from that position on; so no change
made during the snapshot is missed, and the order of :mod:`.model` makes the overlap harmless.
Generation 0 is the first; a gap in the stream (a checkpoint older than the safe age, or a trimmed
position) starts generation ``g + 1`` with ``on_gap: resnapshot``, or stops with ``on_gap: fail``.

Each generation's work has its own lease keys and ledger marks (:func:`lease_key`), so a new
generation starts from fresh positions and never from the checkpoints of the one it replaces.

The steps of a batch, and what a crash after each leaves:

1. **Start** a generation (:class:`StartGeneration`) when there is none, or after a gap: its
   position and time are recorded in Snowflake before anything is read. *Crash:* the next batch
   finds the record and reads on.
2. **Read** the generation's unfinished snapshot segments (at most ``max_segments_per_batch``)
   and its stream shards, and apply the changes with the ledger in one transaction. *Crash:* as
   for Kinesis, the next batch reads from the ledger's marks.
3. **Complete** the snapshot once every segment is done (:class:`CompleteSnapshot`): rows older than
   the generation are items deleted meanwhile, and are removed; the generation's tombstones are no
   longer needed. It is idempotent, so a crash repeats it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import (
    MAX_TOTAL_SEGMENTS,
    SegmentState,
    SegmentTask,
    SnapshotStart,
    plan_snapshot_batch,
    snapshot_complete,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.streams import DEFAULT_MAX_CHECKPOINT_AGE, gap_reason

#: DynamoDB Streams keeps records for 24 hours.
STREAM_RETENTION = timedelta(hours=24)
#: Read the stream from this long before a generation's start: approximate creation times are
#: rounded, and an earlier change read again is ordered below the snapshot's view of it anyway.
STREAM_START_MARGIN = timedelta(minutes=2)


class SnapshotMode(StrEnum):
    """Whether a table's existing items are copied before its stream is followed."""

    INITIAL = "initial"
    SKIP = "skip"


class OnGap(StrEnum):
    """What a gap in the stream does: a new snapshot of the table, or a stop with the explanation."""

    RESNAPSHOT = "resnapshot"
    FAIL = "fail"


class StreamStart(StrEnum):
    """Where the stream of a table whose snapshot is skipped is first read."""

    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"


@dataclass(frozen=True)
class SyncSettings:
    """A table's sync settings, from the connector file.

    :param snapshot: copy the existing items first (``initial``), or only follow the stream (``skip``).
    :param stream_start: with ``snapshot: skip``, the stream's oldest record or the first batch's time.
    :param on_gap: a new snapshot, or a stop, when the stream lost changes.
    :param max_checkpoint_age: a shard not read for this long counts as a gap (below 24 hours).
    :param total_segments: the snapshot's parallel Scan segments.
    :param max_segments_per_batch: at most this many segments are read in one batch.
    :param max_snapshot_batches_per_run: a sync run goes on with the next snapshot batch until the
        snapshot is complete or it has read this many (each one committed on its own).
    """

    snapshot: SnapshotMode = SnapshotMode.INITIAL
    stream_start: StreamStart = StreamStart.TRIM_HORIZON
    on_gap: OnGap = OnGap.RESNAPSHOT
    max_checkpoint_age: timedelta = DEFAULT_MAX_CHECKPOINT_AGE
    total_segments: int = 4
    max_segments_per_batch: int = 4
    max_snapshot_batches_per_run: int = 10

    def __post_init__(self) -> None:
        if not timedelta(0) < self.max_checkpoint_age < STREAM_RETENTION:
            raise ValueError(f"max_checkpoint_age must be between 0 and 24 hours, got {self.max_checkpoint_age}")
        if not 1 <= self.total_segments <= MAX_TOTAL_SEGMENTS:
            raise ValueError(
                f"total_segments must be 1 to {MAX_TOTAL_SEGMENTS} (DynamoDB's limit), got {self.total_segments}"
            )
        if self.max_segments_per_batch < 1:
            raise ValueError(f"max_segments_per_batch must be at least 1, got {self.max_segments_per_batch}")
        if self.max_snapshot_batches_per_run < 1:
            raise ValueError(
                f"max_snapshot_batches_per_run must be at least 1, got {self.max_snapshot_batches_per_run}"
            )


@dataclass(frozen=True)
class Generation:
    """A generation of a table's sync, as recorded in Snowflake when it started.

    :param number: 0, then one more per snapshot taken after a gap (:attr:`.model.Version.snapshot`).
    :param started_at: when it started; its stream is read from :attr:`stream_not_before`.
    :param snapshot: its snapshot's segments; None when the snapshot was skipped.
    :param stream_from_trim_horizon: its stream is read from the oldest record kept, unfiltered.
    :param completed: its snapshot's completion (step 3) committed; True when there is no snapshot.
    :param stream_arn: the stream it follows (the table's ``LatestStreamArn`` when it started); None
        when not recorded.
    """

    number: int
    started_at: datetime
    snapshot: SnapshotStart | None
    stream_from_trim_horizon: bool = False
    completed: bool = False
    stream_arn: str | None = None

    def __post_init__(self) -> None:
        if self.snapshot is not None and self.snapshot.generation != self.number:
            raise ValueError(f"generation {self.number} holds the snapshot of generation {self.snapshot.generation}")

    @property
    def stream_not_before(self) -> datetime | None:
        """Stream records created before this are older than the generation's view; None: read all."""
        if self.stream_from_trim_horizon:
            return None
        return self.started_at - STREAM_START_MARGIN


@dataclass(frozen=True)
class StartGeneration:
    """Step 1: record a new generation before reading anything (``reason`` says why)."""

    generation: Generation
    reason: str


@dataclass(frozen=True)
class ReadBatch:
    """Step 2: read these segments of the generation's snapshot (from their cursors), and its stream."""

    generation: Generation
    segments: tuple[SegmentTask, ...]


@dataclass(frozen=True)
class CompleteSnapshot:
    """Step 3: remove rows older than the generation, purge its tombstones."""

    generation: Generation


class StreamGapError(RuntimeError):
    """The stream lost changes of the table and ``on_gap: fail`` is set: what happened and what to do."""


@dataclass(frozen=True)
class Gap:
    """Why the stream's changes since a generation's position are not all readable any more."""

    shard_id: str
    reason: str


def gap_error(table: str, gap: Gap) -> StreamGapError:
    """The error of a gap with ``on_gap: fail``: what was lost and the fix."""
    return StreamGapError(
        f"DynamoDB table {table}: {gap.reason}; changes since the last batch may be lost, so the "
        "destination may no longer equal the table. Set on_gap: resnapshot to take a new snapshot "
        "(it resumes per segment and removes rows of items deleted meanwhile), or run the reset DAG"
    )


def destination_dropped(current: Generation | None, destination: str) -> Gap | None:
    """The gap of a destination table found missing while a generation is recorded: it was dropped.

    The sync creates the destination before it records a generation, and a reset never drops it, so
    its rows were lost with it; the stream alone would only bring later changes. Only a new snapshot
    makes the table whole again (or ``UNDROP TABLE``, while Time Travel keeps it, before the next run).
    """
    if current is None:
        return None
    return Gap(
        destination,
        f"the destination table {destination} was dropped after generation {current.number} started, and its "
        f"rows with it (UNDROP TABLE {destination} brings them back while Time Travel keeps them)",
    )


def stream_replaced(current: Generation, stream_arn: str) -> Gap | None:
    """A gap when the table's stream is no longer the one the generation follows.

    Disabling a table's stream and enabling it again makes a new stream, and so does deleting the
    table and creating it again: the changes made in between are in no stream, and those the old
    stream held unread are no longer followed. Only a new snapshot finds the table's state again.
    A generation that did not record its stream (None) is taken as following the current one.
    """
    if current.stream_arn is None or current.stream_arn == stream_arn:
        return None
    return Gap(
        stream_arn,
        f"the table's stream is now {stream_arn}, not {current.stream_arn} that generation {current.number} "
        "follows (the stream was disabled and enabled again, or the table deleted and created again): changes "
        "made in between are in neither stream",
    )


def checkpoint_gap(
    shard_id: str, last_read_at: datetime | None, now: datetime, max_age: timedelta = DEFAULT_MAX_CHECKPOINT_AGE
) -> Gap | None:
    """A shard last read up to its cut-off at ``last_read_at`` has a gap once that is ``max_age`` ago
    (:func:`.streams.gap_reason`); None (never read) is no gap here: :func:`reads_from_first_record`
    makes the read itself find one.
    """
    if last_read_at is None:
        return None
    reason = gap_reason(last_read_at, now, max_age)
    return None if reason is None else Gap(shard_id, f"shard {shard_id}: {reason}")


def shard_gap(
    shard_id: str,
    *,
    listed: bool,
    ended: bool,
    last_read_at: datetime | None,
    now: datetime,
    max_age: timedelta = DEFAULT_MAX_CHECKPOINT_AGE,
) -> Gap | None:
    """The gap, if any, in one stream shard of the current generation, from its lease.

    A shard read to its end has none. A shard that DescribeStream no longer lists but that no batch
    read to its end left the stream with records unread (AWS removes a shard once its records are
    past the retention): a gap, which also frees its children, which wait for their parents. A
    listed shard has one once its last read is ``max_age`` ago (:func:`checkpoint_gap`).

    :param listed: DescribeStream lists the shard.
    :param ended: a batch read the shard to its end (its lease is SHARD_END).
    :param last_read_at: when a batch last read it; None: never.
    """
    if ended:
        return None
    if not listed:
        return Gap(
            shard_id,
            f"shard {shard_id} left the stream (its records passed the stream's retention) before a batch "
            "read it to its end",
        )
    return checkpoint_gap(shard_id, last_read_at, now, max_age)


def reads_from_first_record(
    generation: Generation, now: datetime, max_age: timedelta = DEFAULT_MAX_CHECKPOINT_AGE
) -> bool:
    """Whether a shard that no batch has read starts at its first sequence number (AT_SEQUENCE_NUMBER),
    not at TRIM_HORIZON.

    TRIM_HORIZON starts at the oldest record kept, so it passes silently over records trimmed
    before the first read. While the generation began less than ``max_age`` ago that is harmless:
    a trimmed record is older than the stream's retention, so it predates the generation's view
    (the snapshot holds its effect). Once the generation is older, a shard never read (a child
    left unread by an outage after its parent ended, a shard whose lease table was deleted) may
    have lost records of the view: reading from its first sequence number makes DynamoDB answer
    ``TrimmedDataAccessException``, a gap, where records were trimmed.
    """
    return now - generation.started_at >= max_age


def next_step(
    table: str,
    current: Generation | None,
    segments: Iterable[SegmentState],
    settings: SyncSettings,
    now: datetime,
    gap: Gap | None = None,
) -> StartGeneration | ReadBatch | CompleteSnapshot:
    """What the next batch of ``table`` does, from its current generation, its segments' states and
    any gap found.

    :raises StreamGapError: a gap, with ``on_gap: fail``: the message says what was lost and the fix.
    """
    if current is None:
        return StartGeneration(_first_generation(settings, now), "the table's first sync")
    if gap is not None:
        if settings.on_gap is OnGap.FAIL:
            raise gap_error(table, gap)
        number = current.number + 1
        started = Generation(number, now, SnapshotStart(number, now, settings.total_segments))
        return StartGeneration(started, f"a gap in the stream: {gap.reason}")
    if current.snapshot is None or current.completed:
        return ReadBatch(current, ())
    states = list(segments)
    if snapshot_complete(current.snapshot, states):
        return CompleteSnapshot(current)
    return ReadBatch(current, tuple(plan_snapshot_batch(current.snapshot, states, settings.max_segments_per_batch)))


def _first_generation(settings: SyncSettings, now: datetime) -> Generation:
    if settings.snapshot is SnapshotMode.INITIAL:
        return Generation(0, now, SnapshotStart(0, now, settings.total_segments))
    # No snapshot: nothing to complete, and the stream is read from the oldest record or from now.
    trim_horizon = settings.stream_start is StreamStart.TRIM_HORIZON
    return Generation(0, now, None, stream_from_trim_horizon=trim_horizon, completed=True)


def lease_key(table: str, generation: int, shard_or_segment: str) -> str:
    """The lease key (and ledger shard id) of a stream shard or snapshot segment of a table's generation.

    A connector's tables share its lease table; a DynamoDB table name holds no ``/``.
    """
    return f"{table}/g{generation}/{shard_or_segment}"


# A lease key of :func:`lease_key`: a DynamoDB table name (3-255 of its characters, no '/'), the
# generation, then a stream shard id or a snapshot segment. A Kinesis lease's key is a shard id.
_LEASE_KEY = re.compile(r"^(?P<table>[A-Za-z0-9_.\-]{3,255})/g(?P<generation>\d+)/(?P<unit>[^/]+)$")


@dataclass(frozen=True)
class LeaseKey:
    """A lease key read back: the table, the generation, and the shard or segment."""

    table: str
    generation: int
    unit: str


def parse_lease_key(key: str) -> LeaseKey | None:
    """The parts of a DynamoDB source's lease key; None for any other key (a Kinesis shard id)."""
    match = _LEASE_KEY.match(key)
    if match is None:
        return None
    return LeaseKey(match["table"], int(match["generation"]), match["unit"])
