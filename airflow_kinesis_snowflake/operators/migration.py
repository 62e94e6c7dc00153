"""Migrate a legacy KCL lease table to this provider's lease table."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.core.admin.params import renamed
from airflow_kinesis_snowflake.core.state.migration import migrate_legacy_table, migration_state
from airflow_kinesis_snowflake.hooks.kinesis import LeaseTableHook


class MigrateLegacyCheckpointsOperator(BaseOperator):
    """Turn the KCL lease table named after the application name into this provider's lease table.

    The KCL checkpoints (sequence and sub-sequence numbers), SHARD_END marks and parent shards
    carry over; the migration goes through a temporary ``<application name>_migration`` table and
    can be re-run after an interruption at any point. When there is no table, or it is already
    this provider's, the operator only logs "nothing to migrate". Stop every KCL worker first.

    :param application_name: the KCL application name, which is the lease table's name.
    :param stream_name: the Kinesis stream the KCL application read.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    :param initial_timestamp: the KCL application's AT_TIMESTAMP initial position (ISO 8601, UTC
        when it has no offset); needed only when a lease is still at KCL's AT_TIMESTAMP sentinel,
        as KCL does not store that time in the lease table.
    :param preview_only: only read the tables and return what would be migrated.
    :param dry_run: deprecated name of ``preview_only``.
    :return: a summary: the state found, the number of shards, each shard's checkpoint, the
        shards at SHARD_END and the start positions of shards without a checkpoint.
    """

    template_fields: Sequence[str] = (
        "application_name",
        "stream_name",
        "aws_conn_id",
        "region_name",
        "initial_timestamp",
    )

    def __init__(
        self,
        *,
        application_name: str,
        stream_name: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        initial_timestamp: str | datetime | None = None,
        preview_only: bool | None = None,
        dry_run: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.application_name = application_name
        self.stream_name = stream_name
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.initial_timestamp = initial_timestamp
        # Not ``dry_run``: BaseOperator.dry_run() is a method (render templates only).
        self.preview_only = renamed(
            preview_only,
            dry_run,
            new_name="preview_only",
            old_name="dry_run",
            default=False,
            category=AirflowProviderDeprecationWarning,
        )

    def _at_timestamp(self) -> datetime | None:
        value = self.initial_timestamp
        if value is None or value == "":
            return None
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError as err:
                raise ValueError(f"initial_timestamp {value!r} is not an ISO 8601 timestamp") from err
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)

    def execute(self, context: Context) -> dict[str, Any]:
        at_timestamp = self._at_timestamp()
        hook = LeaseTableHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, table_name=self.application_name
        )
        client = hook.conn
        state = migration_state(client, self.application_name)
        if not state.needs_migration:
            self.log.info("Lease table %s is %s: nothing to migrate", self.application_name, state.value)
        result = migrate_legacy_table(
            client, self.application_name, self.stream_name, at_timestamp=at_timestamp, dry_run=self.preview_only
        )
        summary = result.to_dict()
        if state.needs_migration:
            checkpointed = sum(1 for c in summary["checkpoints"].values() if c is not None)
            self.log.info(
                "%s KCL lease table %s (found %s): %d shards, %d with a checkpoint, %d at SHARD_END, "
                "%d KCL items that are not leases skipped",
                "Would migrate" if self.preview_only else "Migrated",
                self.application_name,
                state.value,
                summary["shard_count"],
                checkpointed,
                len(summary["shard_end"]),
                len(summary["skipped_items"]),
            )
        return summary
