"""Connector configuration: one YAML file per connector, validated before anything runs.

The parameter names follow Snowflake's Openflow Connector for Kinesis so that a user moving from
it recognises them. Every mistake is reported with the file, the field and what is allowed.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, cast

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from airflow_kinesis_snowflake import docs_url
from airflow_kinesis_snowflake.core.admin.iam import IamCheckMode, check_mode_from_skip_if_denied
from airflow_kinesis_snowflake.core.admin.provisioning import (
    IDENTIFIER,
    IDENTIFIER_RULE,
    SNOWFLAKE_CATALOG,
    TABLE_PROPERTIES,
    ProvisioningSpec,
    normalize_base_location,
    normalize_column_type,
)
from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS
from airflow_kinesis_snowflake.core.job_log import SPARK_LOG_LEVEL_SETTING, spark_log_level
from airflow_kinesis_snowflake.core.load.dynamodb_rows import KeyAttribute, Layout
from airflow_kinesis_snowflake.core.load.dynamodb_sink import Deletes, DynamoDBTarget, KeyColumn
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.load.pipe import validate_pipe_definition
from airflow_kinesis_snowflake.core.load.schema import METADATA_COLUMN
from airflow_kinesis_snowflake.core.metrics import DEFAULT_NAMESPACE, check_dimensions, check_namespace
from airflow_kinesis_snowflake.core.metrics import TAGS as METRIC_TAGS
from airflow_kinesis_snowflake.core.model import ConsumerType, Destination, DestinationType, InitialPosition
from airflow_kinesis_snowflake.core.planning import DEFAULT_MAX_BYTES_PER_SHARD
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import (
    DEFAULT_DESTINATION_TEMPLATE,
    TABLE_NAME,
    DiscoveryError,
    SyncTarget,
    TableSelection,
    check_destination_template,
    decide_destinations,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import (
    KeyAttribute as DiscoveredKey,
)
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import OnGap, SnapshotMode, StreamStart, SyncSettings
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateSettings
from airflow_kinesis_snowflake.registry import (
    DEFAULT_SOURCE,
    DYNAMODB_SOURCE,
    KINESIS_SOURCE,
    SOURCE_TYPES,
    of_source,
    registered,
)

# DynamoDB table names: 3-255 characters of [a-zA-Z0-9_.-]. The application name is also the lease
# table name and the name of `<application>_migration`, so it must leave room for that suffix.
_DYNAMODB_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
MIGRATION_SUFFIX = "_migration"
APPLICATION_NAME_MAX = 255 - len(MIGRATION_SUFFIX)
APPLICATION_NAME_RULE = (
    f"must be a valid DynamoDB table name of 3-{APPLICATION_NAME_MAX} characters "
    f"(letters, digits, '_', '.', '-'); it names the lease table and '<name>{MIGRATION_SUFFIX}'"
)
# The same rule as JSON Schema, for the reset DAG's trigger form.
APPLICATION_NAME_PATTERN = rf"^[A-Za-z0-9_.\-]{{3,{APPLICATION_NAME_MAX}}}$"

# Snowflake unquoted identifiers (core.provisioning.IDENTIFIER); we upper-case them, as Snowflake
# resolves them, and quote them.
_KINESIS_STREAM_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
# Longer than any AWS region code; the region is part of task ids, which Airflow limits to 250.
_AWS_REGION_MAX = 32

# The connector id is a tag of every DAG of the connector, and Airflow refuses tags longer than
# airflow.sdk.definitions.dag.TAG_MAX_LEN (100); it also names the DAGs (dynamodb_snowflake_<id>_provision
# is 129 characters at most, well within Airflow's 250 for ids).
CONNECTOR_ID_MAX = 100
_CONNECTOR_ID = re.compile(rf"^[A-Za-z0-9_\-]{{1,{CONNECTOR_ID_MAX}}}$")
CONNECTOR_ID_RULE = (
    f"must be 1-{CONNECTOR_ID_MAX} letters, digits, '_' or '-': it names the connector's DAGs and is one of "
    f"their tags, which Airflow limits to {CONNECTOR_ID_MAX} characters"
)
# Airflow connection ids (airflow.models.connection.RE_SANITIZE_CONN_ID); the AWS one is part of the
# clean-up DAG's task ids, which Airflow limits to 250 characters.
CONNECTION_ID_MAX = 200
_CONNECTION_ID = re.compile(rf"^[\w#!()\-.:/\\]{{1,{CONNECTION_ID_MAX}}}$")

# Schedules as Airflow 3 reads a DAG's ``schedule`` string: these two are timetables of their own,
# anything else is a cron expression or one of Airflow's cron presets.
SCHEDULE_TIMETABLES = ("@once", "@continuous")
CRON_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
# The provider's own schedule: an Asset whose watcher's trigger fires when records are new.
ON_NEW_RECORDS = "on_new_records"
SCHEDULE_RULE = (
    "use a cron expression such as '*/5 * * * *' (minute hour day-of-month month day-of-week), one of "
    f"{', '.join(CRON_PRESETS + SCHEDULE_TIMETABLES)}, {ON_NEW_RECORDS} (a run when records arrive), "
    "or null for manual runs only"
)
NEW_RECORDS_POLL_MAX_SECONDS = 3600

# Bounds of the retry delay: Airflow's own default cap on a task's retry delay
# ([core] max_task_retry_delay) is a day; beyond Python's timedelta the DAG cannot even be built.
RETRY_DELAY_MAX_SECONDS = 86_400
# batch.max_bytes_per_shard: from one MiB (a batch must hold the largest record, 1 MiB) to 4 GiB.
MAX_BYTES_PER_SHARD_RANGE = (2**20, 4 * 2**30)
LEASE_DURATION_MAX_SECONDS = 86_400


def validate_schedule(value: str | None) -> str | None:
    """Return ``value`` if Airflow 3 accepts it as a DAG's ``schedule``; :class:`ValueError` if not.

    The expression is parsed by Airflow's own cron timetable (croniter underneath), as the DAG
    processor would parse it, so that a mistake is reported here with its file and field.
    """
    if value is None or value in SCHEDULE_TIMETABLES:
        return value
    from airflow_kinesis_snowflake.compat import AirflowTimetableInvalid, CronTriggerTimetable

    try:
        CronTriggerTimetable(value, timezone="UTC").validate()
    except AirflowTimetableInvalid as err:
        raise ValueError(f"is not a schedule Airflow accepts ({err}); {SCHEDULE_RULE}") from None
    return value


def validate_application_name(value: str) -> str:
    """Return ``value`` if it can be an application name; :class:`ValueError` with the rule if not."""
    if not 3 <= len(value) <= APPLICATION_NAME_MAX or not _DYNAMODB_NAME.match(value):
        raise ValueError(APPLICATION_NAME_RULE)
    return value


def validate_region(value: str) -> str:
    """Return ``value`` if it is an AWS region code; :class:`ValueError` if not."""
    if len(value) > _AWS_REGION_MAX or not _AWS_REGION.match(value):
        raise ValueError("must be an AWS region code such as 'us-east-1'")
    return value


def validate_connector_id(value: str) -> str:
    """Return ``value`` if it can be a connector id; :class:`ValueError` with the rule if not."""
    if not _CONNECTOR_ID.match(value):
        raise ValueError(CONNECTOR_ID_RULE)
    return value


def iam_check_value(value: Any) -> Any:
    """``source.iam_check`` as written: YAML 1.1 reads an unquoted ``off`` as false."""
    if value is False:
        return IamCheckMode.OFF
    if value is True:
        raise ValueError("must be required, best_effort or off, not true")
    return value


class ConnectorConfigError(ValueError):
    """A connector file is missing, unreadable or holds a value that is not allowed."""


# Deprecated form of source.iam_check: true is best_effort, false is required.
DEPRECATED_IAM_ALIAS = "skip_iam_check_if_denied"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


_ModelT = TypeVar("_ModelT", bound=BaseModel)


class _SourceSection(_Strict):
    """The fields every source section has, validated once: ``region``, ``application_name``, ``iam_check``.

    Each source's section declares them (in its own field order); the validators here apply to both.
    """

    @field_validator("region", check_fields=False)
    @classmethod
    def _region(cls, value: str) -> str:
        return validate_region(value)

    @field_validator("application_name", check_fields=False)
    @classmethod
    def _application_name(cls, value: str) -> str:
        return validate_application_name(value)

    @field_validator("iam_check", mode="before", check_fields=False)
    @classmethod
    def _iam_check_off(cls, value: Any) -> Any:
        return iam_check_value(value)


class SourceConfig(_SourceSection):
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
    # A KCL 2.x/3.x lease table already under application_name is migrated by the provisioning DAG.
    migrate_legacy_checkpoints: bool = False
    # The provisioning DAG's IAM permission check (SimulatePrincipalPolicy): see core.iam.IamCheckMode.
    # The deprecated `skip_iam_check_if_denied: true` means best_effort, `false` required.
    iam_check: IamCheckMode = IamCheckMode.REQUIRED

    @model_validator(mode="before")
    @classmethod
    def _deprecated_iam_alias(cls, data: Any) -> Any:
        if not isinstance(data, dict) or DEPRECATED_IAM_ALIAS not in data:
            return data
        data = dict(data)
        skip = data.pop(DEPRECATED_IAM_ALIAS)
        if "iam_check" in data:
            raise ValueError(
                f"source.{DEPRECATED_IAM_ALIAS} is the deprecated form of source.iam_check; "
                f"remove {DEPRECATED_IAM_ALIAS} and keep iam_check"
            )
        if not isinstance(skip, bool):
            raise ValueError(
                f"source.{DEPRECATED_IAM_ALIAS} must be true or false (got {skip!r}); "
                f"it is deprecated: write source.iam_check: {IamCheckMode.BEST_EFFORT.value} or "
                f"{IamCheckMode.REQUIRED.value} instead"
            )
        data["iam_check"] = check_mode_from_skip_if_denied(skip)
        return data

    @property
    def skip_iam_check_if_denied(self) -> bool:
        """Deprecated: ``iam_check`` is not ``required``."""
        return self.iam_check is not IamCheckMode.REQUIRED

    @field_validator("stream_name")
    @classmethod
    def _stream_name(cls, value: str) -> str:
        if not _KINESIS_STREAM_NAME.match(value):
            raise ValueError("must be 1-128 characters of letters, digits, '_', '.' or '-'")
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


def _identifier(value: str) -> str:
    if not IDENTIFIER.match(value):
        raise ValueError(IDENTIFIER_RULE)
    return value.upper()


_TYPE_ONLY_FIELDS: dict[str, DestinationType] = {
    "external_volume": DestinationType.ICEBERG,
    "catalog": DestinationType.ICEBERG,
    "base_location": DestinationType.ICEBERG,
    "pipe": DestinationType.PIPE,
    "pipe_definition": DestinationType.PIPE,
}


class DestinationConfig(_Strict):
    """The Snowflake table records land in. Names are unquoted identifiers, resolved upper-case.

    :param type: TABLE, ICEBERG (Snowflake-managed Iceberg table), INTERACTIVE (interactive table,
        needs ``cluster_by``) or PIPE (a table loaded through the user's pipe).
    :param schema_evolution: create the table with ``ENABLE_SCHEMA_EVOLUTION`` (TABLE, PIPE,
        ICEBERG), and let each batch add a column for a new first-level key and drop NOT NULL
        where its records lack a value (TABLE only: Iceberg tables are never altered, and a pipe's
        SELECT names the keys it loads). Left out, the ingestion follows the table's own
        ``ENABLE_SCHEMA_EVOLUTION``.
    :param on_unknown_key: a key with no column that gets none (evolution off, an Iceberg table,
        a key no column can be named after): IGNORE loads the record without it, FAIL fails the
        batch, before anything is loaded, naming the keys.
    :param error_logging: create the table with ``ERROR_LOGGING`` (TABLE, PIPE, ICEBERG).
    :param row_timestamp: create the table with ``ROW_TIMESTAMP`` (TABLE, PIPE).
    :param cluster_by: clustering columns, from ``snowflake.columns``; required for INTERACTIVE.
    :param external_volume: ICEBERG: external volume of the table's files (``SNOWFLAKE_MANAGED``
        for Snowflake storage); omitted, the database's default applies.
    :param catalog: ICEBERG: ``SNOWFLAKE``, the only catalog the connector can write through.
    :param base_location: ICEBERG: directory of the table's files on the external volume.
    :param pipe: PIPE: name of the pipe, in the destination schema.
    :param pipe_definition: PIPE: ``COPY INTO <database>.<schema>.<table> FROM (SELECT ...)``.
        Provisioning creates the pipe with it, and each batch runs it over its own staged records
        (``$1`` is the record's JSON object with a ``KINESISMETADATA`` key) in the transaction that
        moves the ledger.
    """

    database: str
    schema_: str = Field(alias="schema")
    table: str
    type: DestinationType = DestinationType.TABLE
    schema_evolution: bool = True
    on_unknown_key: UnknownKeys = UnknownKeys.IGNORE
    error_logging: bool = True
    row_timestamp: bool = True
    cluster_by: tuple[str, ...] = ()
    external_volume: str | None = None
    catalog: str = SNOWFLAKE_CATALOG
    base_location: str | None = None
    pipe: str | None = None
    pipe_definition: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def ingest_schema_evolution(self) -> bool | None:
        """``schema_evolution`` as the ingestion takes it: None when the file leaves it out."""
        return self.schema_evolution if "schema_evolution" in self.model_fields_set else None

    @field_validator("database", "schema_", "table", "external_volume", "pipe")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        return None if value is None else _identifier(value)

    @field_validator("cluster_by")
    @classmethod
    def _cluster_by(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_identifier(column) for column in value)

    @field_validator("catalog")
    @classmethod
    def _catalog(cls, value: str) -> str:
        if value.upper() != SNOWFLAKE_CATALOG:
            raise ValueError(f"must be {SNOWFLAKE_CATALOG}: the connector writes Snowflake-managed Iceberg tables only")
        return SNOWFLAKE_CATALOG

    @field_validator("base_location")
    @classmethod
    def _base_location(cls, value: str | None) -> str | None:
        return None if value is None else normalize_base_location(value)

    @field_validator("pipe_definition")
    @classmethod
    def _pipe_definition(cls, value: str | None, info: ValidationInfo) -> str | None:
        database, schema, table = (info.data.get(name) for name in ("database", "schema_", "table"))
        if value is None or not (database and schema and table):
            return value  # a bad table name is reported on its own
        return validate_pipe_definition(value, Destination(database, schema, table))

    @model_validator(mode="after")
    def _fields_of_the_type(self) -> DestinationConfig:
        kind = self.type
        for name, only in _TYPE_ONLY_FIELDS.items():
            if name in self.model_fields_set and kind is not only:
                raise ValueError(f"destination.{name} is only used with type {only.value} (type is {kind.value})")
        supported = TABLE_PROPERTIES[kind]
        for name in ("schema_evolution", "error_logging", "row_timestamp"):
            if name in self.model_fields_set and getattr(self, name) and name not in supported:
                takes = ", ".join(t.value for t, props in TABLE_PROPERTIES.items() if name in props)
                raise ValueError(
                    f"destination.{name} is not available for type {kind.value} (only for {takes}); remove it"
                )
        if kind is DestinationType.INTERACTIVE and not self.cluster_by:
            raise ValueError("destination.cluster_by is required for type INTERACTIVE (its clustering columns)")
        if kind is DestinationType.PIPE:
            missing = [name for name in ("pipe", "pipe_definition") if getattr(self, name) is None]
            if missing:
                raise ValueError(f"type PIPE needs {' and '.join('destination.' + m for m in missing)}")
        return self


class SnowflakeConfig(_Strict):
    """The connector's identity in Snowflake and its table's initial columns (provisioning only).

    The RSA public key of the service user is read at run time from an Airflow Variable or
    connection, never from this file.

    :param role: the connector's role; it gets usage on database, schema (and warehouse), and owns
        the destination table. Without it, provisioning creates the objects and grants nothing.
    :param user: the connector's service user (``TYPE = SERVICE``, key-pair authentication);
        needs ``role`` (its default role) and a public key source.
    :param warehouse: a warehouse the role may use, and the user's default.
    :param public_key_variable: Airflow Variable holding the user's RSA public key (PEM).
    :param public_key_conn_id: Airflow connection holding it (extra ``public_key``, or password).
    :param columns: the table's initial columns, name -> Snowflake type (e.g. ``NUMBER(38,0)``);
        ``KINESISMETADATA`` is always added. Schema evolution adds the rest as records arrive.
    """

    role: str | None = None
    user: str | None = None
    warehouse: str | None = None
    public_key_variable: str | None = None
    public_key_conn_id: str | None = None
    columns: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _no_inline_key(cls, data: Any) -> Any:
        if isinstance(data, dict):
            inline = sorted(k for k in data if isinstance(k, str) and "key" in k.lower() and "public_key_" not in k)
            if inline:
                raise ValueError(
                    f"snowflake.{inline[0]}: keys are never written in the connector file; store the RSA "
                    "public key PEM in an Airflow Variable (public_key_variable) or connection (public_key_conn_id)"
                )
        return data

    @field_validator("role", "user", "warehouse")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        return None if value is None else _identifier(value)

    @field_validator("columns")
    @classmethod
    def _columns(cls, value: dict[str, str]) -> dict[str, str]:
        columns: dict[str, str] = {}
        for name, data_type in value.items():
            if not isinstance(name, str) or not IDENTIFIER.match(name):
                raise ValueError(f"column {name!r}: {IDENTIFIER_RULE}")
            upper = name.upper()
            if upper == METADATA_COLUMN:
                raise ValueError(f"column {name!r}: {METADATA_COLUMN} is added by the connector; leave it out")
            if upper in columns:
                raise ValueError(f"column {name!r} duplicates {upper} (names are case-insensitive)")
            try:
                columns[upper] = normalize_column_type(str(data_type))
            except ValueError as err:
                raise ValueError(f"column {name!r}: {err} (got {data_type!r})") from None
        return columns

    @model_validator(mode="after")
    def _key_source(self) -> SnowflakeConfig:
        if self.public_key_variable and self.public_key_conn_id:
            raise ValueError("set only one of snowflake.public_key_variable and snowflake.public_key_conn_id")
        if self.user and not self.role:
            raise ValueError("snowflake.user needs snowflake.role (the service user's default role)")
        if self.user and not (self.public_key_variable or self.public_key_conn_id):
            raise ValueError(
                "snowflake.user needs snowflake.public_key_variable or snowflake.public_key_conn_id "
                "(the service user authenticates with an RSA key pair)"
            )
        if not self.user and (self.public_key_variable or self.public_key_conn_id):
            raise ValueError("a public key source is only used with snowflake.user")
        return self


# ``batch.mode``: one batch per DAG run, or micro-batches back to back in one Spark application.
BATCH_MODES = ("scheduled", "continuous")
# A continuous Spark application runs at most a day (leases are renewed meanwhile).
MAX_RUNTIME_MAX_MINUTES = 24 * 60
IDLE_MAX_SECONDS = 600
# A task of a connector's DAGs that runs longer than this is failed (and its Spark job killed).
DEFAULT_EXECUTION_TIMEOUT_MINUTES = 180
# In continuous mode, by default: the application's runtime, and this margin to end its last batch.
CONTINUOUS_TIMEOUT_MARGIN_MINUTES = 30
EXECUTION_TIMEOUT_MAX_MINUTES = 7 * 24 * 60


class BatchConfig(_Strict):
    """How much one micro-batch reads, and when.

    :param schedule: the ingest DAG's schedule, as Airflow reads it: a cron expression, a cron
        preset (``@hourly``...), ``@once``, ``@continuous``, or null (manual runs only).
    :param retry_delay_seconds: between task retries, at most a day (Airflow's default
        ``[core] max_task_retry_delay``).
    :param wait_for_records: the ingest DAG first checks, for the cost of one ``GetRecords`` per
        shard, that records arrived beyond the checkpoints before the run started; a run with
        nothing new ends skipped without starting Spark. Default: on for shared-throughput
        connectors in scheduled mode; off for enhanced fan-out ones, which otherwise make no
        GetRecords call (and so take nothing of the shards' shared 5 reads a second), and in
        continuous mode, whose runs wait for records themselves.
    :param new_records_poll_seconds: with ``schedule: on_new_records``, how often the triggerer
        checks the shards for new records.
    :param mode: ``scheduled`` (each DAG run loads one batch, in a Spark application of its own) or
        ``continuous`` (each DAG run's Spark application loads micro-batches back to back for
        ``max_runtime_minutes``, then ends;
        https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/modes/).
    :param max_runtime_minutes: continuous mode only (and required there): how long one Spark
        application starts micro-batches.
    :param idle_seconds: continuous mode only: the pause after a micro-batch (a DynamoDB table's run)
        that found nothing new, before the next looks again (default 1). Each look queries
        Snowflake: a longer pause lets a quiet connector cost fewer of them, at the
        price of that much more latency for the first record after a quiet spell.
    :param max_bytes_per_shard: user-record payload bytes one batch reads of one shard at most; the
        read stops after the record that reaches it
        (https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/install/#6-sizing).
    :param execution_timeout_minutes: each task of the connector's DAGs is failed after this long
        (Airflow's ``execution_timeout``; its Spark job is killed, its leases expire after
        ``lease_duration_seconds`` and a retry takes over from the ledger). Default 180, or in
        continuous mode ``max_runtime_minutes`` plus 30; it must exceed ``max_runtime_minutes``.
        A DAG run ends after every try had its time (:attr:`dag_run_timeout`).
    """

    schedule: str | None = "*/5 * * * *"
    wait_for_records: bool | None = None
    new_records_poll_seconds: int = Field(default=30, ge=1, le=NEW_RECORDS_POLL_MAX_SECONDS)
    max_records_per_shard: int = Field(default=100_000, ge=1, le=10_000_000)
    max_bytes_per_shard: int = DEFAULT_MAX_BYTES_PER_SHARD
    max_shards_per_batch: int | None = Field(default=None, ge=1, le=100_000)
    # Failover time: a worker that stopped renewing its leases loses them to others after this long.
    lease_duration_seconds: int = Field(default=300, ge=5, le=LEASE_DURATION_MAX_SECONDS)
    retries: int = Field(default=2, ge=0, le=20)
    retry_delay_seconds: int = Field(default=30, ge=0, le=RETRY_DELAY_MAX_SECONDS)
    mode: Literal["scheduled", "continuous"] = "scheduled"
    max_runtime_minutes: float | None = Field(default=None, gt=0, le=MAX_RUNTIME_MAX_MINUTES)
    idle_seconds: float = Field(default=IDLE_SECONDS, gt=0, le=IDLE_MAX_SECONDS)
    execution_timeout_minutes: float | None = Field(default=None, gt=0, le=EXECUTION_TIMEOUT_MAX_MINUTES)

    @property
    def execution_timeout(self) -> timedelta:
        """How long one task may run (``execution_timeout_minutes``, or its default for the mode)."""
        if self.execution_timeout_minutes is not None:
            return timedelta(minutes=self.execution_timeout_minutes)
        if self.max_runtime_minutes is not None:
            return timedelta(minutes=self.max_runtime_minutes + CONTINUOUS_TIMEOUT_MARGIN_MINUTES)
        return timedelta(minutes=DEFAULT_EXECUTION_TIMEOUT_MINUTES)

    @property
    def dag_run_timeout(self) -> timedelta:
        """How long one DAG run may last: every try of a task its full time, the delays between them,
        and the few minutes the run's other tasks take."""
        tries = self.retries + 1
        return tries * self.execution_timeout + timedelta(seconds=self.retries * self.retry_delay_seconds + 600)

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str | None) -> str | None:
        return value if value == ON_NEW_RECORDS else validate_schedule(value)

    @model_validator(mode="after")
    def _continuous(self) -> BatchConfig:
        if self.mode == "continuous" and self.max_runtime_minutes is None:
            raise ValueError(
                "batch.mode continuous needs batch.max_runtime_minutes: how long one Spark application loads "
                "micro-batches before it ends and the next DAG run takes over; set it to at most the schedule's "
                "interval (e.g. 5 with */5 * * * *)"
            )
        if self.mode == "scheduled" and self.max_runtime_minutes is not None:
            raise ValueError(
                f"batch.max_runtime_minutes ({self.max_runtime_minutes}) is only used with batch.mode continuous; "
                "remove it, or set batch.mode: continuous"
            )
        limit, runtime = self.execution_timeout_minutes, self.max_runtime_minutes
        if limit is not None and runtime is not None and limit <= runtime:
            raise ValueError(
                f"batch.execution_timeout_minutes ({limit:g}) must exceed batch.max_runtime_minutes ({runtime:g}): "
                "a continuous application would be killed before it ends; leave it out (the default is "
                f"max_runtime_minutes + {CONTINUOUS_TIMEOUT_MARGIN_MINUTES}) or raise it"
            )
        if self.mode == "scheduled" and "idle_seconds" in self.model_fields_set:
            raise ValueError(
                f"batch.idle_seconds ({self.idle_seconds}) is only used with batch.mode continuous (the pause "
                "between micro-batches that found nothing new); remove it, or set batch.mode: continuous"
            )
        return self

    @field_validator("max_bytes_per_shard")
    @classmethod
    def _max_bytes_per_shard(cls, value: int) -> int:
        low, high = MAX_BYTES_PER_SHARD_RANGE
        if not low <= value <= high:
            raise ValueError(
                f"must be a number of bytes from {low} (1 MiB, the largest Kinesis record) to {high} (4 GiB); "
                f"write, for instance, {DEFAULT_MAX_BYTES_PER_SHARD} (the default, "
                f"{DEFAULT_MAX_BYTES_PER_SHARD // 2**20} MiB), or leave the field out"
            )
        return value


class ConnectionsConfig(_Strict):
    """Airflow connection ids."""

    aws: str = "aws_default"
    snowflake: str = "snowflake_default"
    spark: str = "spark_default"

    @field_validator("aws", "snowflake", "spark")
    @classmethod
    def _connection_id(cls, value: str) -> str:
        if not _CONNECTION_ID.match(value):
            raise ValueError(f"must be an Airflow connection id: 1-{CONNECTION_ID_MAX} letters, digits or _#!()-.:/\\")
        return value


class MetricsConfig(_Strict):
    """Where a connector's metrics go besides Airflow's ``[metrics]`` backend (docs/operations.md, "Metrics").

    ``cloudwatch: true`` also publishes every batch's metrics to Amazon CloudWatch with
    ``PutMetricData``, through the connector's AWS connection, into ``namespace``, with the tags
    named in ``dimensions`` as dimensions (all of them by default); ``policy`` then grants
    ``cloudwatch:PutMetricData`` for that namespace.
    """

    cloudwatch: bool = False
    namespace: str = DEFAULT_NAMESPACE
    dimensions: tuple[str, ...] = METRIC_TAGS

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return check_namespace(value)

    @field_validator("dimensions")
    @classmethod
    def _dimensions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_dimensions(value)

    @model_validator(mode="after")
    def _only_with_cloudwatch(self) -> MetricsConfig:
        unused = [name for name in ("namespace", "dimensions") if name in self.model_fields_set]
        if unused and not self.cloudwatch:
            given = " and ".join(
                f"{name} {list(value) if name == 'dimensions' else value!r}"
                for name in unused
                for value in [getattr(self, name)]
            )
            raise ValueError(
                f"{given} {'have' if len(unused) > 1 else 'has'} no effect while cloudwatch is false (only CloudWatch "
                f"uses {'them' if len(unused) > 1 else 'it'}); set metrics.cloudwatch: true, or remove "
                + " and ".join(f"metrics.{name}" for name in unused)
            )
        return self

    @property
    def cloudwatch_namespace(self) -> str | None:
        """The namespace the operators publish to; None when CloudWatch is off."""
        return self.namespace if self.cloudwatch else None


# Spark settings (the ``spark:`` section). Sizes as Spark reads them (JavaUtils.byteStringAs), with
# a unit: a bare number is MiB for memory settings, which a reader would take for bytes.
_SPARK_SIZE = re.compile(r"^([1-9][0-9]{0,8})(k|kb|m|mb|g|gb|t|tb)$", re.IGNORECASE)
_SIZE_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
# Spark refuses a driver or an executor with less memory than 1.5 times its reserved 300 MiB
# (UnifiedMemoryManager): the JVM would start and fail at once.
SPARK_MEMORY_MIN_MIB = 450
SPARK_SIZE_RULE = (
    f"must be a size with a unit as Spark writes it, e.g. '512m' or '2g', at least {SPARK_MEMORY_MIN_MIB}m"
)
SPARK_COUNT_MAX = 100_000
SPARK_DEPLOY_MODES = ("client", "cluster")
# The SparkSubmitHook arguments a connector's ``spark:`` section sets besides ``conf`` (``queue`` is ``yarn_queue``).
SPARK_SUBMIT_ARGUMENTS = (
    "deploy_mode",
    "executor_memory",
    "driver_memory",
    "executor_cores",
    "total_executor_cores",
    "num_executors",
    "yarn_queue",
)
_SPARK_KEY = re.compile(r"^spark\.[A-Za-z0-9_.\-\[\]]+$")
# Spark settings that become environment variables of the driver or of the executors: they show on
# the spark-submit command line, in the Spark UI and in event logs.
SPARK_ENV_PREFIXES = (
    "spark.yarn.appMasterEnv.",
    "spark.kubernetes.driverEnv.",
    "spark.executorEnv.",
    "spark.emr-serverless.driverEnv.",
)
# AWS_ENDPOINT_URL_* name endpoints (a Secrets Manager VPC endpoint), not secrets.
_CREDENTIAL_ENV = re.compile(
    r"^(?!AWS_ENDPOINT_URL_).*(SECRET|PASSWORD|PASSWD|PASSPHRASE|TOKEN|PRIVATE_KEY|CREDENTIAL|^AWS_ACCESS_KEY_ID$"
    r"|^SNOWFLAKE_)",
    re.IGNORECASE,
)
# Spark and Hadoop settings that hold a secret themselves (spark.authenticate.secret,
# spark.ssl.keyStorePassword, spark.hadoop.fs.s3a.secret.key ...); *.file settings name a file
# instead, and Kubernetes secret references name a Kubernetes secret.
_SECRET_REFERENCE = re.compile(r"^spark\.kubernetes\.(driver|executor)\.(secretKeyRef|secrets)\.")
_CREDENTIAL_SETTING = re.compile(
    r"(password|passphrase|secret\.key|access\.key|account\.key|private\.key|encryption\.key|session\.token"
    r"|\.sas\.|\.secret$|token$)",
    re.IGNORECASE,
)


def spark_memory_mib(value: str) -> float:
    """The MiB of a Spark size with a unit (``512m``, ``2g``); :class:`ValueError` with the rule if it is none."""
    match = _SPARK_SIZE.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise ValueError(SPARK_SIZE_RULE)
    return int(match.group(1)) * _SIZE_MIB[match.group(2)[0].lower()]


def _spark_memory(value: str | None) -> str | None:
    if value is None:
        return None
    if spark_memory_mib(value) < SPARK_MEMORY_MIN_MIB:
        raise ValueError(f"{SPARK_SIZE_RULE}: Spark refuses less")
    return value.strip().lower()


def _spark_count(value: Any) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isdigit())):
        raise ValueError(f"must be a whole number from 1 to {SPARK_COUNT_MAX}")
    number = int(value)
    if not 1 <= number <= SPARK_COUNT_MAX:
        raise ValueError(f"must be a whole number from 1 to {SPARK_COUNT_MAX}")
    return number


def _spark_deploy_mode(value: Any) -> str:
    mode = str(value).strip().lower()
    if mode not in SPARK_DEPLOY_MODES:
        raise ValueError(f"must be {' or '.join(SPARK_DEPLOY_MODES)}")
    return mode


def _spark_python(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or any(c in value for c in "\n\r\0"):
        raise ValueError("must be the path (or command name) of a Python interpreter")
    return value.strip()


def _spark_queue(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value.strip()):
        raise ValueError("must be the name of a YARN queue, e.g. 'default' or 'root.ingest'")
    return value.strip()


def _spark_log_level(value: Any) -> str:
    return spark_log_level(value)


def _spark_conf_value(value: Any) -> str:
    """A ``--conf`` value as Spark reads it: YAML's true/false as Spark writes booleans."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# Typed fields of the spark section, the Spark setting each stands for, and its check.
_SPARK_TYPED: dict[str, tuple[str, Any]] = {
    "deploy_mode": ("spark.submit.deployMode", _spark_deploy_mode),
    "executor_memory": ("spark.executor.memory", _spark_memory),
    "driver_memory": ("spark.driver.memory", _spark_memory),
    "executor_cores": ("spark.executor.cores", _spark_count),
    "total_executor_cores": ("spark.cores.max", _spark_count),
    "num_executors": ("spark.executor.instances", _spark_count),
    "pyspark_python": ("spark.pyspark.python", _spark_python),
    "pyspark_driver_python": ("spark.pyspark.driver.python", _spark_python),
    "queue": ("spark.yarn.queue", _spark_queue),
    "log_level": (SPARK_LOG_LEVEL_SETTING, _spark_log_level),
}


def spark_conf_problems(conf: dict[str, Any]) -> list[str]:
    """What is wrong with the entries of a ``conf`` map (credentials, keys, values), one line each."""
    return [problem for key, item in conf.items() if (problem := _spark_conf_problem(key, item))]


def check_spark_conf(conf: dict[str, Any], where: str) -> None:
    """Refuse a ``conf`` map with a problem (:func:`spark_conf_problems`); ``where`` starts the message.

    :raises ValueError: naming each wrong entry (never a value that may be a secret).
    """
    if problems := spark_conf_problems(conf):
        raise ValueError(f"{where}: {'; '.join(problems)}")


def _spark_conf_problem(key: Any, value: Any) -> str | None:
    """What is wrong with one ``conf`` entry, naming it; None when nothing is."""
    if not isinstance(key, str) or not _SPARK_KEY.match(key):
        return f"key {key!r} is not a Spark setting: keys start with 'spark.' (letters, digits, '_', '.', '-')"
    for prefix in SPARK_ENV_PREFIXES:
        if key.startswith(prefix) and _CREDENTIAL_ENV.search(key[len(prefix) :]):
            return (
                f"key {key!r} would put a credential into an environment variable through a Spark setting, which "
                "shows on the spark-submit command line, in the Spark UI and in event logs (value not shown); "
                f"remove it: the job gets its credentials from the Airflow connections ({docs_url('connections')})"
            )
    if _CREDENTIAL_SETTING.search(key) and not key.lower().endswith("file") and not _SECRET_REFERENCE.match(key):
        return (
            f"key {key!r} holds a secret in a Spark setting, which shows on the spark-submit command line, in the "
            "Spark UI and in event logs (value not shown); remove it and set it in the cluster's "
            "spark-defaults.conf, or use the setting's *.file form where Spark has one"
        )
    if value is None or isinstance(value, (dict, list)):
        return f"key {key!r}: the value must be a string, number or true/false (got {value!r})"
    if any(c in str(value) for c in "\n\r\0"):
        return f"key {key!r}: the value must be one line (got {value!r})"
    typed = next((name for name, (setting, _) in _SPARK_TYPED.items() if setting == key), None)
    if typed is not None:
        try:
            _SPARK_TYPED[typed][1](value)
        except ValueError as err:
            return f"key {key!r} {err} (got {value!r}); it is spark.{typed} of this section"
    return None


# Where the job runs (``spark.platform``): spark-submit on this worker, or a managed Spark service.
SPARK_SUBMIT_PLATFORM = "spark_submit"
EMR_SERVERLESS_PLATFORM = "emr_serverless"
GLUE_PLATFORM = "glue"
DATABRICKS_PLATFORM = "databricks"
SPARK_PLATFORMS = (SPARK_SUBMIT_PLATFORM, EMR_SERVERLESS_PLATFORM, GLUE_PLATFORM, DATABRICKS_PLATFORM)
# The platforms whose submitter starts a run without waiting and reads its state: a task on them can
# leave the wait to Airflow's triggerer (spark.deferrable; hooks/managed.py, ManagedSubmitter).
DEFERRABLE_PLATFORMS = (EMR_SERVERLESS_PLATFORM, GLUE_PLATFORM, DATABRICKS_PLATFORM)
# The spark: fields that only spark-submit reads: a managed platform sizes and places the driver itself.
_SPARK_SUBMIT_ONLY = ("deploy_mode", "total_executor_cores", "queue")
# The spark: fields Glue decides itself: its worker type sizes the driver and executors, its runtime is the Python.
_GLUE_DECIDES = (
    "executor_memory",
    "driver_memory",
    "executor_cores",
    "num_executors",
    "pyspark_python",
    "pyspark_driver_python",
)
_EMR_APPLICATION_ID = re.compile(r"^[0-9a-z]{1,64}$")
_IAM_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
_S3_LOCATION = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/[^\s]*)?$")
# StartJobRun's executionTimeoutMinutes, within what EMR Serverless accepts.
EMR_TIMEOUT_MAX_MINUTES = 1_000_000


def _whole_number(value: Any, low: int, high: int) -> bool:
    """Whether ``value`` is a whole number (not YAML's true/false) from ``low`` to ``high``."""
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


class _ManagedPlatformSection(_Strict):
    """The fields every managed Spark platform's section has, validated once: the IAM role the job runs
    as, the ``artifacts`` location on S3, the run's timeout in minutes and ``poll_seconds``.

    Each platform's section declares them (in its own field order, the role and the timeout under the
    platform's own names) and says how its messages name the role and the timeout's bounds; the
    validators here apply to both.
    """

    # How the role's message names it, e.g. "the job runtime role".
    role_described: ClassVar[str]
    # The timeout's bounds in minutes and why, as its message gives them.
    timeout_minutes_range: ClassVar[tuple[int, int]]
    timeout_bound: ClassVar[str]

    @field_validator("execution_role_arn", "role_arn", check_fields=False)
    @classmethod
    def _role(cls, value: str) -> str:
        if not _IAM_ROLE_ARN.match(value):
            raise ValueError(
                f"{value!r} is not an IAM role ARN: give {cls.role_described} as arn:aws:iam::<account>:role/<name>"
            )
        return value

    @field_validator("artifacts", check_fields=False)
    @classmethod
    def _artifacts(cls, value: str) -> str:
        if not _S3_LOCATION.match(value):
            raise ValueError(f"{value!r} is not an S3 location: write it s3://<bucket>/<prefix>")
        return value.rstrip("/")

    @field_validator("execution_timeout_minutes", "timeout_minutes", mode="before", check_fields=False)
    @classmethod
    def _timeout(cls, value: Any) -> Any:
        if value is None:
            return None
        low, high = cls.timeout_minutes_range
        if not _whole_number(value, low, high):
            raise ValueError(
                f"{value!r} must be a whole number of minutes from {low} to {high:,} ({cls.timeout_bound})"
            )
        return value

    @field_validator("poll_seconds", mode="before", check_fields=False)
    @classmethod
    def _poll(cls, value: Any) -> Any:
        if not _whole_number(value, 1, 300):
            raise ValueError(f"{value!r} must be a whole number of seconds from 1 to 300")
        return value


class EmrServerlessConfig(_ManagedPlatformSection):
    """Where and as whom the job runs on Amazon EMR Serverless (``spark.emr_serverless``).

    :param application_id: the EMR Serverless application (type Spark) the job runs on.
    :param execution_role_arn: the IAM role the job runs as: the driver's own AWS identity, which
        reads the source, the lease table and the Snowflake connection's secret.
    :param artifacts: ``s3://bucket/prefix`` where the entry point and the package zip are uploaded,
        each under a key holding a hash of its bytes; the job's driver logs go under ``<artifacts>/logs``.
    :param execution_timeout_minutes: StartJobRun's ``executionTimeoutMinutes``: EMR Serverless
        cancels a run that lasts longer (at least 5; EMR Serverless's default, 720, when left out).
    :param poll_seconds: seconds between two reads of a job run's state while the task waits (1 to 300).
    """

    application_id: str
    execution_role_arn: str
    artifacts: str
    execution_timeout_minutes: int | None = None
    poll_seconds: int = 30

    role_described = "the job runtime role"
    timeout_minutes_range = (5, EMR_TIMEOUT_MAX_MINUTES)
    timeout_bound = "EMR Serverless refuses a shorter one"

    @field_validator("application_id")
    @classmethod
    def _application_id(cls, value: str) -> str:
        if not _EMR_APPLICATION_ID.match(value):
            raise ValueError(
                f"{value!r} is not an EMR Serverless application id: lower-case letters and digits, as "
                "`aws emr-serverless list-applications` shows it (e.g. 00fabcdefghijklm)"
            )
        return value

    def platform_arguments(self) -> dict[str, Any]:
        """The section as the operators' ``spark_platform`` mapping."""
        return {"platform": EMR_SERVERLESS_PLATFORM, **self.model_dump(exclude_none=True)}


# Glue job names: 1 to 255 characters of the single-line string pattern Glue's API takes.
_GLUE_JOB_NAME = re.compile(r"^[\w.\-+=,@:/ ]{1,255}$")
# The worker types of Glue ETL jobs on Glue 4.0 and later (G.1X: 4 vCPU, 16 GB; G.2X: 8 vCPU, 32 GB ...).
GLUE_WORKER_TYPES = ("G.1X", "G.2X", "G.4X", "G.8X", "G.12X", "G.16X", "R.1X", "R.2X", "R.4X", "R.8X")
# The Glue versions that run the job: Spark 3.5 and Python 3.11 (5.0 and later).
GLUE_VERSIONS = ("5.0",)
# StartJobRun's Timeout in minutes: Glue's default and largest for a batch job is 2,880 (48 hours).
GLUE_TIMEOUT_MAX_MINUTES = 2_880


class GlueConfig(_ManagedPlatformSection):
    """The AWS Glue job the Spark job runs as (``spark.glue``). The job definition is the task's: it
    is created when missing and updated when its settings differ (the Amazon provider's
    ``GlueJobHook`` with ``update_config``, as ``GlueJobOperator`` does), its script the uploaded
    entry point.

    :param job_name: the Glue job (one per connector: its runs are the connector's batches).
    :param role_arn: the IAM role the job runs as: the driver's own AWS identity, which reads the
        source, the lease table and the Snowflake connection's secret.
    :param artifacts: ``s3://bucket/prefix`` where the entry script and the package zip are uploaded,
        each under a key holding a hash of its bytes.
    :param worker_type: the workers' type (G.1X when left out).
    :param number_of_workers: how many workers, the driver's among them (at least 2; 2 when left out).
    :param glue_version: the Glue version; 5.0 (Spark 3.5, Python 3.11), the first that runs the job.
    :param timeout_minutes: StartJobRun's ``Timeout``: Glue stops a run that lasts longer (TIMEOUT);
        Glue's default, 2,880 (48 hours), when left out.
    :param max_concurrent_runs: the job's ``MaxConcurrentRuns`` (1 when left out): Glue refuses a
        run beyond it (ConcurrentRunsExceededException).
    :param additional_python_modules: pip requirements Glue installs before each run
        (``--additional-python-modules``): the job's libraries that Glue's image lacks, e.g.
        ``snowflake-connector-python>=3.17``, or wheels on S3.
    :param poll_seconds: seconds between two reads of a job run's state while the task waits (1 to 300).
    """

    job_name: str
    role_arn: str
    artifacts: str
    worker_type: str = "G.1X"
    number_of_workers: int = 2
    glue_version: str = "5.0"
    timeout_minutes: int | None = None
    max_concurrent_runs: int = 1
    additional_python_modules: list[str] = Field(default_factory=list)
    poll_seconds: int = 30

    role_described = "the Glue job's role"
    timeout_minutes_range = (1, GLUE_TIMEOUT_MAX_MINUTES)
    timeout_bound = "Glue's longest for a batch job"

    @field_validator("job_name")
    @classmethod
    def _job_name(cls, value: str) -> str:
        if not _GLUE_JOB_NAME.match(value):
            raise ValueError(
                f"{value!r} is not a Glue job name: 1 to 255 letters, digits, spaces and _ . - + = , @ : /"
            )
        return value

    @field_validator("worker_type")
    @classmethod
    def _worker_type(cls, value: str) -> str:
        if value not in GLUE_WORKER_TYPES:
            raise ValueError(
                f"{value!r} is not a Glue worker type of a Spark job: one of {', '.join(GLUE_WORKER_TYPES)}"
            )
        return value

    @field_validator("glue_version", mode="before")
    @classmethod
    def _glue_version(cls, value: Any) -> Any:
        if str(value) not in GLUE_VERSIONS:
            raise ValueError(
                f"{value!r}: the job needs Spark 3.5 and Python 3.11, which Glue runs from version 5.0; "
                f'write glue_version: "5.0" (quoted)'
            )
        return str(value)

    @field_validator("number_of_workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> Any:
        if not _whole_number(value, 2, 10_000):
            raise ValueError(f"{value!r} must be a whole number of workers from 2 (a driver and an executor)")
        return value

    @field_validator("additional_python_modules")
    @classmethod
    def _modules(cls, value: list[str]) -> list[str]:
        if bad := [module for module in value if not module.strip() or "," in module]:
            raise ValueError(
                f"{bad[0]!r}: one pip requirement or S3 wheel per item, without commas "
                "(Glue joins them with commas into --additional-python-modules)"
            )
        return value

    @field_validator("max_concurrent_runs", mode="before")
    @classmethod
    def _concurrent(cls, value: Any) -> Any:
        if not _whole_number(value, 1, 1_000):
            raise ValueError(f"{value!r} must be a whole number of runs from 1")
        return value

    def platform_arguments(self) -> dict[str, Any]:
        """The section as the operators' ``spark_platform`` mapping."""
        return {"platform": GLUE_PLATFORM, **self.model_dump(exclude_none=True)}


# Where a connector's job files go on Databricks: DBFS, or a Unity Catalog volume
# (/Volumes/<catalog>/<schema>/<volume>).
_DBFS_LOCATION = re.compile(r"^dbfs:/[^\s]+$")
_VOLUME_LOCATION = re.compile(r"^/Volumes/[^/\s]+/[^/\s]+/[^/\s]+(/[^\s]*)?$")
# A Databricks cluster id, as the clusters API and the cluster's page show it (e.g. 0123-456789-abcdefgh).
_DATABRICKS_CLUSTER_ID = re.compile(r"^[0-9]{4}-[0-9]{6}-[A-Za-z0-9]+$")
# A Databricks Runtime version key (e.g. 15.4.x-scala2.12, 16.4.x-photon-scala2.12), its major and minor.
_DATABRICKS_RUNTIME = re.compile(r"^(\d+)\.(\d+)\.x-[\w.-]+$")
# The first Databricks Runtime with Python 3.11 (and Spark 3.5), which the job needs; 17.x runs Spark 4.
DATABRICKS_MIN_RUNTIME = 15
# A reference to a Databricks secret, which Databricks resolves on the cluster: {{secrets/<scope>/<key>}}.
_DATABRICKS_SECRET_REFERENCE = re.compile(r"^\{\{secrets/[^/{}]+/[^/{}]+\}\}$")
# runs/submit's timeout_seconds is a 32-bit number of seconds.
DATABRICKS_TIMEOUT_MAX_MINUTES = (2**31 - 1) // 60


class DatabricksConfig(_ManagedPlatformSection):
    """The Databricks workspace and cluster the Spark job runs on (``spark.databricks``): each
    submission is a one-time run (Jobs API ``runs/submit``) of a Python script task, the source's
    entry point, with the package installed on the cluster as a wheel.

    :param databricks_conn_id: the Airflow connection of the workspace (the Databricks provider's).
    :param existing_cluster_id: an all-purpose cluster the runs use; or
    :param new_cluster: the spec of a job cluster created for each run (``spark_version``, node types,
        workers, ``aws_attributes.instance_profile_arn`` ...), as runs/submit takes it. Its Databricks
        Runtime must run Python 3.11 and Spark 3.5 or 4: 15.x or later.
    :param artifacts: where the entry point and the package wheel are uploaded, each under a path holding
        a hash of its bytes: ``dbfs:/<path>`` or a Unity Catalog volume ``/Volumes/<catalog>/<schema>/<volume>/<path>``.
    :param libraries: pip requirements the run installs on the cluster besides the package (the task's
        PyPI libraries): the job's libraries that the Databricks Runtime lacks.
    :param timeout_minutes: runs/submit's ``timeout_seconds``, in minutes: Databricks ends a longer run
        (TIMEDOUT); no timeout when left out.
    :param poll_seconds: seconds between two reads of a run's state while the task waits (1 to 300).
    """

    databricks_conn_id: str = "databricks_default"
    existing_cluster_id: str | None = None
    new_cluster: dict[str, Any] | None = None
    artifacts: str
    libraries: list[str] = Field(default_factory=list)
    timeout_minutes: int | None = None
    poll_seconds: int = 30

    timeout_minutes_range = (1, DATABRICKS_TIMEOUT_MAX_MINUTES)
    timeout_bound = "runs/submit's timeout_seconds is a 32-bit number of seconds"

    @field_validator("artifacts")
    @classmethod
    def _artifacts(cls, value: str) -> str:
        if not (_DBFS_LOCATION.match(value) or _VOLUME_LOCATION.match(value)):
            raise ValueError(
                f"{value!r} is not a Databricks location: write it dbfs:/<path> or, in a Unity Catalog volume, "
                "/Volumes/<catalog>/<schema>/<volume>/<path>"
            )
        return value.rstrip("/")

    @field_validator("databricks_conn_id")
    @classmethod
    def _conn_id(cls, value: str) -> str:
        if not value.strip() or len(value) > 200:
            raise ValueError(f"{value!r} must be an Airflow connection id of 1 to 200 characters")
        return value

    @field_validator("existing_cluster_id")
    @classmethod
    def _cluster_id(cls, value: str | None) -> str | None:
        if value is not None and not _DATABRICKS_CLUSTER_ID.match(value):
            raise ValueError(
                f"{value!r} is not a Databricks cluster id: as the cluster's page or `databricks clusters list` "
                "shows it (e.g. 0123-456789-abcdefgh)"
            )
        return value

    @field_validator("new_cluster")
    @classmethod
    def _new_cluster(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        version = value.get("spark_version")
        match = _DATABRICKS_RUNTIME.match(version) if isinstance(version, str) else None
        if match is None:
            raise ValueError(
                f"spark_version {version!r}: give the cluster's Databricks Runtime version key, e.g. 15.4.x-scala2.12 "
                "(`databricks clusters spark-versions` lists them)"
            )
        if int(match.group(1)) < DATABRICKS_MIN_RUNTIME:
            raise ValueError(
                f"spark_version {version!r}: the job needs Python 3.11 and Spark 3.5 or 4, which Databricks Runtime "
                f"runs from {DATABRICKS_MIN_RUNTIME}.x; choose {DATABRICKS_MIN_RUNTIME}.4.x-scala2.12 or later"
            )
        problems = []
        env = value.get("spark_env_vars") or {}
        if not isinstance(env, dict):
            problems.append("spark_env_vars must be a mapping of variable names to values")
            env = {}
        for name, item in env.items():
            if _CREDENTIAL_ENV.search(str(name)) and not _DATABRICKS_SECRET_REFERENCE.match(str(item)):
                problems.append(
                    f"spark_env_vars[{name!r}] would hold a credential in the cluster's spec, which anyone who may "
                    "read the run sees (value not shown); reference a Databricks secret instead "
                    "({{secrets/<scope>/<key>}}), or remove it: the driver uses the cluster's own identity"
                )
        conf = value.get("spark_conf") or {}
        if not isinstance(conf, dict):
            problems.append("spark_conf must be a mapping of spark.* settings to values")
            conf = {}
        plain = {key: item for key, item in conf.items() if not _DATABRICKS_SECRET_REFERENCE.match(str(item))}
        problems += [f"spark_conf: {problem}" for problem in spark_conf_problems(plain)]
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @field_validator("libraries")
    @classmethod
    def _libraries(cls, value: list[str]) -> list[str]:
        if bad := [library for library in value if not library.strip()]:
            raise ValueError(f"{bad[0]!r}: one pip requirement per item, e.g. snowflake-connector-python>=3.17")
        return value

    @model_validator(mode="after")
    def _one_cluster(self) -> DatabricksConfig:
        if (self.existing_cluster_id is None) == (self.new_cluster is None):
            given = "both" if self.existing_cluster_id is not None else "neither"
            raise ValueError(
                f"{given} of existing_cluster_id and new_cluster is set: give existing_cluster_id (an all-purpose "
                "cluster) or new_cluster (a job cluster's spec, created for each run), one of them"
            )
        return self

    def platform_arguments(self) -> dict[str, Any]:
        """The section as the operators' ``spark_platform`` mapping."""
        return {"platform": DATABRICKS_PLATFORM, **self.model_dump(exclude_none=True)}


class SparkConfig(_Strict):
    """spark-submit settings of the ingest job; the master is the Spark connection's (``connections.spark``).

    The names are spark-submit's (and the Spark provider's ``SparkSubmitHook``'s).

    :param deploy_mode: ``client`` (the driver runs on the Airflow worker) or ``cluster``; left out,
        the Spark connection's ``deploy-mode`` extra decides.
    :param conf: more ``--conf`` settings, ``spark.*`` keys to strings, numbers or true/false.
        Never credentials: Spark settings show on the command line, in the Spark UI and in event
        logs. A setting that one of the fields below stands for is written as that field.
    :param executor_memory: ``--executor-memory`` (``spark.executor.memory``), e.g. ``2g``.
    :param driver_memory: ``--driver-memory`` (``spark.driver.memory``).
    :param executor_cores: ``--executor-cores`` (``spark.executor.cores``).
    :param total_executor_cores: ``--total-executor-cores`` (``spark.cores.max``): the cores the
        job takes on a standalone cluster, all free ones when left out. Set it when connectors
        share a cluster, so that their jobs run side by side.
    :param num_executors: ``--num-executors`` (``spark.executor.instances``), YARN and Kubernetes.
    :param pyspark_python: the executors' Python (``spark.pyspark.python``); in client mode also
        the driver's, unless ``pyspark_driver_python`` is set.
    :param pyspark_driver_python: the driver's Python (``spark.pyspark.driver.python``).
    :param queue: the YARN queue (``--queue``, ``spark.yarn.queue``).
    :param log_level: Spark's own logging (``spark.log.level``): ``WARN`` when left out, so that the
        task log holds the job's lines and Spark's warnings and errors, not its INFO lines; one of
        ALL, TRACE, DEBUG, INFO, WARN, ERROR, FATAL, OFF.
    :param platform: where the job runs: ``spark_submit`` (spark-submit on the Airflow worker, the
        master of the Spark connection), ``emr_serverless`` (a job run on Amazon EMR Serverless,
        :class:`EmrServerlessConfig`), ``glue`` (a run of an AWS Glue job, :class:`GlueConfig`) or
        ``databricks`` (a one-time run on a Databricks cluster, :class:`DatabricksConfig`). On
        EMR Serverless ``conf``, the memory and core sizes, the Pythons and the log level become the
        job run's Spark settings; ``deploy_mode``, ``total_executor_cores`` and ``queue`` are
        spark-submit's only.
    :param emr_serverless: the EMR Serverless application, role and artifacts location.
    :param glue: the AWS Glue job, its role, workers and artifacts location. On Glue ``conf`` and the
        log level become the run's Spark settings; the worker type sizes the driver and executors
        and Glue's runtime is the Python, so the memory and core sizes and the Pythons are refused.
    :param databricks: the Databricks workspace connection, cluster and artifacts location. On a new
        cluster ``conf`` and the log level join the cluster's Spark settings; an existing cluster's are
        its own, so they are refused there. The cluster's node types size the driver and executors and
        its runtime is the Python, so the memory and core sizes and the Pythons are refused.
    :param deferrable: on a managed platform, the ingest and sync tasks submit each batch's job run
        and defer: Airflow's triggerer waits for the run (renewing the batch's leases) and the task
        resumes to read its outcome, so no worker slot is held meanwhile. Scheduled mode only;
        spark-submit runs on the worker and cannot be deferred. Left out: Airflow's ``[operators]
        default_deferrable`` where the tasks can defer.
    """

    deploy_mode: str | None = None
    conf: dict[str, Any] = Field(default_factory=dict)
    executor_memory: str | None = None
    driver_memory: str | None = None
    executor_cores: int | None = None
    total_executor_cores: int | None = None
    num_executors: int | None = None
    pyspark_python: str | None = None
    pyspark_driver_python: str | None = None
    queue: str | None = None
    log_level: str | None = None
    platform: str = SPARK_SUBMIT_PLATFORM
    emr_serverless: EmrServerlessConfig | None = None
    glue: GlueConfig | None = None
    databricks: DatabricksConfig | None = None
    deferrable: bool | None = None

    @field_validator("platform", mode="before")
    @classmethod
    def _platform(cls, value: Any) -> Any:
        if value not in SPARK_PLATFORMS:
            raise ValueError(f"{value!r} is not a Spark platform: one of {', '.join(SPARK_PLATFORMS)}")
        return value

    @model_validator(mode="after")
    def _platform_fields(self) -> SparkConfig:
        sections = {
            EMR_SERVERLESS_PLATFORM: self.emr_serverless,
            GLUE_PLATFORM: self.glue,
            DATABRICKS_PLATFORM: self.databricks,
        }
        needs = {
            EMR_SERVERLESS_PLATFORM: "application_id, execution_role_arn and artifacts (s3://bucket/prefix)",
            GLUE_PLATFORM: "job_name, role_arn and artifacts (s3://bucket/prefix)",
            DATABRICKS_PLATFORM: "existing_cluster_id or new_cluster, and artifacts (dbfs:/<path> or /Volumes/...)",
        }
        for platform, section in sections.items():
            if platform != self.platform and section is not None:
                raise ValueError(
                    f"spark.{platform} is set but spark.platform is {self.platform}: set spark.platform: "
                    f"{platform} to run the job there, or remove spark.{platform}"
                )
        if self.platform in sections:
            if sections[self.platform] is None:
                raise ValueError(
                    f"spark.platform {self.platform} needs the spark.{self.platform} section: {needs[self.platform]}"
                )
            if given := [name for name in _SPARK_SUBMIT_ONLY if getattr(self, name) is not None]:
                raise ValueError(
                    f"{', '.join(f'spark.{name}' for name in given)}: spark-submit's only, and spark.platform is "
                    f"{self.platform}, which places the driver and executors itself; remove "
                    f"{'them' if len(given) > 1 else 'it'}"
                )
        if self.platform == GLUE_PLATFORM and (given := [n for n in _GLUE_DECIDES if getattr(self, n) is not None]):
            raise ValueError(
                f"{', '.join(f'spark.{name}' for name in given)}: on Glue the worker type (spark.glue.worker_type) "
                "sizes the driver and executors and Glue's runtime is the Python; remove "
                f"{'them' if len(given) > 1 else 'it'} and choose spark.glue.worker_type and number_of_workers"
            )
        decided = [n for n in _GLUE_DECIDES if getattr(self, n) is not None]
        if self.platform == DATABRICKS_PLATFORM and (given := decided):
            raise ValueError(
                f"{', '.join(f'spark.{name}' for name in given)}: on Databricks the cluster's node types size the "
                "driver and executors and its Databricks Runtime is the Python; remove "
                f"{'them' if len(given) > 1 else 'it'} and choose them in spark.databricks.new_cluster "
                "(node_type_id, num_workers ...) or on the cluster"
            )
        if self.databricks is not None and self.databricks.existing_cluster_id is not None:
            if given := [name for name in ("conf", "log_level") if getattr(self, name)]:
                raise ValueError(
                    f"{', '.join(f'spark.{name}' for name in given)}: a run on an existing cluster "
                    f"(spark.databricks.existing_cluster_id) has the cluster's Spark settings, which a run cannot "
                    f"change; remove {'them' if len(given) > 1 else 'it'} and set them in the cluster's Spark config, "
                    "or run on spark.databricks.new_cluster, whose spark_conf they join"
                )
        return self

    @model_validator(mode="after")
    def _deferrable(self) -> SparkConfig:
        if not self.deferrable or self.platform in DEFERRABLE_PLATFORMS:
            return self
        raise ValueError(
            f"spark.deferrable: true needs a Spark platform whose job runs the triggerer can wait for, and "
            f"spark.platform is {self.platform}: spark-submit runs on the Airflow worker, in the task, so there "
            "is no job run for the triggerer to wait for. Set spark.platform to one of "
            f"{', '.join(DEFERRABLE_PLATFORMS)} (with its section), or remove spark.deferrable"
        )

    def platform_arguments(self) -> dict[str, Any] | None:
        """The operators' ``spark_platform``: None for spark-submit, else the platform's settings."""
        section = self.emr_serverless or self.glue or self.databricks
        return section.platform_arguments() if section is not None else None

    @field_validator(*_SPARK_TYPED, mode="before")
    @classmethod
    def _typed(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        assert info.field_name is not None
        return _SPARK_TYPED[info.field_name][1](value)

    @field_validator("conf", mode="before")
    @classmethod
    def _conf(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError("must be a mapping of spark.* settings to values")
        problems = spark_conf_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return {key: _spark_conf_value(item) for key, item in value.items()}

    @model_validator(mode="after")
    def _one_place_per_setting(self) -> SparkConfig:
        for name, (setting, _) in _SPARK_TYPED.items():
            if getattr(self, name) is not None and setting in self.conf:
                raise ValueError(
                    f"spark.conf[{setting!r}] ({self.conf[setting]!r}) duplicates spark.{name} "
                    f"({getattr(self, name)!r}): keep spark.{name} and remove {setting} from spark.conf"
                )
        return self

    def spark_conf(self) -> dict[str, str]:
        """``conf`` with the Pythons and the log level as the Spark settings they stand for: the hook's ``conf``."""
        pythons = {
            _SPARK_TYPED[name][0]: value
            for name in ("pyspark_python", "pyspark_driver_python", "log_level")
            if (value := getattr(self, name)) is not None
        }
        return {**self.conf, **pythons}

    def submit_arguments(self) -> dict[str, Any]:
        """The fields set, as the ``SparkSubmitHook`` arguments they are (:data:`SPARK_SUBMIT_ARGUMENTS`)."""
        fields = {argument: ("queue" if argument == "yarn_queue" else argument) for argument in SPARK_SUBMIT_ARGUMENTS}
        return {argument: value for argument, field in fields.items() if (value := getattr(self, field)) is not None}


class _ConnectorBase(_Strict):
    """What every connector file has beside its source and destination: its id, batching,
    connections, and the Snowflake, Spark and metrics sections."""

    connector_id: str
    batch: BatchConfig = BatchConfig()
    connections: ConnectionsConfig = ConnectionsConfig()
    snowflake: SnowflakeConfig | None = None
    spark: SparkConfig = SparkConfig()
    metrics: MetricsConfig = MetricsConfig()

    @field_validator("connector_id")
    @classmethod
    def _connector_id(cls, value: str) -> str:
        return validate_connector_id(value)

    @model_validator(mode="after")
    def _deferrable_mode(self) -> _ConnectorBase:
        if self.spark.deferrable and self.batch.mode == "continuous":
            raise ValueError(
                "spark.deferrable: true is for batch.mode scheduled: a continuous run's task reports each "
                "micro-batch as it commits, for batch.max_runtime_minutes, so it keeps its worker slot. Remove "
                "spark.deferrable, or set batch.mode: scheduled"
            )
        return self


class ConnectorConfig(_ConnectorBase):
    """Everything one connector needs: source stream, destination table, batching, connections, Spark."""

    source: SourceConfig
    destination: DestinationConfig

    @model_validator(mode="after")
    def _cluster_by_columns(self) -> ConnectorConfig:
        columns = self.snowflake.columns if self.snowflake else {}
        for column in self.destination.cluster_by:
            if column not in columns:
                raise ValueError(
                    f"destination.cluster_by: column {column} is not in snowflake.columns "
                    f"({', '.join(columns) or 'none declared'})"
                )
        return self

    @property
    def source_type(self) -> str:
        """This connector's ``source.type`` (:mod:`airflow_kinesis_snowflake.registry`)."""
        return KINESIS_SOURCE

    @property
    def table_fqn(self) -> str:
        d = self.destination
        return f'"{d.database}"."{d.schema_}"."{d.table}"'

    def provisioning_spec(self, public_key: str | None = None) -> ProvisioningSpec:
        """What :func:`~airflow_kinesis_snowflake.core.admin.provisioning.build_plan` needs.

        :param public_key: the service user's RSA public key, read at run time from the Variable or
            connection ``snowflake`` names.
        """
        d, sf = self.destination, self.snowflake
        return ProvisioningSpec(
            database=d.database,
            schema=d.schema_,
            table=d.table,
            destination_type=d.type,
            columns=dict(sf.columns) if sf else {},
            schema_evolution=d.schema_evolution,
            error_logging=d.error_logging,
            row_timestamp=d.row_timestamp,
            external_volume=d.external_volume,
            catalog=d.catalog,
            base_location=d.base_location,
            cluster_by=d.cluster_by,
            pipe=d.pipe,
            pipe_definition=d.pipe_definition,
            role=sf.role if sf else None,
            user=sf.user if sf else None,
            warehouse=sf.warehouse if sf else None,
            public_key=public_key,
        )


# -- The DynamoDB source (issue 15: its sync and provision DAGs; no Spark job yet) ----------------

# source.type's values (DYNAMODB_SOURCE, KINESIS_SOURCE, SOURCE_TYPES) are the registry's:
# airflow_kinesis_snowflake.registry.
# DynamoDB Streams keep records for 24 hours: a checkpoint must be renewed well within that.
STREAM_RETENTION_HOURS = 24
DEFAULT_MAX_CHECKPOINT_AGE_HOURS = 20
# ParallelScan's TotalSegments: 1 to 1,000,000.
SNAPSHOT_SEGMENTS_MAX = 1_000_000
DYNAMODB_NOT_FOR_KINESIS = (
    "source.type dynamodb: a DynamoDB connector file, and this reads Kinesis stream connectors only (the DAG "
    "factory and `validate` read both kinds, with load_any_connector_config)"
)
# What a DynamoDB connector file may not set in this version: the setting would have no effect.
_DYNAMODB_BATCH_UNUSED = (
    "wait_for_records",
    "new_records_poll_seconds",
    "max_bytes_per_shard",
    "max_shards_per_batch",
)


class DynamoDBSourceConfig(_SourceSection):
    """DynamoDB tables as the source (the fields:
    https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/dynamodb/#configuration).

    Tables are named in ``tables``, or discovered by tags: ``ingestion_tag_key`` present (any
    value) and, when set, ``environment_tag_key`` equal to ``environment_tag_value``.

    :param snapshot: ``initial`` copies each table's items once before following its stream;
        ``skip`` follows the stream only, from ``stream_initial_position``.
    :param layout: ``unpacked`` (first-level attributes become columns) or ``packed`` (key columns
        and one ``ITEM`` VARIANT).
    :param deletes: ``hard`` deletes a removed item's row; ``soft`` marks it deleted.
    :param number_keys: an N key attribute's column: ``number`` (``NUMBER(38,0)``; an item whose key
        is not whole or has more than 38 digits is set aside) or ``text`` (``VARCHAR``, every number
        exactly). An existing destination keeps the key type it was created with.
    :param destination_table_template: the Snowflake table of each DynamoDB table, ``{table}``
        standing for its name ('.' and '-' become '_', upper-cased).
    :param on_gap: a stream gap (a checkpoint older than ``max_checkpoint_age_hours``, or trimmed
        records) takes a new snapshot (``resnapshot``) or stops the table (``fail``).
    :param snapshot_read_fraction: the share of a provisioned table's read capacity the snapshot
        may use; ``snapshot_read_units_per_second`` is the absolute rate, required for on-demand
        tables.
    :param snapshot_max_batches_per_run: a sync run reads snapshot batches (each up to
        ``snapshot_max_items_per_segment`` items of each segment it reads) until the snapshot is
        complete or it has read this many; size it with the schedule.
    :param engine: where each batch reads and stages: ``spark`` (a spark-submit through
        ``connections.spark``, one Spark task per snapshot segment and per stream shard) or
        ``worker`` (in the Airflow task itself, for small tables).
    """

    type: Literal["dynamodb"]
    region: str
    application_name: str
    tables: tuple[str, ...] | None = None
    ingestion_tag_key: str | None = None
    environment_tag_key: str | None = None
    environment_tag_value: str | None = None
    snapshot: Literal["initial", "skip"] = "initial"
    stream_initial_position: Literal["TRIM_HORIZON", "LATEST"] | None = None
    layout: Literal["unpacked", "packed"] = "unpacked"
    deletes: Literal["hard", "soft"] = "hard"
    number_keys: Literal["number", "text"] = "number"
    destination_table_template: str = DEFAULT_DESTINATION_TEMPLATE
    on_gap: Literal["resnapshot", "fail"] = "resnapshot"
    max_checkpoint_age_hours: float = Field(default=DEFAULT_MAX_CHECKPOINT_AGE_HOURS, gt=0)
    snapshot_total_segments: int = Field(default=4, ge=1, le=SNAPSHOT_SEGMENTS_MAX)
    snapshot_read_fraction: float | None = Field(default=None, gt=0, le=1)
    snapshot_read_units_per_second: float | None = Field(default=None, gt=0)
    snapshot_max_items_per_segment: int = Field(default=100_000, ge=1, le=10_000_000)
    snapshot_max_batches_per_run: int = Field(default=10, ge=1, le=1000)
    engine: Literal["spark", "worker"] = "spark"
    iam_check: IamCheckMode = IamCheckMode.REQUIRED

    @field_validator("tables")
    @classmethod
    def _tables(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("must list at least one table; or leave it out and discover tables by tags")
        for name in value:
            if not TABLE_NAME.match(name):
                raise ValueError(f"{name!r} is not a DynamoDB table name: 3-255 letters, digits, '_', '.' or '-'")
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"lists {', '.join(repeated)} more than once; list each table once")
        return value

    @field_validator("ingestion_tag_key", "environment_tag_key")
    @classmethod
    def _tag_key(cls, value: str | None) -> str | None:
        if value is not None and not 1 <= len(value) <= 128:
            raise ValueError("must be a tag key of 1-128 characters")
        return value

    @field_validator("destination_table_template")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_destination_template(value)

    @field_validator("max_checkpoint_age_hours")
    @classmethod
    def _checkpoint_age(cls, value: float) -> float:
        if value >= STREAM_RETENTION_HOURS:
            raise ValueError(
                f"must be below {STREAM_RETENTION_HOURS}, the stream's retention: a checkpoint that old may have lost "
                f"records; leave it out for {DEFAULT_MAX_CHECKPOINT_AGE_HOURS}, or write a smaller number"
            )
        return value

    @model_validator(mode="after")
    def _coherent(self) -> DynamoDBSourceConfig:
        if self.tables is None and self.ingestion_tag_key is None:
            raise ValueError(
                "source needs tables (a list of DynamoDB table names) or ingestion_tag_key (discover the tables "
                "carrying that tag)"
            )
        if self.tables is not None and self.ingestion_tag_key is not None:
            raise ValueError("source.tables and source.ingestion_tag_key exclude each other: keep one way to select")
        if (self.environment_tag_key is None) != (self.environment_tag_value is None):
            raise ValueError(
                "source.environment_tag_key and source.environment_tag_value go together: set both or none"
            )
        if self.tables is not None and self.environment_tag_key is not None:
            raise ValueError(
                "source.environment_tag_key only filters tables discovered by tags; remove it, or replace "
                "source.tables with source.ingestion_tag_key"
            )
        if self.stream_initial_position is not None and self.snapshot != "skip":
            raise ValueError(
                "source.stream_initial_position is only used with source.snapshot: skip (a snapshot starts the "
                "stream where the snapshot starts); remove it, or set snapshot: skip"
            )
        if self.snapshot_read_fraction is not None and self.snapshot_read_units_per_second is not None:
            raise ValueError(
                "set one of source.snapshot_read_fraction (of a provisioned table's read capacity) and "
                "source.snapshot_read_units_per_second (an absolute rate, also for on-demand tables)"
            )
        if self.tables is not None:
            try:
                decide_destinations(self.tables, self.destination_table_template)
            except DiscoveryError as err:
                raise ValueError(str(err)) from None
        return self

    @property
    def initial_position(self) -> str:
        """Where a table's stream starts: TRIM_HORIZON unless ``snapshot: skip`` says LATEST."""
        return self.stream_initial_position or "TRIM_HORIZON"

    def table_selection(self) -> TableSelection:
        """The tables, or the tags, as :mod:`~airflow_kinesis_snowflake.core.sources.dynamodb.discovery` takes them."""
        return TableSelection(
            tables=self.tables,
            ingestion_tag_key=self.ingestion_tag_key,
            environment_tag_key=self.environment_tag_key,
            environment_tag_value=self.environment_tag_value,
        )


class DynamoDBDestinationConfig(_Strict):
    """Where a DynamoDB connector's tables land: one Snowflake table each, in one schema.

    The tables' names come from ``source.destination_table_template``.
    """

    database: str
    schema_: str = Field(alias="schema")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("database", "schema_")
    @classmethod
    def _identifier(cls, value: str) -> str:
        return _identifier(value)


class DynamoDBConnectorConfig(_ConnectorBase):
    """A connector whose source is DynamoDB tables (read with :func:`parse_dynamodb_connector_config`).

    A model of its own, beside :class:`ConnectorConfig`, so that everything that reads a Kinesis
    connector (``config.source.stream_name``, ``config.destination.table``) keeps its types.
    """

    source: DynamoDBSourceConfig
    destination: DynamoDBDestinationConfig

    @property
    def source_type(self) -> str:
        """This connector's ``source.type`` (:mod:`airflow_kinesis_snowflake.registry`)."""
        return DYNAMODB_SOURCE

    @model_validator(mode="after")
    def _in_this_version(self) -> DynamoDBConnectorConfig:
        """Refuse what a DynamoDB connector would set without effect, rather than ignore it."""
        later = "not in this version of the DynamoDB source"
        if "spark" in self.model_fields_set and self.source.engine == "worker":
            raise ValueError(
                "spark: has no effect with source.engine: worker (each batch runs in the Airflow task); "
                "remove the spark section, or set source.engine: spark"
            )
        if "snowflake" in self.model_fields_set:
            raise ValueError(
                f"snowflake: {later}: its provision DAG creates the destination tables and their support objects "
                "only (no role, user, warehouse or columns); remove the snowflake section"
            )
        if self.batch.mode == "continuous" and self.source.engine == "worker":
            raise ValueError(
                "batch.mode: continuous runs each table's sync in a Spark driver, and source.engine: worker has "
                "none; set source.engine: spark, or batch.mode: scheduled"
            )
        unused = [name for name in _DYNAMODB_BATCH_UNUSED if name in self.batch.model_fields_set]
        if unused:
            raise ValueError(
                f"batch.{', batch.'.join(unused)}: {later}: the sync DAG reads every table's stream up to the run's "
                "start each run, so they would have no effect; remove them"
            )
        if self.batch.schedule == ON_NEW_RECORDS:
            raise ValueError(
                f"batch.schedule: {ON_NEW_RECORDS} is {later} (it watches Kinesis shards); give a cron expression, "
                "a preset such as @hourly, or null for manual runs"
            )
        return self

    def sync_options(self) -> dict[str, Any]:
        """What every table's :class:`~.core.dynamodb_sync.TableSync` takes from this file, as plain values
        (they travel with the sync task; :func:`table_sync` makes the ``TableSync`` of one table)."""
        src = self.source
        return {
            "connector_id": self.connector_id,
            "application_name": src.application_name,
            "database": self.destination.database,
            "schema": self.destination.schema_,
            "layout": src.layout,
            "deletes": src.deletes,
            "number_keys": src.number_keys,
            "snapshot": src.snapshot,
            "stream_start": src.initial_position,
            "on_gap": src.on_gap,
            "max_checkpoint_age_hours": src.max_checkpoint_age_hours,
            "total_segments": src.snapshot_total_segments,
            "read_fraction": src.snapshot_read_fraction,
            "read_units_per_second": src.snapshot_read_units_per_second,
            "max_items_per_segment": src.snapshot_max_items_per_segment,
            "max_snapshot_batches_per_run": src.snapshot_max_batches_per_run,
            "max_records_per_shard": self.batch.max_records_per_shard,
            "lease_duration_seconds": self.batch.lease_duration_seconds,
        }

    def table_sync(self, target: SyncTarget) -> TableSync:
        """The sync of one discovered table (:func:`table_sync` over :meth:`sync_options`)."""
        return table_sync(target, self.sync_options())


def table_sync(target: SyncTarget, options: Mapping[str, Any]) -> TableSync:
    """One discovered table's sync, from a DynamoDB connector's :meth:`~DynamoDBConnectorConfig.sync_options`.

    The destination is the target's (``destination_table_template`` applied at discovery), in the
    file's database and schema; the key columns are the table's key attributes, partition key
    first; the snapshot's read rate is the file's fraction or absolute rate (the default fraction
    when neither is set, which an on-demand table refuses when its snapshot reads).

    :param target: the table, as discovery found it.
    :param options: :meth:`DynamoDBConnectorConfig.sync_options`.
    """
    ordered = sorted(target.keys, key=lambda k: k.key_type != "HASH")
    numeric = options.get("number_keys", "text") == "number"
    keys = tuple(KeyAttribute(k.name, k.attribute_type, numeric and k.attribute_type == "N") for k in ordered)
    destination = Destination(options["database"], options["schema"], target.destination_table)
    return TableSync(
        application_name=options["application_name"],
        table=target.table,
        stream_arn=target.stream_arn,
        target=DynamoDBTarget(
            destination,
            target.table,
            tuple(KeyColumn(k.column, k.sql_type) for k in keys),
            Layout(options["layout"]),
            Deletes(options["deletes"]),
        ),
        keys=keys,
        settings=SyncSettings(
            snapshot=SnapshotMode(options["snapshot"]),
            stream_start=StreamStart(options["stream_start"]),
            on_gap=OnGap(options["on_gap"]),
            max_checkpoint_age=timedelta(hours=options["max_checkpoint_age_hours"]),
            total_segments=options["total_segments"],
            max_snapshot_batches_per_run=options["max_snapshot_batches_per_run"],
        ),
        read_rate=ReadRateSettings(options["read_fraction"], options["read_units_per_second"]),
        max_items_per_segment=options["max_items_per_segment"],
        max_records_per_shard=options["max_records_per_shard"],
        lease_duration_seconds=float(options["lease_duration_seconds"]),
        connector_id=options.get("connector_id"),
    )


def sync_target_to_dict(target: SyncTarget) -> dict[str, Any]:
    """A discovered table as a JSON-serialisable mapping, as the DAGs pass it to each table's task
    (the inverse of :func:`sync_target_from_dict`)."""
    return {
        "table": target.table,
        "arn": target.arn,
        "stream_arn": target.stream_arn,
        "keys": [[k.name, k.key_type, k.attribute_type] for k in target.keys],
        "read_capacity_units": target.read_capacity_units,
        "destination_table": target.destination_table,
    }


def sync_target_from_dict(value: Mapping[str, Any]) -> SyncTarget:
    """The :class:`SyncTarget` a mapping of :func:`sync_target_to_dict` holds."""
    return SyncTarget(
        table=value["table"],
        arn=value["arn"],
        stream_arn=value["stream_arn"],
        keys=tuple(DiscoveredKey(*key) for key in value["keys"]),
        read_capacity_units=value["read_capacity_units"],
        destination_table=value["destination_table"],
    )


AnyConnectorConfig = ConnectorConfig | DynamoDBConnectorConfig


def source_type(data: Any) -> str | None:
    """The ``source.type`` a connector mapping names, as written (None when it names none)."""
    section = data.get("source") if isinstance(data, dict) else None
    kind = section.get("type") if isinstance(section, dict) else None
    return kind if isinstance(kind, str) else None


def _check_source_type(data: dict[str, Any], source: str) -> None:
    """Refuse a ``source.type`` that names no source, alone: which model would read the rest is unknown.

    Without this, a ``DynamoDB`` (a wrong case) was read as a Kinesis connector, and the file got an
    error for every Kinesis field it lacks and none saying that ``dynamodb`` exists.
    """
    section = data.get("source")
    if not isinstance(section, dict) or "type" not in section:
        return  # no source.type: a Kinesis stream (the model reports a missing source itself)
    kind = section["type"]
    if isinstance(kind, str) and kind in SOURCE_TYPES:
        return
    allowed = " or ".join(SOURCE_TYPES)
    hint = ""
    if isinstance(kind, str) and kind.strip().lower() in SOURCE_TYPES:
        hint = f"; the values are lower case: write source.type: {kind.strip().lower()}"
    raise ConnectorConfigError(
        f"{source}: invalid connector configuration\n  - source.type: must be {allowed} (got {kind!r}){hint}. "
        "Nothing else in the file was checked: which source's fields it needs depends on source.type"
    )


def _validate(model: type[_ModelT], data: Any, source: str) -> _ModelT:
    if not isinstance(data, dict):
        raise ConnectorConfigError(f"{source}: expected a mapping at the top level")
    _check_source_type(data, source)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        lines = "\n".join(f"  - {_describe(e)}" for e in err.errors())  # type: ignore[arg-type]
        raise ConnectorConfigError(f"{source}: invalid connector configuration\n{lines}") from None


def parse_dynamodb_connector_config(data: Any, *, source: str = "<config>") -> DynamoDBConnectorConfig:
    """Validate a mapping as a DynamoDB connector; :class:`ConnectorConfigError` naming file and fields."""
    return _validate(DynamoDBConnectorConfig, data, source)


def load_dynamodb_connector_config(path: str | Path) -> DynamoDBConnectorConfig:
    """Read and validate one DynamoDB connector YAML file."""
    return parse_dynamodb_connector_config(_read_yaml(Path(path)), source=str(path))


def _describe(error: dict[str, Any]) -> str:
    parts = ("schema" if part == "schema_" else str(part) for part in error["loc"] if part != "__root__")
    field = ".".join(parts) or "<top level>"
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{field}: unknown field; check its spelling and its section"
    if kind == "missing":
        return f"{field}: required field is missing"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    shown = f" (got {value!r})" if value is not None and not isinstance(value, dict) else ""
    return f"{field}: {message}{shown}"


def _warn_deprecated(data: dict[str, Any], config: AnyConnectorConfig, source: str) -> None:
    """Report a deprecated field that still works with Airflow's ``AirflowProviderDeprecationWarning``."""
    section = data.get("source")
    if isinstance(section, dict) and DEPRECATED_IAM_ALIAS in section:
        from airflow.exceptions import AirflowProviderDeprecationWarning

        warnings.warn(
            f"{source}: source.{DEPRECATED_IAM_ALIAS} is deprecated; write "
            f"source.iam_check: {config.source.iam_check.value} instead",
            AirflowProviderDeprecationWarning,
            stacklevel=3,
        )


def parse_connector_config(data: Any, *, source: str = "<config>") -> ConnectorConfig:
    """Validate a mapping as a Kinesis connector config; raise :class:`ConnectorConfigError` naming fields.

    A deprecated field that still works is reported with Airflow's
    ``AirflowProviderDeprecationWarning``, naming ``source`` and what to write instead.
    """
    if source_type(data) == DYNAMODB_SOURCE:
        # Its own mistakes first, then the refusal: the Kinesis model cannot hold it.
        try:
            parse_dynamodb_connector_config(data, source=source)
        except ConnectorConfigError as err:
            raise ConnectorConfigError(
                f"{err}\n  (read as a DynamoDB connector because source.type is dynamodb; a Kinesis stream's "
                "connector has source.type kinesis, or none)"
            ) from None
        raise ConnectorConfigError(f"{source}: {DYNAMODB_NOT_FOR_KINESIS}")
    config = _validate(ConnectorConfig, data, source)
    _warn_deprecated(data, config, source)
    return config


def load_connector_config(path: str | Path) -> ConnectorConfig:
    """Read and validate one connector YAML file."""
    path = Path(path)
    return parse_connector_config(_read_yaml(path), source=str(path))


def parse_any_connector_config(data: Any, *, source: str = "<config>") -> AnyConnectorConfig:
    """Validate a mapping as the connector of the source its ``source.type`` names
    (:mod:`airflow_kinesis_snowflake.registry`; none: a Kinesis stream)."""
    if isinstance(data, dict):
        _check_source_type(data, source)
    model: type[AnyConnectorConfig] = registered(source_type(data) or DEFAULT_SOURCE).part("connector_model")
    config = _validate(model, data, source)
    _warn_deprecated(data, config, source)
    return config


def load_any_connector_config(path: str | Path) -> AnyConnectorConfig:
    """Read and validate one connector YAML file of any source (:func:`parse_any_connector_config`)."""
    path = Path(path)
    return parse_any_connector_config(_read_yaml(path), source=str(path))


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConnectorConfigError(f"{path}: cannot read: {err}") from err
    except yaml.YAMLError as err:
        raise ConnectorConfigError(f"{path}: not valid YAML: {err}") from err


def connector_files(directory: str | Path) -> list[Path]:
    """The connector files of a directory: ``*.yaml`` and ``*.yml``, in name order."""
    return sorted(Path(directory).glob("*.y*ml"))


def _raw_connector_id(path: Path) -> str | None:
    """A file's ``connector_id`` as written, nothing else validated; None if there is no string one."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None  # reported by the file's own validation
    connector_id = data.get("connector_id") if isinstance(data, dict) else None
    return connector_id if isinstance(connector_id, str) else None


def duplicate_connector_ids(files: Sequence[Path]) -> dict[Path, Path]:
    """Each connector file whose ``connector_id`` an earlier file (in name order) already has, and that file.

    Only ``connector_id`` is read from each file: nothing else is validated, so that checking one
    file against its directory does not validate every other file. A file whose own validation
    fails still holds its id: once it is fixed, the two would define the same DAGs.

    :param files: connector files, e.g. :func:`connector_files` of a directory.
    """
    first: dict[str, Path] = {}
    duplicates: dict[Path, Path] = {}
    for path in sorted(files):
        connector_id = _raw_connector_id(path)
        if connector_id is None:
            continue
        if connector_id in first:
            duplicates[path] = first[connector_id]
        else:
            first[connector_id] = path
    return duplicates


def duplicate_connector_id_error(path: Path, connector_id: str, first: Path) -> ConnectorConfigError:
    """The error of a connector file whose ``connector_id`` ``first`` already has."""
    return ConnectorConfigError(
        f"{path}: connector_id {connector_id!r} is already used by {first}; give one of them another "
        "connector_id (it names the connector's DAGs)"
    )


def load_connector_configs(directory: str | Path) -> list[ConnectorConfig]:
    """Load every ``*.yaml``/``*.yml`` in a directory; connector ids must be unique.

    Every file is read: the :class:`ConnectorConfigError` names each invalid file, not only the
    first. Of two files with the same ``connector_id``, the second in name order is the invalid one.
    A DynamoDB connector file is refused (:data:`DYNAMODB_NOT_FOR_KINESIS`); see
    :func:`load_any_connector_configs`.
    """
    return kinesis_connectors(load_any_connector_configs(directory, load=load_connector_config))


def kinesis_connectors(configs: Sequence[AnyConnectorConfig]) -> list[ConnectorConfig]:
    """The connectors of ``configs`` that read a Kinesis stream, in their order."""
    return cast(list[ConnectorConfig], of_source(configs, KINESIS_SOURCE))


def dynamodb_connectors(configs: Sequence[AnyConnectorConfig]) -> list[DynamoDBConnectorConfig]:
    """The connectors of ``configs`` that read DynamoDB tables, in their order."""
    return cast(list[DynamoDBConnectorConfig], of_source(configs, DYNAMODB_SOURCE))


def load_any_connector_configs(
    directory: str | Path, *, load: Callable[[Path], AnyConnectorConfig] | None = None
) -> list[AnyConnectorConfig]:
    """Load every connector file of a directory, of either source, as :func:`load_connector_configs` does.

    :param load: reads one file (default :func:`load_any_connector_config`).
    """
    load = load or load_any_connector_config
    files = connector_files(directory)
    duplicates = duplicate_connector_ids(files)
    configs: list[AnyConnectorConfig] = []
    errors: list[str] = []
    for path in files:
        try:
            config = load(path)
        except ConnectorConfigError as err:
            errors.append(str(err))
            continue
        if path in duplicates:
            errors.append(str(duplicate_connector_id_error(path, config.connector_id, duplicates[path])))
            continue
        configs.append(config)
    if errors:
        raise ConnectorConfigError("\n".join(errors))
    return configs
