"""Registering the enhanced fan-out consumer (moto server)."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.operators.fan_out import RegisterStreamConsumerOperator
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from tests.conftest import create_stream, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def test_registers_once_and_returns_the_active_consumer(aws_connections: Emulators) -> None:
    stream, app = unique("efo"), unique("efo-app")
    kinesis = create_stream(aws_connections, stream, 1)
    operator = RegisterStreamConsumerOperator(task_id="register", stream_name=stream, consumer_name=app)
    arn = operator.execute(context={})
    assert operator.execute(context={}) == arn
    stream_arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    consumers = kinesis.list_stream_consumers(StreamARN=stream_arn)["Consumers"]
    assert [(c["ConsumerName"], c["ConsumerARN"], c["ConsumerStatus"]) for c in consumers] == [(app, arn, "ACTIVE")]


def test_ingest_through_a_consumer_that_is_not_registered_says_to_provision(aws_connections: Emulators) -> None:
    stream, app = unique("efo"), unique("efo-app")
    create_stream(aws_connections, stream, 1)
    CreateLeaseTableOperator(task_id="lease_table", application_name=app, stream_name=stream).execute(context={})
    ingest = SparkKinesisIngestOperator(
        task_id="ingest",
        stream_name=stream,
        application_name=app,
        database="ANALYTICS",
        schema="RAW",
        table="NOWHERE",
        consumer_type="ENHANCED_FAN_OUT",
        region_name="us-east-1",
    )
    with pytest.raises(
        AirflowException, match=f"consumer '{app}' of stream '{stream}' is not registered.*provisioning"
    ):
        ingest.execute(context={})
    # It failed before planning: no shard got a lease, none was taken.
    assert LeaseTable(aws_connections.boto3_client("dynamodb"), app).leases() == {}


def test_ingest_consumer_type_must_be_known() -> None:
    with pytest.raises(ValueError, match="consumer_type 'POLLING'"):
        SparkKinesisIngestOperator(
            task_id="ingest",
            stream_name="s",
            application_name="app",
            database="D",
            schema="S",
            table="T",
            consumer_type="POLLING",
        )
