"""Reset where a connector reads its stream: to a new application name, or by recreating its lease table.

Snowflake's Openflow connector for Kinesis resets its state by changing the application name (a
new lease table; the old one is left behind) or by deleting the lease table (it is created
again), and warns that either may load records twice or skip them. :func:`reset_connector` does
the same, in a safe order:

1. check, changing nothing: the configured application resolves (through ``superseded_by``) to
   an active lease table of this stream, no reset or restore is working on it, and a new name
   names no table yet. A dry run reports the estimate here and stops;
2. check the confirmation (the active application name), that the destination where the change is
   recorded is known, and that the tables are this connector's;
3. mark the configured and the active table as resetting: ingest runs skip them;
4. hold every lease of the active table, waiting for running batches to release theirs;
5. back up every lease and checkpoint (the backup a restore puts back), and report;
6. record the new generation in Snowflake's generations table, the truth ingest follows;
7. change DynamoDB: create the new table and point the old ones at it (``new_application_name``),
   or delete the table and create it again with the new generation (``delete_table``);
8. give back the leases and remove the marks (also when a step failed).

Crash windows. Until 6, nothing changed but marks and held leases, which expire
:data:`~.window.LOCK_MARGIN_SECONDS` after the wait for leases (a backup file may be left). Between
6 and 7, Snowflake records a generation DynamoDB does not hold: when the reset fails there, it
records that the current generation stays (``reset-withdrawn``); when it dies, the next ingest
run sees the table still holding the generation the reset replaced and withdraws the reset
itself (``delete_table``), or creates what is missing (``new_application_name``). Once DynamoDB
changed, the recorded intent stands and the next ingest run completes it.

Decisions (:func:`parse_reset_request`, :func:`reset_target`, :func:`generation_record`,
:func:`unfresh_leases`, :func:`reset_changed_dynamodb`) are pure functions; the rest reads and
writes DynamoDB, Kinesis and Snowflake through what it is given.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from airflow_kinesis_snowflake.core.admin.impact import (
    DUPLICATE_AND_LOSS_WARNING,
    ShardImpact,
    estimate_impact,
    ledger_note,
    position_text,
    totals,
)
from airflow_kinesis_snowflake.core.admin.intent import GenerationLog, identity_fields
from airflow_kinesis_snowflake.core.admin.params import ParameterError, as_bool, as_number
from airflow_kinesis_snowflake.core.admin.window import (
    LOCK_MARGIN_SECONDS,
    AdminError,
    clear_marks_quietly,
    release_quietly,
)
from airflow_kinesis_snowflake.core.model import (
    ConsumerType,
    GenerationReason,
    GenerationRecord,
    InitialPosition,
    StartPosition,
)
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.backups import CheckpointBackup, optional_text, snapshot
from airflow_kinesis_snowflake.core.state.dynamodb import delete_table
from airflow_kinesis_snowflake.core.state.errors import LeaseTableError, MaintenanceError
from airflow_kinesis_snowflake.core.state.holding import hold_leases
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable
from airflow_kinesis_snowflake.core.state.marks import (
    ResetMode,
    Resolution,
    mark_superseded,
    resolve_application,
    set_reset_mark,
)
from airflow_kinesis_snowflake.core.state.metadata import ResetMark, TableIdentity, TableMarks, read_marks

log = logging.getLogger(__name__)


class ResetStream(Protocol):
    """What a reset needs of the Kinesis stream (the Kinesis hook provides it)."""

    @property
    def conn(self) -> Any: ...

    def list_shards(self, stream_name: str) -> list[Shard]: ...

    def stream_identity(self, stream_name: str) -> tuple[str, str]: ...

    def register_consumer(self, stream_name: str, consumer_name: str) -> str: ...


@dataclass(frozen=True)
class ResetRequest:
    """A reset, every parameter checked (see :func:`parse_reset_request`).

    :param connector_id: the connector, recorded in the backup and the generations table.
    :param application_name: the connector's configured application name.
    :param stream_name: the Kinesis data stream.
    :param destination: ``DATABASE.SCHEMA.TABLE`` recorded in the backup; None: the table's metadata.
    :param mode: new application name, or delete the table.
    :param new_application_name: the new name (mode ``new_application_name`` only).
    :param position: where every shard starts.
    :param timestamp: with AT_TIMESTAMP, the time.
    :param preview_only: only report, change nothing.
    :param confirm: must equal the active application name to act.
    :param lease_wait_timeout_seconds: how long to wait for running batches' leases.
    :param consumer_type: with ENHANCED_FAN_OUT, a consumer is registered for a new name.
    :param estimate_max_records: cap on the records counted per shard for the estimate (0: none).
    """

    connector_id: str
    application_name: str
    stream_name: str
    destination: str | None
    mode: ResetMode
    new_application_name: str | None
    position: InitialPosition
    timestamp: datetime | None
    preview_only: bool
    confirm: str | None
    lease_wait_timeout_seconds: float
    consumer_type: str
    estimate_max_records: int


def parse_reset_request(
    *,
    connector_id: str,
    application_name: str,
    stream_name: str,
    destination: str | None,
    mode: str,
    new_application_name: str | None,
    initial_position: str,
    initial_timestamp: str | None,
    preview_only: bool | str,
    confirm: str | None,
    lease_wait_timeout_seconds: float | str,
    consumer_type: str,
    estimate_max_records: int,
    check_application_name: Callable[[str], object],
) -> ResetRequest:
    """Every parameter checked before any AWS call, as rendered by a template; no I/O.

    :param check_application_name: raises :class:`ValueError` with the rule for a name that cannot
        be an application name.
    :raises ParameterError: naming the first parameter that is not allowed.
    """
    try:
        reset_mode = ResetMode(str(mode).strip())
    except ValueError:
        raise ParameterError(f"mode must be one of {', '.join(m.value for m in ResetMode)}, not {mode!r}") from None
    new_name = optional_text(new_application_name)
    if reset_mode is ResetMode.NEW_APPLICATION_NAME:
        if new_name is None:
            raise ParameterError("mode new_application_name needs new_application_name")
        try:
            check_application_name(new_name)
        except ValueError as err:
            raise ParameterError(f"new_application_name {new_name!r} {err}") from None
    elif new_name is not None:
        raise ParameterError("new_application_name is only used with mode new_application_name")
    try:
        position = InitialPosition(str(initial_position).strip().upper())
    except ValueError:
        raise ParameterError(
            f"initial_position must be one of {', '.join(p.value for p in InitialPosition)}, not {initial_position!r}"
        ) from None
    timestamp = None
    text = optional_text(initial_timestamp)
    if position is InitialPosition.AT_TIMESTAMP:
        if text is None:
            raise ParameterError("initial_position AT_TIMESTAMP needs initial_timestamp (ISO 8601)")
        try:
            timestamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ParameterError(f"initial_timestamp {text!r} is not an ISO 8601 time") from None
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=UTC)
    elif text is not None:
        raise ParameterError("initial_timestamp is only used with initial_position AT_TIMESTAMP")
    return ResetRequest(
        connector_id=connector_id,
        application_name=application_name,
        stream_name=stream_name,
        destination=optional_text(destination),
        mode=reset_mode,
        new_application_name=new_name,
        position=position,
        timestamp=timestamp,
        preview_only=as_bool(preview_only, "preview_only"),
        confirm=optional_text(confirm),
        lease_wait_timeout_seconds=as_number(lease_wait_timeout_seconds, "lease_wait_timeout_seconds"),
        consumer_type=consumer_type,
        estimate_max_records=estimate_max_records,
    )


@dataclass(frozen=True)
class ResetOutcome:
    """What a reset (or its dry run) found and did; :meth:`to_dict` is the task's result.

    :param new_generation_id: the generation created; None for a dry run.
    :param backup_location: where the backup was written; None for a dry run.
    """

    request: ResetRequest
    resolution: Resolution
    generation_id: str
    new_application_name: str
    new_generation_id: str | None
    new_start: StartPosition
    impacts: Sequence[ShardImpact]
    backup: CheckpointBackup
    backup_location: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "connector_id": self.request.connector_id,
            "mode": self.request.mode.value,
            "dry_run": self.request.preview_only,
            "configured_application_name": self.resolution.configured,
            "application_name": self.resolution.active,
            "generation_id": self.generation_id,
            "new_application_name": self.new_application_name,
            "new_generation_id": self.new_generation_id,
            "new_start": self.new_start.to_dict(),
            "shards": [impact.to_dict() for impact in self.impacts],
            "estimate": totals(self.impacts),
            "backup_location": self.backup_location,
            "backup": self.backup.to_dict(),
        }


# -- decisions ------------------------------------------------------------------------------------


def reset_target(
    request: ResetRequest, resolution: Resolution, marks: TableMarks | None, *, target_exists: bool
) -> str:
    """The lease table the connector reads after the reset; :class:`AdminError` when it may not start.

    :param marks: the metadata item of the active table (None: missing).
    :param target_exists: a table named ``new_application_name`` exists (unused for ``delete_table``).
    """
    current = resolution.active
    if marks is None:
        raise AdminError(
            f"lease table {current!r} does not exist or has no metadata item: connector {request.connector_id} "
            "has no progress to reset"
        )
    if marks.stream_name != request.stream_name:
        raise AdminError(f"lease table {current!r} tracks stream {marks.stream_name!r}, not {request.stream_name!r}")
    if resolution.reset is not None:
        raise AdminError(
            f"a reset or restore is already working on {resolution.reset_table!r} "
            f"({resolution.reset.mode} by {resolution.reset.owner}, "
            f"until {resolution.reset.to_dict()['expires_at']})"
        )
    target = request.new_application_name or current
    if request.mode is ResetMode.NEW_APPLICATION_NAME and (target in resolution.chain or target_exists):
        raise AdminError(
            f"new_application_name {target!r} already names a lease table; choose a name never used "
            "(to go back to an earlier table, restore its backup with the restore DAG)"
        )
    return target


def generation_record(
    request: ResetRequest,
    *,
    target: str,
    generation: str,
    new_start: StartPosition,
    identity: TableIdentity,
    replaced_generation: str,
) -> GenerationRecord:
    """The row recording the reset's new generation, written before DynamoDB changes."""
    reason = (
        GenerationReason.RESET_NEW_APPLICATION_NAME
        if request.mode is ResetMode.NEW_APPLICATION_NAME
        else GenerationReason.RESET_DELETE_TABLE
    )
    return GenerationRecord(
        request.application_name,
        target,
        generation,
        reason,
        new_start,
        *identity_fields(identity),
        # A delete_table reset replaces the generation of the table it deletes: while the
        # table still holds it, ingest knows the reset stopped before it changed anything.
        replaces=replaced_generation if request.mode is ResetMode.DELETE_TABLE else None,
        destination=identity.destination,
    )


