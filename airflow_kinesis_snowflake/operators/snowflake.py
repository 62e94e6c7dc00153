"""Provision the Snowflake side of a connector, and check that it is in place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseHook, BaseOperator, Context, Variable
from airflow.sdk.exceptions import AirflowException
from airflow.sdk.log import mask_secret
from snowflake.connector.errors import Error as SnowflakeError

from airflow_kinesis_snowflake.core.admin.provisioning import (
    SNOWFLAKE_CATALOG,
    ProvisioningPlan,
    ProvisioningSpec,
    Query,
    build_plan,
    destination_type,
    expected_objects,
    missing_objects,
)
from airflow_kinesis_snowflake.core.load.snowflake_sink import qualified_name
from airflow_kinesis_snowflake.core.model import DestinationType
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.config import ConnectorConfig


def _rows(connection: Any, query: Query) -> list[tuple[Any, ...]]:
    cursor = connection.cursor()
    try:
        cursor.execute(query.sql, query.params or None)
        return list(cursor.fetchall()) if cursor.description else []
    finally:
        cursor.close()


class ProvisionSnowflakeObjectsOperator(BaseOperator):
    """Create what a connector needs in Snowflake, following the Openflow Connector for Kinesis
    set-up checklist, as one idempotent SQL plan.

    In order: destination database and schema; the connector's role with usage on them (and on the
    warehouse, and the Iceberg external volume); a ``TYPE = SERVICE`` user authenticating with an
    RSA key pair, whose default role is that role; the destination table (standard, Iceberg or
    interactive) with a ``KINESISMETADATA`` OBJECT column, schema evolution, error logging and row
    timestamps, owned by the role; the provider's ledger, parse-failure table and stage with the
    role's privileges on them; and, for a PIPE destination, the user's pipe. See
    :func:`~airflow_kinesis_snowflake.core.admin.provisioning.build_plan`.

    Run it with a role allowed to create roles and users and to grant (e.g. ``ACCOUNTADMIN``, or
    ``SECURITYADMIN`` together with a role owning the schema); an Iceberg table also needs the
    connection's warehouse to be running. Running it again changes nothing:
    objects are created ``IF NOT EXISTS``, grants are repeated harmlessly, and the table's ownership
    is only transferred while the role does not own it yet. A table that already exists keeps its
    columns and properties. The public key is read at run time from an Airflow Variable or
    connection and is only ever logged by its fingerprint.

    :param database: destination database.
    :param schema: destination schema.
    :param table: destination table.
    :param destination_type: TABLE, ICEBERG, INTERACTIVE or PIPE.
    :param columns: the table's initial columns, name -> Snowflake type; ``KINESISMETADATA`` is
        always added.
    :param schema_evolution: ``ENABLE_SCHEMA_EVOLUTION`` (TABLE, PIPE, ICEBERG).
    :param error_logging: ``ERROR_LOGGING`` (TABLE, PIPE, ICEBERG).
    :param row_timestamp: ``ROW_TIMESTAMP`` (TABLE, PIPE).
    :param cluster_by: clustering columns; required for INTERACTIVE.
    :param external_volume: ICEBERG: the external volume; None leaves the database's default.
    :param catalog: ICEBERG: must be ``SNOWFLAKE``.
    :param base_location: ICEBERG: directory of the table's files on the external volume.
    :param pipe: PIPE: the pipe's name.
    :param pipe_definition: PIPE: ``COPY INTO <database>.<schema>.<table> FROM (SELECT ...)``.
    :param role: the connector's role; None creates the objects only and grants nothing.
    :param user: the connector's service user; needs ``role`` and a public key source.
    :param warehouse: a warehouse the role may use, and the user's default.
    :param public_key_variable: Airflow Variable holding the user's RSA public key (PEM).
    :param public_key_conn_id: Airflow connection holding it, in its extra ``public_key`` or, failing
        that, its password.
    :param snowflake_conn_id: Snowflake connection to provision with.
    :param dry_run: only log the plan (keys redacted) and return it; nothing is executed.
    """

    template_fields: Sequence[str] = (
        "database",
        "schema",
        "table",
        "destination_type",
        "columns",
        "external_volume",
        "base_location",
        "pipe",
        "pipe_definition",
        "role",
        "user",
        "warehouse",
        "public_key_variable",
        "public_key_conn_id",
        "snowflake_conn_id",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"pipe_definition": "sql", "columns": "json"}
    ui_color = "#c6e6ff"

    def __init__(
        self,
        *,
        database: str,
        schema: str,
        table: str,
        destination_type: str = DestinationType.TABLE.value,
        columns: Mapping[str, str] | None = None,
        schema_evolution: bool = True,
        error_logging: bool = True,
        row_timestamp: bool = True,
        cluster_by: Sequence[str] | None = None,
        external_volume: str | None = None,
        catalog: str = SNOWFLAKE_CATALOG,
        base_location: str | None = None,
        pipe: str | None = None,
        pipe_definition: str | None = None,
        role: str | None = None,
        user: str | None = None,
        warehouse: str | None = None,
        public_key_variable: str | None = None,
        public_key_conn_id: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.database = database
        self.schema = schema
        self.table = table
        self.destination_type = destination_type
        self.columns = columns
        self.schema_evolution = schema_evolution
        self.error_logging = error_logging
        self.row_timestamp = row_timestamp
        self.cluster_by = cluster_by
        self.external_volume = external_volume
        self.catalog = catalog
        self.base_location = base_location
        self.pipe = pipe
        self.pipe_definition = pipe_definition
        self.role = role
        self.user = user
        self.warehouse = warehouse
        self.public_key_variable = public_key_variable
        self.public_key_conn_id = public_key_conn_id
        self.snowflake_conn_id = snowflake_conn_id
        # BaseOperator.dry_run() is a method (render templates only); keep it callable.
        self.is_dry_run = dry_run

    @classmethod
    def from_connector_config(cls, config: ConnectorConfig, **kwargs: Any) -> ProvisionSnowflakeObjectsOperator:
        """The operator for one connector file; ``kwargs`` go to the operator (``task_id``, ...)."""
        d, sf = config.destination, config.snowflake
        return cls(
            database=d.database,
            schema=d.schema_,
            table=d.table,
            destination_type=d.type.value,
            columns=dict(sf.columns) if sf else None,
            schema_evolution=d.schema_evolution,
            error_logging=d.error_logging,
            row_timestamp=d.row_timestamp,
            cluster_by=list(d.cluster_by),
            external_volume=d.external_volume,
            catalog=d.catalog,
            base_location=d.base_location,
            pipe=d.pipe,
            pipe_definition=d.pipe_definition,
            role=sf.role if sf else None,
            user=sf.user if sf else None,
            warehouse=sf.warehouse if sf else None,
            public_key_variable=sf.public_key_variable if sf else None,
            public_key_conn_id=sf.public_key_conn_id if sf else None,
            snowflake_conn_id=config.connections.snowflake,
            **kwargs,
        )

    def _public_key(self) -> str | None:
        if self.public_key_variable and self.public_key_conn_id:
            raise AirflowException("set only one of public_key_variable and public_key_conn_id")
        if self.public_key_variable:
            value = Variable.get(self.public_key_variable, default=None)
            if not value:
                raise AirflowException(
                    f"Airflow Variable {self.public_key_variable!r} is not set; store the service user's "
                    "RSA public key PEM in it"
                )
            return str(value)
        if self.public_key_conn_id:
            connection = BaseHook.get_connection(self.public_key_conn_id)
            value = connection.extra_dejson.get("public_key") or connection.password
            if not value:
                raise AirflowException(
                    f"connection {self.public_key_conn_id!r} holds no public key: put the RSA public key PEM "
                    "in its extra 'public_key' or in its password"
                )
            return str(value)
        return None

    def plan(self, public_key: str | None = None) -> ProvisioningPlan:
        """The plan for this operator's parameters (validated; a bad value names its parameter)."""
        spec = ProvisioningSpec(
            database=self.database,
            schema=self.schema,
            table=self.table,
            destination_type=destination_type(self.destination_type),
            columns=dict(self.columns or {}),
            schema_evolution=self.schema_evolution,
            error_logging=self.error_logging,
            row_timestamp=self.row_timestamp,
            cluster_by=tuple(self.cluster_by or ()),
            external_volume=self.external_volume,
            catalog=self.catalog,
            base_location=self.base_location,
            pipe=self.pipe,
            pipe_definition=self.pipe_definition,
            role=self.role,
            user=self.user,
            warehouse=self.warehouse,
            public_key=public_key,
        )
        return build_plan(spec)

    def execute(self, context: Context) -> dict[str, Any]:
        plan = self.plan(self._public_key())
        for statement in plan.statements:
            for secret, _ in statement.redactions:
                # Whatever else logs the SQL (e.g. the connector at DEBUG level) shows it masked.
                mask_secret(secret)
        table = qualified_name(plan.spec.database, plan.spec.schema, plan.spec.table)
        total = len(plan.statements)
        if self.is_dry_run:
            self.log.info("Dry run: %d statements would provision %s:\n%s", total, table, plan.render())
            return self._summary(plan, ["planned"] * total)

        statuses: list[str] = []
        connection = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn()
        try:
            for number, statement in enumerate(plan.statements, start=1):
                try:
                    if statement.skip_if is not None and _rows(connection, statement.skip_if):
                        self.log.info("%d/%d %s: already in effect, skipped", number, total, statement.purpose)
                        statuses.append("skipped")
                        continue
                    self.log.info("%d/%d %s: %s", number, total, statement.purpose, statement.redacted)
                    _rows(connection, Query(statement.sql))
                    statuses.append("executed")
                except SnowflakeError as err:
                    # The error may echo the statement, key included: show it redacted, and leave the
                    # original exception (and its traceback text) out when the statement holds a secret.
                    raise AirflowException(
                        f"provisioning {table} stopped at statement {number}/{total} ({statement.purpose}): "
                        f"{statement.redacted}\nSnowflake error: {plan.redact(str(err))}\n"
                        f"The {number - 1} statements before it took effect; every statement can run again."
                    ) from (None if statement.redactions else err)
        finally:
            connection.close()
        self.log.info(
            "Provisioned %s: %d statements executed, %d already in effect",
            table,
            statuses.count("executed"),
            statuses.count("skipped"),
        )
        return self._summary(plan, statuses)

    def _summary(self, plan: ProvisioningPlan, statuses: list[str]) -> dict[str, Any]:
        statements = [dict(s, status=status) for s, status in zip(plan.describe(), statuses, strict=True)]
        return {
            "table": qualified_name(plan.spec.database, plan.spec.schema, plan.spec.table),
            "destination_type": plan.spec.destination_type.value,
            "dry_run": self.is_dry_run,
            "executed": statuses.count("executed"),
            "skipped": statuses.count("skipped"),
            "statements": statements,
        }


