"""The DAGs folder imports cleanly, and a bad connector file is an import error naming the field."""

from __future__ import annotations

import shutil
from pathlib import Path

from airflow.dag_processing.dagbag import DagBag

from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from tests.emulators.servers import REPO_ROOT

DAGS = REPO_ROOT / "dags"


def test_dags_folder_has_no_import_errors() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert set(bag.dags) == {"kinesis_snowflake_orders_ingest"}
    dag = bag.dags["kinesis_snowflake_orders_ingest"]
    assert dag.max_active_runs == 1
    assert set(dag.task_dict) == {"create_lease_table", "ingest"}
    assert dag.task_dict["ingest"].upstream_task_ids == {"create_lease_table"}
    ingest = dag.task_dict["ingest"]
    assert isinstance(ingest, SparkKinesisIngestOperator)
    assert (ingest.stream_name, ingest.application_name) == ("orders", "orders-to-snowflake")


def test_a_bad_connector_file_is_an_import_error_naming_file_and_field(tmp_path: Path) -> None:
    shutil.copy(DAGS / "kinesis_snowflake_connectors.py", tmp_path)
    (tmp_path / "connectors").mkdir()
    text = (DAGS / "connectors" / "orders.yaml").read_text()
    (tmp_path / "connectors" / "orders.yaml").write_text(
        text.replace("initial_position: TRIM_HORIZON", "initial_position: EARLIEST")
    )
    bag = DagBag(dag_folder=str(tmp_path))
    assert len(bag.import_errors) == 1
    (message,) = bag.import_errors.values()
    assert "orders.yaml" in message
    assert "source.initial_position" in message
    assert "TRIM_HORIZON" in message and "AT_TIMESTAMP" in message
