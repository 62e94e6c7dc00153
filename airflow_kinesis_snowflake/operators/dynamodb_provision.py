"""Provisioning a DynamoDB connector: its lease table, and each discovered table's Snowflake objects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.config import sync_target_from_dict, table_sync
from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync
from airflow_kinesis_snowflake.core.load.dynamodb_sink import DynamoDBSink
from airflow_kinesis_snowflake.hooks.kinesis import LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook


class ProvisionDynamoDBTableOperator(BaseOperator):
    """Create one discovered table's Snowflake table and the support objects (ledgers, stage, tombstones).

    Idempotent (``CREATE ... IF NOT EXISTS``); the database and schema must exist.

    :param target: the table, as :class:`DiscoverDynamoDBTablesOperator` pushed it (mapped).
    :param sync_options: the connector file's settings, for the destination's name, layout and deletes.
    :param snowflake_conn_id: the Airflow Snowflake connection.
    """

    template_fields: Sequence[str] = ("target", "snowflake_conn_id")

    def __init__(
        self,
        *,
        target: Mapping[str, Any],
        sync_options: Mapping[str, Any],
        snowflake_conn_id: str = "snowflake_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.sync_options = dict(sync_options)
        self.snowflake_conn_id = snowflake_conn_id

    def table_sync(self) -> TableSync:
        return table_sync(sync_target_from_dict(self.target), self.sync_options)

    def execute(self, context: Context) -> str:
        sync = self.table_sync()
        conn = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn()
        try:
            sync = sync.fitted_to(DynamoDBSink(conn, sync.target).existing_columns())
            sink = DynamoDBSink(conn, sync.target)
            sink.check_destination(sync.destination_columns, sync.connector_id)
            sink.ensure_support_objects_of(sync.application_name)
            sink.ensure_destination(sync.destination_columns, sync.connector_id)
        finally:
            conn.close()
        self.log.info("%s: Snowflake table %s and its support objects exist", sync.table, sync.target.table)
        return sync.target.table


class CreateDynamoDBLeaseTableOperator(BaseOperator):
    """Create a DynamoDB connector's lease table, named after its application name, unless it exists.

    On-demand and tagged as the Kinesis connectors' lease tables are; its leases are keyed
    ``<table>/g<generation>/<shard or segment>``. Running again is a no-op.

    :param application_name: the connector's application name, which is the table name.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    """

    template_fields: Sequence[str] = ("application_name", "aws_conn_id", "region_name")

    def __init__(
        self,
        *,
        application_name: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.application_name = application_name
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def execute(self, context: Context) -> bool:
        hook = LeaseTableHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, table_name=self.application_name
        )
        # The metadata item's stream is the application itself: the table serves several DynamoDB tables.
        created = hook.lease_table.create(stream_name=self.application_name, application_name=self.application_name)
        self.log.info("Lease table %s %s", self.application_name, "created" if created else "already exists")
        return created