def unfresh_leases(leases: Mapping[str, Lease], start: StartPosition) -> list[str]:
    """Shards of a table the reset just created whose lease is not free, unread and at ``start``."""
    return sorted(
        shard_id
        for shard_id, lease in leases.items()
        if lease.start != start or lease.checkpoint is not None or lease.lease_owner is not None
    )


def reset_changed_dynamodb(
    mode: ResetMode, *, target_exists: bool, table_generation: str | None, generation: str
) -> bool:
    """Whether a reset that failed had changed DynamoDB already (then its recorded intent stands).

    :param target_exists: the new table exists (``new_application_name``).
    :param table_generation: the generation the active table holds now (``delete_table``; None: missing).
    :param generation: the generation it held before the reset.
    """
    if mode is ResetMode.NEW_APPLICATION_NAME:
        return target_exists
    return table_generation != generation


# -- the protocol ---------------------------------------------------------------------------------


def reset_connector(
    request: ResetRequest,
    *,
    dynamodb: Any,
    stream: ResetStream,
    generations: GenerationLog,
    write_backup: Callable[[CheckpointBackup], str],
    owner: str,
    now: datetime | None = None,
) -> ResetOutcome:
    """Carry out (or, with ``preview_only``, only report) ``request``; the steps are the module's.

    :param dynamodb: a boto3 DynamoDB client.
    :param stream: the Kinesis stream's access.
    :param generations: where the new generation is recorded.
    :param write_backup: writes a backup, returns where it went.
    :param owner: whom the marks and held leases belong to.
    :raises AdminError: when the reset may not start, or stopped (saying what changed).
    """
    now = now or datetime.now(UTC)
    # 1. Check, changing nothing.
    try:
        resolution = resolve_application(dynamodb, request.application_name)
    except MaintenanceError as err:
        raise AdminError(f"cannot reset connector {request.connector_id}: {err}") from err
    current = resolution.active
    marks = read_marks(dynamodb, current)
    new_name = request.new_application_name
    target = reset_target(
        request,
        resolution,
        marks,
        target_exists=new_name is not None and marks is not None and LeaseTable(dynamodb, new_name).exists(),
    )
    assert marks is not None  # reset_target refuses a table without one
    new_start = StartPosition.resolve(request.position, request.timestamp, now)
    table = LeaseTable(dynamodb, current)

    if request.preview_only:
        shards = stream.list_shards(request.stream_name)
        impacts = _estimate(request, stream, shards, table.leases(), new_start)
        _report(request, resolution, marks.generation_id, target, new_start, impacts)
        backup = _snapshot(request, table)
        log.info("Dry run: nothing was changed. To reset, trigger again with dry_run false and confirm %r.", current)
        return ResetOutcome(request, resolution, marks.generation_id, target, None, new_start, impacts, backup, None)

    # 2. Confirmation, destination, identity.
    if request.confirm != current:
        raise AdminError(
            f"confirm must be the current application name {current!r} (got {request.confirm!r}); nothing was changed"
        )
    generations.destination()  # where the change is recorded: checked before anything is marked
    generations.check_identity(dynamodb, request.application_name, current)
    lock = request.lease_wait_timeout_seconds + LOCK_MARGIN_SECONDS
    mark = ResetMark(owner, request.mode.value, now.timestamp(), now.timestamp() + lock)
    marked: list[str] = []
    held: dict[str, Lease] = {}
    try:
        # 3. Mark: ingest runs skip.
        for name in dict.fromkeys((request.application_name, current)):
            set_reset_mark(dynamodb, name, mark)
            marked.append(name)
        log.info("Marked connector %s as resetting: ingest runs skip until the reset ends", request.connector_id)
        # 4. Hold every lease; 5. back up and report.
        held = hold_leases(table, owner, hold_seconds=lock, timeout_seconds=request.lease_wait_timeout_seconds)
        backup = _snapshot(request, table)
        location = write_backup(backup)
        log.info("Backed up the %d leases and checkpoints of %s to %s", len(backup.leases), current, location)
        shards = stream.list_shards(request.stream_name)
        impacts = _estimate(request, stream, shards, {lease.shard_id: lease for lease in backup.leases}, new_start)
        _report(request, resolution, marks.generation_id, target, new_start, impacts)
        # 6. Record the new generation in Snowflake.
        stream_arn, stream_created = stream.stream_identity(request.stream_name)
        identity = TableIdentity(request.connector_id, generations.destination_text(), stream_arn, stream_created)
        record = generation_record(
            request,
            target=target,
            generation=uuid.uuid4().hex,
            new_start=new_start,
            identity=identity,
            replaced_generation=marks.generation_id,
        )
        with generations.open() as sink:
            previous = sink.latest_generation(request.application_name)
            sink.record_generation(record)
        log.info(
            "Recorded in Snowflake: connector %s reads %s generation %s from now on (%s)",
            request.connector_id,
            target,
            record.generation_id,
            record.reason.value,
        )
        # 7. Change DynamoDB; a failure before it changed anything withdraws the record.
        try:
            if request.mode is ResetMode.NEW_APPLICATION_NAME:
                generation = _switch(request, dynamodb, stream, current, target, shards, new_start, identity, record)
                release_quietly(table, held.values())
            else:
                generation = _recreate(request, dynamodb, current, shards, new_start, mark, identity, record)
        except BaseException:
            _withdraw(request, dynamodb, generations, current, target, marks.generation_id, previous, identity)
            raise
        held = {}
    except (MaintenanceError, LeaseTableError) as err:
        raise AdminError(f"reset of connector {request.connector_id} stopped: {err}") from err
    finally:
        # 8. Give back what is still held and remove the marks.
        if held:
            release_quietly(table, held.values())
        clear_marks_quietly(dynamodb, marked, owner)
    log.info(
        "Reset done: %s (generation %s) is active; the next ingest run reads it from %s",
        target,
        generation,
        position_text(new_start),
    )
    return ResetOutcome(
        request, resolution, marks.generation_id, target, generation, new_start, impacts, backup, location
    )


