"""Remove what connectors left behind: lease tables, migration copies, enhanced fan-out consumers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.backups import BackupStore
from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.admin.cleanup import DEFAULT_RETENTION_SECONDS
from airflow_kinesis_snowflake.core.admin.cleanup_run import (
    CONFIRMATION,
    Evidence,
    connector_use,
    parse_cleanup_request,
    run_cleanup,
)
from airflow_kinesis_snowflake.core.admin.window import AdminError, maintenance_owner
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

__all__ = ["CONFIRMATION", "CleanupOrphanedTablesOperator"]  # CONFIRMATION: still importable from here


class CleanupOrphanedTablesOperator(BaseOperator):
    """Find, and on request remove, lease tables, migration copies and fan-out consumers no connector uses.

    Candidates, each reported with the rule that matched:

    * ``orphaned-lease-table`` / ``superseded-lease-table``: a lease table tagged as this provider's
      whose application is neither active nor configured for any connector, with no live lease and
      no heartbeat, checkpoint, ingest run, ledger commit or supersession within the retention;
    * ``leftover-migration-table``: a ``<application>_migration`` copy whose migration wrote every
      lease into the new table (never while a migration is under way);
    * ``unused-fan-out-consumer``: a consumer named after such a lease table's application;
    * ``connector-not-enhanced-fan-out``: a consumer named after an application of a connector that
      now reads with SHARED_THROUGHPUT.

    Never touched: untagged tables, tables with a live lease or a running reset, the active and
    configured application of this DAG's connectors, and consumers whose name is no application
    this provider knows. Whether a table is in use is read from the table and the ledger, not only
    from ``connectors``, so that a connector in another DAG folder keeps its table: a checkpoint,
    heartbeat, ingest run (``last_ingest_at`` of its metadata item) or ledger commit
    (``UPDATED_AT`` of ``KINESIS_INGEST_LEDGER`` in the schema of the destination its metadata item
    names) within ``retention_days``, or within the stream's retention period plus a day if that is
    longer, keeps it; so does a stream or ledger that cannot be read, a destination not recorded,
    and checkpoints with no commit of the application in that ledger. A superseded table stays
    while the table it leads to is kept, not ACTIVE, or gone with a recent ledger commit; every
    table a kept table leads to stays. A dry run (the default) only reports. To delete,
    ``confirm`` must be ``DELETE``; each lease table is then marked as under maintenance and its
    leases held (ingest runs skip it), decided on again, backed up and deleted; a consumer that
    follows its lease table goes only once that table went. The steps and what a crash between them
    leaves: :mod:`airflow_kinesis_snowflake.core.admin.cleanup_run`.

    :param connectors: the configured connectors of this AWS connection and region, as mappings
        with ``connector_id``, ``application_name``, ``stream_name`` and ``consumer_type``.
    :param retention_days: how long an unused lease table is kept after its last activity.
    :param application_name_patterns: glob patterns of application names clean-up may consider
        (default all); narrow it when several deployments share an AWS account and region.
    :param preview_only: only report, delete nothing (default; the DAG's ``dry_run``).
    :param confirm: must be ``DELETE`` to delete.
    :param backup_dir: directory path or URL for the backups.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    :param snowflake_conn_id: the Airflow Snowflake connection the ledgers are read through.
    """

    template_fields: Sequence[str] = (
        "retention_days",
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
        connectors: Sequence[Mapping[str, Any]],
        retention_days: float | str = DEFAULT_RETENTION_SECONDS / 86400,
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
        self.connectors = connectors
        self.snowflake_conn_id = snowflake_conn_id
        self.retention_days = retention_days
        self.application_name_patterns = application_name_patterns
        self.preview_only = preview_only
        self.confirm = confirm
        self.backup_dir = backup_dir
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            request = parse_cleanup_request(
                retention_days=self.retention_days,
                application_name_patterns=self.application_name_patterns,
                preview_only=self.preview_only,
                confirm=self.confirm,
            )
            dynamodb = LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn
            kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
            return run_cleanup(
                request,
                dynamodb=dynamodb,
                stream=kinesis,
                evidence=Evidence(
                    kinesis.conn,
                    lambda: KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn(),
                    self.snowflake_conn_id,
                ),
                connectors=[connector_use(dynamodb, connector) for connector in self.connectors],
                backups=BackupStore(self.backup_dir),
                owner=maintenance_owner("cleanup", context.get("ti")),
            )
        except AdminError as err:
            raise AirflowException(str(err)) from err
