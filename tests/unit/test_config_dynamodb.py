"""The DynamoDB source's configuration: every mistake names the file, the field, the value and the fix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.config import (
    DEFAULT_MAX_CHECKPOINT_AGE_HOURS,
    ConnectorConfigError,
    DynamoDBConnectorConfig,
    load_any_connector_config,
    load_connector_config,
    load_dynamodb_connector_config,
    parse_dynamodb_connector_config,
)
from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import KeyAttribute, SyncTarget, TableSelection

BY_NAME: dict[str, Any] = {
    "connector_id": "orders_ddb",
    "source": {
        "type": "dynamodb",
        "region": "eu-west-1",
        "application_name": "orders-ddb",
        "tables": ["orders", "order-lines"],
    },
    "destination": {"database": "analytics", "schema": "raw"},
}


def connector(**source: Any) -> dict[str, Any]:
    data = copy.deepcopy(BY_NAME)
    data["source"].update(source)
    data["source"] = {k: v for k, v in data["source"].items() if v is not None}
    return data


def write(tmp_path: Path, data: dict[str, Any], name: str = "orders_ddb.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def error_of(data: dict[str, Any]) -> str:
    with pytest.raises(ConnectorConfigError) as caught:
        parse_dynamodb_connector_config(data, source="conn/orders_ddb.yaml")
    return str(caught.value)


def test_a_connector_naming_its_tables_has_the_documented_defaults(tmp_path: Path) -> None:
    config = load_dynamodb_connector_config(write(tmp_path, BY_NAME))
    source = config.source
    assert source.table_selection() == TableSelection(tables=("orders", "order-lines"))
    assert (source.snapshot, source.layout, source.deletes, source.on_gap) == (
        "initial",
        "unpacked",
        "hard",
        "resnapshot",
    )
    assert (source.destination_table_template, source.initial_position) == ("{table}", "TRIM_HORIZON")
    assert source.max_checkpoint_age_hours == DEFAULT_MAX_CHECKPOINT_AGE_HOURS == 20
    assert (config.destination.database, config.destination.schema_) == ("ANALYTICS", "RAW")


def test_a_connector_discovering_by_tags_selects_the_tags() -> None:
    data = connector(
        tables=None,
        ingestion_tag_key="datalake-ingest",
        environment_tag_key="environment",
        environment_tag_value="prod",
        snapshot="skip",
        stream_initial_position="LATEST",
        layout="packed",
        deletes="soft",
        destination_table_template="DDB_{table}",
        snapshot_read_units_per_second=50,
    )
    source = parse_dynamodb_connector_config(data).source
    assert source.table_selection() == TableSelection(
        ingestion_tag_key="datalake-ingest", environment_tag_key="environment", environment_tag_value="prod"
    )
    assert (source.initial_position, source.layout, source.deletes) == ("LATEST", "packed", "soft")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"tables": None}, "source needs tables (a list of DynamoDB table names) or ingestion_tag_key"),
        ({"ingestion_tag_key": "ingest"}, "source.tables and source.ingestion_tag_key exclude each other"),
        ({"tables": []}, "source.tables: must list at least one table"),
        ({"tables": ["ok_table", "a b"]}, "source.tables: 'a b' is not a DynamoDB table name"),
        ({"tables": ["orders", "orders"]}, "source.tables: lists orders more than once"),
        (
            {"tables": ["orders-v2", "orders.v2"]},
            "tables 'orders-v2' and 'orders.v2' would both land in Snowflake table ORDERS_V2",
        ),
        ({"tables": ["2024_orders"]}, "'2024_orders' would land in '2024_ORDERS'"),
        (
            {"destination_table_template": "DDB-{table}"},
            "source.destination_table_template: must hold {table} once",
        ),
        (
            {"tables": None, "ingestion_tag_key": "i", "environment_tag_key": "env"},
            "environment_tag_key and source.environment_tag_value go together",
        ),
        (
            {"environment_tag_key": "env", "environment_tag_value": "prod"},
            "environment_tag_key only filters tables discovered by tags",
        ),
        ({"stream_initial_position": "LATEST"}, "stream_initial_position is only used with source.snapshot: skip"),
        ({"snapshot": "sometimes"}, "source.snapshot: Input should be 'initial' or 'skip' (got 'sometimes')"),
        ({"layout": "flat"}, "source.layout: Input should be 'unpacked' or 'packed'"),
        ({"deletes": "never"}, "source.deletes: Input should be 'hard' or 'soft'"),
        ({"number_keys": "decimal"}, "source.number_keys: Input should be 'number' or 'text'"),
        ({"on_gap": "ignore"}, "source.on_gap: Input should be 'resnapshot' or 'fail'"),
        ({"max_checkpoint_age_hours": 24}, "source.max_checkpoint_age_hours: must be below 24, the stream's retention"),
        ({"snapshot_total_segments": 0}, "source.snapshot_total_segments: Input should be greater than or equal to 1"),
        ({"snapshot_read_fraction": 1.5}, "source.snapshot_read_fraction: Input should be less than or equal to 1"),
        (
            {"snapshot_read_fraction": 0.5, "snapshot_read_units_per_second": 100},
            "set one of source.snapshot_read_fraction",
        ),
        ({"snapshot_max_items_per_segment": 0}, "source.snapshot_max_items_per_segment: Input should be greater"),
        ({"region": "Ireland"}, "source.region: must be an AWS region code such as 'us-east-1' (got 'Ireland')"),
        ({"application_name": "ab"}, "source.application_name: must be a valid DynamoDB table name"),
        ({"stream_name": "orders"}, "source.stream_name: unknown field"),
    ],
)
def test_a_mistake_names_the_file_the_field_the_value_and_the_fix(source: dict[str, Any], expected: str) -> None:
    message = error_of(connector(**source))
    assert message.startswith("conn/orders_ddb.yaml: invalid connector configuration")
    assert expected in message


def test_the_destination_holds_a_database_and_a_schema_not_one_table() -> None:
    data = copy.deepcopy(BY_NAME)
    data["destination"]["table"] = "ORDERS"
    assert "destination.table: unknown field" in error_of(data)


def test_a_dynamodb_file_is_refused_by_the_kinesis_loader_and_built_by_the_dag_factory(tmp_path: Path) -> None:
    from airflow_kinesis_snowflake.dags import build_connector_dags, build_connector_file_dags

    connectors = tmp_path / "connectors"
    connectors.mkdir()
    path = write(connectors, BY_NAME)
    with pytest.raises(ConnectorConfigError, match="this reads Kinesis stream connectors only") as caught:
        load_connector_config(path)
    assert str(caught.value).startswith(f"{path}: source.type dynamodb")
    assert "not in this version" not in str(caught.value)
    assert isinstance(load_any_connector_config(path), DynamoDBConnectorConfig)
    expected = {
        "dynamodb_snowflake_orders_ddb_provision",
        "dynamodb_snowflake_orders_ddb_sync",
        "dynamodb_snowflake_orders_ddb_reset",
    }
    assert set(build_connector_file_dags(path)) == expected
    # A directory of DynamoDB connectors only: their DAGs, and the clean-up DAG (their superseded generations).
    assert set(build_connector_dags(connectors)) == expected | {"kinesis_snowflake_cleanup"}


def test_an_invalid_dynamodb_file_is_refused_with_its_own_mistakes(tmp_path: Path) -> None:
    path = write(tmp_path, connector(on_gap="ignore"))
    with pytest.raises(ConnectorConfigError, match=r"source\.on_gap: Input should be") as caught:
        load_connector_config(path)
    assert "not in this version" not in str(caught.value)
    assert "source.type is dynamodb" in str(caught.value)


@pytest.mark.parametrize(
    ("written", "hint"),
    [
        ("DynamoDB", "; the values are lower case: write source.type: dynamodb"),
        ("Kinesis", "; the values are lower case: write source.type: kinesis"),
        ("dynamo", ""),
        (3, ""),
    ],
)
def test_a_source_type_that_names_no_source_is_one_error_naming_the_allowed_values(
    tmp_path: Path, written: Any, hint: str
) -> None:
    path = write(tmp_path, connector(type=written))
    for load in (load_any_connector_config, load_connector_config):
        with pytest.raises(ConnectorConfigError) as caught:
            load(path)
        message = str(caught.value)
        assert message.splitlines() == [
            f"{path}: invalid connector configuration",
            f"  - source.type: must be kinesis or dynamodb (got {written!r}){hint}. Nothing else in the file was "
            "checked: which source's fields it needs depends on source.type",
        ]
    # No Kinesis field is reported missing for a DynamoDB connector's file.
    assert "stream_name" not in message and "tables" not in message


def test_a_tables_sync_carries_the_connector_and_the_destination_its_claim_names(tmp_path: Path) -> None:
    config = load_dynamodb_connector_config(write(tmp_path, BY_NAME))
    target = SyncTarget(
        table="orders",
        arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders",
        stream_arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-11-25T00:00:00.000",
        keys=(KeyAttribute("id", "HASH", "S"),),
        read_capacity_units=None,
        destination_table="ORDERS",
    )
    sync = config.table_sync(target)
    assert (sync.connector_id, sync.application_name) == ("orders_ddb", "orders-ddb")
    assert sync.target.destination.qualified_name == "ANALYTICS.RAW.ORDERS"
    assert TableSync.from_dict(sync.to_dict()) == sync  # as a continuous run carries it


@pytest.mark.parametrize(("number_keys", "column_type"), [(None, "NUMBER(38,0)"), ("text", "VARCHAR")])
def test_a_number_key_is_a_number_column_unless_number_keys_is_text(
    tmp_path: Path, number_keys: str | None, column_type: str
) -> None:
    config = load_dynamodb_connector_config(write(tmp_path, connector(number_keys=number_keys)))
    target = SyncTarget(
        table="orders",
        arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders",
        stream_arn="arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-11-25T00:00:00.000",
        keys=(KeyAttribute("id", "HASH", "S"), KeyAttribute("ts", "RANGE", "N")),
        read_capacity_units=None,
        destination_table="ORDERS",
    )
    sync = config.table_sync(target)
    assert [(k.name, k.column_type) for k in sync.target.keys] == [("ID", "VARCHAR"), ("TS", column_type)]
    assert [k.sql_type for k in sync.keys] == ["VARCHAR", column_type]
    assert TableSync.from_dict(sync.to_dict()) == sync
