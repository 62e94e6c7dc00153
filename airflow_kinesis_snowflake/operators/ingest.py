"""Run one micro-batch: plan from the lease table, load with Spark, then checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import fields
from functools import partial
from typing import Any

from airflow.sdk import AssetAlias, BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from airflow_kinesis_snowflake.config import SPARK_SUBMIT_ARGUMENTS, check_spark_conf
from airflow_kinesis_snowflake.core.batch import BatchOutcome, BatchRefused, BatchSettings, ResetInProgress, run_batch
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.model import ConsumerType, Destination, DestinationType, InitialPosition
from airflow_kinesis_snowflake.core.planning import DEFAULT_MAX_BYTES_PER_SHARD
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import KinesisJobSubmitHook
from airflow_kinesis_snowflake.metrics import BatchFigures, emit_batch_metrics


class SparkKinesisIngestOperator(BaseOperator):
    """Load the next micro-batch of a Kinesis stream into a Snowflake table, exactly once.

    Runs :func:`~airflow_kinesis_snowflake.core.batch.run_batch` (its module tells why a crash at any
    step loses nothing and loads nothing twice) with the Spark job of :class:`~.KinesisJobSubmitHook`,
    which keeps credentials off the command line, Spark settings and logs (``docs/spark.md``).

    :param stream_name: the Kinesis data stream.
    :param application_name: names the lease table; ingestions sharing it share progress. After a
        reset to a new name, the one it was superseded by is used (``docs/operations.md``). One
        application name serves one destination: another destination is refused.
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
    :param aws_conn_id: AWS connection for Kinesis and DynamoDB.
    :param region_name: AWS region; defaults to the connection's.
    :param snowflake_conn_id: Snowflake connection.
    :param spark_conn_id: Spark connection: the master, and how the job gets credentials (``docs/spark.md``).
    :param spark_conf: more ``--conf`` settings for spark-submit (never credentials: they show).
    :param spark_submit: more ``SparkSubmitHook`` arguments (``deploy_mode``, ``executor_memory``
        ...: :data:`~.config.SPARK_SUBMIT_ARGUMENTS`); Spark's defaults and the connection's for the others.
    :param application: the PySpark job file; defaults to the packaged job.
    :param destination_type: TABLE, ICEBERG, INTERACTIVE or PIPE; Iceberg and interactive tables are not altered.
    :param pipe_definition: PIPE: the pipe's ``COPY INTO <table> FROM (SELECT ... FROM ...)``, run by
        each batch over its staged records (JSON lines, ``$1`` the record with its ``KINESISMETADATA``).
    :param schema_evolution: add columns for new keys, drop NOT NULL; None: ``ENABLE_SCHEMA_EVOLUTION``.
    :param on_unknown_key: IGNORE or FAIL: what a key with no column that gets none does.
    :param connector_id: recorded in the lease table and named in refusals; the DAG id by default.
    """

    template_fields: Sequence[str] = (
        "stream_name",
        "application_name",
        "database",
        "schema",
        "table",
        "initial_timestamp",
        "aws_conn_id",
        "region_name",
        "snowflake_conn_id",
        "spark_conn_id",
        "spark_conf",
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
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, Any] | None = None,
        spark_submit: dict[str, Any] | None = None,
        application: str | None = None,
        destination_type: str = DestinationType.TABLE,
        pipe_definition: str | None = None,
        schema_evolution: bool | None = None,
        on_unknown_key: str = UnknownKeys.IGNORE.value,
        connector_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.connector_id = connector_id
        self.stream_name = stream_name
        self.application_name = application_name
        self.database = database
        self.schema = schema
        self.table = table
        self.initial_position = initial_position
        self.initial_timestamp = initial_timestamp
        if consumer_type not in tuple(ConsumerType):
            raise ValueError(f"consumer_type {consumer_type!r} is not one of {', '.join(ConsumerType)}")
        self.consumer_type = consumer_type
        self.max_records_per_call = max_records_per_call
        self.max_records_per_shard = max_records_per_shard
        self.max_bytes_per_shard = max_bytes_per_shard
        self.max_shards_per_batch = max_shards_per_batch
        self.lease_duration_seconds = lease_duration_seconds
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.snowflake_conn_id = snowflake_conn_id
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        if unknown := sorted(set(spark_submit or ()) - set(SPARK_SUBMIT_ARGUMENTS)):
            raise ValueError(f"spark_submit: {', '.join(unknown)} not among {', '.join(SPARK_SUBMIT_ARGUMENTS)}")
        self.spark_submit = dict(spark_submit or {})
        self.application = application
        self.destination_type = destination_type
        self.pipe_definition = pipe_definition
        self.schema_evolution = schema_evolution
        self.on_unknown_key = UnknownKeys(on_unknown_key)
        self._spark_hook: KinesisJobSubmitHook | None = None
        self._last_summary: BatchOutcome | None = None  # the batch loaded, for the lineage

    def execute(self, context: Context) -> dict[str, Any]:
        destination = Destination(self.database.upper(), self.schema.upper(), self.table.upper())
        spark = self._spark_hook = self.build_spark_hook()
        spark.check_submission()  # a submission the job cannot run with fails before any lease is taken
        kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        snowflake = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id)
        own = {f.name: getattr(self, f.name) for f in fields(BatchSettings) if f.name != "destination"}  # rendered
        worker = f"{ti.dag_id}/{ti.run_id}/{ti.try_number}" if (ti := context.get("ti")) is not None else self.dag_id
        try:
            outcome = run_batch(
                BatchSettings(destination=destination, **{**own, "connector_id": self.connector_id or self.dag_id}),
                dynamodb=LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn,
                stream=kinesis,
                connect_snowflake=snowflake.get_conn,
                submit=partial(spark.run_batch, kinesis=kinesis, snowflake=snowflake, application=self.application),
                owner=f"{worker}/{uuid.uuid4().hex[:8]}",
                # The run's start is shared by every try of this task, so a retry plans the same batch.
                run_started_at=getattr(context.get("dag_run"), "start_date", None),
            )
        except ResetInProgress as err:
            raise AirflowSkipException(str(err)) from err
        except BatchRefused as err:
            raise AirflowException(str(err)) from err
        if outcome.result is not None:
            self._last_summary = outcome
            try:
                self._report(context, outcome, destination, snowflake)
            except Exception:  # the batch is committed: reporting it must not fail the task
                self.log.warning("Could not report batch %s", outcome.result.batch_id, exc_info=True)
        return outcome.summary()

    def build_spark_hook(self) -> KinesisJobSubmitHook:
        """The spark-submit hook of the Spark connection, with this operator's Spark settings."""
        check_spark_conf(self.spark_conf or {}, f"spark_conf of task {self.task_id!r}")  # rendered, so here
        return KinesisJobSubmitHook(conn_id=self.spark_conn_id, conf=self.spark_conf, **self.spark_submit)

    def _report(
        self, context: Context, outcome: BatchOutcome, destination: Destination, snowflake: KinesisSnowflakeHook
    ) -> None:
        """Metrics of the batch, and an event of the table's Asset when rows landed in it."""
        from airflow_kinesis_snowflake.lineage import add_batch_asset_events  # not loaded before it is needed

        assert outcome.result is not None
        table = f"{destination.database}.{destination.schema}.{destination.table}"
        figures = BatchFigures.from_result(outcome.result)
        emit_batch_metrics(
            figures, application_name=outcome.application_name, stream_name=self.stream_name, table=table
        )
        aliases = [outlet for outlet in self.outlets if isinstance(outlet, AssetAlias)]
        if aliases and outcome.result.rows_loaded:
            where = snowflake.account_and_region()
            add_batch_asset_events(context["outlet_events"], aliases, where, destination, outcome, self.stream_name)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow_kinesis_snowflake.lineage import ingest_lineage

        return ingest_lineage(self, task_instance)

    def on_kill(self) -> None:
        if self._spark_hook is not None:
            self._spark_hook.on_kill()
