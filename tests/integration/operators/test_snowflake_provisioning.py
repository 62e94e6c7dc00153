"""ProvisionSnowflakeObjectsOperator and VerifySnowflakeObjectsOperator against the fakesnow server.

fakesnow has no roles, users, grants, pipes or interactive tables. The connection used here passes
fakesnow's ``nop_regexes`` session parameter (read at login by fakesnow's server and applied by its
cursor before parsing), so that the plan's text-only statements, those fakesnow does not run
(``tests.emulators.fakesnow_support``), are accepted as no-ops:

* ``CREATE ROLE IF NOT EXISTS`` (the connector's role),
* ``CREATE USER IF NOT EXISTS ... TYPE = SERVICE RSA_PUBLIC_KEY = ...`` (the service user),
* every ``GRANT`` (usage, privileges on the support objects, ``GRANT OWNERSHIP`` of the table),
* ``CREATE PIPE`` and ``CREATE INTERACTIVE TABLE``.

Their SQL is checked as text by the golden plans in tests/unit/core/test_provisioning.py. Everything
else (database, schema, destination table, Iceberg table, ledger, parse-failure table, stage, the
ownership check query, the verification queries) runs for real here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.config import load_connector_config
from airflow_kinesis_snowflake.core.admin.provisioning import parse_public_key
from airflow_kinesis_snowflake.operators.snowflake import ProvisionSnowflakeObjectsOperator
from airflow_kinesis_snowflake.operators.snowflake_verify import VerifySnowflakeObjectsOperator
from tests.conftest import query, unique
from tests.emulators import Emulators
from tests.emulators.fakesnow_support import runs_on_fakesnow

pytestmark = pytest.mark.integration

DATABASE = "ANALYTICS"
SHIPPED = Path(__file__).resolve().parents[3] / "dags" / "connectors" / "orders.yaml"
TEXT_ONLY = [
    r"^\s*CREATE\s+ROLE\s",
    r"^\s*CREATE\s+USER\s",
    r"^\s*GRANT\s",
    r"^\s*CREATE\s+PIPE\s",
    r"^\s*CREATE\s+INTERACTIVE\s+TABLE\s",
]
COLUMNS = {"ORDER_ID": "NUMBER(38,0)", "CUSTOMER": "VARCHAR", "AMOUNT": "FLOAT"}


@pytest.fixture(scope="module")
def public_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@pytest.fixture
def connect_with_nops(aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch) -> Callable[[list[str]], str]:
    """A Snowflake connection id whose sessions treat statements matching ``nops`` as no-ops."""

    def connection(nops: list[str]) -> str:
        conn_id = unique("snowflake_provisioning").replace("-", "_")
        conn = aws_connections.snowflake_connection()
        conn["extra"]["session_parameters"] = {"nop_regexes": nops}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
        return conn_id

    return connection


@pytest.fixture
def key_variable(public_key_pem: str, monkeypatch: pytest.MonkeyPatch) -> str:
    name = unique("kinesis_public_key").replace("-", "_")
    monkeypatch.setenv(f"AIRFLOW_VAR_{name.upper()}", public_key_pem)
    return name


def new_schema() -> str:
    return unique("PROV").replace("-", "_").upper()


def provision(conn_id: str, schema: str, **kwargs: Any) -> ProvisionSnowflakeObjectsOperator:
    values: dict[str, Any] = {
        "task_id": "provision",
        "database": DATABASE,
        "schema": schema,
        "table": "ORDERS",
        "columns": COLUMNS,
        "snowflake_conn_id": conn_id,
    }
    values.update(kwargs)
    return ProvisionSnowflakeObjectsOperator(**values)


def columns_of(emulators: Emulators, schema: str, table: str) -> list[tuple[str, str]]:
    return [
        (str(r[0]), str(r[1]))
        for r in query(
            emulators,
            f"SELECT column_name, data_type FROM {DATABASE}.information_schema.columns "
            f"WHERE table_schema = '{schema}' AND table_name = '{table}' ORDER BY ordinal_position",
        )
    ]


def tables_of(emulators: Emulators, schema: str) -> set[str]:
    rows = query(
        emulators, f"SELECT table_name FROM {DATABASE}.information_schema.tables WHERE table_schema = '{schema}'"
    )
    return {str(r[0]) for r in rows}


def schemas(emulators: Emulators) -> set[str]:
    return {str(r[0]) for r in query(emulators, f"SELECT schema_name FROM {DATABASE}.information_schema.schemata")}


def stages_of(emulators: Emulators, schema: str) -> set[str]:
    return {str(r[1]) for r in query(emulators, f"SHOW STAGES IN SCHEMA {DATABASE}.{schema}")}


def text_only_sql(summary: dict[str, Any]) -> list[str]:
    return [s["sql"] for s in summary["statements"] if not runs_on_fakesnow(s["sql"])]


# -- provisioning --------------------------------------------------------------------------------------


def test_provisions_a_table_and_a_second_run_changes_nothing(
    aws_connections: Emulators,
    connect_with_nops: Callable[[list[str]], str],
    key_variable: str,
    public_key_pem: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    conn_id, schema = connect_with_nops(TEXT_ONLY), new_schema()
    operator = provision(
        conn_id,
        schema,
        role="kinesis_orders_role",
        user="kinesis_orders_user",
        warehouse="kinesis_wh",
        public_key_variable=key_variable,
    )

    first = operator.execute(context={})
    logs = "".join(capfd.readouterr())

    # The text-only statements are exactly the ones fakesnow was told to treat as no-ops.
    for statement in first["statements"]:
        matches = any(re.match(p, statement["sql"], re.IGNORECASE) for p in TEXT_ONLY)
        assert matches is not runs_on_fakesnow(statement["sql"]), statement["sql"]
    assert [s.split(" ")[0:2] for s in text_only_sql(first)] == [
        ["CREATE", "ROLE"],
        ["GRANT", "USAGE"],
        ["GRANT", "USAGE"],
        ["GRANT", "CREATE"],
        ["GRANT", "USAGE"],
        ["CREATE", "USER"],
        ["GRANT", "ROLE"],
        ["GRANT", "OWNERSHIP"],
        ["GRANT", "SELECT,"],
        ["GRANT", "SELECT,"],
        ["GRANT", "READ,"],
        ["GRANT", "SELECT,"],
        ["GRANT", "SELECT,"],
    ]
    assert first["executed"] == len(first["statements"]) and first["skipped"] == 0
    assert schema in schemas(aws_connections)
    assert tables_of(aws_connections, schema) == {
        "ORDERS",
        "ORDERS_PARSE_FAILURES",
        "KINESIS_INGEST_LEDGER",
        "KINESIS_INGEST_GENERATIONS",
        "KINESIS_INGEST_BATCH_OUTCOMES",
    }
    assert stages_of(aws_connections, schema) == {"KINESIS_INGEST_STAGE"}
    created = columns_of(aws_connections, schema, "ORDERS")
    assert [name for name, _ in created] == ["ORDER_ID", "CUSTOMER", "AMOUNT", "KINESISMETADATA"]
    assert created[0][1] == "NUMBER"

    # The key is only ever shown by its fingerprint.
    body = "".join(public_key_pem.strip().splitlines()[1:-1])
    fingerprint = parse_public_key(public_key_pem).fingerprint
    assert body not in json.dumps(first) and body not in logs
    assert fingerprint in logs

    query(aws_connections, f"INSERT INTO {DATABASE}.{schema}.ORDERS (ORDER_ID, CUSTOMER) VALUES (7, 'kept')")
    second = operator.execute(context={})

    assert columns_of(aws_connections, schema, "ORDERS") == created
    assert query(aws_connections, f"SELECT ORDER_ID, CUSTOMER FROM {DATABASE}.{schema}.ORDERS") == [(7, "kept")]
    assert tables_of(aws_connections, schema) == {
        "ORDERS",
        "ORDERS_PARSE_FAILURES",
        "KINESIS_INGEST_LEDGER",
        "KINESIS_INGEST_GENERATIONS",
        "KINESIS_INGEST_BATCH_OUTCOMES",
    }
    assert second["statements"] == first["statements"]


def test_without_a_role_only_objects_are_created(
    aws_connections: Emulators, connect_with_nops: Callable[[list[str]], str]
) -> None:
    # No no-ops at all: a plan without role and user must run on the emulator as it is.
    conn_id, schema = connect_with_nops([]), new_schema()

    summary = provision(conn_id, schema).execute(context={})

    assert text_only_sql(summary) == []
    assert [s["status"] for s in summary["statements"]] == ["executed"] * 10
    assert tables_of(aws_connections, schema) == {
        "ORDERS",
        "ORDERS_PARSE_FAILURES",
        "KINESIS_INGEST_LEDGER",
        "KINESIS_INGEST_GENERATIONS",
        "KINESIS_INGEST_BATCH_OUTCOMES",
    }


@pytest.mark.parametrize(
    ("kwargs", "destination_table"),
    [
        pytest.param(
            {"destination_type": "ICEBERG", "external_volume": "iceberg_vol", "base_location": "orders"},
            True,
            id="iceberg",
        ),
        pytest.param({"destination_type": "INTERACTIVE", "cluster_by": ["order_id"]}, False, id="interactive"),
        pytest.param(
            {
                "destination_type": "PIPE",
                "pipe": "orders_pipe",
                "pipe_definition": "COPY INTO {table} FROM (SELECT $1:order_id, $1 FROM @{stage})",
            },
            True,
            id="pipe",
        ),
    ],
)
def test_every_destination_type_runs_twice_on_the_emulator(
    aws_connections: Emulators,
    connect_with_nops: Callable[[list[str]], str],
    key_variable: str,
    kwargs: dict[str, Any],
    destination_table: bool,
) -> None:
    conn_id, schema = connect_with_nops(TEXT_ONLY), new_schema()
    if "pipe_definition" in kwargs:
        kwargs = dict(
            kwargs,
            pipe_definition=kwargs["pipe_definition"].format(
                table=f"{DATABASE}.{schema}.ORDERS", stage=f"{DATABASE}.{schema}.KINESIS_INGEST_STAGE"
            ),
        )
    operator = provision(conn_id, schema, role="r", user="u", public_key_variable=key_variable, **kwargs)

    first = operator.execute(context={})
    second = operator.execute(context={})

    assert second["statements"] == first["statements"]
    assert first["destination_type"] == kwargs["destination_type"]
    expected_tables = {
        "ORDERS_PARSE_FAILURES",
        "KINESIS_INGEST_LEDGER",
        "KINESIS_INGEST_GENERATIONS",
        "KINESIS_INGEST_BATCH_OUTCOMES",
    } | ({"ORDERS"} if destination_table else set())
    assert tables_of(aws_connections, schema) == expected_tables
    if destination_table:
        assert [c for c, _ in columns_of(aws_connections, schema, "ORDERS")] == [*COLUMNS, "KINESISMETADATA"]


def test_dry_run_executes_nothing_and_shows_the_key_only_by_fingerprint(
    aws_connections: Emulators,
    connect_with_nops: Callable[[list[str]], str],
    key_variable: str,
    public_key_pem: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    conn_id, schema = connect_with_nops([]), new_schema()
    operator = provision(conn_id, schema, role="r", user="u", public_key_variable=key_variable, dry_run=True)

    summary = operator.execute(context={})
    logs = "".join(capfd.readouterr())

    assert schema not in schemas(aws_connections)
    assert summary["dry_run"] is True and summary["executed"] == 0
    assert {s["status"] for s in summary["statements"]} == {"planned"}
    body = "".join(public_key_pem.strip().splitlines()[1:-1])
    fingerprint = parse_public_key(public_key_pem).fingerprint
    assert body not in logs and body not in json.dumps(summary)
    assert f"RSA_PUBLIC_KEY = '<redacted RSA public key {fingerprint}>'" in logs
    assert f'CREATE SCHEMA IF NOT EXISTS "{DATABASE}"."{schema}"' in logs


def test_a_failing_statement_is_reported_with_the_snowflake_error_and_no_key(
    aws_connections: Emulators,
    connect_with_nops: Callable[[list[str]], str],
    key_variable: str,
    public_key_pem: str,
) -> None:
    # CREATE USER is not a no-op here: fakesnow refuses it and echoes the statement's tokens.
    conn_id, schema = connect_with_nops([r"^\s*CREATE\s+ROLE\s", r"^\s*GRANT\s"]), new_schema()
    operator = provision(conn_id, schema, role="r", user="u", public_key_variable=key_variable)

    with pytest.raises(AirflowException) as info:
        operator.execute(context={})

    message = str(info.value)
    body = "".join(public_key_pem.strip().splitlines()[1:-1])
    assert "stopped at statement 7/22 " in message
    assert "(the connector's service user, key-pair authentication)" in message
    assert 'CREATE USER IF NOT EXISTS "U" TYPE = SERVICE RSA_PUBLIC_KEY = \'<redacted RSA public key SHA256:' in message
    assert "Snowflake error:" in message and "CREATE USER" in message.split("Snowflake error:")[1]
    assert "not implemented" in message
    assert body not in message
    # The original exception would carry the key in its message: it is not chained.
    assert info.value.__cause__ is None and info.value.__suppress_context__
    # What ran before the failure took effect.
    assert schema in schemas(aws_connections)


def test_a_bad_parameter_names_itself_before_anything_runs(
    aws_connections: Emulators, connect_with_nops: Callable[[list[str]], str]
) -> None:
    conn_id, schema = connect_with_nops([]), new_schema()

    with pytest.raises(ValueError, match=r"^table: must be a Snowflake identifier"):
        provision(conn_id, schema, table='ORDERS"; DROP SCHEMA ANALYTICS.RAW; --').execute(context={})

    assert schema not in schemas(aws_connections)


def test_a_missing_key_variable_is_named(connect_with_nops: Callable[[list[str]], str]) -> None:
    operator = provision(
        connect_with_nops(TEXT_ONLY), new_schema(), role="r", user="u", public_key_variable="no_such_variable"
    )

    with pytest.raises(AirflowException, match="Airflow Variable 'no_such_variable' is not set"):
        operator.execute(context={})


def test_the_key_can_come_from_a_connection(
    aws_connections: Emulators,
    connect_with_nops: Callable[[list[str]], str],
    public_key_pem: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_KINESIS_USER_KEY", json.dumps({"conn_type": "generic", "extra": {"public_key": public_key_pem}})
    )
    conn_id, schema = connect_with_nops(TEXT_ONLY), new_schema()

    summary = provision(conn_id, schema, role="r", user="u", public_key_conn_id="kinesis_user_key").execute(context={})

    create_user = next(s["sql"] for s in summary["statements"] if s["sql"].startswith("CREATE USER"))
    assert parse_public_key(public_key_pem).fingerprint in create_user


# -- verification ------------------------------------------------------------------------------------


def verify(conn_id: str, schema: str, **kwargs: Any) -> VerifySnowflakeObjectsOperator:
    values: dict[str, Any] = {
        "task_id": "verify",
        "database": DATABASE,
        "schema": schema,
        "table": "ORDERS",
        "columns": COLUMNS,
        "snowflake_conn_id": conn_id,
    }
    values.update(kwargs)
    return VerifySnowflakeObjectsOperator(**values)


def test_verify_passes_after_provisioning(
    aws_connections: Emulators, connect_with_nops: Callable[[list[str]], str]
) -> None:
    conn_id, schema = connect_with_nops(TEXT_ONLY), new_schema()
    provision(conn_id, schema, role="r").execute(context={})

    result = verify(conn_id, schema).execute(context={})

    assert result["missing"] == []
    assert f"columns ORDER_ID, CUSTOMER, AMOUNT, KINESISMETADATA of {DATABASE}.{schema}.ORDERS" in result["checked"]


def test_verify_names_the_column_an_existing_table_lacks(
    aws_connections: Emulators, connect_with_nops: Callable[[list[str]], str]
) -> None:
    conn_id, schema = connect_with_nops(TEXT_ONLY), new_schema()
    query(aws_connections, f"CREATE SCHEMA {DATABASE}.{schema}")
    query(aws_connections, f"CREATE TABLE {DATABASE}.{schema}.ORDERS (ORDER_ID NUMBER(38,0), KINESISMETADATA OBJECT)")

    provision(conn_id, schema, role="r").execute(context={})

    # Provisioning leaves an existing table as it is ...
    assert [c for c, _ in columns_of(aws_connections, schema, "ORDERS")] == ["ORDER_ID", "KINESISMETADATA"]
    # ... and verification says what it lacks.
    with pytest.raises(AirflowException) as info:
        verify(conn_id, schema).execute(context={})
    message = str(info.value)
    assert f'Snowflake objects of "{DATABASE}"."{schema}"."ORDERS" are missing:' in message
    assert f"column CUSTOMER of {DATABASE}.{schema}.ORDERS; column AMOUNT of {DATABASE}.{schema}.ORDERS" in message
    assert "ORDER_ID of" not in message and "stage" not in message


def test_verify_names_missing_support_objects(
    aws_connections: Emulators, connect_with_nops: Callable[[list[str]], str]
) -> None:
    conn_id, schema = connect_with_nops([]), new_schema()
    query(aws_connections, f"CREATE SCHEMA {DATABASE}.{schema}")
    query(aws_connections, f"CREATE TABLE {DATABASE}.{schema}.ORDERS (ORDER_ID NUMBER(38,0), KINESISMETADATA OBJECT)")

    with pytest.raises(AirflowException) as info:
        verify(conn_id, schema, columns=["order_id"]).execute(context={})

    message = str(info.value)
    assert f"table {DATABASE}.{schema}.ORDERS_PARSE_FAILURES" in message
    assert f"table {DATABASE}.{schema}.KINESIS_INGEST_LEDGER" in message
    assert f"stage {DATABASE}.{schema}.KINESIS_INGEST_STAGE" in message
    assert "column" not in message


def test_verify_reports_a_missing_schema(connect_with_nops: Callable[[list[str]], str]) -> None:
    schema = new_schema()

    with pytest.raises(AirflowException, match=f"are missing: schema {DATABASE}.{schema}$"):
        verify(connect_with_nops([]), schema).execute(context={})


# -- from a connector file -----------------------------------------------------------------------------


def test_operators_from_the_shipped_connector_file() -> None:
    config = load_connector_config(SHIPPED)

    provision_op = ProvisionSnowflakeObjectsOperator.from_connector_config(config, task_id="provision", dry_run=True)
    verify_op = VerifySnowflakeObjectsOperator.from_connector_config(config, task_id="verify")
    summary = provision_op.execute(context={})

    assert provision_op.snowflake_conn_id == verify_op.snowflake_conn_id == "snowflake_default"
    assert [s["status"] for s in summary["statements"]] == ["planned"] * 10
    assert summary["statements"][2]["sql"].startswith(
        'CREATE TABLE IF NOT EXISTS "ANALYTICS"."RAW"."ORDERS" ("ORDER_ID" NUMBER(38,0), "CUSTOMER" VARCHAR, '
        '"AMOUNT" FLOAT, "STATUS" VARCHAR, "CREATED_AT" TIMESTAMP_TZ, "KINESISMETADATA" OBJECT)'
    )
    assert (verify_op.database, verify_op.schema, verify_op.table, verify_op.pipe) == (
        "ANALYTICS",
        "RAW",
        "ORDERS",
        None,
    )
    assert verify_op.columns == ["ORDER_ID", "CUSTOMER", "AMOUNT", "STATUS", "CREATED_AT"]
