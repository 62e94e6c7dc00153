"""Put back every lease and checkpoint of a backup, and make its table the active one (undo a reset).

The backup's table gets exactly the backed-up leases (free, at their checkpoints), its generation
id back (so the exactly-once ledger's marks for it apply again), and becomes the connector's
active application; a different table that was active is left in place, marked as superseded. It
is created again if clean-up removed it. :func:`restore_checkpoints` goes in this order:

1. check that the backup is this connector's (:func:`check_restore_owner`), dry run or not;
2. resolve the active table (a broken ``superseded_by`` pointer is what a restore repairs: it goes
   on from the configured table), refuse while a reset or restore works, and report per shard
   what changes. A dry run stops here;
3. check the confirmation (the active application name), that the destination where the restore
   is recorded is known, and that the tables are this connector's;
4. mark the configured, the active and the backup's tables (those that exist) as under
   maintenance: ingest runs skip them;
5. hold the active table's leases and back up its state (``before-restore``, so a restore can be
   undone the same way), then hold the backup's table's leases;
6. record in Snowflake that the backup's generation is read again;
7. create the backup's table if it is gone, and write exactly the backup's leases into it;
8. give it the backup's generation, make it active, and point the active and configured tables at it;
9. give back the leases and remove the marks (also when a step failed).

Crash windows. Until 6, nothing changed but marks and held leases, which expire
:data:`~.window.LOCK_MARGIN_SECONDS` after the wait for leases (a ``before-restore`` backup may be
left). Between 6 and 7, Snowflake records a generation the table does not hold yet; the record
names the generation it replaces, so the next ingest run knows the restore stopped before it
changed anything and withdraws it, and a restore that fails there records the withdrawal itself.
Between 7 and 8 the table holds the backup's leases but not yet its generation: the restore says
so when it fails there; trigger it again to finish it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from airflow_kinesis_snowflake.core.admin.impact import position_text
from airflow_kinesis_snowflake.core.admin.intent import GenerationLog
from airflow_kinesis_snowflake.core.admin.params import ParameterError, as_bool, as_number
from airflow_kinesis_snowflake.core.admin.window import (
    LOCK_MARGIN_SECONDS,
    AdminError,
    clear_marks_quietly,
    release_quietly,
)
from airflow_kinesis_snowflake.core.model import Checkpoint, GenerationReason, GenerationRecord
from airflow_kinesis_snowflake.core.state.backups import (
    CheckpointBackup,
    check_backup_owner,
    optional_text,
    restore_leases,
    restore_target,
    snapshot,
)
from airflow_kinesis_snowflake.core.state.errors import LeaseTableError, MaintenanceError
from airflow_kinesis_snowflake.core.state.holding import hold_leases
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable, earliest_start
from airflow_kinesis_snowflake.core.state.marks import (
    clear_superseded,
    mark_superseded,
    marks_chain,
    resolve_application,
    set_generation,
    set_reset_mark,
)
from airflow_kinesis_snowflake.core.state.metadata import ResetMark, TableMarks, read_marks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestoreRequest:
    """A restore, every parameter checked (see :func:`parse_restore_request`).

    :param connector_id: the connector; a backup of another connector is refused.
    :param application_name: the connector's configured application name.
    :param stream_name: the Kinesis data stream; a backup of another stream is refused.
    :param destination: ``DATABASE.SCHEMA.TABLE`` the connector loads (None: not compared).
    :param location: where the backup is.
    :param preview_only: only report, change nothing.
    :param confirm: must equal the active application name to act.
    :param lease_wait_timeout_seconds: how long to wait for running batches' leases.
    """

    connector_id: str
    application_name: str
    stream_name: str
    destination: str | None
    location: str
    preview_only: bool
    confirm: str | None
    lease_wait_timeout_seconds: float


def parse_restore_request(
    *,
    connector_id: str,
    application_name: str,
    stream_name: str,
    destination: str | None,
    backup: str | None,
    preview_only: bool | str,
    confirm: str | None,
    lease_wait_timeout_seconds: float | str,
) -> RestoreRequest:
    """Every parameter checked before any call, as rendered by a template; no I/O.

    :raises ParameterError: naming the first parameter that is not allowed.
    """
    preview = as_bool(preview_only, "preview_only")
    timeout = as_number(lease_wait_timeout_seconds, "lease_wait_timeout_seconds")
    location = optional_text(backup)
    if location is None:
        raise ParameterError("backup is required: the backup_location a reset or clean-up returned")
    return RestoreRequest(
        connector_id=connector_id,
        application_name=application_name,
        stream_name=stream_name,
        destination=optional_text(destination),
        location=location,
        preview_only=preview,
        confirm=optional_text(confirm),
        lease_wait_timeout_seconds=timeout,
    )


def read_stream_identity(kinesis: Any, stream_name: str) -> dict[str, str | None]:
    """The ARN and creation time of the stream now; None when not read (then not compared).

    :param kinesis: a boto3 Kinesis client.
    """
    try:
        summary = kinesis.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]
    except (ClientError, BotoCoreError) as err:
        log.warning("Cannot read stream %s to compare with the backup's: %s", stream_name, err)
        return {"stream_arn": None, "stream_created_at": None}
    created = summary.get("StreamCreationTimestamp")
    return {
        "stream_arn": summary["StreamARN"],
        "stream_created_at": created.isoformat() if isinstance(created, datetime) else None,
    }


def check_restore_owner(request: RestoreRequest, backup: CheckpointBackup, dynamodb: Any, kinesis: Any) -> None:
    """Step 1: refuse another connector's backup before anything is written (see :func:`check_backup_owner`)."""
    target = restore_target(
        connector_id=request.connector_id,
        stream_name=request.stream_name,
        chain=marks_chain(dynamodb, request.application_name),
        backup_table=read_marks(dynamodb, backup.application_name),
        destination=request.destination,
        **read_stream_identity(kinesis, request.stream_name),
    )
    try:
        check_backup_owner(backup, target)
    except MaintenanceError as err:
        raise AdminError(f"{request.location}: {err}") from err


