"""Kinesis and lease-table hooks over the Amazon provider's AwsBaseHook."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from botocore.config import Config

from airflow_kinesis_snowflake.core.leases import LeaseTable
from airflow_kinesis_snowflake.core.shards import Shard, list_shards

# Back off on throttling (ProvisionedThroughputExceeded, LimitExceeded) instead of failing.
RETRY_CONFIG = Config(retries={"mode": "standard", "max_attempts": 10})


class KinesisStreamHook(AwsBaseHook):
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

    def job_environment(self) -> dict[str, str]:
        """Credentials, region and endpoint for a Spark job, as standard ``AWS_*`` variables."""
        credentials = self.get_credentials()
        env = {
            "AWS_ACCESS_KEY_ID": credentials.access_key,
            "AWS_SECRET_ACCESS_KEY": credentials.secret_key,
        }
        if credentials.token:
            env["AWS_SESSION_TOKEN"] = credentials.token
        if self.region_name:
            env["AWS_DEFAULT_REGION"] = self.region_name
        endpoint = self.conn_config.get_service_endpoint_url(service_name="kinesis")
        if endpoint:
            env["AWS_ENDPOINT_URL_KINESIS"] = endpoint
        return env


class LeaseTableHook(AwsBaseHook):
    """The DynamoDB lease/checkpoint table of one application, through a DynamoDB client.

    :param table_name: the lease table, which is the connector's application name.
    """

    def __init__(self, *args: Any, table_name: str, **kwargs: Any) -> None:
        kwargs["client_type"] = "dynamodb"
        kwargs.setdefault("config", RETRY_CONFIG)
        super().__init__(*args, **kwargs)
        self.table_name = table_name

    @cached_property
    def lease_table(self) -> LeaseTable:
        return LeaseTable(self.conn, self.table_name)
