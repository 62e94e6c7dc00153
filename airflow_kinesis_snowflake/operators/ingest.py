"""Run one micro-batch: plan from the lease table, load with Spark, then checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.compat import AirflowException, AirflowSkipException
from airflow_kinesis_snowflake.config import BATCH_MODES
from airflow_kinesis_snowflake.core.batch import BatchRefused, BatchSettings, ResetInProgress, resume_run, run_batch
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS, check_mode
from airflow_kinesis_snowflake.core.engine.detached import JobDetached
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.model import ConsumerType, DestinationType, InitialPosition
from airflow_kinesis_snowflake.core.planning import DEFAULT_MAX_BYTES_PER_SHARD
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.operators.spark_job import SparkJobMixin, spark_job_template_fields


class SparkKinesisIngestOperator(SparkJobMixin, BaseOperator):
    """Load the next micro-batch of a Kinesis stream into a Snowflake table, exactly once.

    Runs :func:`~airflow_kinesis_snowflake.core.batch.run_batch` (its module tells why a crash at any
    step loses nothing and loads nothing twice) with the Spark job of :class:`~.SparkJobSubmitHook`,
    which keeps credentials off the command line, Spark settings and logs
    (https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/spark/).

    :param stream_name: the Kinesis data stream.
    :param application_name: names the lease table; ingestions sharing it share progress. After a
        reset to a new name, the one it was superseded by is used
        (https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/operations/).
        One application name serves one destination: another destination is refused.
    :param database: destination database.
    :param schema: destination schema.
    :param table: destination table; it must have a ``KINESISMETADATA`` OBJECT column.
    :param initial_position: TRIM_HORIZON, LATEST or AT_TIMESTAMP, for shards with no checkpoint.
    :param initial_timestamp: ISO 8601 start time for AT_TIMESTAMP.
    :param consumer_type: SHARED_THROUGHPUT (GetRecords) or ENHANCED_FAN_OUT (SubscribeToShard through
        the consumer named after the application name, which the provisioning DAG registers).
    :param max_records_per_call: ``Limit`` of each GetRecords call (1..10000).
    :param max_records_per_shard: cap on records read from one shard in one batch.
    :param max_bytes_per_shard: cap on user-record payload bytes read from one shard in one batch
        (None: none); the read stops after the record that reaches it.
    :param max_shards_per_batch: cap on shards one batch takes (None: all eligible).
    :param lease_duration_seconds: failover time: a lease not renewed for this long may be taken by
        another worker; held leases are renewed every third of it.
    :param mode: ``scheduled`` (one run, one batch) or ``continuous`` (``core/continuous.py``,
        https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/modes/).
    :param max_runtime_minutes: continuous only: how long the Spark driver runs micro-batches back to back.
    :param idle_seconds: continuous only: the pause after a micro-batch that read nothing.
    :param aws_conn_id: AWS connection for Kinesis and DynamoDB.
    :param region_name: AWS region; defaults to the connection's.
    :param snowflake_conn_id: Snowflake connection.
    :param spark_conn_id: Spark connection: the master, and how the job gets credentials
        (https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/spark/).
    :param spark_conf: more ``--conf`` settings for spark-submit (never credentials: they show).
    :param spark_submit: more ``SparkSubmitHook`` arguments, among :data:`~.config.SPARK_SUBMIT_ARGUMENTS`.
    :param spark_platform: where the job runs, as
        :meth:`~airflow_kinesis_snowflake.config.SparkConfig.platform_arguments` gives it (e.g. the
        ``emr_serverless`` settings); None: spark-submit on this worker
        (:mod:`~airflow_kinesis_snowflake.hooks.platforms`).
    :param application: the PySpark job file; defaults to the packaged job.
    :param destination_type: TABLE, ICEBERG, INTERACTIVE or PIPE; Iceberg and interactive tables are not altered.
    :param pipe_definition: PIPE: the pipe's ``COPY INTO <table> FROM (SELECT ... FROM ...)``, run by
        each batch over its staged records (JSON lines, ``$1`` the record with its ``KINESISMETADATA``).
    :param schema_evolution: add columns for new keys, drop NOT NULL; None: ``ENABLE_SCHEMA_EVOLUTION``.
    :param on_unknown_key: IGNORE or FAIL: what a key with no column that gets none does.
    :param connector_id: recorded in the lease table and named in refusals; the DAG id by default.
    :param cloudwatch_namespace: also publish the batch's metrics to this CloudWatch namespace, through
        the AWS connection (``metrics.cloudwatch``); None: Airflow's metrics backend only.
    :param cloudwatch_dimensions: the tags that become CloudWatch dimensions (all by default).
    :param deferrable: on a managed ``spark_platform``, in scheduled mode: submit each batch's job run and
        defer; the triggerer waits for it, renewing the batch's leases, and the task resumes to read its
        outcome (:class:`~airflow_kinesis_snowflake.triggers.spark_job.SparkJobRunTrigger`). None:
        ``[operators] default_deferrable`` where the task can defer.
    """

    template_fields: Sequence[str] = spark_job_template_fields(
        "stream_name", "application_name", "database", "schema", "table", "initial_timestamp"
    )
    ui_color = "#8fd3ff"

    def __init__(
        self,
        *,
        stream_name: str,
        application_name: str,
        database: str,
        schema: str,
        table: str,
        initial_position: str = InitialPosition.TRIM_HORIZON.value,
        initial_timestamp: str | None = None,
        consumer_type: str = ConsumerType.SHARED_THROUGHPUT,
        max_records_per_call: int = 10000,
        max_records_per_shard: int = 100_000,
        max_bytes_per_shard: int | None = DEFAULT_MAX_BYTES_PER_SHARD,
        max_shards_per_batch: int | None = None,
        lease_duration_seconds: int = 300,
        mode: str = "scheduled",
        max_runtime_minutes: float | None = None,
        idle_seconds: float = IDLE_SECONDS,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, Any] | None = None,
        spark_submit: dict[str, Any] | None = None,
        spark_platform: dict[str, Any] | None = None,
        application: str | None = None,
        destination_type: str = DestinationType.TABLE,
        pipe_definition: str | None = None,
        schema_evolution: bool | None = None,
        on_unknown_key: str = UnknownKeys.IGNORE.value,
        connector_id: str | None = None,
        cloudwatch_namespace: str | None = None,
        cloudwatch_dimensions: Sequence[str] | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream_name, self.application_name, self.connector_id = stream_name, application_name, connector_id
        self.database, self.schema, self.table = database, schema, table
        self.initial_position, self.initial_timestamp = initial_position, initial_timestamp
        if consumer_type not in tuple(ConsumerType):
            raise ValueError(f"consumer_type {consumer_type!r} is not one of {', '.join(ConsumerType)}")
        check_mode(mode, max_runtime_minutes, BATCH_MODES)
        self.consumer_type = consumer_type
        self.max_records_per_call, self.max_records_per_shard = max_records_per_call, max_records_per_shard
        self.max_bytes_per_shard = max_bytes_per_shard
        self.max_shards_per_batch, self.lease_duration_seconds = max_shards_per_batch, lease_duration_seconds
        self.mode, self.max_runtime_minutes, self.idle_seconds = mode, max_runtime_minutes, idle_seconds
        self.aws_conn_id, self.region_name, self.snowflake_conn_id = aws_conn_id, region_name, snowflake_conn_id
        self.spark_conn_id, self.spark_conf, self.spark_submit = spark_conn_id, spark_conf, spark_submit
        self.spark_platform, self.deferrable = spark_platform, deferrable
        self.cloudwatch_namespace, self.cloudwatch_dimensions = cloudwatch_namespace, cloudwatch_dimensions
        self.check_spark_job(continuous=bool(max_runtime_minutes))
        self.application, self.destination_type, self.pipe_definition = application, destination_type, pipe_definition
        self.schema_evolution, self.on_unknown_key = schema_evolution, UnknownKeys(on_unknown_key)
        self._last_summary: Any = None  # the BatchOutcome loaded, for the lineage (lineage.report_run sets it)

    def execute(self, context: Context) -> dict[str, Any]:
        return self.run_job(context)

    def run_job(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        spark = self.build_spark_hook(check=True)  # a submission the job cannot run with fails here
        kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        snowflake = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id)
        settings = BatchSettings.of_task(self, connector_id=self.connector_id or self.dag_id)
        destination, owner = settings.destination, self.lease_owner(context)
        clients: dict[str, Any] = {"kinesis": kinesis, "snowflake": snowflake, "application": self.application}
        from airflow_kinesis_snowflake.lineage import emit_ingest_metrics, report_run  # loaded when needed

        publish = self.publisher()
        try:
            if self.max_runtime_minutes is not None:  # continuous: the Spark driver runs the protocol
                outcome = spark.run_continuous(
                    settings,
                    owner=owner,
                    max_runtime_minutes=self.max_runtime_minutes,
                    idle_seconds=self.idle_seconds,
                    # Each micro-batch's metrics as it commits, not when the application ends.
                    on_batch=lambda batch: emit_ingest_metrics(self, batch, destination, publish),
                    **clients,
                )
            else:
                dynamodb = LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn
                finish = partial(spark.finish_batch, destination=destination, snowflake=snowflake)
                start = partial(spark.start_batch, kinesis=kinesis, application=self.application)
                submit = self.submit_step(spark, dynamodb, partial(spark.run_batch, **clients), start, finish)
                # A deferred batch whose job run ended is finished first, as the blocking path does.
                resumed, finished = self.resumed(event), partial(spark.finish_detached, finish=finish)
                owner, started, earlier = resume_run(dynamodb, resumed, finished, owner, self.run_cutoff(context))
                outcome = run_batch(
                    settings,
                    dynamodb=dynamodb,
                    stream=kinesis,
                    connect_snowflake=snowflake.get_conn,
                    submit=submit,
                    owner=owner,
                    run_started_at=started,
                    earlier=earlier,
                )
        except JobDetached as detached:
            self.defer_batch(detached)
        except ResetInProgress as err:
            raise AirflowSkipException(str(err)) from err
        except BatchRefused as err:
            raise AirflowException(str(err)) from err
        metrics = self.max_runtime_minutes is None  # in continuous mode each micro-batch's went out as it committed
        return report_run(self, context, outcome, destination, snowflake, kinesis, publish, metrics=metrics)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow_kinesis_snowflake.lineage import ingest_lineage

        return ingest_lineage(self, task_instance)