def replaced_generation(backup: CheckpointBackup, target_marks: TableMarks | None) -> str | None:
    """The generation the backup's table holds now when it is another one (recorded as replaced); no I/O.

    While the table still holds it, ingest knows the restore stopped before it changed anything.
    """
    if target_marks is None or target_marks.generation_id == backup.generation_id:
        return None
    return target_marks.generation_id


def restore_checkpoints(
    request: RestoreRequest,
    backup: CheckpointBackup,
    *,
    dynamodb: Any,
    kinesis: Any,
    generations: GenerationLog,
    write_backup: Callable[[CheckpointBackup], str],
    owner: str,
) -> dict[str, Any]:
    """Carry out (or, with ``preview_only``, only report) the restore of ``backup``; the steps are the module's.

    :param dynamodb: a boto3 DynamoDB client.
    :param kinesis: a boto3 Kinesis client (the stream's identity is compared with the backup's).
    :param generations: where the restore is recorded.
    :param write_backup: writes the backup of the current state, returns where it went.
    :param owner: whom the marks and held leases belong to.
    :return: the task's result: the restored table and generation, and the backup of what it replaced.
    :raises AdminError: when the restore may not start, or stopped.
    """
    check_restore_owner(request, backup, dynamodb, kinesis)  # 1.
    # 2. Resolve and report.
    try:
        resolution = resolve_application(dynamodb, request.application_name)
        current: str | None = resolution.active
    except MaintenanceError as err:
        # A broken pointer is what a restore repairs: go on from the configured table.
        log.warning("%s", err)
        resolution, current = None, None
    if resolution is not None and resolution.reset is not None:
        raise AdminError(f"a reset or restore is already working on {resolution.reset_table!r}")
    current_marks = read_marks(dynamodb, current) if current else None
    if current_marks is None:
        current = None
    target = backup.application_name
    target_table = LeaseTable(dynamodb, target)
    present = target_table.leases() if target_table.exists() else {}
    _report(request, backup, current, present)
    result: dict[str, Any] = {
        "connector_id": request.connector_id,
        "dry_run": request.preview_only,
        "application_name": current,
        "restored_application_name": target,
        "restored_generation_id": backup.generation_id,
        "checkpoints": backup.checkpoints(),
        "backup_location": None,
    }
    expected = current or request.application_name
    if request.preview_only:
        log.info("Dry run: nothing was changed. To restore, trigger again with dry_run false and confirm %r.", expected)
        return result
    # 3. Confirmation, destination, identity.
    if request.confirm != expected:
        raise AdminError(
            f"confirm must be the current application name {expected!r} (got {request.confirm!r}); nothing was changed"
        )
    generations.destination()  # where the restore is recorded: checked before anything is marked
    generations.check_identity(dynamodb, request.application_name, current, target)

    now = datetime.now(UTC).timestamp()
    lock = request.lease_wait_timeout_seconds + LOCK_MARGIN_SECONDS
    timeout = request.lease_wait_timeout_seconds
    mark = ResetMark(owner, "restore", now, now + lock)
    marked: list[str] = []
    holding: list[tuple[LeaseTable, dict[str, Lease]]] = []
    try:
        # 4. Mark: ingest runs skip.
        for name in dict.fromkeys(n for n in (request.application_name, current, target) if n):
            if read_marks(dynamodb, name) is not None:
                set_reset_mark(dynamodb, name, mark)
                marked.append(name)
        # 5. Hold and back up the active table; hold the backup's.
        if current is not None:
            current_table = LeaseTable(dynamodb, current)
            holding.append(
                (current_table, hold_leases(current_table, owner, hold_seconds=lock, timeout_seconds=timeout))
            )
            before = snapshot(
                current_table,
                reason="before-restore",
                connector_id=request.connector_id,
                destination=request.destination,
            )
            result["backup_location"] = write_backup(before)
            log.info("Backed up the current state of %s to %s", current, result["backup_location"])
        if target != current and target_table.exists():
            holding.append((target_table, hold_leases(target_table, owner, hold_seconds=lock, timeout_seconds=timeout)))
        # 6. Record the restore in Snowflake.
        generations.record(
            GenerationRecord(
                request.application_name,
                target,
                backup.generation_id,
                GenerationReason.RESTORE,
                earliest_start(backup.leases),
                request.connector_id,
                replaces=replaced_generation(backup, read_marks(dynamodb, target)),
            )
        )
        log.info(
            "Recorded in Snowflake: connector %s reads %s generation %s again (restore)",
            request.connector_id,
            target,
            backup.generation_id,
        )
        # 7. Write the backup's leases; a failure before the first one withdraws the record.
        try:
            if target_table.create(stream_name=request.stream_name, application_name=target):
                log.info("Lease table %s did not exist; created it again", target)
                set_reset_mark(dynamodb, target, mark)
                marked.append(target)
            restored = restore_leases(target_table, backup, owner)
        except BaseException:
            if _checkpoints(target_table.leases() if target_table.exists() else {}) == _checkpoints(present):
                _withdraw(request, generations, current, current_marks)
            else:
                log.warning("The restore stopped after it wrote leases into %s: trigger it again to finish it", target)
            raise
        # 8. The backup's generation, active again; the other tables point at it.
        set_generation(dynamodb, target, backup.generation_id, owner=owner)
        clear_superseded(dynamodb, target)
        holding = [(t, held) for t, held in holding if t.table_name != target]
        if current is not None and current != target:
            mark_superseded(dynamodb, current, by=target)
        if request.application_name != target:
            LeaseTable(dynamodb, request.application_name).create(
                stream_name=request.stream_name, application_name=request.application_name
            )
            mark_superseded(dynamodb, request.application_name, by=target)
        log.info(
            "Restored %d leases into %s (%d removed); %s is the active application of connector %s",
            len(restored.written),
            target,
            len(restored.removed),
            target,
            request.connector_id,
        )
    except (MaintenanceError, LeaseTableError) as err:
        raise AdminError(f"restore of connector {request.connector_id} stopped: {err}") from err
    finally:
        # 9. Give back what is still held and remove the marks.
        for table, held in holding:
            release_quietly(table, held.values())
        clear_marks_quietly(dynamodb, marked, owner)
    return result


