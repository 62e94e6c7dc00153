"""One DynamoDB table's sync run: the steps of :mod:`.sources.dynamodb.progress`, carried out.

:func:`sync_table` runs one table's batches for one run. Snowflake is the truth (the generations
record, the snapshot ledger's cursors, the stream shards' ledger marks); the lease table holds who
reads what, and a cache of the positions. Each batch:

1. **Decides** from Snowflake's records and the leases' last reads (:func:`.progress.next_step`):
   start a generation (recorded in Snowflake before anything is read, so its stream position is
   fixed before its snapshot starts), complete a snapshot, or read. A gap (a shard of the current
   generation last read longer than ``max_checkpoint_age`` ago by the run's ``now``, a shard that
   left the stream before it was read to its end, a stream that is not the one the generation
   follows, a destination table dropped by hand, or a trimmed position found by a read) starts
   the next generation with ``on_gap: resnapshot``, or raises :class:`.progress.StreamGapError`
   with ``on_gap: fail`` before anything is recorded.
2. **Leases** the segments the step names and the generation's stream shards whose parents are
   finished (conditional writes; a retry of the same task takes over its earlier try's leases).
3. **Reads** each segment from its cursor in the snapshot ledger, and each shard after its ledger
   mark (a shard never read: from its first record once the generation is older than the safe
   age, :func:`.progress.reads_from_first_record`), up to the run's cut-off and the caps. A
   trimmed position is a gap (:class:`.streams.StreamGap`).
4. **Applies** the changes (``unpacked``: after widening and adding the columns they need,
   :func:`~.dynamodb_job.staging_columns`) and moves the ledgers in one Snowflake transaction, guarded by the marks
   the batch read (:meth:`.load.dynamodb_sink.DynamoDBSink.apply_batch`): a batch replayed or run
   twice applies nothing the second time. *Crash before the commit:* nothing is visible, the next
   batch reads the same. *After it:* the next batch starts from the new marks.
5. **Caches** the positions in the lease table, marks finished segments and shards SHARD_END, and
   releases the leases (also when a step failed; a lease not released expires).

A batch refused because a newer generation was recorded since it was planned (a reset during the
run: :class:`~.load.dynamodb_sink.GenerationSupersededError`) applied nothing; its leases are
released and the next round decides again, in the new generation.

The run goes on with another batch while a step started a generation or completed a snapshot, a
shard reached its end (its children become readable), or the snapshot has segments left and the
run has read fewer than ``max_snapshot_batches_per_run`` snapshot batches; at most :data:`MAX_ROUNDS`
rounds besides those snapshot batches. Each batch commits on its own, so a run that dies after some
of them keeps what they applied.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_kinesis_snowflake.core.dynamodb_job import (
    ClientAccess,
    SegmentUnit,
    ShardUnit,
    TableBatchPlan,
    TableBatchResult,
    load,
    target_from_dict,
    target_to_dict,
)
from airflow_kinesis_snowflake.core.dynamodb_job import generation_id as generation_id
from airflow_kinesis_snowflake.core.dynamodb_progress import report_snapshot_progress
from airflow_kinesis_snowflake.core.engine.detached import DetachedRun, JobDetached
from airflow_kinesis_snowflake.core.engine.leases import (
    HeldLeases,
    LeaseHold,
    ResumedBatch,
    forget_run,
    resume_hold,
    take_leases,
)
from airflow_kinesis_snowflake.core.engine.local import LocalContext, SharedConnection
from airflow_kinesis_snowflake.core.load.dynamodb_failures import FAILURES_SUFFIX
from airflow_kinesis_snowflake.core.load.dynamodb_rows import (
    KeyAttribute,
    table_columns,
)
from airflow_kinesis_snowflake.core.load.dynamodb_sink import (
    Deletes,
    DynamoDBSink,
    DynamoDBTarget,
    GenerationSupersededError,
    KeyColumn,
    MergeResult,
    SegmentMark,
)
from airflow_kinesis_snowflake.core.load.ownership import owner_conflict, owner_refusal
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import (
    CompleteSnapshot,
    Gap,
    Generation,
    OnGap,
    ReadBatch,
    SnapshotMode,
    StartGeneration,
    StreamStart,
    SyncSettings,
    destination_dropped,
    gap_error,
    lease_key,
    next_step,
    reads_from_first_record,
    shard_gap,
    stream_replaced,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateSettings
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import (
    SegmentCursor,
    SegmentState,
    SegmentTask,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.streams import (
    StreamGap,
    list_stream_shards,
)
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.errors import IdentityError, LeaseLostError
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable, lease_keys
from airflow_kinesis_snowflake.core.state.metadata import TableClaim, check_claim, check_dynamodb_use

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
    :param connector_id: the connector (named in the refusal when another one holds the table).
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
    connector_id: str | None = None

    @property
    def destination_columns(self) -> list[TableColumn]:
        soft = self.target.deletes is Deletes.SOFT
        return table_columns(self.keys, self.target.layout, soft_deletes=soft)

    def fitted_to(self, existing: Sequence[TableColumn]) -> TableSync:
        """This sync as an existing destination (its ``existing`` columns) holds its keys: a number key
        stays text in a table created with text keys (``number_keys``); unchanged when none exists."""
        by_name = {c.name.upper(): c for c in existing}
        keys = tuple(k.fitted_to(by_name) for k in self.keys)
        if keys == self.keys:
            return self
        target = replace(self.target, keys=tuple(KeyColumn(k.column, k.sql_type) for k in keys))
        return replace(self, keys=keys, target=target)

    def to_dict(self) -> dict[str, Any]:
        """Plain values, no credential (the inverse of :meth:`from_dict`): a continuous run carries them."""
        s, rate = self.settings, self.read_rate
        return {
            "application_name": self.application_name,
            "table": self.table,
            "stream_arn": self.stream_arn,
            "target": target_to_dict(self.target),
            "keys": [k.to_list() for k in self.keys],
            "settings": {
                "snapshot": s.snapshot.value,
                "stream_start": s.stream_start.value,
                "on_gap": s.on_gap.value,
                "max_checkpoint_age_seconds": s.max_checkpoint_age.total_seconds(),
                "total_segments": s.total_segments,
                "max_segments_per_batch": s.max_segments_per_batch,
                "max_snapshot_batches_per_run": s.max_snapshot_batches_per_run,
            },
            "read_rate": None if rate is None else [rate.read_fraction, rate.read_units_per_second],
            "max_items_per_segment": self.max_items_per_segment,
            "max_records_per_shard": self.max_records_per_shard,
            "lease_duration_seconds": self.lease_duration_seconds,
            "connector_id": self.connector_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableSync:
        settings = dict(data["settings"])
        age = timedelta(seconds=settings.pop("max_checkpoint_age_seconds"))
        rate = data["read_rate"]
        return cls(
            application_name=data["application_name"],
            table=data["table"],
            stream_arn=data["stream_arn"],
            target=target_from_dict(data["target"]),
            keys=tuple(KeyAttribute.from_list(k) for k in data["keys"]),
            settings=SyncSettings(
                snapshot=SnapshotMode(settings.pop("snapshot")),
                stream_start=StreamStart(settings.pop("stream_start")),
                on_gap=OnGap(settings.pop("on_gap")),
                max_checkpoint_age=age,
                **settings,
            ),
            read_rate=None if rate is None else ReadRateSettings(*rate),
            max_items_per_segment=data["max_items_per_segment"],
            max_records_per_shard=data["max_records_per_shard"],
            lease_duration_seconds=data["lease_duration_seconds"],
            connector_id=data.get("connector_id"),
        )


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

    @classmethod
    def of_result(cls, generation: int, batch_id: str, result: TableBatchResult, merge: MergeResult) -> BatchFigures:
        """The figures of a batch of ``generation`` that applied ``merge``."""
        return cls(
            generation=generation,
            batch_id=batch_id,
            segments={s.number: s.items for s in result.segments},
            shards={s.shard_id: s.records_read for s in result.shards},
            segments_done=tuple(sorted(s.number for s in result.segments if s.done)),
            shards_ended=tuple(sorted(s.shard_id for s in result.shards if s.shard_end)),
            merge=merge,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "batch_id": self.batch_id,
            "segments": [[number, items] for number, items in self.segments.items()],
            "shards": self.shards,
            "segments_done": list(self.segments_done),
            "shards_ended": list(self.shards_ended),
            "merge": asdict(self.merge),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchFigures:
        return cls(
            generation=int(data["generation"]),
            batch_id=str(data["batch_id"]),
            segments={int(number): int(items) for number, items in data["segments"]},
            shards={str(shard): int(records) for shard, records in data["shards"].items()},
            segments_done=tuple(int(n) for n in data["segments_done"]),
            shards_ended=tuple(str(s) for s in data["shards_ended"]),
            merge=MergeResult(**data["merge"]),
        )


@dataclass(frozen=True)
class TableBatchFigures:
    """What one committed batch of a table read and applied, however it ran (scheduled or continuous):
    what a batch's metrics, Asset event and lineage report.

    :param records: snapshot items and stream records read.
    :param units: snapshot segments and stream shards read.
    """

    batch_id: str
    records: int
    units: int
    merge: MergeResult

    @classmethod
    def of_batch(cls, figures: BatchFigures) -> TableBatchFigures:
        records = sum(figures.segments.values()) + sum(figures.shards.values())
        return cls(figures.batch_id, records, len(figures.segments) + len(figures.shards), figures.merge)

    @classmethod
    def of_result(cls, result: TableBatchResult) -> TableBatchFigures | None:
        """A continuous application's batch, as it recorded its result; None when it applied nothing."""
        if result.merge is None:
            return None
        records = sum(s.items for s in result.segments) + sum(s.records_read for s in result.shards)
        return cls(result.batch_id, records, len(result.segments) + len(result.shards), result.merge)


