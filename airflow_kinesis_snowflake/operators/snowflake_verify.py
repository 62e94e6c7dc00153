"""Check that the Snowflake side of a connector is in place (``ProvisionSnowflakeObjectsOperator`` creates it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.admin.provisioning import expected_objects
from airflow_kinesis_snowflake.core.admin.provisioning_run import SnowflakeObjectsError, find_missing
from airflow_kinesis_snowflake.core.load.snowflake_sink import qualified_name
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.config import ConnectorConfig


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
        self.database, self.schema, self.table = database, schema, table
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
            missing = find_missing(connection, expected)
        except SnowflakeObjectsError as err:
            raise AirflowException(str(err)) from err.__cause__
        finally:
            connection.close()
        if missing:
            raise AirflowException(f"Snowflake objects of {table} are missing: {'; '.join(missing)}")
        self.log.info("Snowflake objects of %s are in place: %s", table, ", ".join(expected.describe()))
        return {"table": table, "checked": expected.describe(), "missing": []}