def _snapshot(request: ResetRequest, table: LeaseTable) -> CheckpointBackup:
    return snapshot(
        table, reason=f"reset-{request.mode.value}", connector_id=request.connector_id, destination=request.destination
    )


def _estimate(
    request: ResetRequest,
    stream: ResetStream,
    shards: list[Shard],
    leases: dict[str, Lease],
    new_start: StartPosition,
) -> list[ShardImpact]:
    return estimate_impact(
        stream.conn, request.stream_name, shards, leases, new_start, max_records=request.estimate_max_records
    )


def _switch(
    request: ResetRequest,
    dynamodb: Any,
    stream: ResetStream,
    current: str,
    target: str,
    shards: list[Shard],
    new_start: StartPosition,
    identity: TableIdentity,
    record: GenerationRecord,
) -> str:
    """Step 7 of ``new_application_name``: create the new table, then point the old ones at it."""
    new_table = LeaseTable(dynamodb, target)
    if not new_table.create(
        stream_name=request.stream_name,
        application_name=target,
        identity=identity,
        generation_id=record.generation_id,
    ):
        raise MaintenanceError(f"lease table {target!r} was created by another process during the reset")
    _check_fresh(new_table, new_table.sync_shards(shards, new_start), new_start)
    # The old active table first, the configured one last: until then resolution follows the chain.
    for name in dict.fromkeys((current, request.application_name)):
        mark_superseded(dynamodb, name, by=target)
    if request.consumer_type == ConsumerType.ENHANCED_FAN_OUT:
        stream.register_consumer(request.stream_name, target)
    log.info("Lease table %s created; %s now supersedes %s", target, target, current)
    return _generation(new_table)


