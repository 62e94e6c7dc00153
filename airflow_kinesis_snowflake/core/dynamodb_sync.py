"""One DynamoDB table's sync run: the steps of :mod:`.sources.dynamodb.progress`, carried out.

:func:`sync_table` runs one table's batches for one run. Snowflake is the truth (the generations
record, the snapshot ledger's cursors, the stream shards' ledger marks); the lease table holds who
reads what, and a cache of the positions. Each batch:

1. **Decides** from Snowflake's records and the leases' last reads (:func:`.progress.next_step`):
   start a generation (recorded in Snowflake before anything is read, so its stream position is
   fixed before its snapshot starts), complete a snapshot, or read. A gap (a shard of the current
   generation last read longer than ``max_checkpoint_age`` ago by the run's ``now``, or a trimmed
   position found by a read) starts the next generation with ``on_gap: resnapshot``, or raises
   :class:`.progress.StreamGapError` with ``on_gap: fail`` before anything is recorded.
2. **Leases** the segments the step names and the generation's stream shards whose parents are
   finished (conditional writes; a retry of the same task takes over its earlier try's leases).
3. **Reads** each segment from its cursor in the snapshot ledger, and each shard after its ledger
   mark, up to the run's cut-off and the caps. A trimmed position is a gap (:class:`.streams.StreamGap`).
4. **Applies** the changes (``unpacked``: after widening and adding the columns they need,
   :func:`_staging_columns`) and moves the ledgers in one Snowflake transaction, guarded by the marks
   the batch read (:meth:`.load.dynamodb_sink.DynamoDBSink.apply_batch`): a batch replayed or run
   twice applies nothing the second time. *Crash before the commit:* nothing is visible, the next
   batch reads the same. *After it:* the next batch starts from the new marks.
5. **Caches** the positions in the lease table, marks finished segments and shards SHARD_END, and
   releases the leases (also when a step failed; a lease not released expires).

The run goes on with another batch while a step started a generation or completed a snapshot, or a
shard reached its end (its children become readable), up to :data:`MAX_ROUNDS` batches.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from airflow_kinesis_snowflake.core.load.dynamodb_rows import (
    ITEM_COLUMN,
    KeyAttribute,
    Layout,
    packed_rows,
    summarize,
    table_columns,
    unpacked_rows,
    widenings,
)
from airflow_kinesis_snowflake.core.load.dynamodb_sink import (
    Deletes,
    DynamoDBSink,
    DynamoDBTarget,
    MergeResult,
    SegmentMark,
)
from airflow_kinesis_snowflake.core.load.evolution import plan_changes
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import ROWS_DIR
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import eligible_leases
from airflow_kinesis_snowflake.core.sources.dynamodb.model import ItemChange
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import (
    CompleteSnapshot,
    Gap,
    Generation,
    ReadBatch,
    StartGeneration,
    SyncSettings,
    checkpoint_gap,
    lease_key,
    next_step,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateLimiter, ReadRateSettings, segment_read_rate
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import (
    SegmentCursor,
    SegmentRead,
    SegmentState,
    SegmentTask,
    SnapshotTable,
    scan_segment,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.streams import (
    StreamGap,
    StreamRead,
    list_stream_shards,
    read_stream_shard,
)
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.errors import LeaseLostError
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable, open_to

log = logging.getLogger(__name__)

MAX_ROUNDS = 8
_ANYWHERE = StartPosition(InitialPosition.TRIM_HORIZON)


@dataclass(frozen=True)
class TableSync:
    """What one table's sync needs to know.

    :param application_name: the connector's application name: its lease table, and the key of its
        records in Snowflake.
    :param table: the DynamoDB table.
    :param stream_arn: the table's stream (``LatestStreamArn``).
    :param target: the destination and how changes are applied to it.
    :param keys: the table's key attributes and their types.
    :param settings: snapshot, gaps, segments.
    :param read_rate: the snapshot's read-rate limit; None reads as fast as the table answers.
    :param max_items_per_segment: a batch reads at most this many items of a segment.
    :param max_records_per_shard: a batch reads at most this many records of a stream shard.
    :param lease_duration_seconds: a lease not renewed for this long may be taken by another worker.
    """

    application_name: str
    table: str
    stream_arn: str
    target: DynamoDBTarget
    keys: tuple[KeyAttribute, ...]
    settings: SyncSettings = field(default_factory=SyncSettings)
    read_rate: ReadRateSettings | None = None
    max_items_per_segment: int = 5000
    max_records_per_shard: int = 10_000
    lease_duration_seconds: float = 300.0

    @property
    def destination_columns(self) -> list[TableColumn]:
        soft = self.target.deletes is Deletes.SOFT
        return table_columns(self.keys, self.target.layout, soft_deletes=soft)


@dataclass(frozen=True)
class BatchFigures:
    """What one batch of a table's sync did."""

    generation: int
    batch_id: str
    segments: Mapping[int, int]
    shards: Mapping[str, int]
    segments_done: tuple[int, ...]
    shards_ended: tuple[str, ...]
    merge: MergeResult


