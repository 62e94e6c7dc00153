"""Directory-wide DAGs of ./connectors: kinesis_snowflake_cleanup (see airflow_kinesis_snowflake.dags).

Each connector's own DAGs are built by its own DAG file (kinesis_snowflake_<name>.py), so that a
mistake in one connector file leaves the others running. Clean-up is built only while every
connector file is valid: it must know every application name in use.
"""

from pathlib import Path

from airflow_kinesis_snowflake.dags import build_cleanup_dags

globals().update(build_cleanup_dags(Path(__file__).parent / "connectors"))
