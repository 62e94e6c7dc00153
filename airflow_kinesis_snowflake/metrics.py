"""A micro-batch's figures as Airflow metrics, through whatever backend ``[metrics]`` configures.

The names are static (``kinesis_snowflake.batch.records``, ``kinesis_snowflake.shard.millis_behind_latest``,
...): the application, the source, the Snowflake table and the shard are **tags**, which tag-aware
backends keep (OpenTelemetry, DogStatsD, StatsD with ``statsd_influxdb_enabled``); plain StatsD
drops tags and so adds up every connector's figures under one name. The catalogue, with each
metric's type, unit and tags, is :data:`~airflow_kinesis_snowflake.core.metrics.METRICS`
(``docs/operations.md``, *Metrics*). A DynamoDB connector's batches report the same names
(:meth:`BatchFigures.from_table_batch`).

Each function also hands the points it sent to ``publish``, when given: the connector's CloudWatch
publisher (``metrics.cloudwatch``, :mod:`airflow_kinesis_snowflake.hooks.cloudwatch`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from airflow_kinesis_snowflake.core.lag import LagReport
from airflow_kinesis_snowflake.core.metrics import (
    PREFIX,
    BatchFigures,
    MetricKind,
    MetricPoint,
    lag_points,
    metric_tags,
)

__all__ = ["PREFIX", "BatchFigures", "Publish", "emit_batch_metrics", "emit_lag_metrics", "send"]

#: Where the points go besides Airflow's ``Stats``; it must not raise (the batch is committed).
Publish = Callable[[Sequence[MetricPoint]], None]


class _Stats(Protocol):
    def incr(self, stat: str, count: int = ..., rate: float = ..., *, tags: dict[str, Any] | None = ...) -> None: ...

    def gauge(self, stat: str, value: float, rate: float = ..., *, tags: dict[str, Any] | None = ...) -> None: ...


def _airflow_stats() -> _Stats:
    from airflow_kinesis_snowflake.compat import Stats

    return Stats


def send(points: Sequence[MetricPoint], *, stats: _Stats | None = None, publish: Publish | None = None) -> None:
    """Send ``points`` to ``stats`` (Airflow's ``Stats`` by default), then hand them to ``publish``."""
    stats = stats if stats is not None else _airflow_stats()
    for point in points:
        if point.spec.kind is MetricKind.COUNTER:
            stats.incr(point.name, int(point.value), tags=dict(point.tags))
        else:
            stats.gauge(point.name, point.value, tags=dict(point.tags))
    if publish is not None and points:
        publish(points)


def emit_lag_metrics(
    report: LagReport,
    *,
    application_name: str,
    source_name: str,
    table: str,
    source_type: str = "kinesis",
    stats: _Stats | None = None,
    publish: Publish | None = None,
) -> list[MetricPoint]:
    """Per-shard gauges of lag and checkpoint age, and the counters of shards near the retention."""
    tags = metric_tags(application=application_name, source_type=source_type, source=source_name, table=table)
    points = lag_points(report, tags)
    send(points, stats=stats, publish=publish)
    return points


def emit_batch_metrics(
    figures: BatchFigures,
    *,
    application_name: str,
    source_name: str,
    table: str,
    source_type: str = "kinesis",
    stats: _Stats | None = None,
    publish: Publish | None = None,
) -> list[MetricPoint]:
    """Send a batch's figures; ``stats`` defaults to Airflow's ``Stats``.

    :param source_name: the Kinesis stream, or the DynamoDB table (``source_type: dynamodb``).
    """
    tags = metric_tags(application=application_name, source_type=source_type, source=source_name, table=table)
    points = figures.points(tags)
    send(points, stats=stats, publish=publish)
    return points
