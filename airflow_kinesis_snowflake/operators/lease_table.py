"""Create the DynamoDB lease/checkpoint table of a connector."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.core.state.metadata import TableIdentity
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook


class CreateLeaseTableOperator(BaseOperator):
    """Create the lease table named after the application name, if it does not exist yet.

    The table uses on-demand billing and is tagged ``created-by=airflow-provider-kinesis-snowflake``
    so that clean-up can recognise it. Running again is a no-op; an existing table that this
    provider did not create is refused rather than written into.

    :param application_name: the connector's application name, which is the table name.
    :param stream_name: the Kinesis stream the table tracks (recorded in its metadata item, with
        its ARN and creation time).
    :param connector_id: the connector, recorded in a new table's metadata item.
    :param destination: the connector's destination, ``DATABASE.SCHEMA.TABLE``, recorded likewise
        (an ingest run of a connector with another destination is refused).
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    """

    template_fields: Sequence[str] = ("application_name", "stream_name", "aws_conn_id", "region_name")

    def __init__(
        self,
        *,
        application_name: str,
        stream_name: str,
        connector_id: str | None = None,
        destination: str | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.connector_id = connector_id
        self.destination = destination.upper() if destination else None
        self.application_name = application_name
        self.stream_name = stream_name
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def execute(self, context: Context) -> dict[str, Any]:
        hook = LeaseTableHook(
            aws_conn_id=self.aws_conn_id, region_name=self.region_name, table_name=self.application_name
        )
        identity = None
        if not hook.lease_table.exists():
            stream_arn, created_at = KinesisStreamHook(
                aws_conn_id=self.aws_conn_id, region_name=self.region_name
            ).stream_identity(self.stream_name)
            # The stream only: this task cannot tell a first start from a table lost and created again,
            # where another connector sharing the application name must not claim it before the ingest
            # run compared the destination with Snowflake's record. The ingest run records the rest.
            identity = TableIdentity(stream_arn=stream_arn, stream_created_at=created_at)
        created = hook.lease_table.create(
            stream_name=self.stream_name, application_name=self.application_name, identity=identity
        )
        metadata = hook.lease_table.metadata()
        self.log.info(
            "Lease table %s %s (generation %s)",
            self.application_name,
            "created" if created else "already exists",
            metadata.generation_id if metadata else "?",
        )
        return {
            "table_name": self.application_name,
            "created": created,
            "generation_id": metadata.generation_id if metadata else None,
        }
