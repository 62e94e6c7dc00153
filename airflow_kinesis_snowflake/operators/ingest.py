"""Run one micro-batch: plan from the lease table, load with Spark, then checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import fields
from functools import partial
from typing import Any

from airflow.sdk import AssetAlias, BaseOperator, Context
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from airflow_kinesis_snowflake.core.batch import BatchOutcome, BatchRefused, BatchSettings, ResetInProgress, run_batch
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.model import ConsumerType, Destination, DestinationType, InitialPosition
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import KinesisJobSubmitHook
from airflow_kinesis_snowflake.metrics import BatchFigures, emit_batch_metrics


class SparkKinesisIngestOperator(BaseOperator):
    """Load the next micro-batch of a Kinesis stream into a Snowflake table, exactly once.

    Runs :func:`~airflow_kinesis_snowflake.core.batch.run_batch` (its module tells the protocol and
    why a crash at any step loses nothing and loads nothing twice), loading with the Spark job through
    :class:`~airflow_kinesis_snowflake.hooks.spark.KinesisJobSubmitHook`, which keeps credentials off
    the command line, Spark settings and logs, and refuses a deploy mode the job cannot run in (``docs/spark.md``).

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
    :param max_shards_per_batch: cap on shards one batch takes (None: all eligible).
    :param lease_duration_seconds: failover time: a lease not renewed for this long (its worker
        stopped) may be taken by another worker. Held leases are renewed every third of it.
    :param aws_conn_id: AWS connection for Kinesis and DynamoDB.
    :param region_name: AWS region; defaults to the connection's.
    :param snowflake_conn_id: Snowflake connection.
    :param spark_conn_id: Spark connection (its host is the master, e.g. ``local[2]``); its extras
        ``driver_identity`` and ``snowflake_connection_ref`` choose how the job gets its credentials.
    :param spark_conf: extra ``--conf`` settings for spark-submit (never credentials: they show).
    :param deploy_mode: ``client`` or ``cluster``; None: the Spark connection's ``deploy-mode`` extra.
    :param executor_memory: and ``driver_memory``, ``executor_cores``, ``total_executor_cores``
        (``spark.cores.max``), ``num_executors``, ``yarn_queue``: the ``SparkSubmitHook`` arguments
        of the same names (spark-submit's ``--executor-memory`` ...); None leaves them to Spark.
    :param application: the PySpark job file; defaults to the packaged job.
    :param destination_type: TABLE, ICEBERG, INTERACTIVE or PIPE; Iceberg and interactive tables are not altered.
    :param pipe_definition: PIPE: the pipe's ``COPY INTO <database>.<schema>.<table> FROM (SELECT
        ... FROM ...)``. Each batch runs it over its own staged records (JSON lines, ``$1`` is the
        record with its ``KINESISMETADATA``) in the transaction that moves the ledger.
    :param schema_evolution: add columns for new keys and drop NOT NULL where records lack a value;
        None follows the table's ``ENABLE_SCHEMA_EVOLUTION``.
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
        max_shards_per_batch: int | None = None,
        lease_duration_seconds: int = 300,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        spark_conn_id: str = "spark_default",
        spark_conf: dict[str, Any] | None = None,
        deploy_mode: str | None = None,
        executor_memory: str | None = None,
        driver_memory: str | None = None,
        executor_cores: int | None = None,
        total_executor_cores: int | None = None,
        num_executors: int | None = None,
        yarn_queue: str | None = None,
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
        self.max_shards_per_batch = max_shards_per_batch
        self.lease_duration_seconds = lease_duration_seconds
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.snowflake_conn_id = snowflake_conn_id
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self.deploy_mode = deploy_mode
        self.executor_memory = executor_memory
        self.driver_memory = driver_memory
        self.executor_cores = executor_cores
        self.total_executor_cores = total_executor_cores
        self.num_executors = num_executors
        self.yarn_queue = yarn_queue
        self.application = application
        self.destination_type = destination_type
        self.pipe_definition = pipe_definition
        self.schema_evolution = schema_evolution
        self.on_unknown_key = UnknownKeys(on_unknown_key)
        self._spark_hook: KinesisJobSubmitHook | None = None
        self._last_summary: BatchOutcome | None = None  # the batch loaded, for the lineage

    def execute(self, context: Context) -> dict[str, Any]:
        destination = Destination(self.database.upper(), self.schema.upper(), self.table.upper())
        # A Spark connection the job cannot run with (cluster deploy mode) fails before any lease is taken.
        spark = self._spark_hook = self.build_spark_hook()
        spark.check_credential_delivery()
        kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        snowflake = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id)
        # The batch settings are this operator's (rendered) arguments of the same names.
        own = {f.name: getattr(self, f.name) for f in fields(BatchSettings) if f.name != "destination"}
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
        return KinesisJobSubmitHook(
            conn_id=self.spark_conn_id,
            conf=self.spark_conf,
            deploy_mode=self.deploy_mode,
            executor_memory=self.executor_memory,
            driver_memory=self.driver_memory,
            executor_cores=self.executor_cores,
            total_executor_cores=self.total_executor_cores,
            num_executors=self.num_executors,
            yarn_queue=self.yarn_queue,
        )

    def _report(
        self, context: Context, outcome: BatchOutcome, destination: Destination, snowflake: KinesisSnowflakeHook
    ) -> None:
        """Metrics of the batch, and an event of the table's Asset when rows landed in it."""
        from airflow_kinesis_snowflake.lineage import batch_asset_event  # not loaded before it is needed

        result, application = outcome.result, outcome.application_name
        assert result is not None
        table = f"{destination.database}.{destination.schema}.{destination.table}"
        figures = BatchFigures.from_result(result)
        emit_batch_metrics(figures, application_name=application, stream_name=self.stream_name, table=table)
        account, region = snowflake.account_and_region()
        aliases = [outlet for outlet in self.outlets if isinstance(outlet, AssetAlias)]
        if not aliases or not result.rows_loaded:
            return
        if not account:
            self.log.warning("The Snowflake connection names no account: no Asset event for %s", table)
            return
        asset, extra = batch_asset_event(account, region, destination, result, self.stream_name, application)
        for alias in aliases:
            context["outlet_events"][alias].add(asset, extra=extra)
        self.log.info("Asset event for %s: %s", asset.uri, extra)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from airflow_kinesis_snowflake.lineage import ingest_lineage

        return ingest_lineage(self, task_instance)

    def on_kill(self) -> None:
        if self._spark_hook is not None:
            self._spark_hook.on_kill()