class VerifySnowflakeObjectsOperator(BaseOperator):
    """Check that a connector's Snowflake objects exist: destination table with its expected
    columns, parse-failure table, ledger, stage and, for PIPE, the pipe.

    Tables, columns and pipes are read from ``INFORMATION_SCHEMA``, the stage from ``SHOW STAGES``.
    Column names are compared, not types (schema evolution may have widened them); roles, users and
    grants are not checked. Fails listing everything missing.

    :param database: destination database.
    :param schema: destination schema.
    :param table: destination table.
    :param columns: the columns the table must have (names, or name -> type as for provisioning);
        ``KINESISMETADATA`` is always expected.
    :param pipe: the pipe that must exist (PIPE destinations).
    :param snowflake_conn_id: Snowflake connection.
    """

    template_fields: Sequence[str] = ("database", "schema", "table", "columns", "pipe", "snowflake_conn_id")
    ui_color = "#c6e6ff"

    def __init__(
        self,
        *,
        database: str,
        schema: str,
        table: str,
        columns: Mapping[str, str] | Sequence[str] | None = None,
        pipe: str | None = None,
        snowflake_conn_id: str = "snowflake_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.database = database
        self.schema = schema
        self.table = table
        self.columns = columns
        self.pipe = pipe
        self.snowflake_conn_id = snowflake_conn_id

    @classmethod
    def from_connector_config(cls, config: ConnectorConfig, **kwargs: Any) -> VerifySnowflakeObjectsOperator:
        """The operator for one connector file; ``kwargs`` go to the operator (``task_id``, ...)."""
        d, sf = config.destination, config.snowflake
        return cls(
            database=d.database,
            schema=d.schema_,
            table=d.table,
            columns=list(sf.columns) if sf else None,
            pipe=d.pipe,
            snowflake_conn_id=config.connections.snowflake,
            **kwargs,
        )

    def execute(self, context: Context) -> dict[str, Any]:
        expected = expected_objects(
            database=self.database, schema=self.schema, table=self.table, columns=self.columns or (), pipe=self.pipe
        )
        table = qualified_name(expected.database, expected.schema, expected.tables[0])
        connection = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn()
        try:
            try:
                schemas = [r[0] for r in _rows(connection, expected.schema_query())]
                tables = [r[0] for r in _rows(connection, expected.tables_query())]
                columns = [r[0] for r in _rows(connection, expected.columns_query())]
                stages = self._stage_names(connection, expected.stage_query()) if schemas else []
                pipe_query = expected.pipe_query()
                pipes = [r[0] for r in _rows(connection, pipe_query)] if pipe_query and schemas else []
            except SnowflakeError as err:
                raise AirflowException(
                    f"cannot read the objects of {table} (does database {expected.database} exist, and may "
                    f"this connection's role use it?): {err}"
                ) from err
        finally:
            connection.close()
        missing = missing_objects(expected, schemas=schemas, tables=tables, columns=columns, stages=stages, pipes=pipes)
        if missing:
            raise AirflowException(f"Snowflake objects of {table} are missing: {'; '.join(missing)}")
        self.log.info("Snowflake objects of %s are in place: %s", table, ", ".join(expected.describe()))
        return {"table": table, "checked": expected.describe(), "missing": []}

    @staticmethod
    def _stage_names(connection: Any, query: Query) -> list[str]:
        cursor = connection.cursor()
        try:
            cursor.execute(query.sql)
            names = [str(d[0]).lower() for d in cursor.description or []]
            rows = cursor.fetchall() if names else []
        finally:
            cursor.close()
        if "name" not in names:
            return []
        index = names.index("name")
        return [str(row[index]) for row in rows]
