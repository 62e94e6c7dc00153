"""The DAGs folder imports cleanly, and a bad connector file is an import error naming the field."""

from __future__ import annotations

import copy
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from airflow.dag_processing.dagbag import DagBag

from airflow_kinesis_snowflake.__main__ import main
from airflow_kinesis_snowflake.compat import ParamValidationError
from airflow_kinesis_snowflake.operators.cleanup import CleanupOrphanedTablesOperator
from airflow_kinesis_snowflake.operators.iam import CheckIamPermissionsOperator
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.reset import ResetConnectorStateOperator
from airflow_kinesis_snowflake.operators.restore import RestoreCheckpointsOperator
from tests.emulators.airflow_env import airflow_home_env, migrate
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
    assert set(dag.task_dict) == {"wait_for_records", "create_lease_table", "ingest"}
    assert dag.task_dict["create_lease_table"].upstream_task_ids == {"wait_for_records"}
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


def dag_folder(tmp_path: Path, connectors: dict[str, str]) -> Path:
    """A DAGs folder as a user lays it out: connectors/<name>.yaml, a DAG file for each, the directory's file."""
    (tmp_path / "connectors").mkdir(parents=True)
    shutil.copy(DAGS / "kinesis_snowflake_connectors.py", tmp_path)
    for name, text in connectors.items():
        connector = tmp_path / "connectors" / f"{name}.yaml"
        connector.write_text(text)
        assert main(["dag-file", str(connector)]) == 0
    return tmp_path


def payments(text: str) -> str:
    return (
        text.replace("connector_id: orders", "connector_id: payments")
        .replace("stream_name: orders", "stream_name: payments")
        .replace("application_name: orders-to-snowflake", "application_name: payments-to-snowflake")
        .replace("table: ORDERS", "table: PAYMENTS")
    )


def test_a_bad_connector_file_is_an_import_error_naming_file_and_field(tmp_path: Path) -> None:
    folder = dag_folder(tmp_path, {"orders": (DAGS / "connectors" / "orders.yaml").read_text()})
    connector = folder / "connectors" / "orders.yaml"
    connector.write_text(connector.read_text().replace("initial_position: TRIM_HORIZON", "initial_position: EARLIEST"))

    bag = DagBag(dag_folder=str(folder))

    message = bag.import_errors[str(folder / "kinesis_snowflake_orders.py")]
    assert f"{connector}: invalid connector configuration" in message
    assert "source.initial_position" in message
    assert "TRIM_HORIZON" in message and "AT_TIMESTAMP" in message


def test_one_broken_connector_file_leaves_the_others_loading(tmp_path: Path) -> None:
    orders = (DAGS / "connectors" / "orders.yaml").read_text()
    folder = dag_folder(tmp_path, {"orders": orders, "payments": payments(orders)})
    broken = folder / "connectors" / "payments.yaml"
    # A typo made after the connector was set up: a cron expression with four fields.
    broken.write_text(broken.read_text().replace('schedule: "*/5 * * * *"', 'schedule: "*/5 * * *"'))

    bag = DagBag(dag_folder=str(folder))

    # The healthy connector's DAGs load, and come from its own DAG file.
    assert set(bag.dags) == {
        "kinesis_snowflake_orders_provision",
        "kinesis_snowflake_orders_ingest",
        "kinesis_snowflake_orders_reset",
        "kinesis_snowflake_orders_restore",
    }
    assert {dag.fileloc for dag in bag.dags.values()} == {str(folder / "kinesis_snowflake_orders.py")}
    # The broken one is an import error of its own DAG file, naming the connector file, field and fix.
    assert set(bag.import_errors) == {
        str(folder / "kinesis_snowflake_payments.py"),
        str(folder / "kinesis_snowflake_connectors.py"),
    }
    message = bag.import_errors[str(folder / "kinesis_snowflake_payments.py")]
    assert f"{broken}: invalid connector configuration" in message
    assert "batch.schedule: is not a schedule Airflow accepts" in message
    assert "(got '*/5 * * *')" in message
    assert "@hourly" in message and "@continuous" in message and "null for manual runs only" in message
    # Clean-up waits until every connector file is valid: it must know every application name in use.
    cleanup = bag.import_errors[str(folder / "kinesis_snowflake_connectors.py")]
    assert "kinesis_snowflake_cleanup is not built until every connector file" in cleanup
    assert f"{broken}: invalid connector configuration" in cleanup


def test_two_connector_files_with_one_id_the_second_is_the_error(tmp_path: Path) -> None:
    orders = (DAGS / "connectors" / "orders.yaml").read_text()
    folder = dag_folder(tmp_path, {"orders": orders, "zz_orders_copy": orders})

    bag = DagBag(dag_folder=str(folder))

    assert bag.dags["kinesis_snowflake_orders_ingest"].fileloc == str(folder / "kinesis_snowflake_orders.py")
    message = bag.import_errors[str(folder / "kinesis_snowflake_zz_orders_copy.py")]
    assert f"connector_id 'orders' is already used by {folder / 'connectors' / 'orders.yaml'}" in message


