"""The DAGs folder imports cleanly, and a bad connector file is an import error naming the field."""

from __future__ import annotations

import copy
import itertools
import shutil
from pathlib import Path

import pytest
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.exceptions import ParamValidationError

from airflow_kinesis_snowflake.operators.cleanup import CleanupOrphanedTablesOperator
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.reset import ResetConnectorStateOperator, RestoreCheckpointsOperator
from tests.emulators.servers import REPO_ROOT

DAGS = REPO_ROOT / "dags"


def test_dags_folder_has_no_import_errors() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert set(bag.dags) == {
        "kinesis_snowflake_orders_ingest",
        "kinesis_snowflake_orders_provision",
        "kinesis_snowflake_orders_reset",
        "kinesis_snowflake_orders_restore",
        "kinesis_snowflake_cleanup",
    }
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


def test_maintenance_dags_are_manual_dry_runs_with_a_validated_form() -> None:
    bag = DagBag(dag_folder=str(DAGS))
    reset = bag.dags["kinesis_snowflake_orders_reset"]
    assert reset.schedule is None and reset.max_active_runs == 1
    task = reset.task_dict["reset"]
    assert isinstance(task, ResetConnectorStateOperator)
    assert (task.application_name, task.stream_name, task.retries) == ("orders-to-snowflake", "orders", 0)
    params = reset.params
    assert params.dump() == {
        "mode": "new_application_name",
        "new_application_name": None,
        "initial_position": "TRIM_HORIZON",
        "initial_timestamp": None,
        "dry_run": True,
        "confirm": "",
        "lease_wait_timeout_seconds": 360,
    }
    for name in params:
        schema = params.get_param(name).schema
        assert schema.get("title") and params.get_param(name).description, name
    assert params.get_param("mode").schema["enum"] == ["new_application_name", "delete_table"]
    assert params.get_param("initial_position").schema["enum"] == ["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]
    form = copy.deepcopy(params)
    form.update({"new_application_name": "orders-to-snowflake-v2", "dry_run": False, "confirm": "orders-to-snowflake"})
    assert form.validate()["new_application_name"] == "orders-to-snowflake-v2"
    for name, bad in [
        ("mode", "truncate"),
        ("new_application_name", "ab"),
        ("new_application_name", "no spaces"),
        ("initial_position", "EARLIEST"),
        ("dry_run", "no"),
        ("lease_wait_timeout_seconds", -1),
    ]:
        with pytest.raises(ParamValidationError):
            copy.deepcopy(params).update({name: bad})

    restore = bag.dags["kinesis_snowflake_orders_restore"]
    assert restore.schedule is None
    assert isinstance(restore.task_dict["restore"], RestoreCheckpointsOperator)
    with pytest.raises(ParamValidationError, match="backup"):
        restore.params.validate()  # the backup location has no default: the form asks for it

    cleanup = bag.dags["kinesis_snowflake_cleanup"]
    assert cleanup.schedule == "@daily"
    (task_id,) = cleanup.task_dict
    clean = cleanup.task_dict[task_id]
    assert isinstance(clean, CleanupOrphanedTablesOperator)
    assert task_id == "cleanup_aws_default_us_east_1"
    assert clean.connectors == [
        {
            "connector_id": "orders",
            "application_name": "orders-to-snowflake",
            "stream_name": "orders",
            "consumer_type": "SHARED_THROUGHPUT",
        }
    ]
    assert cleanup.params.dump() == {
        "dry_run": True,
        "confirm": "",
        "retention_days": 7.0,
        "application_name_patterns": ["*"],
    }


def test_one_cleanup_dag_per_directory_with_a_task_per_connection_and_region(tmp_path: Path) -> None:
    from airflow_kinesis_snowflake.dags import build_connector_dags

    text = (DAGS / "connectors" / "orders.yaml").read_text()
    (tmp_path / "orders.yaml").write_text(text)
    (tmp_path / "eu.yaml").write_text(
        text.replace("connector_id: orders", "connector_id: orders_eu").replace("us-east-1", "eu-west-1")
    )
    dags = build_connector_dags(tmp_path, cleanup_dag_id="kinesis_snowflake_cleanup_team_a")
    assert sorted(d for d in dags if "cleanup" in d) == ["kinesis_snowflake_cleanup_team_a"]
    cleanup = dags["kinesis_snowflake_cleanup_team_a"]
    assert set(cleanup.task_dict) == {"cleanup_aws_default_eu_west_1", "cleanup_aws_default_us_east_1"}
    assert {"kinesis_snowflake_orders_eu_reset", "kinesis_snowflake_orders_eu_restore"} <= set(dags)
    assert build_connector_dags(tmp_path / "empty-dir-does-not-exist") == {}
