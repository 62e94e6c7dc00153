"""The provisioning plan: golden SQL per destination type, validation of every value, redaction.

The golden files under ``golden/`` hold the exact SQL of each variant. After an intended change,
regenerate them with ``UPDATE_GOLDEN=1 pytest tests/unit/core/admin/test_provisioning.py`` and review the
diff.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from airflow_kinesis_snowflake.config import load_connector_config
from airflow_kinesis_snowflake.core.admin.provisioning import (
    ProvisioningError,
    ProvisioningSpec,
    build_plan,
    expected_objects,
    expected_objects_of,
    missing_objects,
    normalize_column_type,
    parse_public_key,
    quote_literal,
)
from airflow_kinesis_snowflake.core.load.pipe import validate_pipe_definition
from airflow_kinesis_snowflake.core.load.snowflake_sink import quote_identifier, support_objects_ddl
from airflow_kinesis_snowflake.core.model import Destination, DestinationType
from tests.emulators.fakesnow_support import runs_on_fakesnow, text_only

GOLDEN = Path(__file__).parent / "golden"
PUBLIC_KEY_PEM = (GOLDEN / "service_user_public_key.pem").read_text(encoding="ascii")
KEY_BODY = "".join(PUBLIC_KEY_PEM.strip().splitlines()[1:-1])
SHIPPED = Path(__file__).resolve().parents[4] / "dags" / "connectors" / "orders.yaml"

PIPE_DEFINITION = (
    "COPY INTO ANALYTICS.RAW.ORDERS FROM (SELECT $1:order_id::NUMBER(38,0) AS ORDER_ID, $1:status::VARCHAR AS STATUS, "
    "$1 AS KINESISMETADATA FROM TABLE(DATA_SOURCE(TYPE => 'STREAMING')))"
)


def spec(**overrides: Any) -> ProvisioningSpec:
    values: dict[str, Any] = {
        "database": "analytics",
        "schema": "raw",
        "table": "orders",
        "columns": {"order_id": "number(38, 0)", "Customer": "varchar", "amount": "NUMBER(12,2)"},
        "role": "kinesis_orders_role",
        "user": "kinesis_orders_user",
        "warehouse": "kinesis_wh",
        "public_key": PUBLIC_KEY_PEM,
    }
    values.update(overrides)
    return ProvisioningSpec(**values)


VARIANTS = {
    "table": spec(),
    "table_without_warehouse": spec(warehouse=None),
    "table_objects_only": spec(role=None, user=None, warehouse=None, public_key=None),
    "table_properties_off": spec(schema_evolution=False, error_logging=False, row_timestamp=False),
    "iceberg": spec(
        destination_type="ICEBERG",
        external_volume="iceberg_vol",
        base_location="kinesis/orders",
        cluster_by=["order_id"],
    ),
    "interactive": spec(destination_type="INTERACTIVE", cluster_by=["customer", "order_id"]),
    "pipe": spec(destination_type="PIPE", pipe="orders_pipe", pipe_definition=PIPE_DEFINITION + ";"),
}


def golden(name: str, text: str) -> str:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    return path.read_text(encoding="utf-8")


# -- golden plans ------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_plan_matches_golden_sql(variant: str) -> None:
    text = build_plan(VARIANTS[variant]).render(redact=False)

    assert text == golden(f"{variant}.sql", text)


def test_redacted_plan_matches_golden_sql() -> None:
    text = build_plan(VARIANTS["table"]).render()

    assert text == golden("table.redacted.sql", text)


def test_golden_files_cover_every_destination_type() -> None:
    assert {v.destination_type for v in VARIANTS.values()} == set(DestinationType)
    assert {p.name for p in GOLDEN.glob("*.sql")} == {f"{v}.sql" for v in VARIANTS} | {"table.redacted.sql"}


def test_plan_from_the_shipped_connector_file() -> None:
    config = load_connector_config(SHIPPED)
    plan = build_plan(config.provisioning_spec())

    create = next(s.sql for s in plan.statements if s.sql.startswith("CREATE TABLE IF NOT EXISTS " + config.table_fqn))
    assert create.startswith(
        'CREATE TABLE IF NOT EXISTS "ANALYTICS"."RAW"."ORDERS" ("ORDER_ID" NUMBER(38,0), "CUSTOMER" VARCHAR, '
        '"AMOUNT" FLOAT, "STATUS" VARCHAR, "CREATED_AT" TIMESTAMP_TZ, "KINESISMETADATA" OBJECT)'
    )
    assert "ENABLE_SCHEMA_EVOLUTION = TRUE ERROR_LOGGING = TRUE ROW_TIMESTAMP = TRUE" in create


# -- structure of the plan ------------------------------------------------------------------------------


TEXT_ONLY = re.compile(r"^(GRANT |CREATE ROLE |CREATE USER |CREATE PIPE |CREATE INTERACTIVE TABLE )")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_only_roles_users_grants_pipes_and_interactive_tables_are_text_only(variant: str) -> None:
    plan = build_plan(VARIANTS[variant])

    for statement in plan.statements:
        assert runs_on_fakesnow(statement.sql) is not bool(TEXT_ONLY.match(statement.sql)), statement.redacted
    # The objects-only plan creates no role, user or grant: everything in it runs on the emulator.
    assert bool(text_only(plan.statements)) is (variant != "table_objects_only")


def test_support_objects_come_from_the_sink_ddl() -> None:
    plan = build_plan(spec())
    ddl = [d.sql for d in support_objects_ddl(Destination("ANALYTICS", "RAW", "ORDERS"))]

    assert [s.sql for s in plan.statements if s.sql in ddl] == ddl
    # ledger, parse failures, stage, generations, the generations columns added to existing tables,
    # and the batch outcomes the Airflow worker reads back
    assert [d.kind for d in support_objects_ddl(Destination("ANALYTICS", "RAW", "ORDERS"))] == [
        "ledger",
        "parse failures",
        "stage",
        "generations",
        "generations columns",
        "generations columns",
        "batch outcomes",
    ]


def test_only_the_ownership_transfer_is_checked_before_it_runs() -> None:
    plan = build_plan(spec())

    checked = [s for s in plan.statements if s.skip_if is not None]
    assert [s.sql for s in checked] == [
        'GRANT OWNERSHIP ON TABLE "ANALYTICS"."RAW"."ORDERS" TO ROLE "KINESIS_ORDERS_ROLE" COPY CURRENT GRANTS'
    ]
    query = checked[0].skip_if
    assert query is not None
    assert query.sql.startswith('SELECT 1 FROM "ANALYTICS".INFORMATION_SCHEMA.TABLES WHERE')
    assert query.params == ("RAW", "ORDERS", "KINESIS_ORDERS_ROLE")


def test_role_and_user_come_before_the_grants_that_use_them() -> None:
    sqls = [s.sql for s in build_plan(spec()).statements]
    role = sqls.index('CREATE ROLE IF NOT EXISTS "KINESIS_ORDERS_ROLE"')
    user = next(i for i, s in enumerate(sqls) if s.startswith("CREATE USER"))
    table = next(
        i for i, s in enumerate(sqls) if s.startswith('CREATE TABLE IF NOT EXISTS "ANALYTICS"."RAW"."ORDERS" ')
    )
    owner = next(i for i, s in enumerate(sqls) if s.startswith("GRANT OWNERSHIP"))

    assert sqls[:2] == ['CREATE DATABASE IF NOT EXISTS "ANALYTICS"', 'CREATE SCHEMA IF NOT EXISTS "ANALYTICS"."RAW"']
    assert role < user < table < owner
    assert all(i > role for i, s in enumerate(sqls) if s.startswith("GRANT "))


def test_snowflake_managed_iceberg_storage_needs_no_volume_grant() -> None:
    plan = build_plan(spec(destination_type="ICEBERG", external_volume="snowflake_managed"))
    sqls = [s.sql for s in plan.statements]

    assert not [s for s in sqls if "EXTERNAL VOLUME" in s]
    assert any("EXTERNAL_VOLUME = 'SNOWFLAKE_MANAGED'" in s for s in sqls)
    assert any(s.startswith('GRANT OWNERSHIP ON ICEBERG TABLE "ANALYTICS"."RAW"."ORDERS"') for s in sqls)


def test_the_spec_is_normalized() -> None:
    s = spec(destination_type="iceberg", catalog="snowflake")

    assert (s.database, s.schema, s.table, s.role, s.user, s.warehouse) == (
        "ANALYTICS",
        "RAW",
        "ORDERS",
        "KINESIS_ORDERS_ROLE",
        "KINESIS_ORDERS_USER",
        "KINESIS_WH",
    )
    assert s.destination_type is DestinationType.ICEBERG
    assert s.catalog == "SNOWFLAKE"
    assert dict(s.columns) == {"ORDER_ID": "NUMBER(38,0)", "CUSTOMER": "VARCHAR", "AMOUNT": "NUMBER(12,2)"}
    assert s.all_columns == ("ORDER_ID", "CUSTOMER", "AMOUNT", "KINESISMETADATA")


# -- identifiers and literals -------------------------------------------------------------------------

HOSTILE_NAMES = [
    'orders"; DROP TABLE analytics.raw.orders; --',
    "orders; DROP TABLE x",
    "orders'--",
    "my table",
    "1orders",
    "",
    "a" * 256,
    "orders\x00",
    "ördérs",
]


@pytest.mark.parametrize(
    ("field", "name"),
    [
        (field, name)
        for field in ("database", "schema", "table", "role", "user", "warehouse")
        for name in HOSTILE_NAMES
        # an empty optional name means "not set"
        if name or field in ("database", "schema", "table")
    ],
)
def test_hostile_names_are_refused_naming_the_parameter(field: str, name: str) -> None:
    with pytest.raises(ProvisioningError) as info:
        spec(**{field: name})

    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"columns": {'id"; DROP TABLE x; --': "NUMBER"}}, "columns."),
        ({"columns": {"id": "NUMBER); DROP TABLE x; --"}}, "columns.id"),
        ({"columns": {"id": "NUMBER(38,0) DEFAULT 1"}}, "columns.id"),
        ({"destination_type": "ICEBERG", "external_volume": "vol'; DROP"}, "external_volume"),
        ({"destination_type": "ICEBERG", "base_location": "x'); DROP TABLE y; --"}, "base_location"),
        ({"destination_type": "ICEBERG", "base_location": "../other_table"}, "base_location"),
        ({"destination_type": "ICEBERG", "base_location": "/absolute"}, "base_location"),
        ({"destination_type": "PIPE", "pipe": "p; DROP", "pipe_definition": PIPE_DEFINITION}, "pipe"),
        ({"cluster_by": ["order_id) ; DROP TABLE x; --"]}, "cluster_by"),
    ],
)
def test_hostile_values_are_refused_naming_the_parameter(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ProvisioningError) as info:
        spec(**overrides)

    assert str(info.value).startswith(field)


@pytest.mark.parametrize(
    ("name", "quoted"),
    [("ORDERS", '"ORDERS"'), ('a"b', '"a""b"'), ('"; DROP TABLE x; --', '"""; DROP TABLE x; --"'), ("a.b", '"a.b"')],
)
def test_quote_identifier_doubles_embedded_quotes(name: str, quoted: str) -> None:
    assert quote_identifier(name) == quoted


