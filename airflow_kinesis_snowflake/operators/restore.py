"""Restore a connector's progress from a checkpoint backup (undo a reset)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.backups import BackupStore, read_checkpoint_backup
from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.admin.intent import GenerationLog
from airflow_kinesis_snowflake.core.admin.restore import parse_restore_request, restore_checkpoints
from airflow_kinesis_snowflake.core.admin.window import AdminError, maintenance_owner
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook


class RestoreCheckpointsOperator(BaseOperator):
    """Put back every lease and checkpoint of a backup, and make its table the active one (undo a reset).

    The backup's table gets exactly the backed-up leases (free, at their checkpoints), its
    generation id back (so the exactly-once ledger's marks for it apply again), and becomes the
    connector's active application; a different table that was active is left in place, marked as
    superseded. Created again if clean-up removed it.

    As with a reset: a dry run by default; ``confirm`` must be the current (active) application
    name; ingestions are paused by a reset mark, running batches' leases are waited for and held,
    and the current state is backed up first (its location is in the result), so a restore can be
    undone the same way. The steps and what a crash between them leaves:
    :mod:`airflow_kinesis_snowflake.core.admin.restore`.

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

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            request = parse_restore_request(
                connector_id=self.connector_id,
                application_name=self.application_name,
                stream_name=self.stream_name,
                destination=self.destination,
                backup=self.backup,
                preview_only=self.preview_only,
                confirm=self.confirm,
                lease_wait_timeout_seconds=self.lease_wait_timeout_seconds,
            )
            return restore_checkpoints(
                request,
                read_checkpoint_backup(request.location),
                dynamodb=LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn,
                kinesis=KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn,
                generations=GenerationLog(
                    lambda: KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn(),
                    self.connector_id,
                    self.database,
                    self.schema,
                    self.table,
                ),
                write_backup=BackupStore(self.backup_dir).checkpoints,
                owner=maintenance_owner("restore", context.get("ti")),
            )
        except AdminError as err:
            raise AirflowException(str(err)) from err
