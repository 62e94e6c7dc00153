"""The DynamoDB source's tasks: find the tables, sync one table (provisioning: :mod:`.dynamodb_provision`).

A DynamoDB connector's tables are discovered at the start of each run; the per-table tasks are
mapped over what discovery pushed (one task instance per table, labelled with its name), so the
targets travel as XCom: plain mappings (:func:`~airflow_kinesis_snowflake.config.sync_target_to_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.config import (
    SPARK_SUBMIT_ARGUMENTS,
    check_spark_conf,
    sync_target_from_dict,
    sync_target_to_dict,
    table_sync,
)
from airflow_kinesis_snowflake.core.continuous import IDLE_SECONDS
from airflow_kinesis_snowflake.core.dynamodb_continuous import TableContinuousRun, summary_of_results
from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchPlan, TableBatchResult
from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync, describe_summary, sync_table
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import TableSelection
from airflow_kinesis_snowflake.core.state.leases import LeaseOwner
from airflow_kinesis_snowflake.hooks.dynamodb import DynamoDBSourceHook, DynamoDBStreamsHook
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import KinesisJobSubmitHook

# The label of each mapped task instance (``map_index_template``): the DynamoDB table it works on.
TABLE_MAP_INDEX = "{{ task.target['table'] }}"


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


class SyncDynamoDBTableOperator(BaseOperator):
    """Sync one DynamoDB table into its Snowflake table (:func:`~.core.dynamodb_sync.sync_table`).

    The run's batches take a new snapshot when one is due, and follow the table's stream up to the
    DAG run's start; a retry of the task takes over its earlier try's leases and plans from the
    same Snowflake records, so it loads nothing twice.

    :param target: the table, as :class:`DiscoverDynamoDBTablesOperator` pushed it (mapped).
    :param sync_options: the connector file's settings
        (:meth:`~airflow_kinesis_snowflake.config.DynamoDBConnectorConfig.sync_options`).
    :param aws_conn_id: the Airflow AWS connection: the tables, their streams and the lease table.
    :param region_name: AWS region; defaults to the connection's.
    :param snowflake_conn_id: the Airflow Snowflake connection.
    :param spark_conn_id: the Airflow Spark connection: each batch's reads, staging and MERGE run
        through spark-submit, one Spark task per snapshot segment and per stream shard
        (:meth:`~airflow_kinesis_snowflake.hooks.spark.KinesisJobSubmitHook.run_table_batch`);
        None runs them in this task's process.
    :param spark_conf: more ``--conf`` settings for spark-submit (never credentials: they show).
    :param spark_submit: more ``SparkSubmitHook`` arguments, among :data:`~.config.SPARK_SUBMIT_ARGUMENTS`
        (e.g. ``total_executor_cores`` on a cluster shared with other connectors).
    :param max_runtime_minutes: continuous mode (needs ``spark_conn_id``): one Spark application syncs
        the table run after run for this long (:mod:`~airflow_kinesis_snowflake.core.dynamodb_continuous`);
        None syncs it once, up to the DAG run's start.
    :param idle_seconds: continuous mode: the pause after a run that found nothing new.
    :return: the run's figures: table, batches, changes loaded, snapshots completed, and (scheduled)
        the generations started.
    """

    template_fields: Sequence[str] = (
        "target",
        "aws_conn_id",
        "region_name",
        "snowflake_conn_id",
        "spark_conn_id",
        "spark_conf",
    )

    def __init__(
        self,
        *,
        target: Mapping[str, Any],
        sync_options: Mapping[str, Any],
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        spark_conn_id: str | None = None,
        spark_conf: dict[str, Any] | None = None,
        spark_submit: dict[str, Any] | None = None,
        max_runtime_minutes: float | None = None,
        idle_seconds: float = IDLE_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target, self.sync_options = target, dict(sync_options)
        self.aws_conn_id, self.region_name = aws_conn_id, region_name
        self.snowflake_conn_id = snowflake_conn_id
        self.spark_conn_id, self.spark_conf = spark_conn_id, spark_conf
        if unknown := sorted(set(spark_submit or ()) - set(SPARK_SUBMIT_ARGUMENTS)):
            raise ValueError(f"spark_submit: {', '.join(unknown)} not among {', '.join(SPARK_SUBMIT_ARGUMENTS)}")
        if max_runtime_minutes is not None and (spark_conn_id is None or max_runtime_minutes <= 0):
            raise ValueError("max_runtime_minutes (continuous mode) needs a spark_conn_id and a positive value")
        self.spark_submit, self.max_runtime_minutes = dict(spark_submit or {}), max_runtime_minutes
        self.idle_seconds = idle_seconds
        self._spark_hook: KinesisJobSubmitHook | None = None

    def table_sync(self) -> TableSync:
        """The sync of :attr:`target` with the connector file's settings."""
        return table_sync(sync_target_from_dict(self.target), self.sync_options)

    def execute(self, context: Context) -> dict[str, Any]:
        sync = self.table_sync()
        aws = {"aws_conn_id": self.aws_conn_id, "region_name": self.region_name}
        snowflake = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id)
        # A retry takes over what an earlier try of this task instance still holds.
        owner = str(LeaseOwner.of_try(context.get("ti"), self.dag_id, self.task_id))
        submit, region = None, ""
        if self.spark_conn_id is not None:
            check_spark_conf(self.spark_conf or {}, f"spark_conf of task {self.task_id!r}")  # rendered, so here
            spark = KinesisJobSubmitHook(conn_id=self.spark_conn_id, conf=self.spark_conf, **self.spark_submit)
            self._spark_hook = spark
            job_aws = KinesisStreamHook(**aws)
            region = job_aws.region_name or ""
            spark.check_submission()  # before anything is leased or recorded
            if self.max_runtime_minutes is not None:
                run = TableContinuousRun(sync, region, owner, self.max_runtime_minutes * 60, self.idle_seconds)
                figures = summary_of_results(sync, spark.run_table_continuous(run, aws=job_aws, snowflake=snowflake))
                self.log.info("%s", describe_summary(figures))
                return figures

            def submit(plan: TableBatchPlan) -> TableBatchResult:
                return spark.run_table_batch(plan, aws=job_aws, snowflake=snowflake)

        outcome = sync_table(
            sync,
            lease_dynamodb=LeaseTableHook(**aws).conn,
            source_dynamodb=DynamoDBSourceHook(scan=True, **aws).conn,
            streams=DynamoDBStreamsHook(**aws).conn,
            connect_snowflake=snowflake.get_conn,
            owner=owner,
            # The run's start is shared by every try, so a retry reads up to the same records.
            cutoff=getattr(context.get("dag_run"), "start_date", None),
            submit=submit,
            region=region,
        )
        figures = outcome.summary(sync)
        self.log.info("%s", describe_summary(figures))
        return figures

    def on_kill(self) -> None:
        if self._spark_hook is not None:
            self._spark_hook.on_kill()