@pytest.mark.parametrize("name", ["", "a\x00b"])
def test_quote_identifier_refuses_empty_and_nul(name: str) -> None:
    with pytest.raises(ValueError, match="invalid identifier"):
        quote_identifier(name)


@pytest.mark.parametrize(
    ("value", "literal"),
    [("VOL", "'VOL'"), ("it's", "'it\\'s'"), ("a\\b", "'a\\\\b'"), ("\\'; DROP --", "'\\\\\\'; DROP --'")],
)
def test_quote_literal_escapes_backslashes_and_quotes(value: str, literal: str) -> None:
    assert quote_literal(value) == literal


def test_quote_literal_refuses_nul() -> None:
    with pytest.raises(ValueError, match="NUL"):
        quote_literal("a\x00b")


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("number( 38 , 0 )", "NUMBER(38,0)"),
        ("varchar(100)", "VARCHAR(100)"),
        ("double   precision", "DOUBLE PRECISION"),
        ("timestamp_tz(9)", "TIMESTAMP_TZ(9)"),
        ("OBJECT", "OBJECT"),
    ],
)
def test_column_types_are_normalized(text: str, normalized: str) -> None:
    assert normalize_column_type(text) == normalized


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("BLOB", "must be a Snowflake data type"),
        ("NUMBER(38,0,1)", "must be a Snowflake data type"),
        ("VARCHAR(10,2)", "VARCHAR takes one parameter"),
        ("BOOLEAN(1)", "BOOLEAN takes no parameters"),
        ("ARRAY(NUMBER)", "must be a Snowflake data type"),
    ],
)
def test_unknown_column_types_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        normalize_column_type(text)