def _recreate(
    request: ResetRequest,
    dynamodb: Any,
    current: str,
    shards: list[Shard],
    new_start: StartPosition,
    mark: ResetMark,
    identity: TableIdentity,
    record: GenerationRecord,
) -> str:
    """Step 7 of ``delete_table``: delete the table and create it again, marked, with the new generation."""
    delete_table(dynamodb, current)
    log.info("Deleted lease table %s", current)
    table = LeaseTable(dynamodb, current)
    if not table.create(
        stream_name=request.stream_name,
        application_name=current,
        identity=identity,
        generation_id=record.generation_id,
    ):
        raise MaintenanceError(
            f"lease table {current!r} was created again by another process (an ingest run's create_lease_table) "
            "while it was deleted; it starts at the connector's initial position. Trigger the reset again, or "
            "restore the backup"
        )
    set_reset_mark(dynamodb, current, mark)
    _check_fresh(table, table.sync_shards(shards, new_start), new_start)
    log.info("Lease table %s created again", current)
    return _generation(table)


def _withdraw(
    request: ResetRequest,
    dynamodb: Any,
    generations: GenerationLog,
    current: str,
    target: str,
    generation: str,
    previous: GenerationRecord | None,
    identity: TableIdentity,
) -> None:
    """A reset that failed before it changed DynamoDB: record that the current generation stays.

    Once DynamoDB changed, the recorded intent stands, and the next ingest run completes it.
    """
    marks = read_marks(dynamodb, current)
    if reset_changed_dynamodb(
        request.mode,
        target_exists=request.mode is ResetMode.NEW_APPLICATION_NAME and LeaseTable(dynamodb, target).exists(),
        table_generation=marks.generation_id if marks is not None else None,
        generation=generation,
    ):
        log.warning(
            "The reset stopped after it changed DynamoDB: Snowflake keeps recording the new generation, and the "
            "next ingest run reads it (creating what is missing)"
        )
        return
    try:
        generations.record(
            GenerationRecord(
                request.application_name,
                current,
                generation,
                GenerationReason.RESET_WITHDRAWN,
                previous.start if previous is not None else None,
                *identity_fields(identity),
            )
        )
    except Exception:
        log.error(
            "Could not withdraw the reset recorded in Snowflake: the next ingest run will carry it out",
            exc_info=True,
        )