#: Runs a batch's data plane elsewhere (spark-submit): takes the plan, answers what was applied.
Submit = Callable[[TableBatchPlan], TableBatchResult]


@dataclass
class TableOutcome:
    """What a run of :func:`sync_table` did: its batches, the generations it started, snapshots completed,
    and the generations whose batch was refused because a newer one was recorded meanwhile (a reset)."""

    table: str
    batches: list[BatchFigures] = field(default_factory=list)
    generations_started: list[str] = field(default_factory=list)
    snapshots_completed: list[int] = field(default_factory=list)
    generations_superseded: list[int] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return sum(b.merge.changes_loaded for b in self.batches)

    @property
    def items_set_aside(self) -> int:
        return sum(b.merge.items_set_aside for b in self.batches)

    def summary(self, sync: TableSync) -> dict[str, Any]:
        """The run's figures as plain values (the sync task's return value; :func:`describe_summary`)."""
        return {
            "table": sync.table,
            "destination": sync.target.table,
            "batches": len(self.batches),
            "changes": self.changes,
            "items_set_aside": self.items_set_aside,
            "generations_started": self.generations_started,
            "snapshots_completed": self.snapshots_completed,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "batches": [b.to_dict() for b in self.batches],
            "generations_started": list(self.generations_started),
            "snapshots_completed": list(self.snapshots_completed),
            "generations_superseded": list(self.generations_superseded),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableOutcome:
        return cls(
            str(data["table"]),
            [BatchFigures.from_dict(b) for b in data["batches"]],
            [str(reason) for reason in data["generations_started"]],
            [int(n) for n in data["snapshots_completed"]],
            [int(n) for n in data["generations_superseded"]],
        )


@dataclass(frozen=True)
class PendingBatch:
    """A batch whose job run went on without the run (:mod:`~.engine.detached`): what finishing it needs.

    :param generation: the generation it read.
    :param batch_id: its id.
    :param segments: its snapshot segments' lease keys, each with the segment's number.
    """

    generation: int
    batch_id: str
    segments: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"generation": self.generation, "batch_id": self.batch_id, "segments": dict(self.segments)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingBatch:
        segments = {str(key): int(number) for key, number in data["segments"].items()}
        return cls(int(data["generation"]), str(data["batch_id"]), segments)


@dataclass
class SyncProgress:
    """Where a table's run is: what it did so far, the snapshot batches and rounds it took, the gap its
    last batch found (read by the next round), its cut-off, and the batch whose job run went on
    without it (:class:`~.engine.detached.JobDetached`'s ``progress``), if one did."""

    outcome: TableOutcome
    snapshot_batches: int = 0
    rounds: int = 0
    gap: Gap | None = None
    cutoff: datetime | None = None
    pending: PendingBatch | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.to_dict(),
            "snapshot_batches": self.snapshot_batches,
            "rounds": self.rounds,
            "gap": None if self.gap is None else [self.gap.shard_id, self.gap.reason],
            "cutoff": None if self.cutoff is None else self.cutoff.isoformat(),
            "pending": None if self.pending is None else self.pending.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SyncProgress:
        gap, cutoff, pending = data.get("gap"), data.get("cutoff"), data.get("pending")
        return cls(
            TableOutcome.from_dict(data["outcome"]),
            int(data["snapshot_batches"]),
            int(data["rounds"]),
            None if gap is None else Gap(str(gap[0]), str(gap[1])),
            None if cutoff is None else datetime.fromisoformat(cutoff),
            None if pending is None else PendingBatch.from_dict(pending),
        )


@dataclass(frozen=True)
class DetachedBatch:
    """A table's run whose batch's job run went on without it, once the run ended: what
    :func:`sync_table` finishes before it goes on.

    :param progress: the run's progress, as :class:`~.engine.detached.JobDetached` carried it.
    :param hold: the batch's leases.
    :param run: the job run.
    :param result: the job's outcome, read as the blocking path reads it; raises when the run failed.
    """

    progress: SyncProgress
    hold: LeaseHold
    run: DetachedRun
    result: Callable[[], TableBatchResult]

    @classmethod
    def of_resumed(cls, resumed: ResumedBatch, result: Callable[[], TableBatchResult]) -> DetachedBatch:
        """The batch a deferred task resumed with (its trigger's event), and how its outcome is read."""
        return cls(SyncProgress.from_dict(resumed.progress), resumed.hold, resumed.run, result)


def describe_summary(figures: Mapping[str, Any]) -> str:
    """One line for a :meth:`TableOutcome.summary` (or a continuous run's, which has no generations)."""
    started = figures.get("generations_started")
    line = (
        f"{figures['table']} -> {figures['destination']}: {figures['batches']} batch(es), "
        f"{figures['changes']} change(s) loaded; "
    )
    if started is not None:
        line += f"generations started: {started or 'none'}; "
    line += f"snapshots completed: {figures['snapshots_completed'] or 'none'}"
    if figures.get("items_set_aside"):
        line += f"; {figures['items_set_aside']} item change(s) set aside in {figures['destination']}{FAILURES_SUFFIX}"
    return line


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
    submit: Submit | None = None,
    region: str = "",
    detached: DetachedBatch | None = None,
) -> TableOutcome:
    """Run one table's batches for one run (the module docstring tells the steps).

    A ``submit`` that leaves a batch's job run to another process raises
    :class:`~.engine.detached.JobDetached`, whose ``progress`` is the run's :class:`SyncProgress`
    (the batch in its ``pending``); once the job run ended, ``sync_table`` with ``detached`` finishes
    that batch and goes on with the run.

    :param lease_dynamodb: a DynamoDB client for the lease table.
    :param source_dynamodb: a DynamoDB client for the source table's Scan.
    :param streams: a DynamoDB Streams client.
    :param connect_snowflake: opens a Snowflake connection.
    :param owner: the lease owner this run writes (:class:`~.state.leases.LeaseOwner`).
    :param cutoff: stream records created after it are left for the next run; now when None.
    :param submit: runs each batch's data plane (read, stage, apply) from its
        :class:`~.dynamodb_job.TableBatchPlan`, e.g. through spark-submit; None runs it here, with
        ``source_dynamodb`` and ``streams``.
    :param region: the table's region, written into the plans (for ``submit``).
    :param detached: the run's batch whose job run went on without it, to finish first.
    :raises StreamGapError: the stream lost changes and ``on_gap: fail`` is set.
    :raises JobDetached: ``submit`` left a batch's job run to another process.
    """
    progress = detached.progress if detached is not None else SyncProgress(TableOutcome(sync.table))
    progress.cutoff = progress.cutoff or cutoff or now()
    outcome = progress.outcome
    leases = LeaseTable(lease_dynamodb, sync.application_name)
    with closing(connect_snowflake()) as conn:
        sink = DynamoDBSink(conn, sync.target)
        sync = sync.fitted_to(sink.existing_columns())
        sink = DynamoDBSink(conn, sync.target)
        # Step 0: an existing destination fits the connector's layout and deletes, before anything is
        # created, claimed or recorded; then Snowflake's record (a refusal leaves no claim behind)
        # and the lease table's.
        sink.check_destination(sync.destination_columns, sync.connector_id)
        # Before any mark is read: the marks an earlier release kept in the Kinesis-named ledger.
        sink.ensure_support_objects_of(sync.application_name)
        # Snowflake's record first (a refusal leaves no claim behind), then the lease table's.
        _check_recorded_destinations(sink, sync)
        _check_owner(sink, sync)
        _claim(leases, sync)
        # A destination dropped by hand is a gap, told before it is created again (``UNDROP TABLE``
        # still works after a refusal).
        if progress.gap is None and not sink.destination_exists():
            current = sink.current_generation(sync.application_name)
            progress.gap = destination_dropped(current, sync.target.destination.qualified_name)
        if progress.gap is not None and sync.settings.on_gap is OnGap.FAIL:
            raise gap_error(sync.table, progress.gap)
        sink.ensure_destination(sync.destination_columns, sync.connector_id)
        if detached is not None and not _finish_detached(sync, sink, leases, detached, source_dynamodb, now):
            return outcome
        while progress.rounds < max_rounds + sync.settings.max_snapshot_batches_per_run:
            progress.rounds += 1
            current = sink.current_generation(sync.application_name)
            segment_marks = _segment_marks(sink, sync, current)
            states = _segment_states(segment_marks)
            shards = list_stream_shards(streams, sync.stream_arn)
            gap = progress.gap
            if gap is None and current is not None:
                gap = stream_replaced(current, sync.stream_arn) or _checkpoint_gap(leases, sync, current, shards, now())
            step = next_step(sync.table, current, states, sync.settings, now(), gap)
            progress.gap = None
            if isinstance(step, StartGeneration):
                sink.record_generation(
                    sync.application_name, replace(step.generation, stream_arn=sync.stream_arn), step.reason
                )
                log.info("%s: generation %d started: %s", sync.table, step.generation.number, step.reason)
                outcome.generations_started.append(step.reason)
                continue
            if isinstance(step, CompleteSnapshot):
                assert step.generation.snapshot is not None
                try:
                    sink.complete_snapshot(
                        sync.application_name, step.generation.number, step.generation.snapshot.total_segments
                    )
                except GenerationSupersededError as err:
                    log.warning("%s: %s", sync.table, err)
                    outcome.generations_superseded.append(step.generation.number)
                    continue
                outcome.snapshots_completed.append(step.generation.number)
                continue
            try:
                figures = _read_batch(
                    sync,
                    step,
                    segment_marks,
                    shards,
                    leases,
                    sink,
                    owner,
                    progress.cutoff,
                    now,
                    _DataPlane(source_dynamodb, streams, submit, region),
                )
            except JobDetached as detached_now:
                detached_now.progress.update({k: v for k, v in progress.to_dict().items() if k != "pending"})
                raise
            except StreamGap as err:
                progress.gap = Gap(err.shard_id, str(err))
                log.warning("%s: %s", sync.table, err)
                continue
            except GenerationSupersededError as err:
                # A reset (or another worker's gap) recorded a newer generation meanwhile: nothing
                # of this batch was applied; the leases are released, the next round decides again.
                log.warning("%s: %s", sync.table, err)
                outcome.generations_superseded.append(step.generation.number)
                continue
            if figures is None:
                break
            # The snapshot's segments and items done, percentage and ETA, in the task log.
            report_snapshot_progress(
                sync.table,
                step.generation,
                segment_marks,
                figures.segments,
                figures.segments_done,
                source_dynamodb,
                now(),
            )
            if not _account(progress, figures, sync.settings):
                break
    return outcome