# -- the public key ---------------------------------------------------------------------------------


def _pem(key: Any, private: bool = False) -> str:
    if private:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def test_public_key_fingerprint_is_snowflakes_rsa_public_key_fp() -> None:
    der = serialization.load_pem_public_key(PUBLIC_KEY_PEM.encode()).public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )

    key = parse_public_key(PUBLIC_KEY_PEM)

    assert key.fingerprint == "SHA256:" + base64.b64encode(hashlib.sha256(der).digest()).decode()
    assert key.body == KEY_BODY
    assert parse_public_key(KEY_BODY) == key
    assert parse_public_key("\n".join(PUBLIC_KEY_PEM.splitlines()) + "\n\n") == key


def test_a_private_key_is_refused_without_repeating_it() -> None:
    private_pem = _pem(rsa.generate_private_key(public_exponent=65537, key_size=2048), private=True)
    body_line = private_pem.splitlines()[1]

    with pytest.raises(ProvisioningError) as info:
        spec(public_key=private_pem)

    assert "public_key: this is a private key" in str(info.value)
    assert body_line not in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not a key", "not a PEM public key"),
        ("MIIB'; DROP USER x; --", "not a PEM public key"),
        ("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "BEGIN CERTIFICATE"),
        ("   ", "empty"),
    ],
)
def test_malformed_public_keys_are_refused(text: str, message: str) -> None:
    with pytest.raises(ProvisioningError, match=re.escape(message)):
        spec(public_key=text)


