"""Reset a DynamoDB connector's tables: each one's next sync takes a new snapshot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.config import sync_target_from_dict, table_sync
from airflow_kinesis_snowflake.core.admin.dynamodb_reset import parse_reset_params, plan_table_reset
from airflow_kinesis_snowflake.core.admin.params import ParameterError
from airflow_kinesis_snowflake.core.admin.window import maintenance_owner
from airflow_kinesis_snowflake.core.load.dynamodb_sink import DynamoDBSink
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook


class ResetDynamoDBTablesOperator(BaseOperator):
    """Reset DynamoDB tables' syncs: record a new generation with a snapshot, which the next sync run takes.

    Nothing is truncated or deleted in Snowflake: the rows stay queryable until the new snapshot
    overwrites them, and its completion removes (or, ``deletes: soft``, marks) the rows of items it
    did not see (:mod:`airflow_kinesis_snowflake.core.admin.dynamodb_reset`). A table not synced yet
    has nothing to reset. A dry run (the default) logs per table what would happen and records
    nothing; otherwise ``confirm`` must be the connector's application name. Parameters are checked
    before anything is read or recorded.

    :param targets: the tables the connector syncs now, as discovery pushed them (a list of mappings,
        or the discovery task's output).
    :param sync_options: the connector file's settings
        (:meth:`~airflow_kinesis_snowflake.config.DynamoDBConnectorConfig.sync_options`).
    :param tables: the DynamoDB tables to reset (a list, or its JSON text); empty for all of ``targets``.
    :param preview_only: only report (default; the DAG's ``dry_run``).
    :param confirm: must equal the connector's application name to act.
    :param snowflake_conn_id: the Airflow Snowflake connection.
    :return: per table: the current generation (None before the first sync), the generation
        recorded (None: nothing to do, or a dry run), and what the reset does.
    """

    template_fields: Sequence[str] = ("targets", "tables", "preview_only", "confirm", "snowflake_conn_id")
    ui_color = "#ffd8a8"

    def __init__(
        self,
        *,
        targets: Any,
        sync_options: Mapping[str, Any],
        tables: Sequence[str] | str | None = None,
        preview_only: bool | str = True,
        confirm: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.targets = targets
        self.sync_options = dict(sync_options)
        self.tables = tables
        self.preview_only = preview_only
        self.confirm = confirm
        self.snowflake_conn_id = snowflake_conn_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        syncs = {s.table: s for s in (table_sync(sync_target_from_dict(t), self.sync_options) for t in self.targets)}
        application_name = self.sync_options["application_name"]
        try:
            params = parse_reset_params(
                tables=self.tables,
                available=list(syncs),
                dry_run=self.preview_only,
                confirm=self.confirm,
                application_name=application_name,
            )
        except ParameterError as err:
            raise AirflowException(str(err)) from err
        ti = context.get("ti")
        requested_by = maintenance_owner("reset", ti).rsplit("/", 1)[0]
        now = datetime.now(UTC)
        report = []
        with closing(KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn()) as conn:
            for table in params.tables:
                sync = syncs[table]
                sink = DynamoDBSink(conn, sync.target)
                current = sink.current_generation(application_name)
                reset = plan_table_reset(
                    table, current, sync.settings.total_segments, now, requested_by, sync.stream_arn
                )
                recorded = None
                if reset.start is not None and not params.dry_run:
                    if not sink.record_generation(application_name, reset.start.generation, reset.start.reason):
                        raise AirflowException(
                            f"{table}: generation {reset.start.generation.number} was recorded meanwhile (a gap, or "
                            "another reset): its sync takes a new snapshot already; nothing was recorded by this run"
                        )
                    recorded = reset.start.generation.number
                self.log.info("%s%s", "Dry run, nothing recorded: " if params.dry_run else "", reset.describe())
                report.append(
                    {
                        "table": table,
                        "current_generation": None if current is None else current.number,
                        "recorded_generation": recorded,
                        "reset": reset.describe(),
                    }
                )
        return report