def _report(request: RestoreRequest, backup: CheckpointBackup, current: str | None, present: dict[str, Lease]) -> None:
    """Step 2's report: per shard, the checkpoint now and the one restored."""
    log.info(
        "Restore of connector %s from %s (taken %s, %s): lease table %s, generation %s; active now: %s",
        request.connector_id,
        request.location,
        backup.created_at.isoformat(),
        backup.reason,
        backup.application_name,
        backup.generation_id,
        current or "none",
    )
    for lease in sorted(backup.leases, key=lambda lease: lease.shard_id):
        now_at = present.get(lease.shard_id)
        log.info(
            "  %s: checkpoint %s -> %s%s",
            lease.shard_id,
            _checkpoint(now_at) if now_at else "(no lease)",
            _checkpoint(lease),
            " (SHARD_END)" if lease.shard_ended else "",
        )
    for shard_id in sorted(set(present) - {lease.shard_id for lease in backup.leases}):
        log.info("  %s: lease removed (not in the backup)", shard_id)
    log.warning(
        "Records loaded since the backup was taken are read and loaded again where the restored checkpoints are "
        "behind them; the ledger marks of %s generation %s apply again.",
        backup.application_name,
        backup.generation_id,
    )


def _withdraw(
    request: RestoreRequest, generations: GenerationLog, current: str | None, current_marks: TableMarks | None
) -> None:
    """A restore that failed before it wrote a lease: record that the active generation stays."""
    if current is None or current_marks is None:
        log.error(
            "The restore stopped before it wrote a lease and the connector had no active lease table; the next "
            "ingest run refuses until the restore is triggered again"
        )
        return
    try:
        generations.record(
            GenerationRecord(
                request.application_name,
                current,
                current_marks.generation_id,
                GenerationReason.RESET_WITHDRAWN,
                None,
                request.connector_id,
            )
        )
    except Exception:
        log.error(
            "Could not withdraw the restore recorded in Snowflake: the next ingest run withdraws it",
            exc_info=True,
        )


def _checkpoints(leases: dict[str, Lease]) -> dict[str, tuple[Checkpoint | None, bool]]:
    return {shard_id: (lease.checkpoint, lease.shard_ended) for shard_id, lease in leases.items()}


def _checkpoint(lease: Lease) -> str:
    if lease.checkpoint is None:
        return f"none (starts at {position_text(lease.start)})"
    return lease.checkpoint.sequence_number
