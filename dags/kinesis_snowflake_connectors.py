"""One set of DAGs per connector file in ./connectors (see airflow_kinesis_snowflake.dags)."""

from pathlib import Path

from airflow_kinesis_snowflake.dags import build_connector_dags

globals().update(build_connector_dags(Path(__file__).parent / "connectors"))