def test_small_and_non_rsa_keys_are_refused() -> None:
    small = _pem(rsa.generate_private_key(public_exponent=65537, key_size=1024))
    elliptic = _pem(ec.generate_private_key(ec.SECP256R1()))

    with pytest.raises(ProvisioningError, match="1024 bits; Snowflake needs at least 2048"):
        spec(public_key=small)
    with pytest.raises(ProvisioningError, match="needs an RSA key"):
        spec(public_key=elliptic)


def test_a_user_needs_a_role_and_a_key() -> None:
    with pytest.raises(ProvisioningError, match=r"^user: needs role"):
        spec(role=None)
    with pytest.raises(ProvisioningError, match=r"^public_key: is required to create the service user"):
        spec(public_key=None)


# -- redaction ---------------------------------------------------------------------------------------


def test_the_key_appears_only_in_the_sql_of_create_user() -> None:
    plan = build_plan(spec())

    holding = [s for s in plan.statements if KEY_BODY in s.sql]
    assert len(holding) == 1
    assert holding[0].sql.startswith('CREATE USER IF NOT EXISTS "KINESIS_ORDERS_USER" TYPE = SERVICE RSA_PUBLIC_KEY = ')
    assert f"RSA_PUBLIC_KEY = '{KEY_BODY}' DEFAULT_ROLE" in holding[0].sql


def test_nothing_shown_holds_the_key() -> None:
    plan = build_plan(spec())
    fingerprint = parse_public_key(PUBLIC_KEY_PEM).fingerprint
    create_user = next(s for s in plan.statements if s.sql.startswith("CREATE USER"))
    shown = [plan.render(), str(plan.describe()), repr(plan), repr(plan.spec), str(create_user), repr(create_user)]

    for text in shown:
        assert KEY_BODY not in text
        assert KEY_BODY[20:60] not in text
    assert f"RSA_PUBLIC_KEY = '<redacted RSA public key {fingerprint}>'" in create_user.redacted
    assert fingerprint in plan.render()


