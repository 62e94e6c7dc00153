"""DAGs of the Kinesis -> Snowflake connector in connectors/orders.yaml.

One DAG file per connector file: a mistake in orders.yaml is an import error of this file only, and
the other connectors' DAGs keep running. Written by
`python -m airflow_kinesis_snowflake dag-file`; see airflow_kinesis_snowflake.dags.
"""

from pathlib import Path

from airflow_kinesis_snowflake.dags import build_connector_file_dags

globals().update(build_connector_file_dags(Path(__file__).parent / "connectors" / "orders.yaml"))
