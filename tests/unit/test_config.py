"""ConnectorConfig validation: every mistake names the file, the field and what is allowed."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.exceptions import AirflowProviderDeprecationWarning

from airflow_kinesis_snowflake.config import (
    APPLICATION_NAME_MAX,
    CONNECTOR_ID_MAX,
    IDLE_MAX_SECONDS,
    MAX_RUNTIME_MAX_MINUTES,
    MIGRATION_SUFFIX,
    RETRY_DELAY_MAX_SECONDS,
    BatchConfig,
    ConnectorConfig,
    ConnectorConfigError,
    ConsumerType,
    load_connector_config,
    load_connector_configs,
    parse_connector_config,
)
from airflow_kinesis_snowflake.core.admin.iam import IamCheckMode
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS
from airflow_kinesis_snowflake.core.model import DestinationType, InitialPosition
from airflow_kinesis_snowflake.core.planning import DEFAULT_MAX_BYTES_PER_SHARD

CONNECTORS_DIR = Path(__file__).resolve().parents[2] / "dags" / "connectors"
SHIPPED = CONNECTORS_DIR / "orders.yaml"


def _shipped_data() -> dict[str, Any]:
    data = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _write(directory: Path, data: Any, name: str = "orders.yaml") -> Path:
    path = directory / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _with(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = copy.deepcopy(_shipped_data())
    change(data)
    return data


def _load_error(directory: Path, data: Any) -> str:
    """Write ``data`` to a file, load it, and return the error message (which must name the file)."""
    path = _write(directory, data)
    with pytest.raises(ConnectorConfigError) as info:
        load_connector_config(path)
    message = str(info.value)
    assert str(path) in message
    return message


def _set(section: str, **values: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data[section].update(values)

    return change


def _drop(section: str | None, field: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        (data[section] if section else data).pop(field)

    return change


# -- the shipped file ---------------------------------------------------------------------------


def test_shipped_orders_yaml_loads() -> None:
    config = load_connector_config(SHIPPED)

    assert config.connector_id == "orders"
    assert config.source.type == "kinesis"
    assert config.source.stream_name == "orders"
    assert config.source.region == "us-east-1"
    assert config.source.application_name == "orders-to-snowflake"
    assert config.source.consumer_type is ConsumerType.SHARED_THROUGHPUT
    assert config.source.initial_position is InitialPosition.TRIM_HORIZON
    assert config.source.initial_timestamp is None
    assert config.source.max_records_per_call == 10000
    assert (config.destination.database, config.destination.schema_, config.destination.table) == (
        "ANALYTICS",
        "RAW",
        "ORDERS",
    )
    assert config.table_fqn == '"ANALYTICS"."RAW"."ORDERS"'
    assert config.batch.max_records_per_shard == 100000
    assert config.batch.max_bytes_per_shard == DEFAULT_MAX_BYTES_PER_SHARD
    assert config.connections.aws == "aws_default"
    assert config.connections.snowflake == "snowflake_default"
    assert config.connections.spark == "spark_default"


def test_shipped_connectors_directory_loads() -> None:
    configs = load_connector_configs(CONNECTORS_DIR)

    assert "orders" in [c.connector_id for c in configs]
    assert all(isinstance(c, ConnectorConfig) for c in configs)


def test_minimal_config_gets_defaults() -> None:
    config = parse_connector_config(
        {
            "connector_id": "minimal",
            "source": {"stream_name": "s", "region": "eu-west-1", "application_name": "app"},
            "destination": {"database": "db", "schema": "sc", "table": "tb"},
        }
    )

    assert config.source.consumer_type is ConsumerType.SHARED_THROUGHPUT
    assert config.source.initial_position is InitialPosition.TRIM_HORIZON
    assert config.source.max_records_per_call == 10000
    assert config.destination.type == "TABLE"
    assert config.connections.aws == "aws_default"


# -- one bad value at a time ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            _set("source", initial_position="EARLIEST"),
            ["source.initial_position", "TRIM_HORIZON", "LATEST", "AT_TIMESTAMP", "EARLIEST"],
            id="initial_position",
        ),
        pytest.param(
            _set("source", consumer_type="EFO"),
            ["source.consumer_type", "SHARED_THROUGHPUT", "ENHANCED_FAN_OUT", "EFO"],
            id="consumer_type",
        ),
        pytest.param(
            _set("source", max_records_per_call=0),
            ["source.max_records_per_call", "greater than or equal to 1", "got 0"],
            id="max_records_per_call-0",
        ),
        pytest.param(
            _set("source", max_records_per_call=10001),
            ["source.max_records_per_call", "less than or equal to 10000", "got 10001"],
            id="max_records_per_call-10001",
        ),
        pytest.param(
            _set("source", max_records_per_call="lots"),
            ["source.max_records_per_call", "integer"],
            id="max_records_per_call-not-a-number",
        ),
        pytest.param(
            _set("source", application_name="ab"),
            ["source.application_name", f"3-{APPLICATION_NAME_MAX}", "DynamoDB", "'ab'"],
            id="application_name-too-short",
        ),
        pytest.param(
            _set("source", application_name="orders to/snowflake"),
            ["source.application_name", "letters, digits, '_', '.', '-'"],
            id="application_name-bad-characters",
        ),
        pytest.param(
            _set("source", application_name="a" * (APPLICATION_NAME_MAX + 1)),
            ["source.application_name", f"3-{APPLICATION_NAME_MAX}", MIGRATION_SUFFIX],
            id="application_name-too-long",
        ),
        pytest.param(
            _set("source", region="US-EAST-1"),
            ["source.region", "AWS region", "us-east-1", "US-EAST-1"],
            id="region-upper-case",
        ),
        pytest.param(
            _set("source", region="useast1"),
            ["source.region", "AWS region", "useast1"],
            id="region-no-dashes",
        ),
        pytest.param(
            _set("source", stream_name="orders/stream"),
            ["source.stream_name", "1-128 characters"],
            id="stream_name",
        ),
        pytest.param(
            _set("source", type="dynamodb"),
            ["source.type", "kinesis"],
            id="source-type",
        ),
        pytest.param(
            _set("destination", table="a-b"),
            ["destination.table", "Snowflake identifier", "'a-b'"],
            id="destination-table",
        ),
        pytest.param(
            _set("destination", schema="1raw"),
            ["destination.schema", "Snowflake identifier", "'1raw'"],
            id="destination-schema",
        ),
        pytest.param(
            _set("destination", database="my db"),
            ["destination.database", "Snowflake identifier"],
            id="destination-database",
        ),
        pytest.param(
            _set("batch", max_records_per_shard=0),
            ["batch.max_records_per_shard", "greater than or equal to 1"],
            id="batch-max_records_per_shard",
        ),
        pytest.param(
            _set("batch", max_bytes_per_shard=1000),
            ["batch.max_bytes_per_shard", "from 1048576 (1 MiB", "to 4294967296", "(got 1000)", "leave the field out"],
            id="batch-max_bytes_per_shard-too-small",
        ),
        pytest.param(
            _set("batch", max_bytes_per_shard=2**33),
            ["batch.max_bytes_per_shard", "to 4294967296 (4 GiB)", f"(got {2**33})"],
            id="batch-max_bytes_per_shard-too-large",
        ),
        pytest.param(
            _set("batch", max_bytes_per_shard="64MB"),
            ["batch.max_bytes_per_shard", "valid integer", "'64MB'"],
            id="batch-max_bytes_per_shard-with-a-unit",
        ),
        pytest.param(
            lambda data: data.update(connector_id="orders feed"),
            ["connector_id", "orders feed"],
            id="connector_id",
        ),
    ],
)
def test_bad_value_names_file_field_and_rule(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], expected: list[str]
) -> None:
    message = _load_error(tmp_path, _with(change))

    for fragment in expected:
        assert fragment in message


def test_application_name_leaves_room_for_migration_suffix() -> None:
    # DynamoDB table names are at most 255 characters; '<name>_migration' must fit too.
    assert APPLICATION_NAME_MAX + len(MIGRATION_SUFFIX) == 255

    longest = "a" * APPLICATION_NAME_MAX
    config = parse_connector_config(_with(_set("source", application_name=longest)))
    assert config.source.application_name == longest

    with pytest.raises(ConnectorConfigError, match=r"source\.application_name"):
        parse_connector_config(_with(_set("source", application_name=longest + "a")))


@pytest.mark.parametrize("name", ["abc", "orders.to_snowflake-v2", "A_B.C-1"])
def test_valid_application_names(name: str) -> None:
    config = parse_connector_config(_with(_set("source", application_name=name)))

    assert config.source.application_name == name


@pytest.mark.parametrize("region", ["us-east-1", "eu-central-1", "ap-southeast-2", "us-gov-west-1"])
def test_valid_regions(region: str) -> None:
    assert parse_connector_config(_with(_set("source", region=region))).source.region == region


# -- initial position and timestamp ----------------------------------------------------------------


def test_at_timestamp_without_initial_timestamp(tmp_path: Path) -> None:
    message = _load_error(tmp_path, _with(_set("source", initial_position="AT_TIMESTAMP")))

    assert "source" in message
    assert "initial_position AT_TIMESTAMP needs initial_timestamp" in message
    assert "ISO 8601" in message


def test_initial_timestamp_without_at_timestamp(tmp_path: Path) -> None:
    message = _load_error(tmp_path, _with(_set("source", initial_timestamp="2026-01-31T00:00:00Z")))

    assert "source" in message
    assert "initial_timestamp is only used with initial_position AT_TIMESTAMP" in message


def test_at_timestamp_with_initial_timestamp_from_yaml_file(tmp_path: Path) -> None:
    text = SHIPPED.read_text(encoding="utf-8").replace(
        "initial_position: TRIM_HORIZON",
        "initial_position: AT_TIMESTAMP\n  initial_timestamp: '2026-01-31T12:30:00Z'",
    )
    path = tmp_path / "orders.yaml"
    path.write_text(text, encoding="utf-8")

    config = load_connector_config(path)

    assert config.source.initial_position is InitialPosition.AT_TIMESTAMP
    assert config.source.initial_timestamp == datetime(2026, 1, 31, 12, 30, tzinfo=UTC)


def test_naive_initial_timestamp_is_taken_as_utc() -> None:
    config = parse_connector_config(
        _with(_set("source", initial_position="AT_TIMESTAMP", initial_timestamp="2026-01-31T12:30:00"))
    )

    assert config.source.initial_timestamp == datetime(2026, 1, 31, 12, 30, tzinfo=UTC)
    assert config.source.initial_timestamp is not None
    assert config.source.initial_timestamp.utcoffset() is not None


# -- unknown and missing fields ---------------------------------------------------------------


def test_unknown_field_is_a_typo(tmp_path: Path) -> None:
    def typo(data: dict[str, Any]) -> None:
        data["source"]["stream_nmae"] = data["source"].pop("stream_name")

    message = _load_error(tmp_path, _with(typo))

    assert "source.stream_nmae: unknown field" in message
    assert "source.stream_name: required field is missing" in message


def test_unknown_top_level_section(tmp_path: Path) -> None:
    message = _load_error(tmp_path, _with(lambda data: data.update(sink={"table": "x"})))

    assert "sink: unknown field" in message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_drop("source", "application_name"), "source.application_name"),
        (_drop("source", "region"), "source.region"),
        (_drop("destination", "table"), "destination.table"),
        (_drop("destination", "schema"), "destination.schema"),
        (_drop(None, "destination"), "destination"),
        (_drop(None, "connector_id"), "connector_id"),
    ],
)
def test_missing_required_field(tmp_path: Path, change: Callable[[dict[str, Any]], None], field: str) -> None:
    message = _load_error(tmp_path, _with(change))

    assert f"{field}: required field is missing" in message


def test_every_mistake_is_reported_at_once(tmp_path: Path) -> None:
    def two_mistakes(data: dict[str, Any]) -> None:
        data["source"]["region"] = "nowhere"
        data["destination"]["table"] = "a-b"

    message = _load_error(tmp_path, _with(two_mistakes))

    assert "source.region" in message
    assert "destination.table" in message


# -- destination identifiers ----------------------------------------------------------------------


def test_destination_identifiers_are_upper_cased() -> None:
    config = parse_connector_config(_with(_set("destination", database="analytics", schema="raw", table="_orders$1")))

    assert config.destination.database == "ANALYTICS"
    assert config.destination.schema_ == "RAW"
    assert config.destination.table == "_ORDERS$1"
    assert config.table_fqn == '"ANALYTICS"."RAW"."_ORDERS$1"'


# -- the file itself ------------------------------------------------------------------------------


def test_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("connector_id: orders\nsource: [unclosed\n", encoding="utf-8")

    with pytest.raises(ConnectorConfigError) as info:
        load_connector_config(path)

    assert str(path) in str(info.value)
    assert "not valid YAML" in str(info.value)


@pytest.mark.parametrize("text", ["- orders\n- payments\n", "just a string\n", "42\n", ""])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str) -> None:
    path = tmp_path / "orders.yaml"
    path.write_text(text, encoding="utf-8")

    with pytest.raises(ConnectorConfigError) as info:
        load_connector_config(path)

    assert str(path) in str(info.value)
    assert "expected a mapping at the top level" in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"

    with pytest.raises(ConnectorConfigError) as info:
        load_connector_config(path)

    assert str(path) in str(info.value)
    assert "cannot read" in str(info.value)


def test_parse_connector_config_names_its_source() -> None:
    with pytest.raises(ConnectorConfigError) as info:
        parse_connector_config(["not", "a", "mapping"], source="inline.yaml")

    assert str(info.value).startswith("inline.yaml:")


# -- a directory of connectors ---------------------------------------------------------------------


def test_load_connector_configs_reads_yaml_and_yml_in_name_order(tmp_path: Path) -> None:
    _write(tmp_path, _with(lambda d: d.update(connector_id="payments")), name="b.yml")
    _write(tmp_path, _with(lambda d: d.update(connector_id="orders")), name="a.yaml")
    (tmp_path / "notes.txt").write_text("not a connector", encoding="utf-8")

    configs = load_connector_configs(tmp_path)

    assert [c.connector_id for c in configs] == ["orders", "payments"]


def test_duplicate_connector_id_across_files(tmp_path: Path) -> None:
    first = _write(tmp_path, _shipped_data(), name="a.yaml")
    second = _write(tmp_path, _with(_set("source", application_name="other-app")), name="b.yaml")

    with pytest.raises(ConnectorConfigError) as info:
        load_connector_configs(tmp_path)

    message = str(info.value)
    assert message.startswith(f"{second}:")
    assert "'orders'" in message
    assert str(first) in message


def test_one_bad_file_fails_the_directory(tmp_path: Path) -> None:
    _write(tmp_path, _shipped_data(), name="a.yaml")
    bad = _write(tmp_path, _with(_set("source", region="mars")), name="b.yaml")

    with pytest.raises(ConnectorConfigError) as info:
        load_connector_configs(tmp_path)

    assert str(bad) in str(info.value)
    assert "source.region" in str(info.value)


# -- destination types, table properties and the snowflake section -----------------------------------

PUBLIC_KEY_PEM = Path(__file__).parent / "core" / "admin" / "golden" / "service_user_public_key.pem"
PIPE_SQL = "COPY INTO ANALYTICS.RAW.ORDERS FROM (SELECT $1:order_id, $1 FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"


def _snowflake(**values: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["snowflake"] = {**(data.get("snowflake") or {}), **values}

    return change


def _without_table_properties(data: dict[str, Any]) -> None:
    for name in ("schema_evolution", "error_logging", "row_timestamp"):
        data["destination"].pop(name, None)


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        for c in changes:
            c(data)

    return change


def test_shipped_orders_yaml_declares_table_properties_and_columns() -> None:
    config = load_connector_config(SHIPPED)

    assert config.destination.type is DestinationType.TABLE
    assert (config.destination.schema_evolution, config.destination.error_logging) == (True, True)
    assert config.destination.row_timestamp is True
    assert config.snowflake is not None
    assert config.snowflake.columns == {
        "ORDER_ID": "NUMBER(38,0)",
        "CUSTOMER": "VARCHAR",
        "AMOUNT": "FLOAT",
        "STATUS": "VARCHAR",
        "CREATED_AT": "TIMESTAMP_TZ",
    }
    assert config.snowflake.role is None and config.snowflake.user is None


def test_new_fields_default_when_left_out() -> None:
    config = parse_connector_config(
        {
            "connector_id": "minimal",
            "source": {"stream_name": "s", "region": "eu-west-1", "application_name": "app"},
            "destination": {"database": "db", "schema": "sc", "table": "tb"},
        }
    )

    d = config.destination
    assert (d.type, d.schema_evolution, d.error_logging, d.row_timestamp) == (DestinationType.TABLE, True, True, True)
    assert (d.catalog, d.external_volume, d.base_location, d.pipe, d.pipe_definition) == (
        "SNOWFLAKE",
        None,
        None,
        None,
        None,
    )
    assert d.cluster_by == ()
    assert config.snowflake is None
    spec = config.provisioning_spec()
    assert (spec.role, spec.user, dict(spec.columns)) == (None, None, {})


def test_snowflake_section_with_service_user() -> None:
    config = parse_connector_config(
        _with(
            _snowflake(
                role="kinesis_role",
                user="kinesis_user",
                warehouse="wh",
                public_key_variable="orders_public_key",
                columns={"order_id": "number(38, 0)", "note": "varchar(100)"},
            )
        )
    )

    sf = config.snowflake
    assert sf is not None
    assert (sf.role, sf.user, sf.warehouse) == ("KINESIS_ROLE", "KINESIS_USER", "WH")
    assert (sf.public_key_variable, sf.public_key_conn_id) == ("orders_public_key", None)
    assert sf.columns == {"ORDER_ID": "NUMBER(38,0)", "NOTE": "VARCHAR(100)"}


@pytest.mark.parametrize(
    ("change", "check"),
    [
        pytest.param(
            _both(
                _without_table_properties,
                _set(
                    "destination",
                    type="ICEBERG",
                    external_volume="iceberg_vol",
                    base_location="orders/data",
                    schema_evolution=False,
                ),
            ),
            lambda d: (
                (d.type, d.external_volume, d.base_location, d.catalog, d.schema_evolution)
                == (DestinationType.ICEBERG, "ICEBERG_VOL", "orders/data", "SNOWFLAKE", False)
            ),
            id="iceberg",
        ),
        pytest.param(
            _both(
                _without_table_properties,
                _set("destination", type="INTERACTIVE", cluster_by=["order_id"]),
                _snowflake(columns={"ORDER_ID": "NUMBER"}),
            ),
            lambda d: (d.type, d.cluster_by) == (DestinationType.INTERACTIVE, ("ORDER_ID",)),
            id="interactive",
        ),
        pytest.param(
            _set("destination", type="PIPE", pipe="orders_pipe", pipe_definition=PIPE_SQL + ";"),
            lambda d: (d.type, d.pipe, d.pipe_definition) == (DestinationType.PIPE, "ORDERS_PIPE", PIPE_SQL),
            id="pipe",
        ),
    ],
)
def test_each_destination_type_loads(change: Callable[[dict[str, Any]], None], check: Callable[[Any], bool]) -> None:
    config = parse_connector_config(_with(change))

    assert check(config.destination)
    assert config.provisioning_spec().destination_type is config.destination.type


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            _set("destination", type="VIEW"),
            ["destination.type", "'TABLE', 'ICEBERG', 'INTERACTIVE' or 'PIPE'", "VIEW"],
            id="type",
        ),
        pytest.param(
            _set("destination", schema_evolution="sometimes"),
            ["destination.schema_evolution", "valid boolean"],
            id="schema_evolution-not-a-bool",
        ),
        pytest.param(
            _set("destination", type="ICEBERG", catalog="GLUE"),
            ["destination.catalog", "must be SNOWFLAKE", "GLUE"],
            id="catalog",
        ),
        pytest.param(
            _set("destination", type="ICEBERG", base_location="../elsewhere"),
            ["destination.base_location", "relative directory", "without '..'"],
            id="base_location",
        ),
        pytest.param(
            _set("destination", type="ICEBERG", external_volume="my volume"),
            ["destination.external_volume", "Snowflake identifier"],
            id="external_volume",
        ),
        pytest.param(
            _set("destination", external_volume="vol"),
            ["destination.external_volume is only used with type ICEBERG", "type is TABLE"],
            id="external_volume-on-table",
        ),
        pytest.param(
            _set("destination", pipe="p"),
            ["destination.pipe is only used with type PIPE"],
            id="pipe-on-table",
        ),
        pytest.param(
            _set("destination", type="PIPE"),
            ["type PIPE needs destination.pipe and destination.pipe_definition"],
            id="pipe-missing",
        ),
        pytest.param(
            _set("destination", type="PIPE", pipe="p", pipe_definition=PIPE_SQL.replace("ORDERS FROM", "OTHER FROM")),
            ["destination.pipe_definition", "must load the destination table: COPY INTO ANALYTICS.RAW.ORDERS"],
            id="pipe_definition-other-table",
        ),
        pytest.param(
            _set("destination", type="PIPE", pipe="p", pipe_definition=PIPE_SQL + "; DROP TABLE ANALYTICS.RAW.ORDERS"),
            ["destination.pipe_definition", "single COPY INTO statement"],
            id="pipe_definition-two-statements",
        ),
        pytest.param(
            _both(_without_table_properties, _set("destination", type="INTERACTIVE")),
            ["destination.cluster_by is required for type INTERACTIVE"],
            id="interactive-without-cluster_by",
        ),
        pytest.param(
            _both(
                _without_table_properties,
                _set("destination", type="INTERACTIVE", cluster_by=["ID"], row_timestamp=True),
                _snowflake(columns={"ID": "NUMBER"}),
            ),
            ["destination.row_timestamp is not available for type INTERACTIVE", "only for TABLE, PIPE"],
            id="row_timestamp-on-interactive",
        ),
        pytest.param(
            _set("destination", type="ICEBERG"),
            ["destination.row_timestamp is not available for type ICEBERG", "remove it"],
            id="row_timestamp-on-iceberg",
        ),
        pytest.param(
            _set("destination", cluster_by=["shipped_at"]),
            ["destination.cluster_by: column SHIPPED_AT is not in snowflake.columns", "ORDER_ID, CUSTOMER"],
            id="cluster_by-unknown-column",
        ),
        pytest.param(
            _snowflake(user="u", public_key_variable="k"),
            ["snowflake.user needs snowflake.role"],
            id="user-without-role",
        ),
        pytest.param(
            _snowflake(role="r", user="u"),
            ["snowflake.user needs snowflake.public_key_variable or snowflake.public_key_conn_id"],
            id="user-without-key-source",
        ),
        pytest.param(
            _snowflake(role="r", user="u", public_key_variable="v", public_key_conn_id="c"),
            ["set only one of snowflake.public_key_variable and snowflake.public_key_conn_id"],
            id="two-key-sources",
        ),
        pytest.param(
            _snowflake(role="r", public_key_variable="v"),
            ["a public key source is only used with snowflake.user"],
            id="key-source-without-user",
        ),
        pytest.param(
            _snowflake(role="my role"),
            ["snowflake.role", "Snowflake identifier", "my role"],
            id="role",
        ),
        pytest.param(
            _snowflake(columns={"ID": "BLOB"}),
            ["snowflake.columns", "column 'ID'", "must be a Snowflake data type", "NUMBER", "BLOB"],
            id="column-type",
        ),
        pytest.param(
            _snowflake(columns={"ID": "NUMBER); DROP TABLE x; --"}),
            ["snowflake.columns", "column 'ID'", "must be a Snowflake data type"],
            id="column-type-injection",
        ),
        pytest.param(
            _snowflake(columns={'id"; DROP TABLE x; --': "NUMBER"}),
            ["snowflake.columns", "Snowflake identifier"],
            id="column-name-injection",
        ),
        pytest.param(
            _snowflake(columns={"kinesisMetadata": "OBJECT"}),
            ["snowflake.columns", "KINESISMETADATA is added by the connector"],
            id="column-kinesismetadata",
        ),
        pytest.param(
            _snowflake(columns={"id": "NUMBER", "ID": "VARCHAR"}),
            ["snowflake.columns", "duplicates ID"],
            id="column-duplicate",
        ),
        pytest.param(
            _snowflake(rol="r"),
            ["snowflake.rol: unknown field"],
            id="snowflake-typo",
        ),
    ],
)
def test_bad_new_value_names_file_field_and_rule(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], expected: list[str]
) -> None:
    message = _load_error(tmp_path, _with(change))

    for fragment in expected:
        assert fragment in message


@pytest.mark.parametrize("field", ["public_key", "rsa_public_key", "private_key"])
def test_keys_are_never_accepted_inline(tmp_path: Path, field: str) -> None:
    secret = "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAsecretmaterial"

    message = _load_error(tmp_path, _with(_snowflake(role="r", user="u", **{field: secret})))

    assert f"snowflake.{field}: keys are never written in the connector file" in message
    assert "public_key_variable" in message and "public_key_conn_id" in message
    assert secret not in message


def test_provisioning_spec_carries_every_field() -> None:
    config = parse_connector_config(
        _with(
            _both(
                _without_table_properties,
                _set("destination", type="ICEBERG", external_volume="vol", base_location="o", cluster_by=["ID"]),
                _snowflake(role="r", user="u", warehouse="w", public_key_conn_id="key_conn", columns={"id": "int"}),
            )
        )
    )

    public_key = PUBLIC_KEY_PEM.read_text(encoding="ascii")

    spec = config.provisioning_spec(public_key)

    assert (spec.database, spec.schema, spec.table) == ("ANALYTICS", "RAW", "ORDERS")
    assert (spec.destination_type, spec.external_volume, spec.base_location) == (DestinationType.ICEBERG, "VOL", "o")
    assert (spec.role, spec.user, spec.warehouse, spec.public_key) == ("R", "U", "W", public_key)
    assert dict(spec.columns) == {"ID": "INT"}
    assert tuple(spec.cluster_by) == ("ID",)


def test_a_service_user_cannot_be_planned_without_its_key() -> None:
    config = parse_connector_config(_with(_snowflake(role="r", user="u", public_key_variable="v")))

    with pytest.raises(ValueError, match=r"^public_key: is required to create the service user U"):
        config.provisioning_spec()


# -- schedules, as Airflow reads them ----------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule", ["*/5 * * *", "61 * * * *", "*/5 * * * MON-FUNDAY", "@every 5m", "@reboot", "every 5 minutes", ""]
)
def test_a_schedule_airflow_rejects_names_file_field_and_what_is_allowed(tmp_path: Path, schedule: str) -> None:
    message = _load_error(tmp_path, _with(_set("batch", schedule=schedule)))

    assert "batch.schedule: is not a schedule Airflow accepts" in message
    assert f"(got {schedule!r})" in message
    for allowed in ("'*/5 * * * *'", "@hourly", "@daily", "@quarterly", "@once", "@continuous", "null"):
        assert allowed in message


@pytest.mark.parametrize(
    "schedule", [None, "*/5 * * * *", "0 */2 * * 1-5", "30 6 1 * *", "@hourly", "@quarterly", "@once", "@continuous"]
)
def test_schedules_airflow_accepts(schedule: str | None) -> None:
    assert parse_connector_config(_with(_set("batch", schedule=schedule))).batch.schedule == schedule


# -- ids and numbers Airflow or Python cannot take ------------------------------------------------------


def test_connector_id_limit_is_airflows_tag_limit(tmp_path: Path) -> None:
    from airflow.sdk.definitions.dag import TAG_MAX_LEN

    assert CONNECTOR_ID_MAX == TAG_MAX_LEN  # the id is a tag of every DAG of the connector
    longest = "c" * CONNECTOR_ID_MAX
    assert parse_connector_config(_with(lambda d: d.update(connector_id=longest))).connector_id == longest

    message = _load_error(tmp_path, _with(lambda d: d.update(connector_id=longest + "c")))
    assert f"connector_id: must be 1-{CONNECTOR_ID_MAX} letters, digits, '_' or '-'" in message
    assert f"which Airflow limits to {CONNECTOR_ID_MAX} characters" in message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            _set("batch", retry_delay_seconds=1.0e15),
            ["batch.retry_delay_seconds", f"less than or equal to {RETRY_DELAY_MAX_SECONDS}"],
            id="retry_delay_seconds-float-beyond-timedelta",
        ),
        pytest.param(
            _set("batch", retry_delay_seconds=10**15),
            ["batch.retry_delay_seconds", f"less than or equal to {RETRY_DELAY_MAX_SECONDS}"],
            id="retry_delay_seconds-int-beyond-timedelta",
        ),
        pytest.param(
            _set("batch", retry_delay_seconds=RETRY_DELAY_MAX_SECONDS + 1),
            ["batch.retry_delay_seconds", f"less than or equal to {RETRY_DELAY_MAX_SECONDS}"],
            id="retry_delay_seconds-over-a-day",
        ),
        pytest.param(
            _set("batch", retry_delay_seconds=float("inf")),
            ["batch.retry_delay_seconds", "finite number"],
            id="retry_delay_seconds-infinite",
        ),
        pytest.param(
            _set("batch", lease_duration_seconds=10**20),
            ["batch.lease_duration_seconds", "less than or equal to 86400"],
            id="lease_duration_seconds",
        ),
        pytest.param(
            _set("batch", max_shards_per_batch=10**20),
            ["batch.max_shards_per_batch", "less than or equal to 100000"],
            id="max_shards_per_batch",
        ),
        pytest.param(
            _set("batch", retries=10**20),
            ["batch.retries", "less than or equal to 20"],
            id="retries",
        ),
        pytest.param(
            _set("source", region="us-" + "east" * 10 + "-1"),
            ["source.region", "AWS region"],
            id="region-too-long",
        ),
        pytest.param(
            _set("connections", aws="my aws"),
            ["connections.aws", "Airflow connection id", "'my aws'"],
            id="connection-id-with-a-space",
        ),
        pytest.param(
            _set("connections", spark="s" * 201),
            ["connections.spark", "1-200"],
            id="connection-id-too-long",
        ),
    ],
)
def test_values_airflow_or_python_cannot_take(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], expected: list[str]
) -> None:
    message = _load_error(tmp_path, _with(change))

    for fragment in expected:
        assert fragment in message


def test_the_longest_retry_delay_builds_a_timedelta() -> None:
    config = parse_connector_config(_with(_set("batch", retry_delay_seconds=RETRY_DELAY_MAX_SECONDS)))

    assert timedelta(seconds=config.batch.retry_delay_seconds) == timedelta(days=1)


def test_every_invalid_file_of_a_directory_is_named(tmp_path: Path) -> None:
    _write(tmp_path, _shipped_data(), name="a.yaml")
    first = _write(tmp_path, _with(_set("source", region="mars")), name="b.yaml")
    second = _write(tmp_path, _with(_set("batch", schedule="hourly")), name="c.yaml")

    with pytest.raises(ConnectorConfigError) as info:
        load_connector_configs(tmp_path)

    message = str(info.value)
    assert f"{first}: invalid connector configuration\n  - source.region" in message
    assert f"{second}: invalid connector configuration\n  - batch.schedule" in message


# -- the IAM check's mode --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(IamCheckMode))
def test_iam_check_modes(mode: IamCheckMode) -> None:
    assert parse_connector_config(_with(_set("source", iam_check=mode.value))).source.iam_check is mode


def test_iam_check_off_unquoted_in_yaml(tmp_path: Path) -> None:
    # YAML 1.1 reads `off` as false; the connector file means the mode.
    text = SHIPPED.read_text(encoding="utf-8").replace("iam_check: required", "iam_check: off")
    path = tmp_path / "orders.yaml"
    path.write_text(text, encoding="utf-8")

    assert load_connector_config(path).source.iam_check is IamCheckMode.OFF
    assert "source.iam_check: must be required, best_effort or off, not true" in _load_error(
        tmp_path, _with(_set("source", iam_check=True))
    )


def test_iam_check_is_required_by_default() -> None:
    data = _shipped_data()
    data["source"].pop("iam_check", None)

    assert parse_connector_config(data).source.iam_check is IamCheckMode.REQUIRED


def test_unknown_iam_check_mode_lists_the_modes(tmp_path: Path) -> None:
    message = _load_error(tmp_path, _with(_set("source", iam_check="lenient")))

    assert "source.iam_check: Input should be 'required', 'best_effort' or 'off' (got 'lenient')" in message


@pytest.mark.parametrize(("skip", "mode"), [(True, IamCheckMode.BEST_EFFORT), (False, IamCheckMode.REQUIRED)])
def test_skip_iam_check_if_denied_is_a_deprecated_alias(tmp_path: Path, skip: bool, mode: IamCheckMode) -> None:
    def alias(data: dict[str, Any]) -> None:
        data["source"].pop("iam_check", None)
        data["source"]["skip_iam_check_if_denied"] = skip

    path = _write(tmp_path, _with(alias))

    with pytest.warns(AirflowProviderDeprecationWarning) as warned:
        config = load_connector_config(path)

    assert config.source.iam_check is mode
    assert config.source.skip_iam_check_if_denied is skip
    (warning,) = warned
    assert str(warning.message) == (
        f"{path}: source.skip_iam_check_if_denied is deprecated; write source.iam_check: {mode.value} instead"
    )


def test_skip_iam_check_if_denied_with_iam_check_is_refused(tmp_path: Path) -> None:
    message = _load_error(tmp_path, _with(_set("source", iam_check="off", skip_iam_check_if_denied=True)))

    assert "source.skip_iam_check_if_denied is the deprecated form of source.iam_check" in message
    assert "remove skip_iam_check_if_denied and keep iam_check" in message


def test_a_duplicate_id_is_found_even_when_the_first_file_is_invalid(tmp_path: Path) -> None:
    first = _write(tmp_path, _with(_set("source", region="mars")), name="a.yaml")
    second = _write(tmp_path, _shipped_data(), name="b.yaml")

    with pytest.raises(ConnectorConfigError) as info:
        load_connector_configs(tmp_path)

    message = str(info.value)
    assert f"{first}: invalid connector configuration\n  - source.region" in message
    assert f"{second}: connector_id 'orders' is already used by {first}; give one of them another connector_id" in (
        message
    )


# -- batch.mode ---------------------------------------------------------------------------------


def test_continuous_mode_with_its_runtime_loads() -> None:
    batch = parse_connector_config(_with(_set("batch", mode="continuous", max_runtime_minutes=0.5))).batch

    assert (batch.mode, batch.max_runtime_minutes, batch.idle_seconds) == ("continuous", 0.5, IDLE_SECONDS)
    assert (BatchConfig().mode, BatchConfig().max_runtime_minutes) == ("scheduled", None)
    # A quiet connector may look for new records less often than every second.
    paced = _set("batch", mode="continuous", max_runtime_minutes=5, idle_seconds=30)
    assert parse_connector_config(_with(paced)).batch.idle_seconds == 30


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        pytest.param(
            {"mode": "continuous"},
            ["batch.mode continuous needs batch.max_runtime_minutes", "e.g. 5 with */5 * * * *"],
            id="continuous-without-runtime",
        ),
        pytest.param(
            {"max_runtime_minutes": 3},
            ["batch.max_runtime_minutes (3.0) is only used with batch.mode continuous", "set batch.mode: continuous"],
            id="runtime-without-continuous",
        ),
        pytest.param({"mode": "streaming"}, ["batch.mode", "'scheduled' or 'continuous'", "'streaming'"], id="mode"),
        pytest.param(
            {"mode": "continuous", "max_runtime_minutes": 0},
            ["batch.max_runtime_minutes", "greater than 0"],
            id="runtime-zero",
        ),
        pytest.param(
            {"idle_seconds": 10},
            ["batch.idle_seconds (10.0) is only used with batch.mode continuous", "set batch.mode: continuous"],
            id="idle-pause-without-continuous",
        ),
        pytest.param(
            {"mode": "continuous", "max_runtime_minutes": 5, "idle_seconds": 0},
            ["batch.idle_seconds", "greater than 0"],
            id="idle-pause-zero",
        ),
        pytest.param(
            {"mode": "continuous", "max_runtime_minutes": 5, "idle_seconds": 3600},
            ["batch.idle_seconds", f"less than or equal to {IDLE_MAX_SECONDS}"],
            id="idle-pause-over-ten-minutes",
        ),
        pytest.param(
            {"mode": "continuous", "max_runtime_minutes": 10**6},
            ["batch.max_runtime_minutes", f"less than or equal to {MAX_RUNTIME_MAX_MINUTES}"],
            id="runtime-over-a-day",
        ),
        pytest.param(
            {"mode": "continuous", "max_runtime_minutes": 60, "execution_timeout_minutes": 60},
            [
                "batch.execution_timeout_minutes (60) must exceed batch.max_runtime_minutes (60)",
                "leave it out (the default is max_runtime_minutes + 30) or raise it",
            ],
            id="timeout-not-above-the-runtime",
        ),
        pytest.param({"execution_timeout_minutes": 0}, ["batch.execution_timeout_minutes", "greater than 0"], id="t0"),
    ],
)
def test_batch_mode_mistakes_name_file_field_value_and_fix(
    tmp_path: Path, batch: dict[str, Any], expected: list[str]
) -> None:
    message = _load_error(tmp_path, _with(_set("batch", **batch)))

    for fragment in expected:
        assert fragment in message


@pytest.mark.parametrize(
    ("batch", "timeout_minutes"),
    [
        pytest.param({}, 180, id="scheduled-default"),
        pytest.param({"mode": "continuous", "max_runtime_minutes": 55}, 85, id="continuous-default"),
        pytest.param({"execution_timeout_minutes": 20}, 20, id="set"),
    ],
)
def test_a_task_times_out_and_a_run_lasts_as_long_as_every_try_needs(
    tmp_path: Path, batch: dict[str, Any], timeout_minutes: int
) -> None:
    config = load_connector_config(_write(tmp_path, _with(_set("batch", retries=2, retry_delay_seconds=60, **batch))))
    assert config.batch.execution_timeout == timedelta(minutes=timeout_minutes)
    # Three tries of their full time, two delays, and ten minutes for the run's other tasks.
    assert config.batch.dag_run_timeout == timedelta(minutes=3 * timeout_minutes + 2 + 10)
