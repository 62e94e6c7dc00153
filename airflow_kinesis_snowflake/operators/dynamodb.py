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

from airflow_kinesis_snowflake.config import (
    sync_target_from_dict,
    table_sync,
)
from airflow_kinesis_snowflake.core.dynamodb_continuous import TableContinuousRun, summary_of_results
from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchResult
from airflow_kinesis_snowflake.core.dynamodb_sync import (
    DetachedBatch,
    Submit,
    SyncProgress,
    TableBatchFigures,
    TableSync,
    describe_summary,
    sync_table,
)
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS
from airflow_kinesis_snowflake.core.engine.detached import DetachedRun, JobDetached
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.state.leases import LeaseOwner
from airflow_kinesis_snowflake.hooks.dynamodb import DynamoDBSourceHook, DynamoDBStreamsHook
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.operators.spark_job import SparkJobMixin

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
        self.init_spark_job(
            spark_conn_id=spark_conn_id,
            spark_conf=spark_conf,
            spark_submit=spark_submit,
            spark_platform=spark_platform,
            cloudwatch_namespace=cloudwatch_namespace,
            cloudwatch_dimensions=cloudwatch_dimensions,
            deferrable=deferrable,
            continuous=max_runtime_minutes is not None,
        )
        if max_runtime_minutes is not None and (spark_conn_id is None or max_runtime_minutes <= 0):
            raise ValueError("max_runtime_minutes (continuous mode) needs a spark_conn_id and a positive value")
        self.max_runtime_minutes, self.idle_seconds = max_runtime_minutes, idle_seconds
        self._destination: Destination | None = None  # what execute reported, for the lineage
        self._batches: list[TableBatchFigures] = []

    def table_sync(self) -> TableSync:
        """The sync of :attr:`target` with the connector file's settings."""
        return table_sync(sync_target_from_dict(self.target), self.sync_options)

    def execute(self, context: Context) -> dict[str, Any]:
        return self._sync(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume once the deferred batch's job run ended: finish that batch, then go on with the table's run."""
        return self._sync(context, event)

    def _sync(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        sync = self.table_sync()
        aws = {"aws_conn_id": self.aws_conn_id, "region_name": self.region_name}
        snowflake = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id)
        # A retry takes over what an earlier try of this task instance still holds.
        owner = str(LeaseOwner.of_try(context.get("ti"), self.dag_id, self.task_id))
        submit: Submit | None = None
        region, lease_dynamodb, detached = "", LeaseTableHook(**aws).conn, None
        if self.spark_conn_id is not None:
            spark = self.build_spark_hook()
            job_aws = KinesisStreamHook(**aws)
            region = job_aws.region_name or ""
            spark.check_submission()  # before anything is leased or recorded
            if self.max_runtime_minutes is not None:
                run = TableContinuousRun(sync, region, owner, self.max_runtime_minutes * 60, self.idle_seconds)
                publish, destination = self.publisher(), sync.target.destination
                from airflow_kinesis_snowflake.lineage import emit_table_metrics  # not loaded before it is needed

                def committed(result: TableBatchResult) -> None:  # as each batch commits: its metrics
                    if (batch := TableBatchFigures.of_result(result)) is not None:
                        emit_table_metrics(batch, sync.application_name, sync.table, destination, publish)

                results = spark.run_table_continuous(run, aws=job_aws, snowflake=snowflake, on_batch=committed)
                batches = [f for r in results if (f := TableBatchFigures.of_result(r)) is not None]
                figures = summary_of_results(sync, results)
                return self._report(context, sync, snowflake, figures, batches, continuous=True)
            submit = partial(spark.run_table_batch, aws=job_aws, snowflake=snowflake)
            if self.deferrable:

                def finish(job_run: DetachedRun) -> TableBatchResult:
                    return spark.finish_table_batch(job_run.key, sync.target.destination, snowflake, table=sync.table)

                start = partial(spark.start_table_batch, aws=job_aws)
                submit = self.detaching_submit(spark, lease_dynamodb, start, finish)
                if event is not None:  # the deferred batch's job run ended: finish it as the blocking path does
                    job_run, hold, progress = self.resumed(event)
                    owner, result = hold.owner, partial(self.finish_job, spark, event, job_run, finish)
                    detached = DetachedBatch(SyncProgress.from_dict(progress), hold, job_run, result)
        try:
            outcome = sync_table(
                sync,
                lease_dynamodb=lease_dynamodb,
                source_dynamodb=DynamoDBSourceHook(scan=True, **aws).conn,
                streams=DynamoDBStreamsHook(**aws).conn,
                connect_snowflake=snowflake.get_conn,
                owner=owner,
                # The run's start is shared by every try, so a retry reads up to the same records.
                cutoff=getattr(context.get("dag_run"), "start_date", None),
                submit=submit,
                region=region,
                detached=detached,
            )
        except JobDetached as batch:
            self.defer_batch(batch)
        batches = [TableBatchFigures.of_batch(b) for b in outcome.batches]
        return self._report(context, sync, snowflake, outcome.summary(sync), batches)

    def _report(
        self,
        context: Context,
        sync: TableSync,
        snowflake: Any,
        figures: dict[str, Any],
        batches: Any,
        *,
        continuous: bool = False,
    ) -> Any:
        """Log the run's figures, report each committed batch (metrics, Asset event) and keep them for the lineage."""
        from airflow_kinesis_snowflake.lineage import report_table_batches  # not loaded before it is needed

        self.log.info("%s", describe_summary(figures))
        self._destination, self._batches = sync.target.destination, batches
        report_table_batches(
            self,
            context,
            batches,
            application_name=sync.application_name,
            source_table=sync.table,
            destination=sync.target.destination,
            snowflake=snowflake,
            publish=self.publisher(),
            metrics=not continuous,  # in continuous mode each batch's went out as it committed
        )
        return figures

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow_kinesis_snowflake.lineage import sync_lineage

        return sync_lineage(self, task_instance)
