"""Kinesis and lease-table hooks over the Amazon provider's AwsBaseHook."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from functools import cached_property
from types import FrameType
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from botocore.config import Config

from airflow_kinesis_snowflake.core.freshness import Freshness, check_new_records
from airflow_kinesis_snowflake.core.sources.shards import Shard, list_shards
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.holding import held_by_others
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.marks import resolve_application
from airflow_kinesis_snowflake.core.state.metadata import stream_created_at

# Back off on throttling (ProvisionedThroughputExceeded, LimitExceeded) instead of failing.
RETRY_CONFIG = Config(retries={"mode": "standard", "max_attempts": 10})


class _FrameCaller:
    """Names the operator (or executor) that made a client for its user agent, from the call frames.

    The Amazon provider finds it with ``inspect.stack()``, which reads the source lines of every
    frame on the stack: about a third of a second of CPU for each client, several per task. The
    same walk over the frames alone gives the same name.
    """

    @staticmethod
    def _find_operator_class_name(target_function_name: str) -> str | None:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == target_function_name and "self" in frame.f_locals:
                return type(frame.f_locals["self"]).__name__
            frame = frame.f_back
        return None

    @staticmethod
    def _find_executor_class_name() -> str | None:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            classes = [name for name, value in frame.f_globals.items() if isinstance(value, type)]
            if "BaseExecutor" in classes:
                return classes[-1]
            frame = frame.f_back
        return None


class KinesisStreamHook(_FrameCaller, AwsBaseHook):
    """Interact with a Kinesis data stream through :external+boto3:py:class:`Kinesis.Client`.

    Additional arguments (such as ``aws_conn_id``) are passed to
    :class:`~airflow.providers.amazon.aws.hooks.base_aws.AwsBaseHook`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["client_type"] = "kinesis"
        kwargs.setdefault("config", RETRY_CONFIG)
        super().__init__(*args, **kwargs)

    def list_shards(self, stream_name: str) -> list[Shard]:
        """All shards of ``stream_name`` in retention, parents before children."""
        return list_shards(self.conn, stream_name)

    def stream_arn(self, stream_name: str) -> str:
        arn: str = self.conn.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]["StreamARN"]
        return arn

    def stream_identity(self, stream_name: str) -> tuple[str, str]:
        """The stream's ARN and creation time (ISO 8601 UTC), from DescribeStreamSummary.

        A stream deleted and created again under the same name has another creation time (and,
        on AWS, the same ARN).
        """
        summary = self.conn.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]
        return str(summary["StreamARN"]), stream_created_at(summary["StreamCreationTimestamp"])

    def retention_hours(self, stream_name: str) -> int:
        """The stream's retention period in hours (``RetentionPeriodHours`` of DescribeStreamSummary):
        records older than this are deleted, read or not."""
        summary = self.conn.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]
        return int(summary["RetentionPeriodHours"])

    def register_consumer(self, stream_name: str, consumer_name: str, *, timeout_seconds: float = 300) -> str:
        """Register an enhanced fan-out consumer unless it exists; wait until ACTIVE; return its ARN."""
        consumer = self.ensure_consumer(stream_name, consumer_name)
        deadline = time.monotonic() + timeout_seconds
        while consumer["ConsumerStatus"] != "ACTIVE":
            if consumer["ConsumerStatus"] == "DELETING" or time.monotonic() > deadline:
                raise RuntimeError(
                    f"fan-out consumer {consumer_name} on {stream_name} is {consumer['ConsumerStatus']}, not ACTIVE"
                )
            time.sleep(2)
            consumer = self.consumer_status(consumer["ConsumerARN"])
        arn: str = consumer["ConsumerARN"]
        return arn

    def ensure_consumer(self, stream_name: str, consumer_name: str) -> dict[str, Any]:
        """Register an enhanced fan-out consumer unless it exists; its description, ACTIVE or not yet."""
        stream_arn = self.stream_arn(stream_name)
        try:
            consumer: dict[str, Any] = self.conn.describe_stream_consumer(
                StreamARN=stream_arn, ConsumerName=consumer_name
            )["ConsumerDescription"]
        except self.conn.exceptions.ResourceNotFoundException:
            consumer = self.conn.register_stream_consumer(StreamARN=stream_arn, ConsumerName=consumer_name)["Consumer"]
            self.log.info("Registered fan-out consumer %s on %s", consumer_name, stream_name)
        return consumer

    def consumer_status(self, consumer_arn: str) -> dict[str, Any]:
        """The ``ConsumerDescription`` of a fan-out consumer by its ARN (DescribeStreamConsumer)."""
        description: dict[str, Any] = self.conn.describe_stream_consumer(ConsumerARN=consumer_arn)[
            "ConsumerDescription"
        ]
        return description

    def check_new_records(
        self, stream_name: str, application_name: str, *, dynamodb: Any, arrived_before: datetime | None = None
    ) -> Freshness:
        """Whether any shard has records beyond its checkpoint (:func:`~.core.freshness.check_new_records`).

        :param dynamodb: a boto3 DynamoDB client for the lease table (:class:`LeaseTableHook`'s ``conn``).
        """
        return check_new_records(
            dynamodb,
            self.conn,
            stream_name=stream_name,
            application_name=application_name,
            arrived_before=arrived_before,
        )

    def describe_consumer(self, stream_name: str, consumer_name: str) -> dict[str, Any] | None:
        """The ``ConsumerDescription`` of a fan-out consumer (DescribeStreamConsumer); None if not registered."""
        try:
            description: dict[str, Any] = self.conn.describe_stream_consumer(
                StreamARN=self.stream_arn(stream_name), ConsumerName=consumer_name
            )["ConsumerDescription"]
        except self.conn.exceptions.ResourceNotFoundException:
            return None
        return description

    def list_consumers(self, stream_name: str) -> list[dict[str, Any]]:
        """The enhanced fan-out consumers registered on ``stream_name`` (ListStreamConsumers)."""
        stream_arn = self.stream_arn(stream_name)
        consumers: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"StreamARN": stream_arn}
        while True:
            page = self.conn.list_stream_consumers(**kwargs)
            consumers.extend(page.get("Consumers", []))
            if not page.get("NextToken"):
                return consumers
            kwargs = {"StreamARN": stream_arn, "NextToken": page["NextToken"]}

    def deregister_consumer(self, consumer_arn: str) -> None:
        """Deregister an enhanced fan-out consumer by its ARN; one already gone is fine."""
        try:
            self.conn.deregister_stream_consumer(ConsumerARN=consumer_arn)
        except self.conn.exceptions.ResourceNotFoundException:
            self.log.info("Fan-out consumer %s was already deregistered", consumer_arn)

    def job_environment(self) -> dict[str, str]:
        """Credentials, region and endpoint for a Spark job, as standard ``AWS_*`` variables.

        The secret key and session token are registered with Airflow's secret masker (by
        :meth:`~airflow.providers.amazon.aws.hooks.base_aws.AwsBaseHook.get_credentials`): resolved
        from a role or a profile, they are values the connection itself never held.
        """
        credentials = self.get_credentials()
        env = {
            "AWS_ACCESS_KEY_ID": credentials.access_key,
            "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
        }
        if credentials.token:
            env["AWS_SESSION_TOKEN"] = credentials.token
        env.update(self.job_location())
        return env

    def job_location(self) -> dict[str, str]:
        """Region and service endpoints for a Spark job (``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_*``):
        no credentials, for a job that uses its own AWS identity."""
        env: dict[str, str] = {}
        if self.region_name:
            env["AWS_DEFAULT_REGION"] = self.region_name
        for service, variable in (
            ("kinesis", "AWS_ENDPOINT_URL_KINESIS"),
            ("dynamodb", "AWS_ENDPOINT_URL_DYNAMODB"),  # the lease table, read by a continuous driver
            ("secretsmanager", "AWS_ENDPOINT_URL_SECRETS_MANAGER"),
        ):
            endpoint = self.conn_config.get_service_endpoint_url(service_name=service)
            if endpoint:
                env[variable] = endpoint
        return env