def test_error_messages_echoing_the_key_are_redacted() -> None:
    plan = build_plan(spec())
    error = f"SQL compilation error: syntax error line 1 at position 80 unexpected '{KEY_BODY}'."

    redacted = plan.redact(error)

    assert KEY_BODY not in redacted
    assert redacted.startswith("SQL compilation error: syntax error line 1 at position 80 unexpected '<redacted")


# -- the custom pipe ---------------------------------------------------------------------------------

DEST = Destination("ANALYTICS", "RAW", "ORDERS")


@pytest.mark.parametrize(
    "sql",
    [
        PIPE_DEFINITION,
        PIPE_DEFINITION + " ;  ",
        PIPE_DEFINITION.replace("ANALYTICS.RAW.ORDERS", '"ANALYTICS"."RAW"."ORDERS"'),
        PIPE_DEFINITION.replace("ANALYTICS.RAW.ORDERS", "analytics . raw . orders"),
        "copy into analytics.raw.orders from (select $1:note::varchar from @s) FILE_FORMAT = (FIELD_DELIMITER = ';')",
        "COPY INTO analytics.raw.orders FROM (SELECT $1 FROM @s) -- ; a comment is not a statement",
    ],
)
def test_pipe_definitions_loading_the_destination_are_accepted(sql: str) -> None:
    validated = validate_pipe_definition(sql, DEST)

    assert validated == sql.strip().removesuffix(";").rstrip()
    assert not validated.endswith(";")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (PIPE_DEFINITION.replace("ORDERS FROM", "OTHER FROM"), "must load the destination table"),
        (PIPE_DEFINITION.replace("ANALYTICS.RAW.ORDERS", "RAW.ORDERS"), "must load the destination table"),
        (PIPE_DEFINITION.replace("ANALYTICS.RAW.ORDERS", "ORDERS"), "must load the destination table"),
        (PIPE_DEFINITION.replace("ANALYTICS.RAW.ORDERS", '"analytics"."raw"."orders"'), "must load the destination"),
        (PIPE_DEFINITION + "; DROP TABLE ANALYTICS.RAW.ORDERS", "single COPY INTO statement"),
        (PIPE_DEFINITION + ";;", "single COPY INTO statement"),
        ("COPY INTO ANALYTICS.RAW.ORDERS FROM @s", "FROM (SELECT"),
        ("INSERT INTO ANALYTICS.RAW.ORDERS SELECT 1", "must start with COPY INTO ANALYTICS.RAW.ORDERS"),
        ("DROP TABLE ANALYTICS.RAW.ORDERS; COPY INTO ANALYTICS.RAW.ORDERS FROM (SELECT 1 FROM @s)", "single COPY"),
        ("COPY INTO ANALYTICS.RAW.ORDERS FROM (SELECT 'unterminated FROM @s)", "unterminated"),
        ("COPY INTO ANALYTICS.RAW.ORDERS FROM (SELECT 1 FROM @s) /* open comment", "unterminated"),
        ("", "is empty"),
    ],
)
def test_other_pipe_definitions_are_refused(sql: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        validate_pipe_definition(sql, DEST)


def test_a_bad_pipe_definition_names_the_parameter() -> None:
    with pytest.raises(ProvisioningError, match=r"^pipe_definition: must load the destination table"):
        spec(destination_type="PIPE", pipe="p", pipe_definition="COPY INTO A.B.C FROM (SELECT 1 FROM @s)")


# -- what belongs to which destination type -----------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"destination_type": "VIEW"}, "destination_type: must be one of TABLE, ICEBERG, INTERACTIVE, PIPE"),
        ({"destination_type": "INTERACTIVE"}, "cluster_by: is required for INTERACTIVE"),
        ({"cluster_by": ["status"]}, "cluster_by: column STATUS is not one of the columns"),
        ({"external_volume": "vol"}, "external_volume: is only used with destination type ICEBERG"),
        ({"base_location": "x"}, "base_location: is only used with destination type ICEBERG"),
        ({"destination_type": "ICEBERG", "catalog": "GLUE"}, "catalog: must be SNOWFLAKE"),
        ({"pipe": "p"}, "pipe: is only used with destination type PIPE"),
        ({"pipe_definition": PIPE_DEFINITION}, "pipe_definition: is only used with destination type PIPE"),
        ({"destination_type": "PIPE", "pipe_definition": PIPE_DEFINITION}, "pipe: is required"),
        ({"destination_type": "PIPE", "pipe": "p"}, "pipe_definition: is empty"),
        ({"columns": {"kinesismetadata": "OBJECT"}}, "KINESISMETADATA is added by the connector"),
        ({"columns": {"id": "NUMBER", "ID": "VARCHAR"}}, "duplicates column ID"),
    ],
)
def test_values_that_do_not_fit_the_destination_type(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ProvisioningError, match=re.escape(message)):
        spec(**overrides)


