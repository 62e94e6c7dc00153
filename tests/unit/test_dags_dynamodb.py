"""A DynamoDB connector file's DAGs, and the sync each of its tables gets from the file."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk import DAG

from airflow_kinesis_snowflake.compat import TriggerRule
from airflow_kinesis_snowflake.config import (
    ConnectorConfigError,
    DynamoDBConnectorConfig,
    load_any_connector_configs,
    parse_dynamodb_connector_config,
)
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS
from airflow_kinesis_snowflake.core.load.dynamodb_rows import KeyAttribute as RowKey
from airflow_kinesis_snowflake.core.load.dynamodb_rows import Layout
from airflow_kinesis_snowflake.core.load.dynamodb_sink import Deletes, KeyColumn
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import KeyAttribute, SyncTarget
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import OnGap, SnapshotMode, StreamStart
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateSettings
from airflow_kinesis_snowflake.dags import (
    build_cleanup_dags,
    build_connector_dags,
    build_connector_file_dags,
    build_dynamodb_provision_dag,
    build_dynamodb_sync_dag,
    dag_file_name,
    render_dag_file,
)
from airflow_kinesis_snowflake.operators.dynamodb import TABLE_MAP_INDEX, SyncDynamoDBTableOperator
from airflow_kinesis_snowflake.operators.dynamodb_discovery import DiscoverDynamoDBTablesOperator
from airflow_kinesis_snowflake.operators.dynamodb_provision import (
    ProvisionDynamoDBTableOperator,
)
from airflow_kinesis_snowflake.operators.iam import CheckDynamoDBIamPermissionsOperator

TAGGED: dict[str, Any] = {
    "connector_id": "orders_ddb",
    "source": {
        "type": "dynamodb",
        "region": "eu-west-1",
        "application_name": "orders-ddb",
        "ingestion_tag_key": "sync-to-snowflake",
        "environment_tag_key": "env",
        "environment_tag_value": "prod",
        "layout": "packed",
        "deletes": "soft",
        "snapshot": "skip",
        "stream_initial_position": "LATEST",
        "on_gap": "fail",
        "max_checkpoint_age_hours": 6,
        "snapshot_total_segments": 16,
        "snapshot_read_fraction": 0.25,
        "snapshot_max_items_per_segment": 2000,
        "snapshot_max_batches_per_run": 3,
    },
    "destination": {"database": "analytics", "schema": "raw"},
    "batch": {
        "schedule": "@hourly",
        "retries": 4,
        "retry_delay_seconds": 10,
        "max_records_per_shard": 5000,
        "lease_duration_seconds": 120,
    },
    "connections": {"aws": "aws_ddb", "snowflake": "snowflake_ddb"},
}
TARGET = SyncTarget(
    table="orders-v2.eu",
    arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders-v2.eu",
    stream_arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders-v2.eu/stream/2026-01-01T00:00:00.000",
    # As DescribeTable may list them: the sort key first.
    keys=(KeyAttribute("sk", "RANGE", "N"), KeyAttribute("pk", "HASH", "B")),
    read_capacity_units=40,
    destination_table="ORDERS_V2_EU",
)


def config(data: dict[str, Any] | None = None) -> DynamoDBConnectorConfig:
    return parse_dynamodb_connector_config(copy.deepcopy(data or TAGGED), source="connectors/orders_ddb.yaml")


def task(dag: DAG, task_id: str) -> Any:
    """A task of the DAG, its operator's own attributes read as they are (a mapped one's too)."""
    return dag.get_task(task_id)


def mapped_over(mapped: Any) -> Any:
    """The task whose result a mapped task is expanded over, by its only argument ``target``."""
    (argument,) = mapped.expand_input.value
    assert argument == "target"
    return mapped.expand_input.value["target"].operator


def with_(section: str, **values: Any) -> dict[str, Any]:
    data = copy.deepcopy(TAGGED)
    data[section] = {**data.get(section, {}), **values}
    return data


def test_the_sync_dag_discovers_then_maps_one_sync_task_over_the_tables() -> None:
    dag = build_dynamodb_sync_dag(config())
    assert dag.dag_id == "dynamodb_snowflake_orders_ddb_sync"
    assert set(dag.task_ids) == {"discover_tables", "sync_table"}
    discover, sync = task(dag, "discover_tables"), task(dag, "sync_table")
    assert isinstance(discover, DiscoverDynamoDBTablesOperator)
    assert sync.downstream_task_ids == set() and discover.downstream_task_ids == {"sync_table"}
    # Mapped over what discovery returns, one task instance per table, labelled with the table.
    assert sync.operator_class is SyncDynamoDBTableOperator
    assert mapped_over(sync) is discover
    assert sync.partial_kwargs["map_index_template"] == TABLE_MAP_INDEX == "{{ task.target['table'] }}"
    assert sync.partial_kwargs["sync_options"] == config().sync_options()
    assert (sync.partial_kwargs["aws_conn_id"], sync.partial_kwargs["region_name"]) == ("aws_ddb", "eu-west-1")
    assert sync.partial_kwargs["snowflake_conn_id"] == "snowflake_ddb"
    # Discovery selects as the file says.
    assert (discover.tables, discover.ingestion_tag_key) == (None, "sync-to-snowflake")
    assert (discover.environment_tag_key, discover.environment_tag_value) == ("env", "prod")
    assert (discover.aws_conn_id, discover.region_name) == ("aws_ddb", "eu-west-1")


def test_batches_run_on_spark_through_the_spark_connection_unless_the_engine_is_the_worker() -> None:
    on_spark = task(build_dynamodb_sync_dag(config()), "sync_table")
    assert on_spark.partial_kwargs["spark_conn_id"] == config().connections.spark
    in_worker = task(build_dynamodb_sync_dag(config(with_("source", engine="worker"))), "sync_table")
    assert in_worker.partial_kwargs["spark_conn_id"] is None


def test_in_continuous_mode_each_table_s_task_runs_one_spark_application_for_the_runtime() -> None:
    continuous = task(
        build_dynamodb_sync_dag(config(with_("batch", mode="continuous", max_runtime_minutes=5))), "sync_table"
    )
    assert continuous.partial_kwargs["max_runtime_minutes"] == 5
    assert continuous.partial_kwargs["spark_conn_id"] == config().connections.spark
    assert task(build_dynamodb_sync_dag(config()), "sync_table").partial_kwargs["max_runtime_minutes"] is None
    assert continuous.partial_kwargs["idle_seconds"] == IDLE_SECONDS
    paced = with_("batch", mode="continuous", max_runtime_minutes=5, idle_seconds=15)
    assert task(build_dynamodb_sync_dag(config(paced)), "sync_table").partial_kwargs["idle_seconds"] == 15


def test_the_spark_section_reaches_each_batch_s_spark_submit() -> None:
    data = with_("spark", total_executor_cores=2, executor_memory="2g", conf={"spark.task.maxFailures": 2})
    sync = task(build_dynamodb_sync_dag(config(data)), "sync_table")
    assert sync.partial_kwargs["spark_submit"] == {"total_executor_cores": 2, "executor_memory": "2g"}
    assert sync.partial_kwargs["spark_conf"] == {"spark.task.maxFailures": "2"}
    # Without a spark section: spark-submit's own defaults (and the Spark connection's).
    plain = task(build_dynamodb_sync_dag(config()), "sync_table")
    assert (plain.partial_kwargs["spark_submit"], plain.partial_kwargs["spark_conf"]) == ({}, None)


def test_the_sync_dag_runs_on_the_connector_schedule_one_run_at_a_time_with_its_retries() -> None:
    dag = build_dynamodb_sync_dag(config())
    assert (dag.schedule, dag.max_active_runs, dag.catchup) == ("@hourly", 1, False)
    assert set(dag.tags) == {"dynamodb", "snowflake", "orders_ddb"}
    assert dag.default_args["retries"] == 4 and dag.default_args["retry_delay"] == timedelta(seconds=10)
    assert "discover_tables" in (dag.doc_md or "") and "Each batch runs on Spark" in (dag.doc_md or "")
    assert dag.description == "DynamoDB tables tagged sync-to-snowflake, env=prod -> Snowflake ANALYTICS.RAW"


def test_the_provision_dag_creates_the_lease_table_then_each_discovered_table_objects() -> None:
    dag = build_dynamodb_provision_dag(config())
    assert dag.dag_id == "dynamodb_snowflake_orders_ddb_provision"
    assert (dag.schedule, dag.max_active_runs) == (None, 1)
    lease, discover, provision = (task(dag, t) for t in ("create_lease_table", "discover_tables", "provision_table"))
    assert lease.downstream_task_ids == {"discover_tables"} and discover.downstream_task_ids == {"provision_table"}
    assert lease.application_name == "orders-ddb" and lease.aws_conn_id == "aws_ddb"
    assert provision.operator_class is ProvisionDynamoDBTableOperator
    assert mapped_over(provision) is discover
    assert provision.partial_kwargs["snowflake_conn_id"] == "snowflake_ddb"


def test_listed_tables_are_discovered_by_name() -> None:
    data = copy.deepcopy(TAGGED)
    for key in ("ingestion_tag_key", "environment_tag_key", "environment_tag_value"):
        del data["source"][key]
    data["source"]["tables"] = ["orders", "order-lines"]
    dag = build_dynamodb_sync_dag(config(data))
    discover = task(dag, "discover_tables")
    assert (discover.tables, discover.ingestion_tag_key) == (("orders", "order-lines"), None)
    assert dag.description == "DynamoDB tables orders, order-lines -> Snowflake ANALYTICS.RAW"


def test_each_table_sync_takes_the_file_settings_and_the_discovered_table() -> None:
    sync = config().table_sync(TARGET)
    assert (sync.application_name, sync.table, sync.stream_arn) == ("orders-ddb", TARGET.table, TARGET.stream_arn)
    # The partition key first, whatever order DescribeTable gave.
    assert sync.keys == (RowKey("pk", "B"), RowKey("sk", "N", numeric=True))  # number_keys: number
    assert sync.target.destination == Destination("ANALYTICS", "RAW", "ORDERS_V2_EU")
    assert sync.target.source_table == TARGET.table
    assert sync.target.keys == (KeyColumn("PK", "BINARY"), KeyColumn("SK", "NUMBER(38,0)"))
    assert (sync.target.layout, sync.target.deletes) == (Layout.PACKED, Deletes.SOFT)
    settings = sync.settings
    assert (settings.snapshot, settings.stream_start, settings.on_gap) == (
        SnapshotMode.SKIP,
        StreamStart.LATEST,
        OnGap.FAIL,
    )
    assert (settings.max_checkpoint_age, settings.total_segments) == (timedelta(hours=6), 16)
    assert settings.max_snapshot_batches_per_run == 3
    assert sync.read_rate == ReadRateSettings(read_fraction=0.25, read_units_per_second=None)
    assert (sync.max_items_per_segment, sync.max_records_per_shard, sync.lease_duration_seconds) == (2000, 5000, 120.0)


def test_the_defaults_map_to_an_initial_snapshot_from_the_trim_horizon_with_hard_deletes() -> None:
    data = {k: v for k, v in TAGGED.items() if k not in ("batch", "connections")}
    data["source"] = {k: TAGGED["source"][k] for k in ("type", "region", "application_name", "ingestion_tag_key")}
    sync = config(data).table_sync(TARGET)
    assert (sync.target.layout, sync.target.deletes) == (Layout.UNPACKED, Deletes.HARD)
    settings = sync.settings
    assert (settings.snapshot, settings.stream_start, settings.on_gap) == (
        SnapshotMode.INITIAL,
        StreamStart.TRIM_HORIZON,
        OnGap.RESNAPSHOT,
    )
    assert (settings.max_checkpoint_age, settings.total_segments) == (timedelta(hours=20), 4)
    assert settings.max_snapshot_batches_per_run == 10
    assert sync.read_rate == ReadRateSettings(None, None)  # the default fraction of a provisioned table
    assert sync.settings.snapshot is SnapshotMode.INITIAL


def test_an_absolute_read_rate_is_taken_for_on_demand_tables() -> None:
    data = copy.deepcopy(TAGGED)
    del data["source"]["snapshot_read_fraction"]
    data["source"]["snapshot_read_units_per_second"] = 150
    assert config(data).table_sync(TARGET).read_rate == ReadRateSettings(None, 150)


@pytest.mark.parametrize(
    ("data", "expected", "fix"),
    [
        (
            {**with_("spark", executor_memory="2g"), "source": {**TAGGED["source"], "engine": "worker"}},
            "spark: has no effect with source.engine: worker",
            "remove the spark section, or set source.engine: spark",
        ),
        (with_("snowflake", role="LOADER"), "snowflake: not in this version of the DynamoDB source", "remove"),
        (
            {
                **with_("batch", mode="continuous", max_runtime_minutes=5),
                "source": {**TAGGED["source"], "engine": "worker"},
            },
            "batch.mode: continuous runs each table's sync in a Spark driver, and source.engine: worker has none",
            "set source.engine: spark, or batch.mode: scheduled",
        ),
        (
            with_("batch", wait_for_records=True, max_bytes_per_shard=1048576),
            "batch.wait_for_records, batch.max_bytes_per_shard: not in this version",
            "remove",
        ),
        (
            with_("batch", schedule="on_new_records"),
            "batch.schedule: on_new_records is not in this version",
            "give a cron expression",
        ),
    ],
)
def test_a_setting_without_effect_on_the_dynamodb_source_is_refused(
    data: dict[str, Any], expected: str, fix: str
) -> None:
    with pytest.raises(ConnectorConfigError) as caught:
        config(data)
    message = str(caught.value)
    assert message.startswith("connectors/orders_ddb.yaml: invalid connector configuration")
    assert expected in message and fix in message


@pytest.mark.parametrize("mode", ["required", "best_effort"])
def test_the_provision_dag_checks_iam_first_for_the_tags_or_the_listed_tables(mode: str) -> None:
    dag = build_dynamodb_provision_dag(config(with_("source", iam_check=mode)))
    check = task(dag, "check_iam_permissions")
    assert isinstance(check, CheckDynamoDBIamPermissionsOperator)
    assert check.downstream_task_ids == {"create_lease_table"} and not check.upstream_task_ids
    assert (check.check_mode.value, check.tables, check.application_name) == (mode, None, "orders-ddb")
    assert (check.aws_conn_id, check.region_name) == ("aws_ddb", TAGGED["source"]["region"])
    # The tables it is pointed at, when listed: the policy it simulates is scoped to them.
    listed = copy.deepcopy(TAGGED)
    for key in ("ingestion_tag_key", "environment_tag_key", "environment_tag_value"):
        del listed["source"][key]
    listed["source"]["tables"] = ["orders"]
    assert task(build_dynamodb_provision_dag(config(listed)), "check_iam_permissions").tables == ["orders"]


def test_every_provision_step_after_a_skipped_iam_check_still_runs() -> None:
    """``iam_check: best_effort``: a check that cannot run skips, and provisioning goes on, as for Kinesis."""
    dag = build_dynamodb_provision_dag(config(with_("source", iam_check="best_effort")))
    check = task(dag, "check_iam_permissions")
    after = check.get_flat_relatives(upstream=False)
    assert {t.task_id for t in after} == {"create_lease_table", "discover_tables", "provision_table"}
    # Each one runs unless a step before it failed: a skipped step before it is no failure.
    assert {t.task_id: t.trigger_rule for t in after} == {t.task_id: TriggerRule.NONE_FAILED for t in after}
    assert set(dag.task_dict) == {check.task_id} | {t.task_id for t in after}


def test_the_provision_dag_has_no_iam_check_when_it_is_off() -> None:
    dag = build_dynamodb_provision_dag(config(with_("source", iam_check="off")))
    assert "check_iam_permissions" not in dag.task_ids
    assert config().source.iam_check.value == "required"  # the default, as for Kinesis


def write(directory: Path, data: dict[str, Any], name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


KINESIS: dict[str, Any] = {
    "connector_id": "orders",
    "source": {"stream_name": "orders", "region": "eu-west-1", "application_name": "orders-app"},
    "destination": {"database": "ANALYTICS", "schema": "RAW", "table": "ORDERS"},
}


def test_a_directory_with_both_sources_builds_every_dag_and_cleans_up_both(tmp_path: Path) -> None:
    connectors = tmp_path / "dags" / "connectors"
    ddb = write(connectors, TAGGED, "orders_ddb.yaml")
    kinesis = write(connectors, KINESIS, "orders.yaml")
    assert [c.connector_id for c in load_any_connector_configs(connectors)] == ["orders", "orders_ddb"]
    dags = build_connector_dags(connectors)
    assert {d for d in dags if "orders_ddb" in d} == {
        "dynamodb_snowflake_orders_ddb_provision",
        "dynamodb_snowflake_orders_ddb_sync",
        "dynamodb_snowflake_orders_ddb_reset",
    }
    cleanup: Any
    generations: Any
    cleanup, generations = sorted(dags["kinesis_snowflake_cleanup"].tasks, key=lambda t: t.task_id)
    assert cleanup.task_id == "cleanup_aws_default_eu_west_1"
    assert [c["connector_id"] for c in cleanup.connectors] == ["orders"]
    # The DynamoDB connector's task: its lease table, and the schema holding its generations table.
    assert generations.task_id == "cleanup_orders_ddb_generations"
    where = (generations.application_name, generations.database, generations.schema)
    assert where == ("orders-ddb", "ANALYTICS", "RAW")
    assert (generations.preview_only, generations.confirm) == ("{{ params.dry_run }}", "{{ params.confirm }}")
    # The way of a DAG file per connector file: the DynamoDB file gets one too.
    for path in (ddb, kinesis):
        (tmp_path / "dags" / dag_file_name(path)).write_text(render_dag_file(path, tmp_path / "dags"))
    assert set(build_cleanup_dags(connectors)) == {"kinesis_snowflake_cleanup"}
    assert set(build_connector_file_dags(ddb)) == {
        "dynamodb_snowflake_orders_ddb_provision",
        "dynamodb_snowflake_orders_ddb_sync",
        "dynamodb_snowflake_orders_ddb_reset",
    }


def test_two_files_with_one_connector_id_are_refused_across_sources(tmp_path: Path) -> None:
    connectors = tmp_path / "connectors"
    write(connectors, {**KINESIS, "connector_id": "orders_ddb"}, "a.yaml")
    second = write(connectors, TAGGED, "b.yaml")
    with pytest.raises(ConnectorConfigError, match="connector_id 'orders_ddb' is already used by"):
        build_connector_file_dags(second)