def _account(progress: SyncProgress, figures: BatchFigures, settings: SyncSettings) -> bool:
    """A batch that applied its changes, in the run's outcome; whether the run goes on with another.

    On: after a shard ended (its children are read next), and while the snapshot has more to read
    within the run's bound (this batch read segments without completing it); a stream batch that
    ended no shard read up to the cutoff.
    """
    progress.outcome.batches.append(figures)
    if figures.merge.completed_snapshot is not None:
        progress.outcome.snapshots_completed.append(figures.merge.completed_snapshot)
    if figures.segments:
        progress.snapshot_batches += 1
    more_snapshot = (
        bool(figures.segments)
        and figures.merge.completed_snapshot is None
        and progress.snapshot_batches < settings.max_snapshot_batches_per_run
    )
    return bool(figures.shards_ended) or more_snapshot


def _finish_detached(
    sync: TableSync,
    sink: DynamoDBSink,
    leases: LeaseTable,
    detached: DetachedBatch,
    source_dynamodb: Any,
    now: Callable[[], datetime],
) -> bool:
    """The batch whose job run went on without the run, once the run ended: its leases held again, its
    outcome read (``detached.result()``, which raises when the run failed), the lease table caching what
    it applied, the leases released, the run's record removed; whether the run goes on with another.
    """
    progress = detached.progress
    pending = progress.pending
    assert pending is not None, "a detached batch carries its pending batch"
    progress.pending = None
    try:
        try:
            with resume_hold(leases, detached.hold, what=sync.table) as held:
                result = detached.result()
                figures = _settle(sync, leases, held, pending, result, now().timestamp())
        finally:
            forget_run(leases, detached.run)
    except StreamGap as err:
        progress.gap = Gap(err.shard_id, str(err))
        log.warning("%s: %s", sync.table, err)
        return True
    except GenerationSupersededError as err:
        log.warning("%s: %s", sync.table, err)
        progress.outcome.generations_superseded.append(pending.generation)
        return True
    current = sink.current_generation(sync.application_name)
    if current is not None and current.number == pending.generation:
        # The snapshot ledger holds the batch already: its marks as they are, and nothing more read.
        marks = _segment_marks(sink, sync, current)
        report_snapshot_progress(
            sync.table, current, marks, dict.fromkeys(figures.segments, 0), (), source_dynamodb, now()
        )
    return _account(progress, figures, sync.settings)