# -- verification -----------------------------------------------------------------------------------


def test_expected_objects_of_a_spec() -> None:
    expected = expected_objects_of(VARIANTS["pipe"])

    assert expected.tables == ("ORDERS", "ORDERS_PARSE_FAILURES", "KINESIS_INGEST_LEDGER")
    assert expected.columns == ("ORDER_ID", "CUSTOMER", "AMOUNT", "KINESISMETADATA")
    assert (expected.stage, expected.pipe) == ("KINESIS_INGEST_STAGE", "ORDERS_PIPE")
    assert expected_objects_of(VARIANTS["table"]).pipe is None


def test_nothing_missing_when_everything_is_there() -> None:
    expected = expected_objects(database="analytics", schema="raw", table="orders", columns=["order_id"])

    assert (
        missing_objects(
            expected,
            schemas=["RAW"],
            tables=["ORDERS", "ORDERS_PARSE_FAILURES", "KINESIS_INGEST_LEDGER"],
            columns=["ORDER_ID", "KINESISMETADATA", "ADDED_BY_EVOLUTION"],
            stages=["KINESIS_INGEST_STAGE"],
        )
        == []
    )


def test_missing_objects_are_all_named() -> None:
    expected = expected_objects(
        database="analytics", schema="raw", table="orders", columns={"order_id": "NUMBER", "amount": "FLOAT"}, pipe="p"
    )

    missing = missing_objects(
        expected,
        schemas=["RAW"],
        tables=["ORDERS", "KINESIS_INGEST_LEDGER"],
        columns=["ORDER_ID"],
        stages=["KINESIS_INGEST_STAGEX"],
        pipes=[],
    )

    assert missing == [
        "table ANALYTICS.RAW.ORDERS_PARSE_FAILURES",
        "column AMOUNT of ANALYTICS.RAW.ORDERS",
        "column KINESISMETADATA of ANALYTICS.RAW.ORDERS",
        "stage ANALYTICS.RAW.KINESIS_INGEST_STAGE",
        "pipe ANALYTICS.RAW.P",
    ]


def test_a_missing_schema_is_reported_alone() -> None:
    expected = expected_objects(database="analytics", schema="raw", table="orders")

    assert missing_objects(expected, schemas=[], tables=[], columns=[], stages=[]) == ["schema ANALYTICS.RAW"]


def test_verification_queries_bind_their_values() -> None:
    expected = expected_objects(database="analytics", schema="raw", table="orders", pipe="p")

    assert expected.tables_query().params == ("RAW", "ORDERS", "ORDERS_PARSE_FAILURES", "KINESIS_INGEST_LEDGER")
    assert expected.tables_query().sql.count("%s") == 4
    assert expected.columns_query().params == ("RAW", "ORDERS")
    assert expected.stage_query().sql == 'SHOW STAGES LIKE \'KINESIS_INGEST_STAGE\' IN SCHEMA "ANALYTICS"."RAW"'
    pipe_query = expected.pipe_query()
    assert pipe_query is not None and pipe_query.params == ("RAW", "P")
    with pytest.raises(ProvisioningError, match=r"^table: "):
        expected_objects(database="analytics", schema="raw", table='x" OR 1=1 --')
