"""The DAGs folder imports cleanly, and a bad connector file is an import error naming the field."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

from airflow.dag_processing.dagbag import DagBag

from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from tests.emulators.servers import REPO_ROOT

DAGS = REPO_ROOT / "dags"


def test_dags_folder_has_no_import_errors() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert set(bag.dags) == {"kinesis_snowflake_orders_ingest", "kinesis_snowflake_orders_provision"}
    dag = bag.dags["kinesis_snowflake_orders_ingest"]
    assert dag.max_active_runs == 1
    assert set(dag.task_dict) == {"create_lease_table", "ingest"}
    assert dag.task_dict["ingest"].upstream_task_ids == {"create_lease_table"}
    ingest = dag.task_dict["ingest"]
    assert isinstance(ingest, SparkKinesisIngestOperator)
    assert (ingest.stream_name, ingest.application_name) == ("orders", "orders-to-snowflake")

    provision = bag.dags["kinesis_snowflake_orders_provision"]
    assert provision.schedule is None
    order = [
        "check_iam_permissions",
        "create_lease_table",
        "provision_snowflake",
        "verify_snowflake",
    ]
    assert set(provision.task_dict) == set(order)
    for upstream, downstream in itertools.pairwise(order):
        assert provision.task_dict[downstream].upstream_task_ids == {upstream}


def test_fan_out_and_migration_add_their_steps(tmp_path: Path) -> None:
    from airflow_kinesis_snowflake.config import load_connector_config
    from airflow_kinesis_snowflake.dags import build_provision_dag

    text = (DAGS / "connectors" / "orders.yaml").read_text()
    text = text.replace("consumer_type: SHARED_THROUGHPUT", "consumer_type: ENHANCED_FAN_OUT")
    text = text.replace(
        "  max_records_per_call: 10000", "  max_records_per_call: 10000\n  migrate_legacy_checkpoints: true"
    )
    (tmp_path / "orders.yaml").write_text(text)
    dag = build_provision_dag(load_connector_config(tmp_path / "orders.yaml"))
    assert dag.task_dict["migrate_legacy_checkpoints"].upstream_task_ids == {"check_iam_permissions"}
    assert dag.task_dict["create_lease_table"].upstream_task_ids == {"migrate_legacy_checkpoints"}
    assert dag.task_dict["register_fan_out_consumer"].upstream_task_ids == {"create_lease_table"}
    assert dag.task_dict["provision_snowflake"].upstream_task_ids == {"register_fan_out_consumer"}
    check = dag.task_dict["check_iam_permissions"]
    assert check.include_migration_table is True  # type: ignore[union-attr]


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