def _claim(leases: LeaseTable, sync: TableSync) -> None:
    """Step 0, before anything is recorded or read: the lease table is a DynamoDB source's (created
    with its metadata item when missing), and its progress of the table belongs to this destination.

    :raises IdentityError: the lease table serves a Kinesis stream, or another destination of the table.
    """
    mine = TableClaim(sync.table, sync.target.destination.qualified_name, sync.connector_id)
    metadata = leases.metadata() if leases.exists() else None
    if metadata is None:
        # A connector's tables share its lease table, which names the connector's application as
        # its source (as the provision DAG creates it).
        leases.create(stream_name=sync.application_name, application_name=sync.application_name)
    else:
        check_dynamodb_use(sync.application_name, metadata, mine)
    check_claim(sync.application_name, leases.claim_table(mine), mine)


def _check_recorded_destinations(sink: DynamoDBSink, sync: TableSync) -> None:
    """Snowflake's record agrees: the table's generations under this application name were recorded for
    this destination (the lease table's claim is a cache: a lost lease table claims anew).

    :raises IdentityError: another destination's generations are recorded.
    """
    mine = TableClaim(sync.table, sync.target.destination.qualified_name, sync.connector_id)
    for destination in sink.recorded_destinations(sync.application_name):
        check_claim(sync.application_name, TableClaim(sync.table, destination), mine)


