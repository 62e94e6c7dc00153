"""Provision the Snowflake side of a connector (``VerifySnowflakeObjectsOperator`` checks it is in place)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk import BaseOperator, Context
from airflow.sdk.log import mask_secret

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.admin.params import renamed
from airflow_kinesis_snowflake.core.admin.provisioning import (
    SNOWFLAKE_CATALOG,
    ProvisioningPlan,
    ProvisioningSpec,
    build_plan,
    destination_type,
)
from airflow_kinesis_snowflake.core.admin.provisioning_run import (
    SnowflakeObjectsError,
    plan_summary,
    plan_target,
    run_plan,
)
from airflow_kinesis_snowflake.core.model import DestinationType
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.public_key import read_public_key

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.config import ConnectorConfig

# The spec's fields, each the operator's parameter of the same name.
_SPEC_FIELDS = (
    "database", "schema", "table", "columns", "schema_evolution", "error_logging", "row_timestamp", "cluster_by",
    "external_volume", "catalog", "base_location", "pipe", "pipe_definition", "role", "user", "warehouse",
)  # fmt: skip


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
    :param preview_only: only log the plan (keys redacted) and return it; nothing is executed.
    :param dry_run: deprecated name of ``preview_only``.
    """

    template_fields: Sequence[str] = (
        "database", "schema", "table", "destination_type", "columns", "external_volume", "base_location",
        "pipe", "pipe_definition", "role", "user", "warehouse",
        "public_key_variable", "public_key_conn_id", "snowflake_conn_id",
    )  # fmt: skip
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
        preview_only: bool | None = None,
        dry_run: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.database, self.schema, self.table = database, schema, table
        self.destination_type = destination_type
        self.columns = columns
        self.schema_evolution, self.error_logging, self.row_timestamp = schema_evolution, error_logging, row_timestamp
        self.cluster_by = cluster_by
        self.external_volume, self.catalog, self.base_location = external_volume, catalog, base_location
        self.pipe, self.pipe_definition = pipe, pipe_definition
        self.role, self.user, self.warehouse = role, user, warehouse
        self.public_key_variable, self.public_key_conn_id = public_key_variable, public_key_conn_id
        self.snowflake_conn_id = snowflake_conn_id
        # Not ``dry_run``: BaseOperator.dry_run() is a method (render templates only).
        self.preview_only = renamed(
            preview_only,
            dry_run,
            new_name="preview_only",
            old_name="dry_run",
            default=False,
            category=AirflowProviderDeprecationWarning,
        )

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

    def plan(self, public_key: str | None = None) -> ProvisioningPlan:
        """The plan for this operator's parameters (validated; a bad value names its parameter)."""
        values = {name: getattr(self, name) for name in _SPEC_FIELDS}
        values.update(columns=dict(self.columns or {}), cluster_by=tuple(self.cluster_by or ()))
        kind = destination_type(self.destination_type)
        return build_plan(ProvisioningSpec(**values, destination_type=kind, public_key=public_key))

    def execute(self, context: Context) -> dict[str, Any]:
        plan = self.plan(read_public_key(self.public_key_variable, self.public_key_conn_id))
        for statement in plan.statements:
            for secret, _ in statement.redactions:
                # Whatever else logs the SQL (e.g. the connector at DEBUG level) shows it masked.
                mask_secret(secret)
        if self.preview_only:
            total = len(plan.statements)
            self.log.info("Dry run: %d statements would provision %s:\n%s", total, plan_target(plan), plan.render())
            return plan_summary(plan, ["planned"] * total, preview_only=True)
        connection = KinesisSnowflakeHook(snowflake_conn_id=self.snowflake_conn_id).get_conn()
        try:
            statuses = run_plan(connection, plan, progress=self.log)
        except SnowflakeObjectsError as err:
            # The cause is left out when it may echo a secret (then it is None already).
            raise AirflowException(str(err)) from err.__cause__
        finally:
            connection.close()
        return plan_summary(plan, statuses, preview_only=False)
