"""Register the enhanced fan-out consumer of a connector."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook


class RegisterStreamConsumerOperator(BaseOperator):
    """Register the stream's enhanced fan-out consumer, named after the application name.

    A consumer that is already registered is left as it is; the task waits until it is ACTIVE.

    :param stream_name: the Kinesis data stream.
    :param consumer_name: the consumer name; connectors use their application name.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    """

    template_fields: Sequence[str] = ("stream_name", "consumer_name", "aws_conn_id", "region_name")

    def __init__(
        self,
        *,
        stream_name: str,
        consumer_name: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.stream_name = stream_name
        self.consumer_name = consumer_name
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def execute(self, context: Context) -> str:
        hook = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        arn = hook.register_consumer(self.stream_name, self.consumer_name)
        self.log.info("Fan-out consumer %s is ACTIVE: %s", self.consumer_name, arn)
        return arn