def _check_owner(sink: DynamoDBSink, sync: TableSync) -> None:
    """Snowflake's record names no other application loading the destination (a renamed application:
    :mod:`~.load.ownership`).

    :raises IdentityError: another application owns the destination.
    """
    owner = owner_conflict(
        sync.application_name, sink.destination_loaders(), destination_exists=sink.destination_exists()
    )
    if owner is None:
        return
    previous = sorted(owner.names)[0]
    raise IdentityError(
        owner_refusal(
            sync.application_name,
            sync.target.destination.qualified_name,
            owner,
            what_a_second_load_does=(
                "would leave a stale copy: the rows that application wrote from its stream are newer than "
                "a new snapshot, so updated items would keep old values and deleted items would stay"
            ),
            fixes=(
                f"Set application_name back to {previous!r} (its reset DAG takes a fresh snapshot when one is "
                f"wanted); or point destination.table at a new table; or, to move this table to "
                f"{sync.application_name!r}, drop or rename {sync.target.destination.qualified_name} first: "
                f"{sync.application_name!r} then snapshots the DynamoDB table into a new one."
            ),
        )
    )


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
    """The first gap (:func:`.progress.shard_gap`) among the generation's stream leases: the listed
    shards' and the parents they name, which a shard no longer listed keeps (read by key)."""
    if not leases.exists():
        return None
    units = _stream_leases(sync, current.number, shards)
    listed = {s.shard_id for s in units}
    for lease in leases.leases_of(lease_keys(units)).values():
        found = shard_gap(
            lease.shard_id,
            listed=lease.shard_id in listed,
            ended=lease.shard_ended,
            last_read_at=datetime.fromtimestamp(lease.checkpointed_at, UTC) if lease.checkpointed_at else None,
            now=now,
            max_age=sync.settings.max_checkpoint_age,
        )
        if found is not None:
            return found
    return None