@dataclass
class TableOutcome:
    """What a run of :func:`sync_table` did: its batches, the generations it started, snapshots completed."""

    table: str
    batches: list[BatchFigures] = field(default_factory=list)
    generations_started: list[str] = field(default_factory=list)
    snapshots_completed: list[int] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return sum(b.merge.changes_loaded for b in self.batches)


def generation_id(table: str, generation: int) -> str:
    """The ledger's generation of a table's stream marks."""
    return f"{table}/g{generation}"


def sync_table(
    sync: TableSync,
    *,
    lease_dynamodb: Any,
    source_dynamodb: Any,
    streams: Any,
    connect_snowflake: Callable[[], Any],
    owner: str,
    cutoff: datetime | None = None,
    max_rounds: int = MAX_ROUNDS,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> TableOutcome:
    """Run one table's batches for one run (the module docstring tells the steps).

    :param lease_dynamodb: a DynamoDB client for the lease table.
    :param source_dynamodb: a DynamoDB client for the source table's Scan.
    :param streams: a DynamoDB Streams client.
    :param connect_snowflake: opens a Snowflake connection.
    :param owner: the lease owner this run writes (:class:`~.state.leases.LeaseOwner`).
    :param cutoff: stream records created after it are left for the next run; now when None.
    :raises StreamGapError: the stream lost changes and ``on_gap: fail`` is set.
    """
    cutoff = cutoff or now()
    outcome = TableOutcome(sync.table)
    leases = LeaseTable(lease_dynamodb, sync.application_name)
    gap: Gap | None = None
    with closing(connect_snowflake()) as conn:
        sink = DynamoDBSink(conn, sync.target)
        sink.ensure_support_objects()
        sink.ensure_destination(sync.destination_columns)
        for _ in range(max_rounds):
            current = sink.current_generation(sync.application_name)
            segment_marks = _segment_marks(sink, sync, current)
            states = _segment_states(segment_marks)
            shards = list_stream_shards(streams, sync.stream_arn)
            if gap is None and current is not None:
                gap = _checkpoint_gap(leases, sync, current, shards, now())
            step = next_step(sync.table, current, states, sync.settings, now(), gap)
            gap = None
            if isinstance(step, StartGeneration):
                sink.record_generation(sync.application_name, step.generation, step.reason)
                log.info("%s: generation %d started: %s", sync.table, step.generation.number, step.reason)
                outcome.generations_started.append(step.reason)
                continue
            if isinstance(step, CompleteSnapshot):
                assert step.generation.snapshot is not None
                sink.complete_snapshot(
                    sync.application_name, step.generation.number, step.generation.snapshot.total_segments
                )
                outcome.snapshots_completed.append(step.generation.number)
                continue
            try:
                figures = _read_batch(
                    sync, step, segment_marks, shards, leases, sink, source_dynamodb, streams, owner, cutoff, now
                )
            except StreamGap as err:
                gap = Gap(err.shard_id, str(err))
                log.warning("%s: %s", sync.table, err)
                continue
            if figures is None:
                break
            outcome.batches.append(figures)
            if figures.merge.completed_snapshot is not None:
                outcome.snapshots_completed.append(figures.merge.completed_snapshot)
            if not figures.shards_ended:
                break
    return outcome


def _segment_marks(sink: DynamoDBSink, sync: TableSync, current: Generation | None) -> dict[int, SegmentMark]:
    """The snapshot ledger's mark of each segment of the generation that a batch read."""
    if current is None or current.snapshot is None:
        return {}
    return {row.segment: row.mark for row in sink.read_segments(sync.application_name, current.number)}


def _segment_states(marks: Mapping[int, SegmentMark]) -> list[SegmentState]:
    return [
        SegmentState(n, SegmentCursor.from_text(m.cursor) if m.cursor is not None else None, m.done)
        for n, m in sorted(marks.items())
    ]


def _stream_leases(sync: TableSync, generation: int, shards: Iterable[Shard]) -> list[Shard]:
    """The stream's shards under the generation's lease keys."""
    return [
        Shard(
            shard_id=lease_key(sync.table, generation, s.shard_id),
            parent_shard_ids=tuple(lease_key(sync.table, generation, p) for p in s.parent_shard_ids),
            starting_sequence_number=s.starting_sequence_number,
            ending_sequence_number=s.ending_sequence_number,
        )
        for s in shards
    ]


def _checkpoint_gap(
    leases: LeaseTable, sync: TableSync, current: Generation, shards: Sequence[Shard], now: datetime
) -> Gap | None:
    """A shard of the generation that no batch read for longer than the safe age (read by key)."""
    if not leases.exists():
        return None
    keys = [s.shard_id for s in _stream_leases(sync, current.number, shards)]
    for lease in leases.leases_of(keys).values():
        if lease.shard_ended or not lease.checkpointed_at:
            continue
        last_read = datetime.fromtimestamp(lease.checkpointed_at, UTC)
        found = checkpoint_gap(lease.shard_id, last_read, now, sync.settings.max_checkpoint_age)
        if found is not None:
            return found
    return None


def _take(
    leases: LeaseTable, candidates: Mapping[str, Lease], wanted: set[str], owner: str, duration: float
) -> dict[str, Lease]:
    now = time.time()
    held: dict[str, Lease] = {}
    for lease in eligible_leases(open_to(candidates, owner, now), now):
        if lease.shard_id not in wanted:
            continue
        taken = leases.take(lease, owner, duration)
        if taken is not None:
            held[taken.shard_id] = taken
    return held


def _read_batch(
    sync: TableSync,
    step: ReadBatch,
    segment_marks: Mapping[int, SegmentMark],
    shards: Sequence[Shard],
    leases: LeaseTable,
    sink: DynamoDBSink,
    source_dynamodb: Any,
    streams: Any,
    owner: str,
    cutoff: datetime,
    now: Callable[[], datetime],
) -> BatchFigures | None:
    """Steps 2 to 5 of one batch; None when it could take no lease."""
    generation = step.generation
    if not leases.exists():
        # A connector's tables share its lease table, which names the connector's application as
        # its source (as the provision DAG creates it).
        leases.create(stream_name=sync.application_name, application_name=sync.application_name)
    shard_of = {lease_key(sync.table, generation.number, s.shard_id): s.shard_id for s in shards}
    task_of = {lease_key(sync.table, generation.number, t.segment.id): t for t in step.segments}
    units = _stream_leases(sync, generation.number, shards) + [Shard(shard_id=key) for key in task_of]
    candidates = leases.sync_shards(units, _ANYWHERE)
    held = _take(leases, candidates, set(shard_of) | set(task_of), owner, sync.lease_duration_seconds)
    if not held:
        log.info("%s: no lease free to take in generation %d", sync.table, generation.number)
        return None
    try:
        batch = _Batch(
            sync,
            generation,
            segments=[task_of[k] for k in sorted(held) if k in task_of],
            shards={k: shard_of[k] for k in sorted(held) if k in shard_of},
            segment_marks=segment_marks,
            marks=sink.read_ledger(sync.application_name, generation_id(sync.table, generation.number)),
        )
        batch.read(source_dynamodb, streams, cutoff)
        merge = batch.apply(sink)
        batch.cache(leases, held, task_of, now().timestamp())
        return batch.figures(merge)
    finally:
        for lease in held.values():
            try:
                leases.release(lease)
            except Exception:  # best effort: the lease expires anyway
                log.warning("Could not release the lease on %s", lease.shard_id, exc_info=True)


@dataclass
class _Batch:
    """One batch's units, where each starts (Snowflake's marks), and what was read."""

    sync: TableSync
    generation: Generation
    segments: list[SegmentTask]
    shards: dict[str, str]  # lease key -> stream shard id
    segment_marks: Mapping[int, SegmentMark]
    marks: Mapping[str, Checkpoint]
    segment_reads: list[SegmentRead] = field(default_factory=list)
    stream_reads: dict[str, StreamRead] = field(default_factory=dict)

    @property
    def batch_id(self) -> str:
        """Named by where it starts: a retry that starts from the same marks has the same id."""
        parts = [self.sync.application_name, self.sync.table, str(self.generation.number)]
        parts += [f"{t.segment.id}:{t.cursor.to_text() if t.cursor else ''}" for t in self.segments]
        parts += [f"{k}:{self.marks[k].sequence_number if k in self.marks else ''}" for k in sorted(self.shards)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]

    def read(self, source_dynamodb: Any, streams: Any, cutoff: datetime) -> None:
        """Step 3: each segment from its cursor, each shard after its ledger mark."""
        self.segment_reads = _scan(self.sync, self.segments, source_dynamodb)
        for key, shard_id in self.shards.items():
            mark = self.marks.get(key)
            self.stream_reads[key] = read_stream_shard(
                streams,
                self.sync.stream_arn,
                shard_id,
                table=self.sync.table,
                snapshot=self.generation.number,
                cutoff=cutoff,
                max_records=self.sync.max_records_per_shard,
                after=mark.sequence_number if mark else None,
                not_before=self.generation.stream_not_before,
            )

    def apply(self, sink: DynamoDBSink) -> MergeResult:
        """Step 4: stage the changes, then apply them and move the ledgers in one transaction."""
        changes: list[ItemChange] = [c for r in self.segment_reads for c in r.changes]
        changes += [c for r in self.stream_reads.values() for c in r.changes]
        stage_dir = f"{self.sync.application_name}/{self.sync.table}/{self.batch_id}/{uuid.uuid4().hex[:12]}"
        columns = self.sync.destination_columns
        if changes:
            columns = _staging_columns(sink, self.sync, changes)
            _stage(sink, changes, self.sync.keys, columns, stage_dir)
        shard_ends = {}
        for key, read in self.stream_reads.items():
            start = self.marks.get(key)
            if read.last_sequence_number is not None and (
                start is None or start.sequence_number != read.last_sequence_number
            ):
                shard_ends[key] = Checkpoint(read.last_sequence_number)
        segment_ends = {}
        for scanned in self.segment_reads:
            before = self.segment_marks.get(scanned.segment.number)
            items = (before.items if before else 0) + len(scanned.changes)
            cursor = None if scanned.cursor is None else scanned.cursor.to_text()
            segment_ends[scanned.segment.number] = SegmentMark(cursor, done=cursor is None, items=items)
        snapshot = self.generation.snapshot
        return sink.apply_batch(
            application_name=self.sync.application_name,
            generation_id=generation_id(self.sync.table, self.generation.number),
            batch_id=self.batch_id,
            stage_dir=stage_dir,
            rows=len(changes),
            columns=columns,
            shard_starts={k: self.marks.get(k) for k in shard_ends},
            shard_ends=shard_ends,
            snapshot_generation=self.generation.number if segment_ends else None,
            total_segments=snapshot.total_segments if snapshot else 0,
            segment_starts={n: self.segment_marks.get(n) for n in segment_ends},
            segment_ends=segment_ends,
        )

    def cache(
        self, leases: LeaseTable, held: dict[str, Lease], task_of: Mapping[str, SegmentTask], read_at: float
    ) -> None:
        """Step 5: the lease table caches what the ledger now holds; a lease lost meanwhile is left.

        A shard read to the cut-off is checkpointed even when it had nothing new: its lease's
        ``checkpointed_at`` is when a batch last read it (``read_at``, on the run's clock, which
        the safe-age rule measures against).
        """
        done = {r.segment.number for r in self.segment_reads if r.done}
        for key, lease in list(held.items()):
            try:
                if key in self.stream_reads:
                    read = self.stream_reads[key]
                    mark = Checkpoint(read.last_sequence_number) if read.last_sequence_number else None
                    held[key] = leases.checkpoint(lease, mark, shard_end=read.shard_end, now=read_at)
                elif key in task_of and task_of[key].segment.number in done:
                    held[key] = leases.checkpoint(lease, None, shard_end=True, now=read_at)
            except LeaseLostError:
                log.warning("The lease on %s was taken meanwhile: its new owner reads from the ledger", key)

    def figures(self, merge: MergeResult) -> BatchFigures:
        return BatchFigures(
            generation=self.generation.number,
            batch_id=self.batch_id,
            segments={r.segment.number: len(r.changes) for r in self.segment_reads},
            shards={self.shards[k]: r.records_read for k, r in self.stream_reads.items()},
            segments_done=tuple(sorted(r.segment.number for r in self.segment_reads if r.done)),
            shards_ended=tuple(sorted(self.shards[k] for k, r in self.stream_reads.items() if r.shard_end)),
            merge=merge,
        )


def _scan(sync: TableSync, tasks: Sequence[SegmentTask], client: Any) -> list[SegmentRead]:
    if not tasks:
        return []
    description = client.describe_table(TableName=sync.table)["Table"]
    table = SnapshotTable.from_description(description)
    limiter = None
    if sync.read_rate is not None:
        rate = segment_read_rate(table.capacity, sync.read_rate, len(tasks))
        limiter = ReadRateLimiter(rate)
    return [scan_segment(client, table, t.segment, t.cursor, sync.max_items_per_segment, limiter) for t in tasks]


#: Widenings a batch runs at most before it stages (each pass widens every column it can).
_WIDENING_PASSES = 3


def _staging_columns(sink: DynamoDBSink, sync: TableSync, changes: Sequence[ItemChange]) -> list[TableColumn]:
    """The columns the batch is staged with; with ``unpacked``, the destination's once it fits them.

    As for Kinesis records (:func:`~.job.evolve_schema`), before anything is staged: an attribute
    column that cannot hold a value of the batch exactly is widened (``NUMBER(38,0)`` and an S value
    give ``VARCHAR``; :func:`~.load.dynamodb_rows.widenings`), then a column is added for each new
    attribute (:func:`~.load.dynamodb_rows.summarize`, :func:`~.load.evolution.plan_changes`; all
    of the batch's, so that no value is left without a column).
    """
    if sync.target.layout is Layout.PACKED:
        return sync.destination_columns
    columns = sink.widen_columns(())
    for _ in range(_WIDENING_PASSES):
        wider = widenings(changes, columns, sync.keys)
        if not wider:
            break
        log.info("%s: widening %s", sync.table, ", ".join(f"{w.column} to {w.sql_type}" for w in wider))
        columns = sink.widen_columns(wider)
    summary = summarize(changes, columns, sync.keys)
    plan = plan_changes(summary, columns, evolve=True, max_new_columns=max(len(summary.keys), 1))
    if plan.add:
        log.info("%s: adding columns %s", sync.table, ", ".join(f"{c.name} {c.type.sql}" for c in plan.add))
        columns = sink.sink.evolve([(c.name, c.type.sql) for c in plan.add], ())
    return columns


def _stage(
    sink: DynamoDBSink,
    changes: Sequence[ItemChange],
    keys: Sequence[KeyAttribute],
    columns: Sequence[TableColumn],
    stage_dir: str,
) -> None:
    if any(c.name == ITEM_COLUMN for c in columns):
        rows = packed_rows(changes, keys)
    else:
        rows = unpacked_rows(changes, keys, columns)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "changes.parquet"
        pq.write_table(rows, path)
        sink.sink.put_file(path, f"{stage_dir}/{ROWS_DIR}")
