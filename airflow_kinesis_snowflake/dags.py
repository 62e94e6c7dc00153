"""DAG factory: one connector YAML file becomes its DAGs.

Use it from a file in the DAGs folder::

    from airflow_kinesis_snowflake.dags import build_connector_dags

    globals().update(build_connector_dags("connectors"))

Each connector gets ``kinesis_snowflake_<id>_provision`` (manual: check IAM, lease table, fan-out
consumer, Snowflake objects, verify) and ``kinesis_snowflake_<id>_ingest`` (scheduled
micro-batches). A mistake in a connector file fails the DAG file at parse time with the file, the
field and the allowed values, so it shows up as an import error in the Airflow UI.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG
from airflow.task.trigger_rule import TriggerRule

from airflow_kinesis_snowflake.config import ConnectorConfig, ConsumerType, load_connector_configs
from airflow_kinesis_snowflake.operators.fan_out import RegisterStreamConsumerOperator
from airflow_kinesis_snowflake.operators.iam import CheckIamPermissionsOperator
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from airflow_kinesis_snowflake.operators.migration import MigrateLegacyCheckpointsOperator
from airflow_kinesis_snowflake.operators.snowflake import (
    ProvisionSnowflakeObjectsOperator,
    VerifySnowflakeObjectsOperator,
)

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)


def ingest_dag_id(config: ConnectorConfig) -> str:
    return f"kinesis_snowflake_{config.connector_id}_ingest"


def provision_dag_id(config: ConnectorConfig) -> str:
    return f"kinesis_snowflake_{config.connector_id}_provision"


def _dag_args(config: ConnectorConfig) -> dict[str, Any]:
    return {
        "start_date": START_DATE,
        "catchup": False,
        "tags": ["kinesis", "snowflake", config.connector_id],
        "default_args": {
            "retries": config.batch.retries,
            "retry_delay": timedelta(seconds=config.batch.retry_delay_seconds),
        },
    }


def _create_lease_table(config: ConnectorConfig) -> CreateLeaseTableOperator:
    return CreateLeaseTableOperator(
        task_id="create_lease_table",
        application_name=config.source.application_name,
        stream_name=config.source.stream_name,
        aws_conn_id=config.connections.aws,
        region_name=config.source.region,
    )


def build_provision_dag(config: ConnectorConfig) -> DAG:
    """check_iam >> [migrate] >> create_lease_table >> [register consumer] >> provision >> verify.

    Manually triggered; every step is idempotent, so running it again changes nothing.
    """
    src, conns = config.source, config.connections
    with DAG(
        dag_id=provision_dag_id(config),
        description=f"Provision Kinesis stream {src.stream_name} -> Snowflake {config.table_fqn}",
        schedule=None,
        max_active_runs=1,
        **_dag_args(config),
    ) as dag:
        steps: list[Any] = [
            CheckIamPermissionsOperator(
                task_id="check_iam_permissions",
                stream_name=src.stream_name,
                application_name=src.application_name,
                consumer_type=src.consumer_type.value,
                region_name=src.region,
                aws_conn_id=conns.aws,
                include_migration_table=src.migrate_legacy_checkpoints,
                skip_if_simulation_denied=src.skip_iam_check_if_denied,
            )
        ]
        if src.migrate_legacy_checkpoints:
            steps.append(
                MigrateLegacyCheckpointsOperator(
                    task_id="migrate_legacy_checkpoints",
                    application_name=src.application_name,
                    stream_name=src.stream_name,
                    aws_conn_id=conns.aws,
                    region_name=src.region,
                    initial_timestamp=src.initial_timestamp,
                )
            )
        steps.append(_create_lease_table(config))
        if src.consumer_type is ConsumerType.ENHANCED_FAN_OUT:
            steps.append(
                RegisterStreamConsumerOperator(
                    task_id="register_fan_out_consumer",
                    stream_name=src.stream_name,
                    consumer_name=src.application_name,
                    aws_conn_id=conns.aws,
                    region_name=src.region,
                )
            )
        steps.append(ProvisionSnowflakeObjectsOperator.from_connector_config(config, task_id="provision_snowflake"))
        steps.append(VerifySnowflakeObjectsOperator.from_connector_config(config, task_id="verify_snowflake"))
        for upstream, downstream in itertools.pairwise(steps):
            # A skipped IAM check (principal may not simulate, and the connector allows it) is no failure.
            downstream.trigger_rule = TriggerRule.NONE_FAILED
            upstream >> downstream
    return dag


def build_ingest_dag(config: ConnectorConfig) -> DAG:
    """create_lease_table >> ingest, on the connector's schedule, one run at a time."""
    src, dst, conns = config.source, config.destination, config.connections
    with DAG(
        dag_id=ingest_dag_id(config),
        description=f"Kinesis stream {src.stream_name} -> Snowflake {config.table_fqn}",
        schedule=config.batch.schedule,
        max_active_runs=1,
        **_dag_args(config),
    ) as dag:
        ingest = SparkKinesisIngestOperator(
            task_id="ingest",
            stream_name=src.stream_name,
            application_name=src.application_name,
            database=dst.database,
            schema=dst.schema_,
            table=dst.table,
            initial_position=src.initial_position.value,
            initial_timestamp=src.initial_timestamp.isoformat() if src.initial_timestamp else None,
            max_records_per_call=src.max_records_per_call,
            max_records_per_shard=config.batch.max_records_per_shard,
            max_shards_per_batch=config.batch.max_shards_per_batch,
            lease_duration_seconds=config.batch.lease_duration_seconds,
            aws_conn_id=conns.aws,
            region_name=src.region,
            snowflake_conn_id=conns.snowflake,
            spark_conn_id=conns.spark,
        )
        _create_lease_table(config) >> ingest
    return dag


def build_connector_dags(directory: str | Path) -> dict[str, DAG]:
    """Every DAG of every connector file in ``directory``."""
    dags: dict[str, DAG] = {}
    for config in load_connector_configs(directory):
        for dag in (build_provision_dag(config), build_ingest_dag(config)):
            dags[dag.dag_id] = dag
    return dags