def _first_records(
    sync: TableSync, generation: Generation, shards: Sequence[Shard], held: Mapping[str, Lease], now: datetime
) -> dict[str, str]:
    """The held shards no batch has read that start at their first sequence number, by lease key
    (:func:`.progress.reads_from_first_record`); the ledger's marks come first where there are any."""
    if not reads_from_first_record(generation, now, sync.settings.max_checkpoint_age):
        return {}
    first = {lease_key(sync.table, generation.number, s.shard_id): s.starting_sequence_number for s in shards}
    return {key: first[key] for key, lease in held.items() if key in first and not lease.checkpointed_at}


@dataclass(frozen=True)
class _DataPlane:
    """Where a batch's data plane runs: here with these clients, or through ``submit``."""

    source_dynamodb: Any
    streams: Any
    submit: Submit | None = None
    region: str = ""

    def load(self, plan: TableBatchPlan, sink: DynamoDBSink) -> TableBatchResult:
        """Run the batch's data plane: through ``submit``, or the Spark job's steps here, one unit after the
        other, on the hooks' clients and the run's Snowflake connection."""
        if self.submit is not None:
            return self.submit(plan)
        access = ClientAccess(self.source_dynamodb, self.streams)
        return load(LocalContext(), plan, SharedConnection(sink.connection), access=access)


