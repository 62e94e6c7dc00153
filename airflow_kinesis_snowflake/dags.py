"""DAG factory: one connector YAML file becomes its DAGs.

Use it from a file in the DAGs folder::

    from airflow_kinesis_snowflake.dags import build_connector_dags

    globals().update(build_connector_dags("connectors"))

A mistake in a connector file fails the DAG file at parse time with the file, the field and the
allowed values, so it shows up as an import error in the Airflow UI.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from airflow_kinesis_snowflake.config import ConnectorConfig, load_connector_configs
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)


def ingest_dag_id(config: ConnectorConfig) -> str:
    return f"kinesis_snowflake_{config.connector_id}_ingest"


def build_ingest_dag(config: ConnectorConfig) -> DAG:
    """create_lease_table >> ingest, on the connector's schedule, one run at a time."""
    src, dst, conns = config.source, config.destination, config.connections
    with DAG(
        dag_id=ingest_dag_id(config),
        description=f"Kinesis stream {src.stream_name} -> Snowflake {config.table_fqn}",
        schedule=config.batch.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=["kinesis", "snowflake", config.connector_id],
        default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    ) as dag:
        create = CreateLeaseTableOperator(
            task_id="create_lease_table",
            application_name=src.application_name,
            stream_name=src.stream_name,
            aws_conn_id=conns.aws,
            region_name=src.region,
        )
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
            aws_conn_id=conns.aws,
            region_name=src.region,
            snowflake_conn_id=conns.snowflake,
            spark_conn_id=conns.spark,
        )
        create >> ingest
    return dag


def build_connector_dags(directory: str | Path) -> dict[str, DAG]:
    """Every connector file in ``directory`` (relative paths resolve against the caller's file)."""
    dags: dict[str, DAG] = {}
    for config in load_connector_configs(directory):
        dag = build_ingest_dag(config)
        dags[dag.dag_id] = dag
    return dags
