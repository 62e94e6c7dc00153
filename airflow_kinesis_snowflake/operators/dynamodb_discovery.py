"""The DynamoDB source's discovery task: the tables a connector syncs, found at the start of each run.

The per-table tasks (:mod:`.dynamodb`, :mod:`.dynamodb_provision`) are mapped over what it pushes:
plain mappings (:func:`~airflow_kinesis_snowflake.config.sync_target_to_dict`) that travel as XCom.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.config import sync_target_to_dict
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import TableSelection
from airflow_kinesis_snowflake.hooks.dynamodb import DynamoDBSourceHook


class DiscoverDynamoDBTablesOperator(BaseOperator):
    """Find the tables a DynamoDB connector syncs, by name or by tags; push them for the mapped tasks.

    Each table that is named or tagged but cannot be synced is logged with the reason and the fix
    (no stream, a ``KEYS_ONLY`` or ``OLD_IMAGE`` stream, not ACTIVE, not found, DescribeTable denied).

    :param tables: the tables named in the connector file; None to discover them by tags.
    :param ingestion_tag_key: with ``tables`` None, the tag a table must carry (any value).
    :param environment_tag_key: and, when set, this tag with ``environment_tag_value``.
    :param environment_tag_value: the value of ``environment_tag_key``.
    :param destination_table_template: the Snowflake table of each table (``{table}`` its name).
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: the tables' region; defaults to the connection's.
    :return: one :func:`~airflow_kinesis_snowflake.config.sync_target_to_dict` mapping per table to
        sync, in table-name order.
    """

    template_fields: Sequence[str] = ("aws_conn_id", "region_name")

    def __init__(
        self,
        *,
        tables: Sequence[str] | None = None,
        ingestion_tag_key: str | None = None,
        environment_tag_key: str | None = None,
        environment_tag_value: str | None = None,
        destination_table_template: str = "{table}",
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tables = tuple(tables) if tables is not None else None
        self.ingestion_tag_key, self.environment_tag_key = ingestion_tag_key, environment_tag_key
        self.environment_tag_value = environment_tag_value
        self.destination_table_template = destination_table_template
        self.aws_conn_id, self.region_name = aws_conn_id, region_name

    def execute(self, context: Context) -> list[dict[str, Any]]:
        selection = TableSelection(
            self.tables, self.ingestion_tag_key, self.environment_tag_key, self.environment_tag_value
        )
        hook = DynamoDBSourceHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        found = hook.discover(selection, self.destination_table_template)
        for skipped in found.skipped:
            self.log.warning("Not synced: %s", skipped.describe())
        for target in found.targets:
            self.log.info("Syncing %s into %s", target.table, target.destination_table)
        if not found.targets:
            self.log.warning("No table to sync: %s", "none named is syncable" if self.tables else "none tagged")
        return [sync_target_to_dict(t) for t in found.targets]