def _read_batch(
    sync: TableSync,
    step: ReadBatch,
    segment_marks: Mapping[int, SegmentMark],
    shards: Sequence[Shard],
    leases: LeaseTable,
    sink: DynamoDBSink,
    owner: str,
    cutoff: datetime,
    now: Callable[[], datetime],
    data_plane: _DataPlane,
) -> BatchFigures | None:
    """Steps 2 to 5 of one batch; None when it could take no lease."""
    generation = step.generation
    shard_of = {lease_key(sync.table, generation.number, s.shard_id): s.shard_id for s in shards}
    task_of = {lease_key(sync.table, generation.number, t.segment.id): t for t in step.segments}
    units = _stream_leases(sync, generation.number, shards) + [Shard(shard_id=key) for key in task_of]
    candidates = leases.sync_shards(units, _ANYWHERE)
    taken = take_leases(leases, candidates, owner, sync.lease_duration_seconds, wanted=set(shard_of) | set(task_of))
    if not taken:
        log.info("%s: no lease free to take in generation %d", sync.table, generation.number)
        return None
    # The data plane runs with the leases renewed (and the worker's heartbeat written) every third of
    # their duration, so a batch that outlives the duration keeps its units; released whatever happens.
    with HeldLeases(leases, owner, sync.lease_duration_seconds, taken, what=sync.table) as held:
        keys = sorted(held.held)
        batch = _Batch(
            sync,
            generation,
            segments=[task_of[k] for k in keys if k in task_of],
            shards={k: shard_of[k] for k in keys if k in shard_of},
            segment_marks=segment_marks,
            marks=sink.read_ledger(sync.application_name, generation_id(sync.table, generation.number)),
            first_records=_first_records(sync, generation, shards, held.held, now()),
        )
        plan = batch.plan(cutoff, data_plane.region)
        pending = PendingBatch(
            generation.number, batch.batch_id, {k: task_of[k].segment.number for k in keys if k in task_of}
        )
        try:
            result = held.run(lambda: data_plane.load(plan, sink))
        except JobDetached as detached:
            detached.progress["pending"] = pending.to_dict()
            raise
        return _settle(sync, leases, held, pending, result, now().timestamp())


