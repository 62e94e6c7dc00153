"""Reset a connector's progress: to a new application name, or by recreating its lease table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.backups import BackupStore
from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.config import validate_application_name
from airflow_kinesis_snowflake.core.admin.impact import DEFAULT_MAX_RECORDS
from airflow_kinesis_snowflake.core.admin.intent import GenerationLog
from airflow_kinesis_snowflake.core.admin.reset import ResetRequest, parse_reset_request, reset_connector
from airflow_kinesis_snowflake.core.admin.window import AdminError, maintenance_owner
from airflow_kinesis_snowflake.core.model import InitialPosition
from airflow_kinesis_snowflake.core.state.marks import ResetMode
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.triggers.lease_table import LeasesReleasedTrigger


class ResetConnectorStateOperator(BaseOperator):
    """Reset where a connector reads its stream: to a new application name, or by recreating the lease table.

    ``new_application_name`` creates a new lease table at the chosen start position and leaves the
    old one in place, recorded as superseded (``superseded_by`` in its metadata item, and in the
    configured table's): ingestions follow it with no change to the connector file.
    ``delete_table`` deletes the active lease table and creates it again, empty, with a new
    generation id. Either way every shard starts at ``initial_position``.

    A dry run (the default) only reports, per shard, the checkpoint, the new start and how many
    records would be read again or skipped. Otherwise ``confirm`` must be the active application
    name; the reset waits for running batches, backs every checkpoint up (the task's result, which
    ``RestoreCheckpointsOperator`` puts back), acts, and reports. Its steps and what a crash
    between them leaves: :mod:`airflow_kinesis_snowflake.core.admin.reset`.

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
    :param database: the destination database; with ``schema`` it locates the generations table, where
        the reset records its new generation before acting (ingest starts over only after a reset).
    :param schema: the destination schema.
    :param table: the destination table, recorded in the new lease table.
    :param snowflake_conn_id: the Snowflake connection.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    :param deferrable: wait in the triggerer for running batches' leases before the reset starts
        (default: ``[operators] default_deferrable``); a batch started meanwhile is waited for as above.
    :param waiter_delay: seconds between reads of the leases while deferred.
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
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        waiter_delay: float = 5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deferrable = deferrable
        self.waiter_delay = waiter_delay
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

    def execute(self, context: Context) -> dict[str, Any]:
        request = self._request()
        if self.deferrable and not request.preview_only:
            hook = LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
            active = hook.active_table_held(request.application_name)
            if active is not None:
                self.log.info("Running batches hold leases of %s: waiting for them in the triggerer", active)
                self.defer(
                    trigger=LeasesReleasedTrigger(
                        table_name=active,
                        aws_conn_id=self.aws_conn_id,
                        region_name=self.region_name,
                        poke_interval=self.waiter_delay,
                        timeout=request.lease_wait_timeout_seconds,
                    ),
                    method_name="execute_complete",
                )
        return self._reset(context, request)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "success":
            raise AirflowException(event["message"])
        return self._reset(context, self._request())

    def _request(self) -> ResetRequest:
        try:
            return parse_reset_request(
                connector_id=self.connector_id,
                application_name=self.application_name,
                stream_name=self.stream_name,
                destination=self.destination,
                mode=self.mode,
                new_application_name=self.new_application_name,
                initial_position=self.initial_position,
                initial_timestamp=self.initial_timestamp,
                preview_only=self.preview_only,
                confirm=self.confirm,
                lease_wait_timeout_seconds=self.lease_wait_timeout_seconds,
                consumer_type=self.consumer_type,
                estimate_max_records=self.estimate_max_records,
                check_application_name=validate_application_name,
            )
        except AdminError as err:
            raise AirflowException(str(err)) from err

    def _reset(self, context: Context, request: ResetRequest) -> dict[str, Any]:
        try:
            outcome = reset_connector(
                request,
                dynamodb=LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn,
                stream=KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name),
                generations=GenerationLog(
                    lambda: KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn(),
                    self.connector_id,
                    self.database,
                    self.schema,
                    self.table,
                ),
                write_backup=BackupStore(self.backup_dir).checkpoints,
                owner=maintenance_owner("reset", context.get("ti")),
            )
        except AdminError as err:
            raise AirflowException(str(err)) from err
        return outcome.to_dict()
