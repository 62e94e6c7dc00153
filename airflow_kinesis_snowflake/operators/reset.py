"""Reset a connector's progress, or restore it from a checkpoint backup.

Snowflake's Openflow connector for Kinesis resets its state by changing the application name (a
new lease table; the old one is left behind) or by deleting the lease table (it is created
again), and warns that either may load records twice or skip them. These operators do the same,
in a safe order: dry run by default, confirmation by name, ingestions paused by a reset mark,
every lease held and every checkpoint backed up before anything changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException
from botocore.exceptions import BotoCoreError, ClientError

from airflow_kinesis_snowflake.backups import read_backup, write_checkpoint_backup
from airflow_kinesis_snowflake.config import validate_application_name
from airflow_kinesis_snowflake.core.admin.impact import (
    DEFAULT_MAX_RECORDS,
    DUPLICATE_AND_LOSS_WARNING,
    ShardImpact,
    estimate_impact,
    ledger_note,
    position_text,
    totals,
)
from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink
from airflow_kinesis_snowflake.core.model import (
    Checkpoint,
    ConsumerType,
    Destination,
    GenerationReason,
    GenerationRecord,
    InitialPosition,
    StartPosition,
)
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.backups import (
    CheckpointBackup,
    check_backup_owner,
    optional_text,
    restore_leases,
    restore_target,
    snapshot,
)
from airflow_kinesis_snowflake.core.state.dynamodb import delete_table
from airflow_kinesis_snowflake.core.state.errors import IdentityError, LeaseTableError, MaintenanceError
from airflow_kinesis_snowflake.core.state.holding import hold_leases
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable, earliest_start
from airflow_kinesis_snowflake.core.state.marks import (
    ResetMode,
    Resolution,
    clear_reset_mark,
    clear_superseded,
    mark_superseded,
    marks_chain,
    resolve_application,
    set_generation,
    set_reset_mark,
)
from airflow_kinesis_snowflake.core.state.metadata import (
    ResetMark,
    TableIdentity,
    TableMarks,
    check_identity,
    read_marks,
)
from airflow_kinesis_snowflake.hooks.kinesis import DynamoDBTablesHook, KinesisStreamHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

# How long a reset mark and the leases a reset holds outlive the wait for leases, should the task
# die without clearing them: ingestions resume on their own after that.
LOCK_MARGIN_SECONDS = 900


def as_bool(value: bool | str, name: str) -> bool:
    """A flag given as a bool or as rendered by a template (``True``/``False``, any case)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise AirflowException(f"{name} must be true or false, not {value!r}")


def as_number(value: float | int | str, name: str, *, minimum: float = 0) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise AirflowException(f"{name} must be a number, not {value!r}") from None
    if number < minimum:
        raise AirflowException(f"{name} must be at least {minimum:g}, not {value!r}")
    return number


def maintenance_owner(context: Context, kind: str) -> str:
    ti = context.get("ti")
    where = f"{ti.dag_id}/{ti.run_id}/{ti.try_number}" if ti is not None else "manual"
    return f"{kind}/{where}/{uuid.uuid4().hex[:8]}"


def _release(table: LeaseTable, held: Iterable[Lease], log: Any) -> None:
    for lease in held:
        try:
            table.release(lease)
        except Exception:  # best effort: a held lease also expires on its own
            log.warning("Could not release the lease on %s in %s", lease.shard_id, table.table_name, exc_info=True)


class _SnowflakeRecords:
    """Where reset and restore record their intent: the generations table next to the ledger.

    Recorded before DynamoDB changes, so that ingest knows a new generation is wanted (or an old
    one is back) even if a lease table is lost right after; see :func:`~.maintenance.choose_generation`.
    """

    snowflake_conn_id: str
    database: str | None
    schema: str | None
    table: str | None
    connector_id: str
    application_name: str

    def _destination(self) -> Destination:
        if not (self.database and self.schema and self.table):
            raise AirflowException(
                f"connector {self.connector_id}: database, schema and table are needed to record the change in "
                "Snowflake (the generations table next to the ledger); nothing was changed"
            )
        return Destination(self.database.upper(), self.schema.upper(), self.table.upper())

    def _destination_text(self) -> str:
        d = self._destination()
        return f"{d.database}.{d.schema}.{d.table}"

    @contextmanager
    def _generations(self) -> Iterator[SnowflakeSink]:
        conn = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn()
        try:
            sink = SnowflakeSink(conn, self._destination())
            sink.ensure_generations_table()
            yield sink
        finally:
            conn.close()

    def _check_identity(self, client: Any, *names: str | None) -> None:
        """Refuse a lease table whose progress belongs to a connector loading another destination."""
        current = TableIdentity(self.connector_id, self._destination_text())
        for name in dict.fromkeys(n for n in names if n):
            metadata = LeaseTable(client, name).metadata() if LeaseTable(client, name).exists() else None
            if metadata is None:
                continue
            try:
                check_identity(name, metadata.identity, current)
            except IdentityError as err:
                raise AirflowException(f"{err} (nothing was changed)") from err

    def _record(self, record: GenerationRecord) -> None:
        with self._generations() as sink:
            sink.record_generation(replace(record, destination=record.destination or self._destination_text()))