def _report(
    request: ResetRequest,
    resolution: Resolution,
    generation: str,
    target: str,
    new_start: StartPosition,
    impacts: Sequence[ShardImpact],
) -> None:
    """Step 5's report: per shard and in total, what is read again or skipped, and the ledger's note."""
    current = resolution.active
    change = (
        f"{current} -> new lease table {target}"
        if request.mode is ResetMode.NEW_APPLICATION_NAME
        else f"{current}, deleted and created again"
    )
    log.info(
        "Reset of connector %s (%s): %s; every shard starts at %s",
        request.connector_id,
        request.mode.value,
        change,
        position_text(new_start),
    )
    for impact in impacts:
        log.info("  %s", impact.describe())
    total = totals(impacts)
    log.info(
        "In total: %s%d Kinesis records read again, %s%d skipped (counts stop at %d per shard; a KPL aggregate "
        "counts once)",
        "at least " if total["read_again_at_least"] else "",
        total["read_again"],
        "at least " if total["skipped_at_least"] else "",
        total["skipped"],
        request.estimate_max_records,
    )
    log.warning("%s", DUPLICATE_AND_LOSS_WARNING)
    log.warning(
        "%s",
        ledger_note(old_application=current, old_generation=generation, new_application=target, new_generation=None),
    )


def _generation(table: LeaseTable) -> str:
    metadata = table.metadata()
    if metadata is None:
        raise MaintenanceError(f"lease table {table.table_name!r} lost its metadata item")
    return metadata.generation_id


def _check_fresh(table: LeaseTable, leases: dict[str, Lease], start: StartPosition) -> None:
    """Every lease of a table the reset just created is free, unread and at the reset's start."""
    others = unfresh_leases(leases, start)
    if others:
        raise MaintenanceError(
            f"lease table {table.table_name!r} holds leases the reset did not write ({', '.join(others)}): another "
            "process used it during the reset"
        )