def test_dag_file_refuses_an_invalid_connector_and_an_existing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = dag_folder(tmp_path, {"orders": (DAGS / "connectors" / "orders.yaml").read_text()})
    assert main(["dag-file", str(folder / "connectors" / "orders.yaml")]) == 1
    assert "exists; --force overwrites it" in capsys.readouterr().err
    broken = folder / "connectors" / "broken.yaml"
    broken.write_text("connector_id: broken\n")
    assert main(["dag-file", str(broken)]) == 1
    assert f"{broken}: invalid connector configuration" in capsys.readouterr().err
    assert not (folder / "kinesis_snowflake_broken.py").exists()


def test_the_longest_connector_id_builds_its_dags(tmp_path: Path) -> None:
    from airflow_kinesis_snowflake.config import CONNECTOR_ID_MAX
    from airflow_kinesis_snowflake.dags import build_connector_file_dags

    longest = "c" * CONNECTOR_ID_MAX
    text = (DAGS / "connectors" / "orders.yaml").read_text().replace("connector_id: orders", f"connector_id: {longest}")
    (tmp_path / "orders.yaml").write_text(text)

    dags = build_connector_file_dags(tmp_path / "orders.yaml")

    assert f"kinesis_snowflake_{longest}_provision" in dags
    assert all(longest in dag.tags for dag in dags.values())


@pytest.mark.parametrize(
    ("mode", "first_task"),
    [("required", "check_iam_permissions"), ("best_effort", "check_iam_permissions"), ("off", "create_lease_table")],
)
def test_iam_check_mode_reaches_the_provision_dag(tmp_path: Path, mode: str, first_task: str) -> None:
    from airflow_kinesis_snowflake.config import load_connector_config
    from airflow_kinesis_snowflake.dags import build_provision_dag

    text = (DAGS / "connectors" / "orders.yaml").read_text().replace("iam_check: required", f"iam_check: {mode}")
    (tmp_path / "orders.yaml").write_text(text)
    dag = build_provision_dag(load_connector_config(tmp_path / "orders.yaml"))

    (root,) = [task for task in dag.tasks if not task.upstream_task_ids]
    assert root.task_id == first_task
    if mode != "off":
        assert isinstance(root, CheckIamPermissionsOperator)
        assert root.check_mode == mode
    else:
        assert "check_iam_permissions" not in dag.task_dict


def test_a_day_long_lease_gets_a_reset_form_that_validates(tmp_path: Path) -> None:
    from airflow_kinesis_snowflake.config import LEASE_DURATION_MAX_SECONDS
    from airflow_kinesis_snowflake.dags import build_connector_file_dags

    text = (DAGS / "connectors" / "orders.yaml").read_text()
    text = text.replace(
        "  max_records_per_shard: 100000",
        f"  max_records_per_shard: 100000\n  lease_duration_seconds: {LEASE_DURATION_MAX_SECONDS}",
    )
    (tmp_path / "orders.yaml").write_text(text)

    dags = build_connector_file_dags(tmp_path / "orders.yaml")

    for dag_id in ("kinesis_snowflake_orders_reset", "kinesis_snowflake_orders_restore"):
        params = copy.deepcopy(dags[dag_id].params)
        params.update({"backup": "/tmp/backup.json"} if "restore" in dag_id else {})
        assert params.validate()["lease_wait_timeout_seconds"] == LEASE_DURATION_MAX_SECONDS + 60


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


_DB_STATE = """
import json
from sqlalchemy import select
from airflow.models.dag import DagModel
from airflow.models.errors import ParseImportError
from airflow.utils.session import create_session

with create_session() as session:
    dags = {d.dag_id: [d.is_stale, d.has_import_errors] for d in session.scalars(select(DagModel))}
    errors = {e.filename: e.stacktrace for e in session.scalars(select(ParseImportError))}
print(json.dumps({"dags": dags, "errors": errors}))
"""