def _settle(
    sync: TableSync, leases: LeaseTable, held: HeldLeases, batch: PendingBatch, result: TableBatchResult, read_at: float
) -> BatchFigures:
    """Step 5 of a batch whose data plane ran: its figures, once the lease table caches what it applied.

    :raises StreamGap: the batch found a trimmed position; it applied nothing.
    :raises GenerationSupersededError: a newer generation was recorded meanwhile; it applied nothing.
    """
    if result.gap is not None:
        gap = result.gap
        raise StreamGap(sync.table, gap.shard_id, gap.checkpoint, gap.reason)
    if result.superseded is not None:
        raise GenerationSupersededError(result.superseded)
    assert result.merge is not None  # a result without one carries its gap
    _cache(leases, held, batch.segments, result, read_at)
    return BatchFigures.of_result(batch.generation, batch.batch_id, result, result.merge)


@dataclass
class _Batch:
    """One batch's units, and where each starts (Snowflake's marks)."""

    sync: TableSync
    generation: Generation
    segments: list[SegmentTask]
    shards: dict[str, str]  # lease key -> stream shard id
    segment_marks: Mapping[int, SegmentMark]
    marks: Mapping[str, Checkpoint]
    first_records: Mapping[str, str] = field(default_factory=dict)  # lease key -> first sequence number

    @property
    def batch_id(self) -> str:
        """Named by where it starts: a retry that starts from the same marks has the same id."""
        parts = [self.sync.application_name, self.sync.table, str(self.generation.number)]
        parts += [f"{t.segment.id}:{t.cursor.to_text() if t.cursor else ''}" for t in self.segments]
        parts += [f"{k}:{self.marks[k].sequence_number if k in self.marks else ''}" for k in sorted(self.shards)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]

    def plan(self, cutoff: datetime, region: str) -> TableBatchPlan:
        """The data plane's plan: each segment from its cursor, each shard after its ledger mark."""
        snapshot = self.generation.snapshot
        return TableBatchPlan(
            application_name=self.sync.application_name,
            table=self.sync.table,
            region=region,
            stream_arn=self.sync.stream_arn,
            generation=self.generation.number,
            stream_not_before=self.generation.stream_not_before,
            total_segments=snapshot.total_segments if snapshot else 0,
            cutoff=cutoff,
            batch_id=self.batch_id,
            segments=tuple(
                SegmentUnit(
                    t.segment.number,
                    t.cursor.to_text() if t.cursor else None,
                    self.segment_marks.get(t.segment.number),
                )
                for t in self.segments
            ),
            shards=tuple(
                ShardUnit(k, shard_id, self.marks.get(k), self.first_records.get(k))
                for k, shard_id in self.shards.items()
            ),
            max_items_per_segment=self.sync.max_items_per_segment,
            max_records_per_shard=self.sync.max_records_per_shard,
            read_rate=self.sync.read_rate,
            target=self.sync.target,
            keys=self.sync.keys,
            generation_started_at=self.generation.started_at,
        )


def _cache(
    leases: LeaseTable, held: HeldLeases, segments: Mapping[str, int], result: TableBatchResult, read_at: float
) -> None:
    """Step 5: the lease table caches what the ledger now holds; a lease lost meanwhile is left.

    A shard read to the cut-off is checkpointed even when it had nothing new: its lease's
    ``checkpointed_at`` is when a batch last read it (``read_at``, on the run's clock, which
    the safe-age rule measures against).

    :param segments: the batch's snapshot segments: lease key -> segment number.
    """
    done = {s.number for s in result.segments if s.done}
    reads = {s.key: s for s in result.shards}
    for key, lease in list(held.held.items()):
        try:
            if key in reads:
                read = reads[key]
                mark = Checkpoint(read.last_sequence_number) if read.last_sequence_number else None
                held.update(leases.checkpoint(lease, mark, shard_end=read.shard_end, now=read_at))
            elif key in segments and segments[key] in done:
                held.update(leases.checkpoint(lease, None, shard_end=True, now=read_at))
        except LeaseLostError:
            log.warning("The lease on %s was taken meanwhile: its new owner reads from the ledger", key)
            held.drop(key)
