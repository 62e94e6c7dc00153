"""Connector configuration: one YAML file per connector, validated before anything runs.

The parameter names follow Snowflake's Openflow Connector for Kinesis so that a user moving from
it recognises them. Every mistake is reported with the file, the field and what is allowed.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from airflow_kinesis_snowflake.core.positions import InitialPosition

# DynamoDB table names: 3-255 characters of [a-zA-Z0-9_.-]. The application name is also the lease
# table name and the name of `<application>_migration`, so it must leave room for that suffix.
_DYNAMODB_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
MIGRATION_SUFFIX = "_migration"
APPLICATION_NAME_MAX = 255 - len(MIGRATION_SUFFIX)

# Snowflake unquoted identifiers; we upper-case them (as Snowflake resolves them) and quote them.
_SNOWFLAKE_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,254}$")
_KINESIS_STREAM_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")


class ConnectorConfigError(ValueError):
    """A connector file is missing, unreadable or holds a value that is not allowed."""


class ConsumerType(StrEnum):
    SHARED_THROUGHPUT = "SHARED_THROUGHPUT"
    ENHANCED_FAN_OUT = "ENHANCED_FAN_OUT"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class SourceConfig(_Strict):
    """Where records come from and how progress is tracked.

    :param application_name: names the DynamoDB lease table (and the fan-out consumer). Two
        ingestions with the same name share progress; a new name starts over.
    """

    type: str = Field(default="kinesis", pattern="^kinesis$")
    stream_name: str
    region: str
    application_name: str
    consumer_type: ConsumerType = ConsumerType.SHARED_THROUGHPUT
    initial_position: InitialPosition = InitialPosition.TRIM_HORIZON
    initial_timestamp: datetime | None = None
    max_records_per_call: int = Field(default=10000, ge=1, le=10000)

    @field_validator("stream_name")
    @classmethod
    def _stream_name(cls, value: str) -> str:
        if not _KINESIS_STREAM_NAME.match(value):
            raise ValueError("must be 1-128 characters of letters, digits, '_', '.' or '-'")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not _AWS_REGION.match(value):
            raise ValueError("must be an AWS region code such as 'us-east-1'")
        return value

    @field_validator("application_name")
    @classmethod
    def _application_name(cls, value: str) -> str:
        if not 3 <= len(value) <= APPLICATION_NAME_MAX or not _DYNAMODB_NAME.match(value):
            raise ValueError(
                f"must be a valid DynamoDB table name of 3-{APPLICATION_NAME_MAX} characters "
                "(letters, digits, '_', '.', '-'); it names the lease table and "
                f"'<name>{MIGRATION_SUFFIX}'"
            )
        return value

    @field_validator("initial_timestamp")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    @model_validator(mode="after")
    def _timestamp_with_at_timestamp(self) -> SourceConfig:
        if self.initial_position is InitialPosition.AT_TIMESTAMP and self.initial_timestamp is None:
            raise ValueError(
                "initial_position AT_TIMESTAMP needs initial_timestamp (ISO 8601, e.g. '2026-01-31T00:00:00Z')"
            )
        if self.initial_position is not InitialPosition.AT_TIMESTAMP and self.initial_timestamp:
            raise ValueError("initial_timestamp is only used with initial_position AT_TIMESTAMP")
        return self


class DestinationConfig(_Strict):
    """The Snowflake table records land in. Names are unquoted identifiers, resolved upper-case."""

    database: str
    schema_: str = Field(alias="schema")
    table: str
    type: str = Field(default="TABLE", pattern="^TABLE$")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("database", "schema_", "table")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not _SNOWFLAKE_IDENTIFIER.match(value):
            raise ValueError(
                "must be a Snowflake identifier: a letter or '_' then letters, digits, '_' or '$' "
                "(at most 255 characters)"
            )
        return value.upper()


class BatchConfig(_Strict):
    """How much one micro-batch reads."""

    schedule: str | None = "*/5 * * * *"
    max_records_per_shard: int = Field(default=100_000, ge=1, le=10_000_000)
    max_shards_per_batch: int | None = Field(default=None, ge=1)


class ConnectionsConfig(_Strict):
    aws: str = "aws_default"
    snowflake: str = "snowflake_default"
    spark: str = "spark_default"


class ConnectorConfig(_Strict):
    """Everything one connector needs: source stream, destination table, batching, connections."""

    connector_id: str = Field(pattern=r"^[A-Za-z0-9_\-]{1,200}$")
    source: SourceConfig
    destination: DestinationConfig
    batch: BatchConfig = BatchConfig()
    connections: ConnectionsConfig = ConnectionsConfig()

    @property
    def table_fqn(self) -> str:
        d = self.destination
        return f'"{d.database}"."{d.schema_}"."{d.table}"'


def _describe(error: dict[str, Any]) -> str:
    field = ".".join(str(part) for part in error["loc"] if part != "__root__") or "<top level>"
    field = field.replace("schema_", "schema")
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{field}: unknown field; check its spelling and its section"
    if kind == "missing":
        return f"{field}: required field is missing"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    shown = f" (got {value!r})" if value is not None and not isinstance(value, dict) else ""
    return f"{field}: {message}{shown}"


def parse_connector_config(data: Any, *, source: str = "<config>") -> ConnectorConfig:
    """Validate a mapping as a connector config; raise :class:`ConnectorConfigError` naming fields."""
    if not isinstance(data, dict):
        raise ConnectorConfigError(f"{source}: expected a mapping at the top level")
    try:
        return ConnectorConfig.model_validate(data)
    except ValidationError as err:
        lines = "\n".join(f"  - {_describe(e)}" for e in err.errors())  # type: ignore[arg-type]
        raise ConnectorConfigError(f"{source}: invalid connector configuration\n{lines}") from None


def load_connector_config(path: str | Path) -> ConnectorConfig:
    """Read and validate one connector YAML file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConnectorConfigError(f"{path}: cannot read: {err}") from err
    except yaml.YAMLError as err:
        raise ConnectorConfigError(f"{path}: not valid YAML: {err}") from err
    return parse_connector_config(data, source=str(path))


def load_connector_configs(directory: str | Path) -> list[ConnectorConfig]:
    """Load every ``*.yaml``/``*.yml`` in a directory; connector ids must be unique."""
    configs: list[ConnectorConfig] = []
    seen: dict[str, Path] = {}
    for path in sorted(Path(directory).glob("*.y*ml")):
        config = load_connector_config(path)
        if config.connector_id in seen:
            raise ConnectorConfigError(
                f"{path}: connector_id {config.connector_id!r} is already used by {seen[config.connector_id]}"
            )
        seen[config.connector_id] = path
        configs.append(config)
    return configs