def _clear_marks(client: Any, tables: Iterable[str], owner: str, log: Any) -> None:
    for name in tables:
        try:
            clear_reset_mark(client, name, owner)
        except Exception:  # it expires on its own; say so rather than hide the first error
            log.warning("Could not remove the reset mark of %s; it expires by itself", name, exc_info=True)


@dataclass(frozen=True)
class _ResetSettings:
    mode: ResetMode
    new_application_name: str | None
    position: InitialPosition
    timestamp: datetime | None
    dry_run: bool
    confirm: str | None
    lease_wait_timeout_seconds: float


class ResetConnectorStateOperator(_SnowflakeRecords, BaseOperator):
    """Reset where a connector reads its stream: to a new application name, or by recreating the lease table.

    ``new_application_name`` creates a new lease table at the chosen start position and leaves the
    old one in place, recorded as superseded (``superseded_by`` in its metadata item, and in the
    configured table's): ingestions follow it with no change to the connector file.
    ``delete_table`` deletes the active lease table and creates it again, empty, with a new
    generation id. Either way every shard starts at ``initial_position``.

    A dry run (the default) only reports, per shard, the current checkpoint, the new start and how
    many records would be read again or skipped. Otherwise ``confirm`` must be the current (active)
    application name, and the operator marks the connector as resetting (ingest runs skip), waits
    for running batches to release their leases and holds them, writes every checkpoint to a
    backup, reports, acts, and removes the mark (also on failure). The backup document is the
    task's result, with where it was written; ``RestoreCheckpointsOperator`` puts it back.

    :param connector_id: the connector, recorded in the backup.
    :param application_name: the connector's configured application name (connector file).
    :param stream_name: the Kinesis data stream.
    :param destination: ``DATABASE.SCHEMA.TABLE`` the connector loads, recorded in the backup
        (default: what the lease table's metadata item records).
    :param mode: ``new_application_name`` or ``delete_table``.
    :param new_application_name: the new name (mode ``new_application_name``): a DynamoDB table
        name no table has yet, 3-245 characters of letters, digits, ``_``, ``.``, ``-``.
    :param initial_position: where every shard starts: TRIM_HORIZON, LATEST or AT_TIMESTAMP.
    :param initial_timestamp: ISO 8601 time, with AT_TIMESTAMP.
    :param preview_only: only report what would change, change nothing (default; the DAG's ``dry_run``).
    :param confirm: must equal the current application name to act.
    :param consumer_type: the connector's consumer type; with ENHANCED_FAN_OUT a consumer named
        after the new application name is registered.
    :param lease_wait_timeout_seconds: how long to wait for running batches to release their leases.
    :param estimate_max_records: cap on the records counted per shard for the estimate (0: none).
    :param backup_dir: directory path or URL for the backup (default ``$AIRFLOW_HOME/kinesis_snowflake_backups``).
    :param database: the connector's destination database; with ``schema`` it locates the
        generations table, where the reset records, before acting, the new generation it creates
        (so that ingest starts over only because of a reset, never because a table was lost).
    :param schema: the destination schema.
    :param table: the destination table, recorded in the new lease table.
    :param snowflake_conn_id: the Snowflake connection.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    """

    template_fields: Sequence[str] = (
        "application_name",
        "stream_name",
        "destination",
        "mode",
        "new_application_name",
        "initial_position",
        "initial_timestamp",
        "preview_only",
        "confirm",
        "lease_wait_timeout_seconds",
        "backup_dir",
        "aws_conn_id",
        "region_name",
    )
    ui_color = "#ffd8a8"

    def __init__(
        self,
        *,
        connector_id: str,
        application_name: str,
        stream_name: str,
        destination: str | None = None,
        mode: str = ResetMode.NEW_APPLICATION_NAME.value,
        new_application_name: str | None = None,
        initial_position: str = InitialPosition.TRIM_HORIZON.value,
        initial_timestamp: str | None = None,
        preview_only: bool | str = True,
        confirm: str | None = None,
        consumer_type: str = "SHARED_THROUGHPUT",
        lease_wait_timeout_seconds: float | str = 600,
        estimate_max_records: int = DEFAULT_MAX_RECORDS,
        backup_dir: str | None = None,
        database: str | None = None,
        schema: str | None = None,
        table: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.database = database
        self.schema = schema
        self.table = table
        self.snowflake_conn_id = snowflake_conn_id
        self.connector_id = connector_id
        self.application_name = application_name
        self.stream_name = stream_name
        self.destination = destination
        self.mode = mode
        self.new_application_name = new_application_name
        self.initial_position = initial_position
        self.initial_timestamp = initial_timestamp
        self.preview_only = preview_only
        self.confirm = confirm
        self.consumer_type = consumer_type
        self.lease_wait_timeout_seconds = lease_wait_timeout_seconds
        self.estimate_max_records = estimate_max_records
        self.backup_dir = backup_dir
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def _settings(self) -> _ResetSettings:
        """Every parameter checked before any AWS call."""
        try:
            mode = ResetMode(str(self.mode).strip())
        except ValueError:
            raise AirflowException(
                f"mode must be one of {', '.join(m.value for m in ResetMode)}, not {self.mode!r}"
            ) from None
        new_name = optional_text(self.new_application_name)
        if mode is ResetMode.NEW_APPLICATION_NAME:
            if new_name is None:
                raise AirflowException("mode new_application_name needs new_application_name")
            try:
                validate_application_name(new_name)
            except ValueError as err:
                raise AirflowException(f"new_application_name {new_name!r} {err}") from None
        elif new_name is not None:
            raise AirflowException("new_application_name is only used with mode new_application_name")
        try:
            position = InitialPosition(str(self.initial_position).strip().upper())
        except ValueError:
            raise AirflowException(
                f"initial_position must be one of {', '.join(p.value for p in InitialPosition)}, "
                f"not {self.initial_position!r}"
            ) from None
        timestamp = None
        text = optional_text(self.initial_timestamp)
        if position is InitialPosition.AT_TIMESTAMP:
            if text is None:
                raise AirflowException("initial_position AT_TIMESTAMP needs initial_timestamp (ISO 8601)")
            try:
                timestamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise AirflowException(f"initial_timestamp {text!r} is not an ISO 8601 time") from None
            if timestamp.tzinfo is None:
                timestamp = timestamp.replace(tzinfo=UTC)
        elif text is not None:
            raise AirflowException("initial_timestamp is only used with initial_position AT_TIMESTAMP")
        return _ResetSettings(
            mode=mode,
            new_application_name=new_name,
            position=position,
            timestamp=timestamp,
            dry_run=as_bool(self.preview_only, "preview_only"),
            confirm=optional_text(self.confirm),
            lease_wait_timeout_seconds=as_number(self.lease_wait_timeout_seconds, "lease_wait_timeout_seconds"),
        )

    def execute(self, context: Context) -> dict[str, Any]:
        settings = self._settings()
        kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        client = DynamoDBTablesHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn
        now = datetime.now(UTC)
        try:
            resolution = resolve_application(client, self.application_name)
        except MaintenanceError as err:
            raise AirflowException(f"cannot reset connector {self.connector_id}: {err}") from err
        current = resolution.active
        marks = read_marks(client, current)
        if marks is None:
            raise AirflowException(
                f"lease table {current!r} does not exist or has no metadata item: connector {self.connector_id} "
                "has no progress to reset"
            )
        if marks.stream_name != self.stream_name:
            raise AirflowException(
                f"lease table {current!r} tracks stream {marks.stream_name!r}, not {self.stream_name!r}"
            )
        if resolution.reset is not None:
            raise AirflowException(
                f"a reset or restore is already working on {resolution.reset_table!r} "
                f"({resolution.reset.mode} by {resolution.reset.owner}, "
                f"until {resolution.reset.to_dict()['expires_at']})"
            )
        target = settings.new_application_name or current
        if settings.mode is ResetMode.NEW_APPLICATION_NAME:
            if target in resolution.chain or LeaseTable(client, target).exists():
                raise AirflowException(
                    f"new_application_name {target!r} already names a lease table; choose a name never used "
                    "(to go back to an earlier table, restore its backup with the restore DAG)"
                )
        new_start = StartPosition.resolve(settings.position, settings.timestamp, now)
        table = LeaseTable(client, current)

        if settings.dry_run:
            shards = kinesis.list_shards(self.stream_name)
            impacts = self._estimate(kinesis, shards, table.leases(), new_start)
            self._report(settings.mode, resolution, marks.generation_id, target, None, new_start, impacts)
            backup = snapshot(
                table,
                reason=f"reset-{settings.mode.value}",
                connector_id=self.connector_id,
                destination=optional_text(self.destination),
            )
            self.log.info(
                "Dry run: nothing was changed. To reset, trigger again with dry_run false and confirm %r.", current
            )
            return self._result(
                settings, resolution, marks.generation_id, target, None, new_start, impacts, backup, None
            )

        if settings.confirm != current:
            raise AirflowException(
                f"confirm must be the current application name {current!r} (got {settings.confirm!r}); "
                "nothing was changed"
            )
        self._destination()  # where the change is recorded: checked before anything is marked
        self._check_identity(client, self.application_name, current)
        owner = maintenance_owner(context, "reset")
        lock = settings.lease_wait_timeout_seconds + LOCK_MARGIN_SECONDS
        mark = ResetMark(owner, settings.mode.value, now.timestamp(), now.timestamp() + lock)
        marked: list[str] = []
        held: dict[str, Lease] = {}
        try:
            for name in dict.fromkeys((self.application_name, current)):
                set_reset_mark(client, name, mark)
                marked.append(name)
            self.log.info("Marked connector %s as resetting: ingest runs skip until the reset ends", self.connector_id)
            held = hold_leases(table, owner, hold_seconds=lock, timeout_seconds=settings.lease_wait_timeout_seconds)
            backup = snapshot(
                table,
                reason=f"reset-{settings.mode.value}",
                connector_id=self.connector_id,
                destination=optional_text(self.destination),
            )
            location = write_checkpoint_backup(backup, self.backup_dir)
            self.log.info("Backed up the %d leases and checkpoints of %s to %s", len(backup.leases), current, location)
            shards = kinesis.list_shards(self.stream_name)
            impacts = self._estimate(kinesis, shards, {lease.shard_id: lease for lease in backup.leases}, new_start)
            self._report(settings.mode, resolution, marks.generation_id, target, None, new_start, impacts)
            generation = uuid.uuid4().hex
            stream_arn, stream_created = kinesis.stream_identity(self.stream_name)
            identity = TableIdentity(self.connector_id, self._destination_text(), stream_arn, stream_created)
            reason = (
                GenerationReason.RESET_NEW_APPLICATION_NAME
                if settings.mode is ResetMode.NEW_APPLICATION_NAME
                else GenerationReason.RESET_DELETE_TABLE
            )
            with self._generations() as sink:
                previous = sink.latest_generation(self.application_name)
                sink.record_generation(
                    GenerationRecord(
                        self.application_name,
                        target,
                        generation,
                        reason,
                        new_start,
                        *identity_fields(identity),
                        # A delete_table reset replaces the generation of the table it deletes: while the
                        # table still holds it, ingest knows the reset stopped before it changed anything.
                        replaces=marks.generation_id if settings.mode is ResetMode.DELETE_TABLE else None,
                        destination=identity.destination,
                    )
                )
            self.log.info(
                "Recorded in Snowflake: connector %s reads %s generation %s from now on (%s)",
                self.connector_id,
                target,
                generation,
                reason.value,
            )
            try:
                if settings.mode is ResetMode.NEW_APPLICATION_NAME:
                    generation = self._switch(client, kinesis, current, target, shards, new_start, identity, generation)
                    _release(table, held.values(), self.log)
                else:
                    generation = self._recreate(client, current, shards, new_start, mark, identity, generation)
            except BaseException:
                self._withdraw(client, settings.mode, current, target, marks.generation_id, previous, identity)
                raise
            held = {}
        except (MaintenanceError, LeaseTableError) as err:
            raise AirflowException(f"reset of connector {self.connector_id} stopped: {err}") from err
        finally:
            if held:
                _release(table, held.values(), self.log)
            _clear_marks(client, marked, owner, self.log)
        self.log.info(
            "Reset done: %s (generation %s) is active; the next ingest run reads it from %s",
            target,
            generation,
            position_text(new_start),
        )
        return self._result(
            settings, resolution, marks.generation_id, target, generation, new_start, impacts, backup, location
        )

    def _estimate(
        self, kinesis: KinesisStreamHook, shards: list[Shard], leases: dict[str, Lease], new_start: StartPosition
    ) -> list[ShardImpact]:
        return estimate_impact(
            kinesis.conn, self.stream_name, shards, leases, new_start, max_records=self.estimate_max_records
        )

    def _withdraw(
        self,
        client: Any,
        mode: ResetMode,
        current: str,
        target: str,
        generation: str,
        previous: GenerationRecord | None,
        identity: TableIdentity,
    ) -> None:
        """A reset that failed before it changed DynamoDB: record that the current generation stays.

        Once DynamoDB changed, the recorded intent stands, and the next ingest run completes it.
        """
        marks = read_marks(client, current)
        unchanged = (
            not LeaseTable(client, target).exists()
            if mode is ResetMode.NEW_APPLICATION_NAME
            else marks is not None and marks.generation_id == generation
        )
        if not unchanged:
            self.log.warning(
                "The reset stopped after it changed DynamoDB: Snowflake keeps recording the new generation, and the "
                "next ingest run reads it (creating what is missing)"
            )
            return
        try:
            self._record(
                GenerationRecord(
                    self.application_name,
                    current,
                    generation,
                    GenerationReason.RESET_WITHDRAWN,
                    previous.start if previous is not None else None,
                    *identity_fields(identity),
                )
            )
        except Exception:
            self.log.error(
                "Could not withdraw the reset recorded in Snowflake: the next ingest run will carry it out",
                exc_info=True,
            )

    def _switch(
        self,
        client: Any,
        kinesis: KinesisStreamHook,
        current: str,
        target: str,
        shards: list[Shard],
        new_start: StartPosition,
        identity: TableIdentity,
        generation: str,
    ) -> str:
        new_table = LeaseTable(client, target)
        if not new_table.create(
            stream_name=self.stream_name, application_name=target, identity=identity, generation_id=generation
        ):
            raise MaintenanceError(f"lease table {target!r} was created by another process during the reset")
        _check_fresh(new_table, new_table.sync_shards(shards, new_start), new_start)
        # The old active table first, the configured one last: until then resolution follows the chain.
        for name in dict.fromkeys((current, self.application_name)):
            mark_superseded(client, name, by=target)
        if self.consumer_type == ConsumerType.ENHANCED_FAN_OUT:
            kinesis.register_consumer(self.stream_name, target)
        self.log.info("Lease table %s created; %s now supersedes %s", target, target, current)
        return _generation(new_table)

    def _recreate(
        self,
        client: Any,
        current: str,
        shards: list[Shard],
        new_start: StartPosition,
        mark: ResetMark,
        identity: TableIdentity,
        generation: str,
    ) -> str:
        delete_table(client, current)
        self.log.info("Deleted lease table %s", current)
        table = LeaseTable(client, current)
        if not table.create(
            stream_name=self.stream_name, application_name=current, identity=identity, generation_id=generation
        ):
            raise MaintenanceError(
                f"lease table {current!r} was created again by another process (an ingest run's create_lease_table) "
                "while it was deleted; it starts at the connector's initial position. Trigger the reset again, or "
                "restore the backup"
            )
        set_reset_mark(client, current, mark)
        _check_fresh(table, table.sync_shards(shards, new_start), new_start)
        self.log.info("Lease table %s created again", current)
        return _generation(table)

    def _report(
        self,
        mode: ResetMode,
        resolution: Resolution,
        generation: str,
        target: str,
        new_generation: str | None,
        new_start: StartPosition,
        impacts: Sequence[ShardImpact],
    ) -> None:
        current = resolution.active
        change = (
            f"{current} -> new lease table {target}"
            if mode is ResetMode.NEW_APPLICATION_NAME
            else (f"{current}, deleted and created again")
        )
        self.log.info(
            "Reset of connector %s (%s): %s; every shard starts at %s",
            self.connector_id,
            mode.value,
            change,
            position_text(new_start),
        )
        for impact in impacts:
            self.log.info("  %s", impact.describe())
        total = totals(impacts)
        self.log.info(
            "In total: %s%d Kinesis records read again, %s%d skipped (counts stop at %d per shard; a KPL aggregate "
            "counts once)",
            "at least " if total["read_again_at_least"] else "",
            total["read_again"],
            "at least " if total["skipped_at_least"] else "",
            total["skipped"],
            self.estimate_max_records,
        )
        self.log.warning("%s", DUPLICATE_AND_LOSS_WARNING)
        self.log.warning(
            "%s",
            ledger_note(
                old_application=current,
                old_generation=generation,
                new_application=target,
                new_generation=new_generation,
            ),
        )

    def _result(
        self,
        settings: _ResetSettings,
        resolution: Resolution,
        generation: str,
        target: str,
        new_generation: str | None,
        new_start: StartPosition,
        impacts: Sequence[ShardImpact],
        backup: CheckpointBackup,
        location: str | None,
    ) -> dict[str, Any]:
        return {
            "connector_id": self.connector_id,
            "mode": settings.mode.value,
            "dry_run": settings.dry_run,
            "configured_application_name": resolution.configured,
            "application_name": resolution.active,
            "generation_id": generation,
            "new_application_name": target,
            "new_generation_id": new_generation,
            "new_start": new_start.to_dict(),
            "shards": [impact.to_dict() for impact in impacts],
            "estimate": totals(impacts),
            "backup_location": location,
            "backup": backup.to_dict(),
        }


def identity_fields(identity: TableIdentity) -> tuple[str | None, str | None, str | None]:
    """The connector and stream of ``identity``, in :class:`GenerationRecord`'s order."""
    return identity.connector_id, identity.stream_arn, identity.stream_created_at


def _generation(table: LeaseTable) -> str:
    metadata = table.metadata()
    if metadata is None:
        raise MaintenanceError(f"lease table {table.table_name!r} lost its metadata item")
    return metadata.generation_id


def _check_fresh(table: LeaseTable, leases: dict[str, Lease], start: StartPosition) -> None:
    """Every lease of a table the reset just created is free, unread and at the reset's start."""
    others = sorted(
        shard_id
        for shard_id, lease in leases.items()
        if lease.start != start or lease.checkpoint is not None or lease.lease_owner is not None
    )
    if others:
        raise MaintenanceError(
            f"lease table {table.table_name!r} holds leases the reset did not write ({', '.join(others)}): another "
            "process used it during the reset"
        )


class RestoreCheckpointsOperator(_SnowflakeRecords, BaseOperator):
    """Put back every lease and checkpoint of a backup, and make its table the active one (undo a reset).

    The backup's table gets exactly the backed-up leases (free, at their checkpoints), its
    generation id back (so the exactly-once ledger's marks for it apply again), and becomes the
    connector's active application; a different table that was active is left in place, marked as
    superseded. Created again if clean-up removed it.

    As with a reset: a dry run by default; ``confirm`` must be the current (active) application
    name; ingestions are paused by a reset mark, running batches' leases are waited for and held,
    and the current state is backed up first (its location is in the result), so a restore can be
    undone the same way.

    Before anything is written, the backup must be this connector's: one that records another
    connector, stream or destination than this one's is refused, naming both, and so is one whose
    lease table now names another connector. A backup that does not record its connector
    (version 1, or of a table of an earlier version) is accepted only for a lease table
    provably this connector's: the connector file's, or one its ``superseded_by`` chain reaches or
    that points into it.

    :param connector_id: the connector; a backup of another connector is refused.
    :param application_name: the connector's configured application name (connector file).
    :param stream_name: the Kinesis data stream; a backup of another stream is refused.
    :param destination: ``DATABASE.SCHEMA.TABLE`` the connector loads; a backup of another
        destination is refused (None: not checked).
    :param backup: where the backup is: the ``backup_location`` a reset, restore or clean-up returned.
    :param preview_only: only report what would change, change nothing (default; the DAG's ``dry_run``).
    :param confirm: must equal the current application name to act.
    :param lease_wait_timeout_seconds: how long to wait for running batches to release their leases.
    :param backup_dir: directory path or URL for the backup of the current state.
    :param database: the connector's destination database; with ``schema`` it locates the
        generations table, where the restore records the generation it brings back before acting.
    :param schema: the destination schema.
    :param table: the destination table.
    :param snowflake_conn_id: the Snowflake connection.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    """

    template_fields: Sequence[str] = (
        "application_name",
        "stream_name",
        "destination",
        "backup",
        "preview_only",
        "confirm",
        "lease_wait_timeout_seconds",
        "backup_dir",
        "aws_conn_id",
        "region_name",
    )
    ui_color = "#c3fae8"

    def __init__(
        self,
        *,
        connector_id: str,
        application_name: str,
        stream_name: str,
        backup: str,
        destination: str | None = None,
        preview_only: bool | str = True,
        confirm: str | None = None,
        lease_wait_timeout_seconds: float | str = 600,
        backup_dir: str | None = None,
        database: str | None = None,
        schema: str | None = None,
        table: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.database = database
        self.schema = schema
        self.table = table
        self.snowflake_conn_id = snowflake_conn_id
        self.connector_id = connector_id
        self.application_name = application_name
        self.stream_name = stream_name
        self.destination = destination
        self.backup = backup
        self.preview_only = preview_only
        self.confirm = confirm
        self.lease_wait_timeout_seconds = lease_wait_timeout_seconds
        self.backup_dir = backup_dir
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def _load(self) -> CheckpointBackup:
        location = optional_text(self.backup)
        if location is None:
            raise AirflowException("backup is required: the backup_location a reset or clean-up returned")
        try:
            text = read_backup(location)
        except (OSError, ValueError) as err:
            raise AirflowException(f"cannot read the backup {location!r}: {err}") from err
        try:
            backup = CheckpointBackup.from_json(text)
        except MaintenanceError as err:
            raise AirflowException(f"{location}: {err}") from err
        return backup

    def _check_owner(self, client: Any, backup: CheckpointBackup) -> None:
        """Refuse another connector's backup before anything is written (see :func:`check_backup_owner`)."""
        target = restore_target(
            connector_id=self.connector_id,
            stream_name=self.stream_name,
            chain=marks_chain(client, self.application_name),
            backup_table=read_marks(client, backup.application_name),
            destination=optional_text(self.destination),
            **self._stream_identity(),
        )
        try:
            check_backup_owner(backup, target)
        except MaintenanceError as err:
            raise AirflowException(f"{self.backup}: {err}") from err

    def _stream_identity(self) -> dict[str, str | None]:
        """The ARN and creation time of the connector's stream now; None when not read (then not compared)."""
        kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn
        try:
            summary = kinesis.describe_stream_summary(StreamName=self.stream_name)["StreamDescriptionSummary"]
        except (ClientError, BotoCoreError) as err:
            self.log.warning("Cannot read stream %s to compare with the backup's: %s", self.stream_name, err)
            return {"stream_arn": None, "stream_created_at": None}
        created = summary.get("StreamCreationTimestamp")
        return {
            "stream_arn": summary["StreamARN"],
            "stream_created_at": created.isoformat() if isinstance(created, datetime) else None,
        }

    def execute(self, context: Context) -> dict[str, Any]:
        dry_run = as_bool(self.preview_only, "preview_only")
        timeout = as_number(self.lease_wait_timeout_seconds, "lease_wait_timeout_seconds")
        backup = self._load()
        client = DynamoDBTablesHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn
        self._check_owner(client, backup)
        try:
            resolution = resolve_application(client, self.application_name)
            current: str | None = resolution.active
        except MaintenanceError as err:
            # A broken pointer is what a restore repairs: go on from the configured table.
            self.log.warning("%s", err)
            resolution, current = None, None
        if resolution is not None and resolution.reset is not None:
            raise AirflowException(f"a reset or restore is already working on {resolution.reset_table!r}")
        current_marks = read_marks(client, current) if current else None
        if current_marks is None:
            current = None
        target = backup.application_name
        target_table = LeaseTable(client, target)
        present = target_table.leases() if target_table.exists() else {}
        self.log.info(
            "Restore of connector %s from %s (taken %s, %s): lease table %s, generation %s; active now: %s",
            self.connector_id,
            self.backup,
            backup.created_at.isoformat(),
            backup.reason,
            target,
            backup.generation_id,
            current or "none",
        )
        for lease in sorted(backup.leases, key=lambda lease: lease.shard_id):
            now_at = present.get(lease.shard_id)
            self.log.info(
                "  %s: checkpoint %s -> %s%s",
                lease.shard_id,
                _checkpoint(now_at) if now_at else "(no lease)",
                _checkpoint(lease),
                " (SHARD_END)" if lease.shard_ended else "",
            )
        for shard_id in sorted(set(present) - {lease.shard_id for lease in backup.leases}):
            self.log.info("  %s: lease removed (not in the backup)", shard_id)
        self.log.warning(
            "Records loaded since the backup was taken are read and loaded again where the restored checkpoints are "
            "behind them; the ledger marks of %s generation %s apply again.",
            target,
            backup.generation_id,
        )
        result: dict[str, Any] = {
            "connector_id": self.connector_id,
            "dry_run": dry_run,
            "application_name": current,
            "restored_application_name": target,
            "restored_generation_id": backup.generation_id,
            "checkpoints": backup.checkpoints(),
            "backup_location": None,
        }
        expected = current or self.application_name
        if dry_run:
            self.log.info(
                "Dry run: nothing was changed. To restore, trigger again with dry_run false and confirm %r.", expected
            )
            return result
        if optional_text(self.confirm) != expected:
            raise AirflowException(
                f"confirm must be the current application name {expected!r} (got {self.confirm!r}); nothing was changed"
            )
        self._destination()  # where the restore is recorded: checked before anything is marked
        self._check_identity(client, self.application_name, current, target)

        now = datetime.now(UTC).timestamp()
        owner = maintenance_owner(context, "restore")
        lock = timeout + LOCK_MARGIN_SECONDS
        mark = ResetMark(owner, "restore", now, now + lock)
        marked: list[str] = []
        holding: list[tuple[LeaseTable, dict[str, Lease]]] = []
        try:
            for name in dict.fromkeys(n for n in (self.application_name, current, target) if n):
                if read_marks(client, name) is not None:
                    set_reset_mark(client, name, mark)
                    marked.append(name)
            if current is not None:
                current_table = LeaseTable(client, current)
                holding.append(
                    (current_table, hold_leases(current_table, owner, hold_seconds=lock, timeout_seconds=timeout))
                )
                before = snapshot(
                    current_table,
                    reason="before-restore",
                    connector_id=self.connector_id,
                    destination=optional_text(self.destination),
                )
                result["backup_location"] = write_checkpoint_backup(before, self.backup_dir)
                self.log.info("Backed up the current state of %s to %s", current, result["backup_location"])
            if target != current and target_table.exists():
                holding.append(
                    (target_table, hold_leases(target_table, owner, hold_seconds=lock, timeout_seconds=timeout))
                )
            replaced = read_marks(client, target)
            self._record(
                GenerationRecord(
                    self.application_name,
                    target,
                    backup.generation_id,
                    GenerationReason.RESTORE,
                    earliest_start(backup.leases),
                    self.connector_id,
                    # While the table still holds another generation, ingest knows the restore stopped
                    # before it changed anything.
                    replaces=(
                        replaced.generation_id
                        if replaced is not None and replaced.generation_id != backup.generation_id
                        else None
                    ),
                )
            )
            self.log.info(
                "Recorded in Snowflake: connector %s reads %s generation %s again (restore)",
                self.connector_id,
                target,
                backup.generation_id,
            )
            try:
                if target_table.create(stream_name=self.stream_name, application_name=target):
                    self.log.info("Lease table %s did not exist; created it again", target)
                    set_reset_mark(client, target, mark)
                    marked.append(target)
                restored = restore_leases(target_table, backup, owner)
            except BaseException:
                if _checkpoints(target_table.leases() if target_table.exists() else {}) == _checkpoints(present):
                    self._withdraw_restore(current, current_marks)
                else:
                    self.log.warning(
                        "The restore stopped after it wrote leases into %s: trigger it again to finish it", target
                    )
                raise
            set_generation(client, target, backup.generation_id, owner=owner)
            clear_superseded(client, target)
            holding = [(t, held) for t, held in holding if t.table_name != target]
            if current is not None and current != target:
                mark_superseded(client, current, by=target)
            if self.application_name != target:
                LeaseTable(client, self.application_name).create(
                    stream_name=self.stream_name, application_name=self.application_name
                )
                mark_superseded(client, self.application_name, by=target)
            self.log.info(
                "Restored %d leases into %s (%d removed); %s is the active application of connector %s",
                len(restored.written),
                target,
                len(restored.removed),
                target,
                self.connector_id,
            )
        except (MaintenanceError, LeaseTableError) as err:
            raise AirflowException(f"restore of connector {self.connector_id} stopped: {err}") from err
        finally:
            for table, held in holding:
                _release(table, held.values(), self.log)
            _clear_marks(client, marked, owner, self.log)
        return result

    def _withdraw_restore(self, current: str | None, current_marks: TableMarks | None) -> None:
        """A restore that failed before it wrote a lease: record that the active generation stays."""
        if current is None or current_marks is None:
            self.log.error(
                "The restore stopped before it wrote a lease and the connector had no active lease table; the next "
                "ingest run refuses until the restore is triggered again"
            )
            return
        try:
            self._record(
                GenerationRecord(
                    self.application_name,
                    current,
                    current_marks.generation_id,
                    GenerationReason.RESET_WITHDRAWN,
                    None,
                    self.connector_id,
                )
            )
        except Exception:
            self.log.error(
                "Could not withdraw the restore recorded in Snowflake: the next ingest run withdraws it",
                exc_info=True,
            )


def _checkpoints(leases: dict[str, Lease]) -> dict[str, tuple[Checkpoint | None, bool]]:
    return {shard_id: (lease.checkpoint, lease.shard_ended) for shard_id, lease in leases.items()}


def _checkpoint(lease: Lease) -> str:
    if lease.checkpoint is None:
        return f"none (starts at {position_text(lease.start)})"
    return lease.checkpoint.sequence_number
