"""DynamoDB source hooks over the Amazon provider's AwsBaseHook: the tables, their streams, their tags."""

from __future__ import annotations

from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from botocore.config import Config

from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import Discovery, TableSelection, discover
from airflow_kinesis_snowflake.hooks.kinesis import RETRY_CONFIG, _FrameCaller

# The snapshot's Scan counts and backs off from throttles itself (docs/dynamodb.md, "Throttling"):
# botocore's own retries would hide them from the count.
SCAN_CONFIG = Config(retries={"total_max_attempts": 1})


class DynamoDBSourceHook(_FrameCaller, AwsBaseHook):
    """The source tables, through :external+boto3:py:class:`DynamoDB.Client`.

    :param scan: a client for the snapshot's Scan (no botocore retries, :data:`SCAN_CONFIG`) rather
        than for DescribeTable and the other calls (retried, as the Kinesis hooks are).

    Additional arguments (such as ``aws_conn_id``) are passed to
    :class:`~airflow.providers.amazon.aws.hooks.base_aws.AwsBaseHook`.
    """

    def __init__(self, *args: Any, scan: bool = False, **kwargs: Any) -> None:
        kwargs["client_type"] = "dynamodb"
        kwargs.setdefault("config", SCAN_CONFIG if scan else RETRY_CONFIG)
        super().__init__(*args, **kwargs)

    def discover(self, selection: TableSelection, template: str) -> Discovery:
        """The tables to sync and those skipped (:func:`~.core.sources.dynamodb.discovery.discover`).

        Tables selected by tags are found with the Resource Groups Tagging API, in the same
        connection and region.
        """
        tagging = None
        if selection.tables is None:
            tagging = TaggingHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn
        return discover(self.conn, tagging, selection, template, self.region_name)


class DynamoDBStreamsHook(_FrameCaller, AwsBaseHook):
    """The tables' streams, through :external+boto3:py:class:`DynamoDBStreams.Client`.

    The stream reader backs off from ``LimitExceededException`` itself; botocore retries the rest.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["client_type"] = "dynamodbstreams"
        kwargs.setdefault("config", RETRY_CONFIG)
        super().__init__(*args, **kwargs)


class TaggingHook(_FrameCaller, AwsBaseHook):
    """The Resource Groups Tagging API (``GetResources``), which finds tables by their tags."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["client_type"] = "resourcegroupstaggingapi"
        kwargs.setdefault("config", RETRY_CONFIG)
        super().__init__(*args, **kwargs)
