"""The Snowflake side of a connector as an ordered, idempotent SQL plan.

It follows the set-up checklist of Snowflake's Openflow Connector for Kinesis: a role with usage on
the destination database and schema (and warehouse, and external volume for Iceberg), a service
user authenticating with an RSA key pair whose default role is that role, the destination table
with a ``KINESISMETADATA`` OBJECT column, schema evolution, error logging and row timestamps, owned
by the role; plus what this provider needs next to the table (ledger, parse-failure table, stage,
see :mod:`~airflow_kinesis_snowflake.core.load.snowflake_sink`) and, for a ``PIPE`` destination, the
user's pipe.

Every statement can run again without changing anything: ``CREATE ... IF NOT EXISTS`` where
Snowflake has it, grants (which Snowflake accepts again), and a check query for the one statement
that cannot simply be repeated (the ownership transfer). Every name is validated and quoted, every
string literal escaped; the RSA public key is only ever shown by its fingerprint.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from cryptography.hazmat.primitives.serialization import load_der_public_key

from airflow_kinesis_snowflake.core.load.pipe import validate_pipe_definition
from airflow_kinesis_snowflake.core.load.schema import METADATA_COLUMN
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    LEDGER_TABLE,
    PARSE_FAILURES_SUFFIX,
    STAGE_NAME,
    SinkObjects,
    quote_identifier,
    support_objects_ddl,
)
from airflow_kinesis_snowflake.core.model import Destination, DestinationType

# Unquoted Snowflake identifiers; they resolve upper-case, and we quote them upper-case.
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,254}$")
IDENTIFIER_RULE = (
    "must be a Snowflake identifier: a letter or '_' then letters, digits, '_' or '$' (at most 255 characters)"
)
SNOWFLAKE_CATALOG = "SNOWFLAKE"
SNOWFLAKE_MANAGED_VOLUME = "SNOWFLAKE_MANAGED"
MIN_RSA_KEY_BITS = 2048

_BASE_LOCATION = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-/]{0,1023}$")
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
_PEM = re.compile(r"-----BEGIN ([A-Z ]+)-----(.*?)-----END \1-----", re.DOTALL)


class ProvisioningError(ValueError):
    """A provisioning parameter is not allowed; the message names the parameter."""


# Table properties each destination type takes. Interactive tables take none of them, and row
# timestamps are documented for standard tables only; a property a type lacks is left out.
TABLE_PROPERTIES: Mapping[DestinationType, tuple[str, ...]] = {
    DestinationType.TABLE: ("schema_evolution", "error_logging", "row_timestamp"),
    DestinationType.PIPE: ("schema_evolution", "error_logging", "row_timestamp"),
    DestinationType.ICEBERG: ("schema_evolution", "error_logging"),
    DestinationType.INTERACTIVE: (),
}
_PROPERTY_SQL = {
    "schema_evolution": "ENABLE_SCHEMA_EVOLUTION",
    "error_logging": "ERROR_LOGGING",
    "row_timestamp": "ROW_TIMESTAMP",
}

# Column types a connector file may declare, and whether they take (length) or (precision, scale).
_TYPE_PARAMETERS: Mapping[str, int] = {
    **dict.fromkeys(("NUMBER", "DECIMAL", "NUMERIC"), 2),
    **dict.fromkeys(("VARCHAR", "CHAR", "CHARACTER", "STRING", "TEXT", "BINARY", "VARBINARY"), 1),
    **dict.fromkeys(("TIME", "TIMESTAMP", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "TIMESTAMP_TZ", "DATETIME"), 1),
    **dict.fromkeys(
        (
            "INT",
            "INTEGER",
            "BIGINT",
            "SMALLINT",
            "TINYINT",
            "BYTEINT",
            "FLOAT",
            "FLOAT4",
            "FLOAT8",
            "DOUBLE",
            "DOUBLE PRECISION",
            "REAL",
            "BOOLEAN",
            "DATE",
            "VARIANT",
            "OBJECT",
            "ARRAY",
        ),
        0,
    ),
}
COLUMN_TYPES = tuple(_TYPE_PARAMETERS)
_COLUMN_TYPE = re.compile(
    r"^\s*(?P<base>[A-Za-z_][A-Za-z0-9_]*(?:\s+PRECISION)?)\s*"
    r"(?:\(\s*(?P<p>\d{1,8})\s*(?:,\s*(?P<s>\d{1,8})\s*)?\))?\s*$",
    re.IGNORECASE,
)

# KINESISMETADATA of an Iceberg table: Iceberg has no semi-structured OBJECT, so the same fields
# as the Parquet struct the ingestion writes (core.schema.METADATA_TYPE), as a structured OBJECT.
_ICEBERG_METADATA_TYPE = (
    "OBJECT(stream VARCHAR, shardId VARCHAR, approximateArrival VARCHAR, partitionKey VARCHAR, "
    "sequenceNumber VARCHAR, subSequenceNumber NUMBER(19,0), shardedSequenceNumber VARCHAR)"
)


# -- small validators, shared with the connector config ----------------------------------------------


def normalize_identifier(value: str) -> str:
    """An unquoted identifier, upper-cased as Snowflake resolves it; :class:`ValueError` otherwise."""
    if not isinstance(value, str) or not IDENTIFIER.match(value):
        raise ValueError(IDENTIFIER_RULE)
    return value.upper()


def normalize_column_type(value: str) -> str:
    """``number( 38 , 0 )`` -> ``NUMBER(38,0)``; only plain Snowflake types are accepted."""
    match = _COLUMN_TYPE.match(value) if isinstance(value, str) else None
    base = re.sub(r"\s+", " ", match.group("base")).upper() if match else ""
    if match is None or base not in _TYPE_PARAMETERS:
        raise ValueError(f"must be a Snowflake data type, one of {', '.join(COLUMN_TYPES)} (e.g. NUMBER(38,0))")
    params = [p for p in (match.group("p"), match.group("s")) if p is not None]
    if len(params) > _TYPE_PARAMETERS[base]:
        allowed = {0: "no parameters", 1: "one parameter", 2: "at most (precision, scale)"}[_TYPE_PARAMETERS[base]]
        raise ValueError(f"{base} takes {allowed}")
    return f"{base}({','.join(params)})" if params else base


def normalize_base_location(value: str) -> str:
    if not _BASE_LOCATION.match(value) or ".." in value.split("/"):
        raise ValueError(
            "must be a relative directory on the external volume: letters, digits, '_', '-', '.' and '/', "
            "not starting with '/' and without '..'"
        )
    return value


def quote_literal(value: str) -> str:
    """A Snowflake single-quoted string literal; backslashes and quotes are escaped."""
    if "\x00" in value:
        raise ValueError("string literals cannot contain NUL characters")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -- the RSA public key -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PublicKey:
    """An RSA public key as Snowflake's ``RSA_PUBLIC_KEY`` takes it: base64 DER, one line."""

    body: str = field(repr=False)
    fingerprint: str

    @property
    def redacted(self) -> str:
        return f"<redacted RSA public key {self.fingerprint}>"