def test_the_healthy_connectors_stay_active_in_the_metadata_database(tmp_path: Path) -> None:
    """What the DAG processor records (``airflow dags reserialize`` writes it the same way).

    Airflow marks every DAG of a Python file with an import error stale, and stale DAGs are not
    scheduled: only a DAG file per connector keeps the healthy connectors running.
    """
    orders = (DAGS / "connectors" / "orders.yaml").read_text()
    folder = dag_folder(tmp_path / "dags", {"orders": orders, "payments": payments(orders)})
    env = airflow_home_env(tmp_path / "airflow", {"AIRFLOW__CORE__DAGS_FOLDER": str(folder)})
    migrate(env)
    airflow = [str(Path(sys.executable).parent / "airflow")]

    def reserialize() -> dict[str, Any]:
        subprocess.run([*airflow, "dags", "reserialize"], env=env, check=True, capture_output=True)
        proc = subprocess.run([sys.executable, "-c", _DB_STATE], env=env, check=True, capture_output=True, text=True)
        state: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return state

    assert reserialize()["errors"] == {}
    broken = folder / "connectors" / "payments.yaml"
    broken.write_text(
        broken.read_text().replace(
            "max_records_per_shard: 100000", "max_records_per_shard: 100000\n  retry_delay_seconds: 1.0e+15"
        )
    )

    state = reserialize()

    assert set(state["errors"]) == {"kinesis_snowflake_payments.py", "kinesis_snowflake_connectors.py"}
    assert "batch.retry_delay_seconds" in state["errors"]["kinesis_snowflake_payments.py"]
    # [is_stale, has_import_errors]
    for kind in ("provision", "ingest", "reset", "restore"):
        assert state["dags"][f"kinesis_snowflake_orders_{kind}"] == [False, False], kind
        assert state["dags"][f"kinesis_snowflake_payments_{kind}"] == [True, True], kind


# -- every connector file has its DAG file, and one way of building DAGs per folder -----------------


def test_the_shipped_dag_file_is_what_dag_file_writes() -> None:
    from airflow_kinesis_snowflake.dags import dag_file_name, render_dag_file

    connector = DAGS / "connectors" / "orders.yaml"
    shipped = DAGS / dag_file_name(connector)

    assert shipped.name == "kinesis_snowflake_orders.py"
    assert shipped.read_text() == render_dag_file(connector, DAGS)


def test_a_connector_file_without_its_dag_file_is_an_import_error_with_the_command(tmp_path: Path) -> None:
    orders = (DAGS / "connectors" / "orders.yaml").read_text()
    folder = dag_folder(tmp_path, {"orders": orders})
    # A new connector file, its DAG file not written yet.
    new = folder / "connectors" / "payments.yaml"
    new.write_text(payments(orders))

    bag = DagBag(dag_folder=str(folder))

    assert set(bag.import_errors) == {str(folder / "kinesis_snowflake_connectors.py")}
    message = bag.import_errors[str(folder / "kinesis_snowflake_connectors.py")]
    assert f"{new}: its DAG file {folder / 'kinesis_snowflake_payments.py'} is missing" in message
    assert f"`python -m airflow_kinesis_snowflake dag-file {new}`" in message
    assert "orders.yaml" not in message
    # The command in the message writes it, and then everything loads.
    assert main(["dag-file", str(new)]) == 0
    bag = DagBag(dag_folder=str(folder))
    assert bag.import_errors == {}
    assert {"kinesis_snowflake_payments_ingest", "kinesis_snowflake_cleanup"} <= set(bag.dags)


def test_replacing_the_single_dag_file_without_writing_dag_files_names_every_connector(tmp_path: Path) -> None:
    orders = (DAGS / "connectors" / "orders.yaml").read_text()
    (tmp_path / "connectors").mkdir()
    (tmp_path / "connectors" / "orders.yaml").write_text(orders)
    (tmp_path / "connectors" / "payments.yaml").write_text(payments(orders))
    shutil.copy(DAGS / "kinesis_snowflake_connectors.py", tmp_path)

    bag = DagBag(dag_folder=str(tmp_path))

    assert bag.dags == {}
    message = bag.import_errors[str(tmp_path / "kinesis_snowflake_connectors.py")]
    for name in ("orders", "payments"):
        connector = tmp_path / "connectors" / f"{name}.yaml"
        assert f"`python -m airflow_kinesis_snowflake dag-file {connector}`" in message


def test_a_dag_file_in_another_folder_is_named_in_the_command(tmp_path: Path) -> None:
    from airflow_kinesis_snowflake.config import ConnectorConfigError
    from airflow_kinesis_snowflake.dags import build_cleanup_dags

    # The DAG files at the top of the DAGs folder, the connector files two levels down.
    dags = tmp_path / "dags"
    connectors = dags / "team_a" / "connectors"
    connectors.mkdir(parents=True)
    (connectors / "orders.yaml").write_text((DAGS / "connectors" / "orders.yaml").read_text())

    with pytest.raises(ConnectorConfigError) as missing:
        build_cleanup_dags(connectors, dag_folder=dags)

    command = f"python -m airflow_kinesis_snowflake dag-file {connectors / 'orders.yaml'} --dag-folder {dags}"
    assert f"`{command}`" in str(missing.value)
    assert main(command.split()[3:]) == 0
    assert set(build_cleanup_dags(connectors, dag_folder=dags)) == {"kinesis_snowflake_cleanup"}


