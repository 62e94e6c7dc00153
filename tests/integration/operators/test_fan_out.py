"""Registering the enhanced fan-out consumer (moto server)."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.operators.fan_out import RegisterStreamConsumerOperator
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