class LeaseTableHook(_FrameCaller, AwsBaseHook):
    """The DynamoDB lease tables: one connector's, or any of them (for reset, restore and clean-up).

    :param table_name: the lease table, which is the connector's application name; optional when
        the caller names a table per call (:meth:`table`) or lists tables through ``conn``.

    Additional arguments (such as ``aws_conn_id``) are passed to
    :class:`~airflow.providers.amazon.aws.hooks.base_aws.AwsBaseHook`.
    """

    def __init__(self, *args: Any, table_name: str | None = None, **kwargs: Any) -> None:
        kwargs["client_type"] = "dynamodb"
        kwargs.setdefault("config", RETRY_CONFIG)
        super().__init__(*args, **kwargs)
        self.table_name = table_name

    @cached_property
    def lease_table(self) -> LeaseTable:
        """The table named ``table_name``."""
        if self.table_name is None:
            raise ValueError("LeaseTableHook.lease_table needs the table_name the hook was built with")
        return self.table(self.table_name)

    def table(self, table_name: str) -> LeaseTable:
        """The lease table ``table_name``."""
        return LeaseTable(self.conn, table_name)

    def active_table_held(self, application_name: str) -> str | None:
        """The active lease table of ``application_name`` when running batches hold leases of it, else None.

        None also when the ``superseded_by`` chain from ``application_name`` is broken: the reset,
        which resolves it again, reports that with its fix.
        """
        try:
            active = resolve_application(self.conn, application_name).active
        except MaintenanceError:
            return None
        table = self.table(active)
        return active if table.exists() and held_by_others(table.leases().values(), None, time.time()) else None
