"""Remove the leases of a DynamoDB connector's superseded generations."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import closing
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.backups import BackupStore
from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.admin.cleanup_run import parse_cleanup_request
from airflow_kinesis_snowflake.core.admin.dynamodb_cleanup import prune_generations
from airflow_kinesis_snowflake.core.admin.window import AdminError
from airflow_kinesis_snowflake.core.load.dynamodb_sink import recorded_generations
from airflow_kinesis_snowflake.hooks.kinesis import LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook


class CleanupDynamoDBGenerationsOperator(BaseOperator):
    """Find, and on request remove, the leases a DynamoDB connector's superseded generations left.

    After a gap or a reset, Snowflake records a new generation of the table and no batch reads the
    old one's leases again; this removes them (rule ``superseded-generation``). Kept: the newest
    generation recorded in the generations table of the connector's schema, any lease held now, and
    everything when that table cannot be read or records no generation of a table. A dry run (the
    default) only reports. To delete, ``confirm`` must be ``DELETE``: every lease of the table is
    backed up, then each superseded one is deleted if unchanged since it was read
    (:mod:`airflow_kinesis_snowflake.core.admin.dynamodb_cleanup`).

    :param connector_id: the connector, recorded in the backup.
    :param application_name: the connector's application name, which is its lease table's name.
    :param database: the Snowflake database of the connector's tables.
    :param schema: their schema, which holds the generations table.
    :param application_name_patterns: glob patterns of the application names clean-up may consider.
    :param preview_only: only report, delete nothing (default; the DAG's ``dry_run``).
    :param confirm: must be ``DELETE`` to delete.
    :param backup_dir: directory path or URL for the backup.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    :param snowflake_conn_id: the Airflow Snowflake connection.
    """

    template_fields: Sequence[str] = (
        "application_name",
        "application_name_patterns",
        "preview_only",
        "confirm",
        "backup_dir",
        "aws_conn_id",
        "region_name",
        "snowflake_conn_id",
    )
    ui_color = "#ffc9c9"

    def __init__(
        self,
        *,
        connector_id: str,
        application_name: str,
        database: str,
        schema: str,
        application_name_patterns: Sequence[str] | str = ("*",),
        preview_only: bool | str = True,
        confirm: str | None = None,
        backup_dir: str | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.connector_id = connector_id
        self.application_name = application_name
        self.database = database
        self.schema = schema
        self.application_name_patterns = application_name_patterns
        self.preview_only = preview_only
        self.confirm = confirm
        self.backup_dir = backup_dir
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.snowflake_conn_id = snowflake_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        def read_recorded() -> dict[str, int]:
            with closing(KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn()) as conn:
                return recorded_generations(conn, self.database, self.schema, self.application_name)

        try:
            request = parse_cleanup_request(
                retention_days=0,
                application_name_patterns=self.application_name_patterns,
                preview_only=self.preview_only,
                confirm=self.confirm,
            )
            hook = LeaseTableHook(
                aws_conn_id=self.aws_conn_id, region_name=self.region_name, table_name=self.application_name
            )
            return prune_generations(
                request,
                hook.lease_table,
                read_recorded,
                backups=BackupStore(self.backup_dir),
                connector_id=self.connector_id,
                destination=f"{self.database}.{self.schema}",
            )
        except AdminError as err:
            raise AirflowException(str(err)) from err
