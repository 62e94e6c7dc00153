"""The ingest DAG's schedule and its wait for new records, as the connector file sets them; the provision
DAG's steps after its IAM check."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from airflow.sdk import Asset
from airflow.sdk.definitions.asset import AssetAll

from airflow_kinesis_snowflake.compat import TriggerRule
from airflow_kinesis_snowflake.config import ConnectorConfigError, load_connector_config
from airflow_kinesis_snowflake.dags import build_ingest_dag, build_provision_dag, new_records_asset_name
from airflow_kinesis_snowflake.sensors.kinesis import KinesisNewRecordsSensor
from airflow_kinesis_snowflake.triggers.kinesis import KinesisNewRecordsTrigger

KINESIS_SOURCE = {"stream_name": "orders", "region": "eu-west-1", "application_name": "orders-app"}
CONNECTOR = {
    "connector_id": "orders",
    "source": KINESIS_SOURCE,
    "destination": {"database": "ANALYTICS", "schema": "RAW", "table": "ORDERS"},
}


def write(tmp_path: Path, batch: dict[str, object]) -> Path:
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({**CONNECTOR, "batch": batch}))
    return path


def test_on_new_records_schedules_by_an_asset_watched_by_the_providers_trigger(tmp_path: Path) -> None:
    config = load_connector_config(write(tmp_path, {"schedule": "on_new_records", "new_records_poll_seconds": 15}))
    dag = build_ingest_dag(config)
    condition = dag.timetable.asset_condition
    assert isinstance(condition, AssetAll)
    (asset,) = condition.objects
    assert isinstance(asset, Asset)
    assert asset.name == new_records_asset_name("orders")
    (watcher,) = asset.watchers
    trigger = watcher.trigger
    assert isinstance(trigger, KinesisNewRecordsTrigger)
    assert (trigger.stream_name, trigger.application_name, trigger.region_name) == ("orders", "orders-app", "eu-west-1")
    assert (trigger.poke_interval, trigger.timeout) == (15, None)


def test_the_sensor_comes_first_and_checks_once_at_the_runs_start(tmp_path: Path) -> None:
    dag = build_ingest_dag(load_connector_config(write(tmp_path, {"schedule": "*/5 * * * *"})))
    sensor = dag.task_dict["wait_for_records"]
    assert isinstance(sensor, KinesisNewRecordsSensor)
    assert (sensor.soft_fail, sensor.timeout, sensor.only_before_run_start) == (True, 0, True)
    assert dag.task_dict["create_lease_table"].upstream_task_ids == {"wait_for_records"}

    without = build_ingest_dag(load_connector_config(write(tmp_path, {"wait_for_records": False})))
    assert set(without.task_dict) == {"create_lease_table", "ingest"}


def test_a_fan_out_connector_checks_for_records_only_when_asked(tmp_path: Path) -> None:
    """A fan-out connector reads through SubscribeToShard alone: by default its runs make no GetRecords call."""

    def ingest_tasks(batch: dict[str, object]) -> set[str]:
        path = write(tmp_path, batch)
        connector = yaml.safe_load(path.read_text())
        connector["source"]["consumer_type"] = "ENHANCED_FAN_OUT"
        path.write_text(yaml.safe_dump(connector))
        return set(build_ingest_dag(load_connector_config(path)).task_dict)

    assert ingest_tasks({}) == {"create_lease_table", "ingest"}
    assert ingest_tasks({"wait_for_records": True}) == {"wait_for_records", "create_lease_table", "ingest"}


def test_a_continuous_connector_does_not_check_first_by_default(tmp_path: Path) -> None:
    """A continuous run waits for records itself: a check at its start would skip a whole window."""
    continuous = {"mode": "continuous", "max_runtime_minutes": 5}
    assert set(build_ingest_dag(load_connector_config(write(tmp_path, continuous))).task_dict) == {
        "create_lease_table",
        "ingest",
    }
    asked = load_connector_config(write(tmp_path, {**continuous, "wait_for_records": True}))
    assert "wait_for_records" in build_ingest_dag(asked).task_dict


def test_a_poll_interval_out_of_bounds_names_file_field_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, {"schedule": "on_new_records", "new_records_poll_seconds": 0})
    with pytest.raises(ConnectorConfigError) as err:
        load_connector_config(path)
    assert str(path) in str(err.value)
    assert "batch.new_records_poll_seconds" in str(err.value) and "(got 0)" in str(err.value)


@pytest.mark.parametrize("consumer_type", ["SHARED_THROUGHPUT", "ENHANCED_FAN_OUT"])
@pytest.mark.parametrize("migrate", [False, True])
def test_every_provision_step_after_a_skipped_iam_check_still_runs(
    tmp_path: Path, consumer_type: str, migrate: bool
) -> None:
    """``iam_check: best_effort``: a check that cannot run skips, and provisioning goes on (docs/operations.md)."""
    path = tmp_path / "orders.yaml"
    source: dict[str, object] = {**KINESIS_SOURCE, "iam_check": "best_effort", "consumer_type": consumer_type}
    if migrate:
        source["migrate_legacy_checkpoints"] = True
    path.write_text(yaml.safe_dump({**CONNECTOR, "source": source}))
    dag = build_provision_dag(load_connector_config(path))

    check = dag.task_dict["check_iam_permissions"]
    after = check.get_flat_relatives(upstream=False)
    assert {"create_lease_table", "provision_snowflake", "verify_snowflake"} <= {t.task_id for t in after}
    # Each one runs unless a step before it failed: a skipped step before it is no failure.
    assert {t.task_id: t.trigger_rule for t in after} == {t.task_id: TriggerRule.NONE_FAILED for t in after}
    assert set(dag.task_dict) == {check.task_id} | {t.task_id for t in after}


def test_every_task_of_every_dag_has_an_execution_timeout_and_every_dag_a_run_timeout(tmp_path: Path) -> None:
    from datetime import timedelta

    from airflow_kinesis_snowflake.dags import MAINTENANCE_TIMEOUT, build_connector_dags

    repo = Path(__file__).resolve().parents[2]
    connectors = tmp_path / "connectors"
    connectors.mkdir()
    for source in (repo / "dags" / "connectors" / "orders.yaml", repo / "demo" / "connectors" / "customers.yaml"):
        (connectors / source.name).write_text(source.read_text())

    dags = build_connector_dags(connectors)

    assert {"kinesis_snowflake_orders_ingest", "dynamodb_snowflake_customers_sync"} <= set(dags)
    # A connector's DAGs: the batch section's timeout (180 minutes by default); maintenance: two hours.
    scheduled = {"ingest", "provision", "sync"}
    for dag_id, dag in dags.items():
        kind = dag_id.rsplit("_", 1)[1]
        expected = timedelta(minutes=180) if kind in scheduled else MAINTENANCE_TIMEOUT
        assert {t.task_id: t.execution_timeout for t in dag.tasks} == dict.fromkeys(dag.task_dict, expected), dag_id
        assert dag.dagrun_timeout is not None and dag.dagrun_timeout > expected, dag_id


def test_every_dag_the_factory_builds_says_what_it_does_and_links_its_page(tmp_path: Path) -> None:
    """A Kinesis and a DynamoDB connector file, built both ways (one DAG file per connector file, and one
    for the folder): every DAG has a doc_md, and it links to a page and heading the published site has."""
    from airflow_kinesis_snowflake import DOCS_URL
    from airflow_kinesis_snowflake.dags import build_connector_dags, build_connector_file_dags
    from tests.unit.test_docs_url import SITE_ADDRESS, unresolved_addresses

    repo = Path(__file__).resolve().parents[2]
    connectors = tmp_path / "connectors"
    connectors.mkdir()
    kinesis = yaml.safe_load((repo / "dags" / "connectors" / "orders.yaml").read_text())
    # Every optional step of the provision DAG, and the ingest DAG's sensor.
    kinesis["source"].update(consumer_type="ENHANCED_FAN_OUT", migrate_legacy_checkpoints=True)
    kinesis.setdefault("batch", {})["wait_for_records"] = True
    (connectors / "orders.yaml").write_text(yaml.safe_dump(kinesis))
    (connectors / "customers.yaml").write_text((repo / "demo" / "connectors" / "customers.yaml").read_text())

    dags = build_connector_dags(connectors)
    per_file = {**build_connector_file_dags(connectors / "orders.yaml")}
    per_file.update(build_connector_file_dags(connectors / "customers.yaml"))

    kinds = {"provision", "ingest", "reset", "restore"}
    assert set(dags) == {f"kinesis_snowflake_orders_{kind}" for kind in kinds} | {
        f"dynamodb_snowflake_customers_{kind}" for kind in ("provision", "sync", "reset")
    } | {"kinesis_snowflake_cleanup"}
    assert set(per_file) == set(dags) - {"kinesis_snowflake_cleanup"}
    for dag_id, dag in [*dags.items(), *per_file.items()]:
        assert dag.doc_md and dag.doc_md.strip(), f"{dag_id} has no doc_md"
        assert len(dag.doc_md.split()) >= 30, f"{dag_id}: {dag.doc_md!r} does not say what the DAG does"
        links = [m[0] for m in SITE_ADDRESS.finditer(dag.doc_md)]
        assert links and all(f"]({link})" in dag.doc_md for link in links), f"{dag_id}: no link to {DOCS_URL}"
        assert not unresolved_addresses(dag.doc_md), dag_id
    assert "`wait_for_records`" in (dags["kinesis_snowflake_orders_ingest"].doc_md or "")
    assert "`register_fan_out_consumer`" in (dags["kinesis_snowflake_orders_provision"].doc_md or "")