def parse_public_key(text: str) -> PublicKey:
    """Accept a PEM ``PUBLIC KEY`` (or its base64 body) of an RSA key of at least 2048 bits.

    The fingerprint is the one Snowflake shows as ``RSA_PUBLIC_KEY_FP`` (``DESC USER``). No error
    message repeats the key.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the RSA public key is empty")
    armored = _PEM.search(text)
    if armored:
        if "PRIVATE" in armored.group(1):
            raise ValueError("this is a private key; give the RSA public key (openssl rsa -in key.p8 -pubout)")
        if armored.group(1) != "PUBLIC KEY":
            raise ValueError(f"expected a '-----BEGIN PUBLIC KEY-----' PEM, got '-----BEGIN {armored.group(1)}-----'")
        body = armored.group(2)
    elif "PRIVATE KEY" in text:
        raise ValueError("this is a private key; give the RSA public key (openssl rsa -in key.p8 -pubout)")
    else:
        body = text
    body = re.sub(r"\s+", "", body)
    try:
        if not _BASE64.match(body):
            raise ValueError
        der = base64.b64decode(body, validate=True)
        key = load_der_public_key(der)
    except ValueError:
        raise ValueError("not a PEM public key (expected '-----BEGIN PUBLIC KEY-----' and base64)") from None
    if not isinstance(key, RSAPublicKey):
        raise ValueError(f"Snowflake key-pair authentication needs an RSA key, got {type(key).__name__}")
    if key.key_size < MIN_RSA_KEY_BITS:
        raise ValueError(f"the RSA key has {key.key_size} bits; Snowflake needs at least {MIN_RSA_KEY_BITS}")
    fingerprint = "SHA256:" + base64.b64encode(hashlib.sha256(der).digest()).decode("ascii")
    return PublicKey(body=base64.b64encode(der).decode("ascii"), fingerprint=fingerprint)


# -- the specification ------------------------------------------------------------------------------


def _fail(name: str, message: str) -> ProvisioningError:
    return ProvisioningError(f"{name}: {message}")


def _identifier_param(name: str, value: str | None, *, required: bool = False) -> str | None:
    if value is None or value == "":
        if required:
            raise _fail(name, "is required")
        return None
    try:
        return normalize_identifier(value)
    except ValueError as err:
        raise _fail(name, f"{err} (got {value!r})") from None


def _required_identifier(name: str, value: str) -> str:
    return _identifier_param(name, value, required=True) or ""


def destination_type(value: str | DestinationType) -> DestinationType:
    """``"iceberg"`` -> :attr:`DestinationType.ICEBERG`; :class:`ProvisioningError` lists the allowed values."""
    try:
        return DestinationType(str(value).upper())
    except ValueError:
        allowed = ", ".join(t.value for t in DestinationType)
        raise _fail("destination_type", f"must be one of {allowed} (got {value!r})") from None


@dataclass(frozen=True)
class ProvisioningSpec:
    """Everything the plan is built from. Values are validated and normalized on creation.

    :param database: destination database (unquoted identifier).
    :param schema: destination schema.
    :param table: destination table.
    :param destination_type: TABLE, ICEBERG, INTERACTIVE or PIPE.
    :param columns: initial columns, name -> Snowflake type, in table order; ``KINESISMETADATA``
        is always added last.
    :param schema_evolution: ``ENABLE_SCHEMA_EVOLUTION`` (where the type takes it).
    :param error_logging: ``ERROR_LOGGING`` (where the type takes it).
    :param row_timestamp: ``ROW_TIMESTAMP`` (standard tables only).
    :param external_volume: Iceberg: the external volume (``SNOWFLAKE_MANAGED`` for Snowflake
        storage); None leaves it to the database's default.
    :param catalog: Iceberg: must be ``SNOWFLAKE`` (the connector writes Snowflake-managed tables).
    :param base_location: Iceberg: directory of the table's files on the external volume.
    :param cluster_by: clustering columns; required for INTERACTIVE.
    :param pipe: PIPE: the pipe's name, in the destination schema.
    :param pipe_definition: PIPE: ``COPY INTO <database>.<schema>.<table> FROM (SELECT ...)``.
    :param role: the connector's role; None provisions the objects only, without grants.
    :param user: the connector's service user; needs ``role`` and ``public_key``.
    :param warehouse: warehouse the role may use (and the user's default).
    :param public_key: the user's RSA public key (PEM or base64 body).
    """

    database: str
    schema: str
    table: str
    destination_type: DestinationType = DestinationType.TABLE
    columns: Mapping[str, str] = field(default_factory=dict)
    schema_evolution: bool = True
    error_logging: bool = True
    row_timestamp: bool = True
    external_volume: str | None = None
    catalog: str = SNOWFLAKE_CATALOG
    base_location: str | None = None
    cluster_by: Sequence[str] = ()
    pipe: str | None = None
    pipe_definition: str | None = None
    role: str | None = None
    user: str | None = None
    warehouse: str | None = None
    public_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        values = _validated(self)
        for name, value in values.items():
            object.__setattr__(self, name, value)

    @property
    def destination(self) -> Destination:
        return Destination(self.database, self.schema, self.table)

    @property
    def all_columns(self) -> tuple[str, ...]:
        """The destination's column names once provisioned, in table order."""
        return (*self.columns, METADATA_COLUMN)


def _validated(spec: ProvisioningSpec) -> dict[str, Any]:
    """Normalized field values of ``spec``; :class:`ProvisioningError` names the first bad one."""
    out: dict[str, Any] = {
        "database": _required_identifier("database", spec.database),
        "schema": _required_identifier("schema", spec.schema),
        "table": _required_identifier("table", spec.table),
    }
    kind = destination_type(spec.destination_type)
    out["destination_type"] = kind

    columns: dict[str, str] = {}
    for raw_name, raw_type in dict(spec.columns).items():
        name = _required_identifier(f"columns.{raw_name}", raw_name)
        if name == METADATA_COLUMN:
            raise _fail(f"columns.{raw_name}", f"{METADATA_COLUMN} is added by the connector; leave it out")
        if name in columns:
            raise _fail(f"columns.{raw_name}", f"duplicates column {name} (names are case-insensitive)")
        try:
            columns[name] = normalize_column_type(raw_type)
        except ValueError as err:
            raise _fail(f"columns.{raw_name}", f"{err} (got {raw_type!r})") from None
    out["columns"] = columns

    cluster_by = tuple(_required_identifier("cluster_by", c) for c in spec.cluster_by)
    for column in cluster_by:
        if column not in columns:
            raise _fail("cluster_by", f"column {column} is not one of the columns ({', '.join(columns) or 'none'})")
    if kind is DestinationType.INTERACTIVE and not cluster_by:
        raise _fail("cluster_by", "is required for INTERACTIVE tables (Snowflake needs a clustering key)")
    out["cluster_by"] = cluster_by

    iceberg = kind is DestinationType.ICEBERG
    out["external_volume"] = _identifier_param("external_volume", spec.external_volume)
    if out["external_volume"] and not iceberg:
        raise _fail("external_volume", "is only used with destination type ICEBERG")
    if str(spec.catalog).upper() != SNOWFLAKE_CATALOG:
        raise _fail("catalog", f"must be {SNOWFLAKE_CATALOG}: the connector writes Snowflake-managed Iceberg tables")
    out["catalog"] = SNOWFLAKE_CATALOG
    if spec.base_location is not None:
        if not iceberg:
            raise _fail("base_location", "is only used with destination type ICEBERG")
        try:
            out["base_location"] = normalize_base_location(spec.base_location)
        except ValueError as err:
            raise _fail("base_location", f"{err} (got {spec.base_location!r})") from None

    pipe = kind is DestinationType.PIPE
    out["pipe"] = _identifier_param("pipe", spec.pipe, required=pipe)
    if out["pipe"] and not pipe:
        raise _fail("pipe", "is only used with destination type PIPE")
    if spec.pipe_definition is not None or pipe:
        if not pipe:
            raise _fail("pipe_definition", "is only used with destination type PIPE")
        try:
            out["pipe_definition"] = validate_pipe_definition(
                spec.pipe_definition or "", Destination(out["database"], out["schema"], out["table"])
            )
        except ValueError as err:
            raise _fail("pipe_definition", str(err)) from None

    out["role"] = _identifier_param("role", spec.role)
    out["user"] = _identifier_param("user", spec.user)
    out["warehouse"] = _identifier_param("warehouse", spec.warehouse)
    if out["user"] and not out["role"]:
        raise _fail("user", "needs role: the service user's default role")
    if out["user"] and not spec.public_key:
        raise _fail("public_key", f"is required to create the service user {out['user']} (key-pair authentication)")
    if spec.public_key:
        try:
            parse_public_key(spec.public_key)
        except ValueError as err:
            raise _fail("public_key", str(err)) from None
    return out


# -- the plan ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """A read-only query with bind parameters."""

    sql: str
    params: tuple[str, ...] = ()


@dataclass(frozen=True)
class Statement:
    """One step of the plan.

    :param sql: what runs; may hold the public key, so it is left out of ``repr`` and ``str``.
    :param purpose: why it runs, for logs and dry runs.
    :param skip_if: when this query returns a row the statement is already in effect; used where
        Snowflake has no ``IF NOT EXISTS`` and repeating the statement is not harmless.
    :param redactions: (text, shown instead) pairs applied by :attr:`redacted`.
    """

    sql: str = field(repr=False)
    purpose: str
    skip_if: Query | None = None
    redactions: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def redact(self, text: str) -> str:
        for secret, shown in self.redactions:
            text = text.replace(secret, shown)
        return text

    @property
    def redacted(self) -> str:
        return self.redact(self.sql)

    def __str__(self) -> str:
        return self.redacted


@dataclass(frozen=True)
class ProvisioningPlan:
    """The ordered statements for one connector; render it, or run it statement by statement."""

    spec: ProvisioningSpec
    statements: tuple[Statement, ...]

    def redact(self, text: str) -> str:
        """``text`` (e.g. an error message echoing SQL) with every secret of the plan replaced."""
        for statement in self.statements:
            text = statement.redact(text)
        return text

    def render(self, *, redact: bool = True) -> str:
        """A SQL script: each statement under a comment with its number and purpose."""
        blocks = []
        for number, statement in enumerate(self.statements, start=1):
            sql = statement.redacted if redact else statement.sql
            blocks.append(f"-- {number}. {statement.purpose}\n{sql};\n")
        return "\n".join(blocks)

    def describe(self) -> list[dict[str, Any]]:
        """JSON-friendly, redacted statements (for XCom and dry runs)."""
        return [{"purpose": s.purpose, "sql": s.redacted} for s in self.statements]


def _column_list(spec: ProvisioningSpec) -> str:
    metadata_type = _ICEBERG_METADATA_TYPE if spec.destination_type is DestinationType.ICEBERG else "OBJECT"
    columns = [f"{quote_identifier(name)} {data_type}" for name, data_type in spec.columns.items()]
    columns.append(f"{quote_identifier(METADATA_COLUMN)} {metadata_type}")
    return ", ".join(columns)


def _table_properties(spec: ProvisioningSpec) -> list[str]:
    values = {
        "schema_evolution": spec.schema_evolution,
        "error_logging": spec.error_logging,
        "row_timestamp": spec.row_timestamp,
    }
    return [
        f"{_PROPERTY_SQL[name]} = {'TRUE' if values[name] else 'FALSE'}"
        for name in TABLE_PROPERTIES[spec.destination_type]
    ]


_TABLE_PURPOSE = {
    DestinationType.TABLE: f"destination table with a {METADATA_COLUMN} column",
    DestinationType.PIPE: f"destination table of the custom pipe, with a {METADATA_COLUMN} column",
    DestinationType.ICEBERG: f"destination Iceberg table with a {METADATA_COLUMN} column",
    DestinationType.INTERACTIVE: f"destination interactive table with a {METADATA_COLUMN} column",
}


def create_table_sql(spec: ProvisioningSpec) -> str:
    """The destination's ``CREATE ... TABLE IF NOT EXISTS`` for its destination type."""
    kind = spec.destination_type
    table = SinkObjects.for_destination(spec.destination).table
    keyword = {DestinationType.ICEBERG: "ICEBERG TABLE", DestinationType.INTERACTIVE: "INTERACTIVE TABLE"}.get(
        kind, "TABLE"
    )
    parts = [f"CREATE {keyword} IF NOT EXISTS {table} ({_column_list(spec)})"]
    if spec.cluster_by:
        parts.append(f"CLUSTER BY ({', '.join(quote_identifier(c) for c in spec.cluster_by)})")
    if kind is DestinationType.ICEBERG:
        if spec.external_volume:
            parts.append(f"EXTERNAL_VOLUME = {quote_literal(spec.external_volume)}")
        parts.append(f"CATALOG = {quote_literal(spec.catalog)}")
        if spec.base_location:
            parts.append(f"BASE_LOCATION = {quote_literal(spec.base_location)}")
    parts.extend(_table_properties(spec))
    return " ".join(parts)


def build_plan(spec: ProvisioningSpec) -> ProvisioningPlan:
    """The statements provisioning ``spec``, in the order they must run."""
    kind = spec.destination_type
    destination = spec.destination
    objects = SinkObjects.for_destination(destination)
    database = quote_identifier(spec.database)
    schema = f"{database}.{quote_identifier(spec.schema)}"
    role = quote_identifier(spec.role) if spec.role else None
    out: list[Statement] = [
        Statement(f"CREATE DATABASE IF NOT EXISTS {database}", "destination database"),
        Statement(f"CREATE SCHEMA IF NOT EXISTS {schema}", "destination schema"),
    ]

    if role:
        out += [
            Statement(f"CREATE ROLE IF NOT EXISTS {role}", "the connector's role"),
            Statement(f"GRANT USAGE ON DATABASE {database} TO ROLE {role}", "role may use the database"),
            Statement(f"GRANT USAGE ON SCHEMA {schema} TO ROLE {role}", "role may use the schema"),
            # The ingestion runs CREATE ... IF NOT EXISTS for its ledger, parse-failure table and
            # stage before each load, which needs these privileges even when the objects exist.
            Statement(
                f"GRANT CREATE TABLE, CREATE STAGE ON SCHEMA {schema} TO ROLE {role}",
                "role may create its support tables and stage",
            ),
        ]
        if spec.warehouse:
            out.append(
                Statement(
                    f"GRANT USAGE ON WAREHOUSE {quote_identifier(spec.warehouse)} TO ROLE {role}",
                    "role may use the warehouse",
                )
            )
        if spec.external_volume and spec.external_volume != SNOWFLAKE_MANAGED_VOLUME:
            out.append(
                Statement(
                    f"GRANT USAGE ON EXTERNAL VOLUME {quote_identifier(spec.external_volume)} TO ROLE {role}",
                    "role may write the Iceberg table's external volume",
                )
            )

    if spec.user and role:
        key = parse_public_key(spec.public_key or "")
        user = quote_identifier(spec.user)
        create_user = (
            f"CREATE USER IF NOT EXISTS {user} TYPE = SERVICE RSA_PUBLIC_KEY = {quote_literal(key.body)} "
            f"DEFAULT_ROLE = {role}"
        )
        if spec.warehouse:
            create_user += f" DEFAULT_WAREHOUSE = {quote_identifier(spec.warehouse)}"
        out += [
            Statement(
                create_user,
                "the connector's service user, key-pair authentication",
                redactions=((key.body, key.redacted),),
            ),
            Statement(f"GRANT ROLE {role} TO USER {user}", "service user gets the role"),
        ]

    out.append(
        Statement(
            create_table_sql(spec),
            _TABLE_PURPOSE[kind],
        )
    )
    if role:
        # Schema evolution alters the table, which only its owner may do. Once the role owns the
        # table, whoever runs this plan may no longer be allowed to transfer it again: check first.
        object_type = "ICEBERG TABLE" if kind is DestinationType.ICEBERG else "TABLE"
        out.append(
            Statement(
                f"GRANT OWNERSHIP ON {object_type} {objects.table} TO ROLE {role} COPY CURRENT GRANTS",
                "role owns the destination table, which loading and schema evolution need",
                skip_if=Query(
                    f"SELECT 1 FROM {database}.INFORMATION_SCHEMA.TABLES "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND TABLE_OWNER = %s",
                    (spec.schema, spec.table, spec.role or ""),
                ),
            )
        )

    purposes = {
        "ledger": "ledger table",
        "parse failures": "parse-failure table",
        "stage": "stage",
        "generations": "generations table",
        "generations columns": "generations table's columns added since its first release",
        "batch outcomes": "batch outcomes table",
    }
    for ddl in support_objects_ddl(destination):
        out.append(Statement(ddl.sql, f"the provider's {purposes[ddl.kind]}"))
    if role:
        out += [
            Statement(
                f"GRANT SELECT, INSERT, UPDATE ON TABLE {objects.ledger} TO ROLE {role}",
                "role reads and moves the ledger",
            ),
            Statement(
                f"GRANT SELECT, INSERT ON TABLE {objects.failures_table} TO ROLE {role}",
                "role loads parse failures",
            ),
            Statement(f"GRANT READ, WRITE ON STAGE {objects.stage} TO ROLE {role}", "role stages its files"),
            Statement(
                f"GRANT SELECT, INSERT ON TABLE {objects.generations} TO ROLE {role}",
                "role records and reads its application's generations",
            ),
            Statement(
                f"GRANT SELECT, INSERT, DELETE ON TABLE {objects.outcomes} TO ROLE {role}",
                "role records its batches' outcomes, which the Airflow worker reads back, and deletes old ones",
            ),
        ]

    if kind is DestinationType.PIPE and spec.pipe and spec.pipe_definition:
        pipe = f"{schema}.{quote_identifier(spec.pipe)}"
        # The pipe is owned by the role running this plan; Snowflake loads through a pipe with its
        # owner's privileges, so that role keeps needing INSERT on the table (e.g. by inheriting
        # the connector's role). The connector's role gets what a streaming client needs.
        out.append(Statement(f"CREATE PIPE IF NOT EXISTS {pipe} AS {spec.pipe_definition}", "custom pipe"))
        if role:
            out.append(Statement(f"GRANT OPERATE, MONITOR ON PIPE {pipe} TO ROLE {role}", "role may run the pipe"))
    return ProvisioningPlan(spec=spec, statements=tuple(out))


# -- verification -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExpectedObjects:
    """What a provisioned connector has in Snowflake, by the names INFORMATION_SCHEMA reports."""

    database: str
    schema: str
    tables: tuple[str, ...]
    columns: tuple[str, ...]
    stage: str
    pipe: str | None = None

    def describe(self) -> list[str]:
        """The objects checked, for logs."""
        prefix = f"{self.database}.{self.schema}"
        checked = [f"table {prefix}.{t}" for t in self.tables]
        checked.append(f"columns {', '.join(self.columns)} of {prefix}.{self.tables[0]}")
        checked.append(f"stage {prefix}.{self.stage}")
        if self.pipe:
            checked.append(f"pipe {prefix}.{self.pipe}")
        return checked

    def schema_query(self) -> Query:
        return Query(
            f"SELECT SCHEMA_NAME FROM {quote_identifier(self.database)}.INFORMATION_SCHEMA.SCHEMATA "
            "WHERE SCHEMA_NAME = %s",
            (self.schema,),
        )

    def tables_query(self) -> Query:
        marks = ", ".join(["%s"] * len(self.tables))
        return Query(
            f"SELECT TABLE_NAME FROM {quote_identifier(self.database)}.INFORMATION_SCHEMA.TABLES "
            f"WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN ({marks})",
            (self.schema, *self.tables),
        )

    def columns_query(self) -> Query:
        return Query(
            f"SELECT COLUMN_NAME FROM {quote_identifier(self.database)}.INFORMATION_SCHEMA.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (self.schema, self.tables[0]),
        )

    def stage_query(self) -> Query:
        # INFORMATION_SCHEMA.STAGES is missing on the emulator; SHOW STAGES works on both. LIKE
        # treats '_' as a wildcard, so the caller keeps only rows whose name matches exactly.
        schema = f"{quote_identifier(self.database)}.{quote_identifier(self.schema)}"
        return Query(f"SHOW STAGES LIKE {quote_literal(self.stage)} IN SCHEMA {schema}")

    def pipe_query(self) -> Query | None:
        if self.pipe is None:
            return None
        return Query(
            f"SELECT PIPE_NAME FROM {quote_identifier(self.database)}.INFORMATION_SCHEMA.PIPES "
            "WHERE PIPE_SCHEMA = %s AND PIPE_NAME = %s",
            (self.schema, self.pipe),
        )


def expected_objects(
    *,
    database: str,
    schema: str,
    table: str,
    columns: Iterable[str] = (),
    pipe: str | None = None,
) -> ExpectedObjects:
    """What to look for; ``columns`` are names (a mapping's keys), ``KINESISMETADATA`` is added."""
    table = _required_identifier("table", table)
    names = [_required_identifier(f"columns.{c}", c) for c in columns]
    return ExpectedObjects(
        database=_required_identifier("database", database),
        schema=_required_identifier("schema", schema),
        tables=(table, table + PARSE_FAILURES_SUFFIX, LEDGER_TABLE),
        columns=(*dict.fromkeys(n for n in names if n != METADATA_COLUMN), METADATA_COLUMN),
        stage=STAGE_NAME,
        pipe=_identifier_param("pipe", pipe),
    )


def expected_objects_of(spec: ProvisioningSpec) -> ExpectedObjects:
    """What :func:`build_plan` of ``spec`` provisions, as :func:`missing_objects` checks it."""
    return expected_objects(
        database=spec.database,
        schema=spec.schema,
        table=spec.table,
        columns=spec.columns,
        pipe=spec.pipe if spec.destination_type is DestinationType.PIPE else None,
    )


def missing_objects(
    expected: ExpectedObjects,
    *,
    schemas: Iterable[str],
    tables: Iterable[str],
    columns: Iterable[str],
    stages: Iterable[str],
    pipes: Iterable[str] = (),
) -> list[str]:
    """Everything in ``expected`` that the listed names lack, most basic first; empty when complete.

    Column names are compared as Snowflake resolves unquoted names (upper case); types are not
    compared, since schema evolution may have widened them.
    """
    db, schema = expected.database, expected.schema
    if schema not in set(schemas):
        return [f"schema {db}.{schema}"]
    missing: list[str] = []
    present_tables = set(tables)
    missing += [f"table {db}.{schema}.{t}" for t in expected.tables if t not in present_tables]
    if expected.tables[0] in present_tables:
        present_columns = {c.upper() for c in columns}
        missing += [
            f"column {c} of {db}.{schema}.{expected.tables[0]}" for c in expected.columns if c not in present_columns
        ]
    if expected.stage not in set(stages):
        missing.append(f"stage {db}.{schema}.{expected.stage}")
    if expected.pipe is not None and expected.pipe not in set(pipes):
        missing.append(f"pipe {db}.{schema}.{expected.pipe}")
    return missing
