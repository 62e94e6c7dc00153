"""The DynamoDB source's sync task: one table (discovery: :mod:`.dynamodb_discovery`; provisioning:
:mod:`.dynamodb_provision`).

The per-table tasks are mapped over what discovery pushed (one task instance per table, labelled
with its name): plain mappings (:func:`~airflow_kinesis_snowflake.config.sync_target_to_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.config import sync_target_from_dict, table_sync
from airflow_kinesis_snowflake.core.dynamodb_continuous import TableContinuousRun, committed_batches, summary_of_results
from airflow_kinesis_snowflake.core.dynamodb_sync import (
    DetachedBatch,
    Submit,
    TableBatchFigures,
    TableSync,
    sync_table,
)
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS
from airflow_kinesis_snowflake.core.engine.detached import JobDetached
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.hooks.dynamodb import DynamoDBSourceHook, DynamoDBStreamsHook
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.operators.spark_job import SparkJobMixin, spark_job_template_fields

# The label of each mapped task instance (``map_index_template``): the DynamoDB table it works on.
TABLE_MAP_INDEX = "{{ task.target['table'] }}"


class SyncDynamoDBTableOperator(SparkJobMixin, BaseOperator):
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
        (:meth:`~airflow_kinesis_snowflake.hooks.spark.SparkJobSubmitHook.run_table_batch`);
        None runs them in this task's process.
    :param spark_conf: more ``--conf`` settings for spark-submit (never credentials: they show).
    :param spark_submit: more ``SparkSubmitHook`` arguments, among :data:`~.config.SPARK_SUBMIT_ARGUMENTS`
        (e.g. ``total_executor_cores`` on a cluster shared with other connectors).
    :param spark_platform: where the Spark job runs (e.g. the ``emr_serverless`` settings,
        :meth:`~airflow_kinesis_snowflake.config.SparkConfig.platform_arguments`); None: spark-submit.
    :param max_runtime_minutes: continuous mode (needs ``spark_conn_id``): one Spark application syncs
        the table run after run for this long (:mod:`~airflow_kinesis_snowflake.core.dynamodb_continuous`);
        None syncs it once, up to the DAG run's start.
    :param idle_seconds: continuous mode: the pause after a run that found nothing new.
    :param cloudwatch_namespace: also publish each batch's metrics to this CloudWatch namespace, through
        the AWS connection (``metrics.cloudwatch``); None: Airflow's metrics backend only.
    :param cloudwatch_dimensions: the tags that become CloudWatch dimensions (all by default).
    :param deferrable: on a managed ``spark_platform``, in scheduled mode: submit each batch's job run and
        defer; the triggerer waits for it, renewing the batch's leases, and the task resumes to read its
        outcome (:class:`~airflow_kinesis_snowflake.triggers.spark_job.SparkJobRunTrigger`). None:
        ``[operators] default_deferrable`` where the task can defer.
    :return: the run's figures: table, batches, changes loaded, snapshots completed, and (scheduled)
        the generations started.
    """

    template_fields: Sequence[str] = spark_job_template_fields("target")

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
        spark_platform: dict[str, Any] | None = None,
        max_runtime_minutes: float | None = None,
        idle_seconds: float = IDLE_SECONDS,
        cloudwatch_namespace: str | None = None,
        cloudwatch_dimensions: Sequence[str] | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target, self.sync_options = target, dict(sync_options)
        self.aws_conn_id, self.region_name = aws_conn_id, region_name
        self.snowflake_conn_id = snowflake_conn_id
        self.spark_conn_id, self.spark_conf, self.spark_submit = spark_conn_id, spark_conf, spark_submit
        self.spark_platform, self.deferrable = spark_platform, deferrable
        self.cloudwatch_namespace, self.cloudwatch_dimensions = cloudwatch_namespace, cloudwatch_dimensions
        self.check_spark_job(continuous=max_runtime_minutes is not None)
        if max_runtime_minutes is not None and (spark_conn_id is None or max_runtime_minutes <= 0):
            raise ValueError("max_runtime_minutes (continuous mode) needs a spark_conn_id and a positive value")
        self.max_runtime_minutes, self.idle_seconds = max_runtime_minutes, idle_seconds
        self._destination: Destination | None = None  # what execute reported, for the lineage
        self._batches: list[TableBatchFigures] = []

    def table_sync(self) -> TableSync:
        """The sync of :attr:`target` with the connector file's settings."""
        return table_sync(sync_target_from_dict(self.target), self.sync_options)

    def execute(self, context: Context) -> dict[str, Any]:
        return self.run_job(context)

    def run_job(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        from airflow_kinesis_snowflake.lineage import report_table_run, table_metrics_on_commit  # when needed

        sync, snowflake = self.table_sync(), KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id)
        aws = {"aws_conn_id": self.aws_conn_id, "region_name": self.region_name}
        owner, publish, submit, detached = self.lease_owner(context), self.publisher(), None, None
        region, lease_dynamodb = "", LeaseTableHook(**aws).conn
        if self.spark_conn_id is not None:
            spark = self.build_spark_hook(check=True)  # before anything is leased or recorded
            job_aws = KinesisStreamHook(**aws)
            region = job_aws.region_name or ""
            if self.max_runtime_minutes is not None:
                run = TableContinuousRun(sync, region, owner, self.max_runtime_minutes * 60, self.idle_seconds)
                on_batch = table_metrics_on_commit(sync, publish)  # each batch's metrics as it commits
                results = spark.run_table_continuous(run, aws=job_aws, snowflake=snowflake, on_batch=on_batch)
                figures, batches = summary_of_results(sync, results), committed_batches(results)
                return report_table_run(self, context, sync, snowflake, figures, batches, publish, continuous=True)
            destination, table = sync.target.destination, sync.table
            finish = partial(spark.finish_table_batch, destination=destination, snowflake=snowflake, table=table)
            start = partial(spark.start_table_batch, aws=job_aws)
            blocking: Submit = partial(spark.run_table_batch, aws=job_aws, snowflake=snowflake)
            submit = self.submit_step(spark, lease_dynamodb, blocking, start, finish)
            if (resumed := self.resumed(event)) is not None:  # the deferred batch's run ended: finish it
                owner = resumed.hold.owner
                detached = DetachedBatch.of_resumed(resumed, partial(spark.finish_detached, resumed, finish))
        try:
            outcome = sync_table(
                sync,
                lease_dynamodb=lease_dynamodb,
                source_dynamodb=DynamoDBSourceHook(scan=True, **aws).conn,
                streams=DynamoDBStreamsHook(**aws).conn,
                connect_snowflake=snowflake.get_conn,
                owner=owner,
                cutoff=self.run_cutoff(context),
                submit=submit,
                region=region,
                detached=detached,
            )
        except JobDetached as batch:
            self.defer_batch(batch)
        batches = [TableBatchFigures.of_batch(b) for b in outcome.batches]
        return report_table_run(self, context, sync, snowflake, outcome.summary(sync), batches, publish)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow_kinesis_snowflake.lineage import sync_lineage

        return sync_lineage(self, task_instance)
