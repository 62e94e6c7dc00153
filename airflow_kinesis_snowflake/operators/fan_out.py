"""Register the enhanced fan-out consumer of a connector."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.common.compat.sdk import conf
from airflow.sdk import BaseOperator, Context

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.triggers.kinesis import FanOutConsumerActiveTrigger


class RegisterStreamConsumerOperator(BaseOperator):
    """Register the stream's enhanced fan-out consumer, named after the application name.

    A consumer that is already registered is left as it is; the task waits until it is ACTIVE.

    :param stream_name: the Kinesis data stream.
    :param consumer_name: the consumer name; connectors use their application name.
    :param aws_conn_id: the Airflow AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    :param deferrable: wait for ACTIVE in the triggerer (default: ``[operators] default_deferrable``).
    :param waiter_delay: seconds between status checks while deferred.
    :param waiter_timeout: seconds to wait for ACTIVE.
    """

    template_fields: Sequence[str] = ("stream_name", "consumer_name", "aws_conn_id", "region_name")

    def __init__(
        self,
        *,
        stream_name: str,
        consumer_name: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        waiter_delay: float = 2,
        waiter_timeout: float = 300,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deferrable = deferrable
        self.waiter_delay = waiter_delay
        self.waiter_timeout = waiter_timeout
        self.stream_name = stream_name
        self.consumer_name = consumer_name
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name

    def execute(self, context: Context) -> str:
        hook = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        if not self.deferrable:
            arn = hook.register_consumer(self.stream_name, self.consumer_name, timeout_seconds=self.waiter_timeout)
            self.log.info("Fan-out consumer %s is ACTIVE: %s", self.consumer_name, arn)
            return arn
        consumer = hook.ensure_consumer(self.stream_name, self.consumer_name)
        if consumer["ConsumerStatus"] == "ACTIVE":
            return self.execute_complete(context, {"status": "success", "consumer_arn": consumer["ConsumerARN"]})
        self.defer(
            trigger=FanOutConsumerActiveTrigger(
                consumer_arn=consumer["ConsumerARN"],
                aws_conn_id=self.aws_conn_id,
                region_name=self.region_name,
                poke_interval=self.waiter_delay,
                timeout=self.waiter_timeout,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> str:
        if event.get("status") != "success":
            raise AirflowException(f"{event.get('message')} (stream {self.stream_name})")
        arn: str = event["consumer_arn"]
        self.log.info("Fan-out consumer %s is ACTIVE: %s", self.consumer_name, arn)
        return arn
