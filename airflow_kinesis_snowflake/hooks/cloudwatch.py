"""Publish a connector's metrics to Amazon CloudWatch (``metrics.cloudwatch: true``) through the AWS connection."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
from botocore.config import Config

from airflow_kinesis_snowflake.core.metrics import TAGS, MetricPoint, cloudwatch_requests
from airflow_kinesis_snowflake.hooks.kinesis import _FrameCaller

log = logging.getLogger(__name__)

# Metrics are reported after the batch committed: a CloudWatch that cannot be reached costs the task
# seconds, not the minutes of the data plane's retries.
PUBLISH_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=15)


class CloudWatchMetricsHook(_FrameCaller, AwsBaseHook):
    """Put metric data into a CloudWatch namespace through :external+boto3:py:class:`CloudWatch.Client`.

    :param namespace: the custom namespace the metrics go to.
    :param dimensions: the tags that become dimensions, in this order (all by default).

    Additional arguments (such as ``aws_conn_id``) are passed to
    :class:`~airflow.providers.amazon.aws.hooks.base_aws.AwsBaseHook`.
    """

    def __init__(self, *args: Any, namespace: str, dimensions: Sequence[str] | None = None, **kwargs: Any) -> None:
        kwargs["client_type"] = "cloudwatch"
        kwargs.setdefault("config", PUBLISH_CONFIG)
        super().__init__(*args, **kwargs)
        self.namespace = namespace
        self.dimensions = tuple(TAGS if dimensions is None else dimensions)

    def put_points(self, points: Sequence[MetricPoint], timestamp: datetime | None = None) -> int:
        """``PutMetricData`` for ``points`` (several requests when they are many); the number of points put."""
        at = timestamp or datetime.now(UTC)
        put = 0
        for request in cloudwatch_requests(points, namespace=self.namespace, dimensions=self.dimensions, timestamp=at):
            self.conn.put_metric_data(**request)
            put += len(request["MetricData"])
        return put

    def publish(self, points: Sequence[MetricPoint]) -> None:
        """:meth:`put_points`, logging a failure as a warning instead of raising: the points are of a
        committed batch, which must not fail because CloudWatch could not be reached."""
        try:
            self.put_points(points)
        except Exception as err:  # noqa: BLE001 - the batch is committed; its figures are in the task log too
            log.warning(
                "Could not publish %d metric point(s) to CloudWatch namespace %r (%s: %s); the batch is committed, "
                "and its figures went to Airflow's metrics backend all the same",
                len(points),
                self.namespace,
                type(err).__name__,
                err,
            )


def cloudwatch_publisher(
    namespace: str | None,
    dimensions: Sequence[str] | None = None,
    *,
    aws_conn_id: str | None = "aws_default",
    region_name: str | None = None,
) -> Callable[[Sequence[MetricPoint]], None] | None:
    """The operators' ``publish``: :meth:`CloudWatchMetricsHook.publish` into ``namespace``, None without one."""
    if namespace is None:
        return None
    hook = CloudWatchMetricsHook(
        namespace=namespace, dimensions=dimensions, aws_conn_id=aws_conn_id, region_name=region_name
    )
    return hook.publish