SINGLE_DAG_FILE = """
from pathlib import Path

from airflow_kinesis_snowflake.dags import build_connector_dags

globals().update(build_connector_dags(Path(__file__).parent / "connectors"))
"""


def test_dag_file_refuses_while_a_dag_file_builds_every_connector(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "connectors").mkdir()
    connector = tmp_path / "connectors" / "orders.yaml"
    connector.write_text((DAGS / "connectors" / "orders.yaml").read_text())
    (tmp_path / "all_connectors.py").write_text(SINGLE_DAG_FILE)

    assert main(["dag-file", str(connector)]) == 1

    error = capsys.readouterr().err
    assert f"{tmp_path / 'all_connectors.py'} build every connector's DAGs with build_connector_dags" in error
    assert "replace that call with build_cleanup_dags" in error
    assert not (tmp_path / "kinesis_snowflake_orders.py").exists()
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    assert {dag.fileloc for dag in bag.dags.values()} == {str(tmp_path / "all_connectors.py")}


def test_build_connector_dags_refuses_beside_dag_files_of_one_connector(tmp_path: Path) -> None:
    # A per-connector DAG file written, and the old single DAG file still there.
    folder = dag_folder(tmp_path, {"orders": (DAGS / "connectors" / "orders.yaml").read_text()})
    (folder / "kinesis_snowflake_connectors.py").unlink()
    (folder / "all_connectors.py").write_text(SINGLE_DAG_FILE)

    bag = DagBag(dag_folder=str(folder))

    # Each DAG id comes from one file only: the per-connector one.
    assert {dag.fileloc for dag in bag.dags.values()} == {str(folder / "kinesis_snowflake_orders.py")}
    message = bag.import_errors[str(folder / "all_connectors.py")]
    assert (
        f"{folder / 'kinesis_snowflake_orders.py'} in the same DAG folder build DAGs of one connector file" in message
    )
    assert "replace this call with build_cleanup_dags" in message


@pytest.mark.parametrize(("first", "second"), [("orders-eu.yaml", "orders_eu.yaml"), ("x.yaml", "x.yml")])
def test_two_connector_files_sharing_a_dag_file_name_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first: str, second: str
) -> None:
    orders = (DAGS / "connectors" / "orders.yaml").read_text()
    folder = dag_folder(tmp_path, {})
    (folder / "connectors" / first).write_text(orders)
    (folder / "connectors" / second).write_text(payments(orders))
    assert main(["dag-file", str(folder / "connectors" / first)]) == 0
    written = (folder / f"kinesis_snowflake_{Path(first).stem.replace('-', '_')}.py").read_text()

    assert main(["dag-file", "--force", str(folder / "connectors" / second)]) == 1

    error = capsys.readouterr().err
    assert f"{folder / 'connectors' / second}: its DAG file would be" in error
    assert f"already the DAG file of {folder / 'connectors' / first}" in error
    assert "rename one of the two files" in error
    assert (folder / f"kinesis_snowflake_{Path(first).stem.replace('-', '_')}.py").read_text() == written
    # The connector left without DAGs is an import error of clean-up, naming both files.
    message = DagBag(dag_folder=str(folder)).import_errors[str(folder / "kinesis_snowflake_connectors.py")]
    assert f"already the DAG file of {folder / 'connectors' / first}" in message


def test_a_connector_file_named_connectors_cannot_overwrite_the_cleanup_dag_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = dag_folder(tmp_path, {})
    cleanup_file = (folder / "kinesis_snowflake_connectors.py").read_text()
    connector = folder / "connectors" / "connectors.yaml"
    connector.write_text((DAGS / "connectors" / "orders.yaml").read_text())

    assert main(["dag-file", "--force", str(connector)]) == 1

    error = capsys.readouterr().err
    assert f"{connector}: a connector file cannot be named connectors.yaml" in error
    assert "kinesis_snowflake_connectors.py, the directory's clean-up DAG file" in error
    assert (folder / "kinesis_snowflake_connectors.py").read_text() == cleanup_file


def test_a_copy_of_a_broken_connector_file_is_a_duplicate_id(tmp_path: Path) -> None:
    """Only connector_id is read from the other files: the copy would collide as soon as the original is fixed."""
    orders = (DAGS / "connectors" / "orders.yaml").read_text()
    folder = dag_folder(tmp_path, {"orders": orders, "zz_orders_copy": orders})
    (folder / "connectors" / "orders.yaml").write_text(orders.replace("region: us-east-1", "region: mars"))

    bag = DagBag(dag_folder=str(folder))

    assert "source.region" in bag.import_errors[str(folder / "kinesis_snowflake_orders.py")]
    message = bag.import_errors[str(folder / "kinesis_snowflake_zz_orders_copy.py")]
    assert f"connector_id 'orders' is already used by {folder / 'connectors' / 'orders.yaml'}" in message
    assert "source.region" not in message
