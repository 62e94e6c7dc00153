"""A micro-batch's figures as Airflow metrics, through whatever backend ``[metrics]`` configures.

Each name carries the application (``kinesis_snowflake.<application>.<figure>``) so that plain
StatsD, which drops tags, still tells connectors apart; tag-aware backends (DogStatsD, StatsD with
InfluxDB tags, OpenTelemetry) also get ``application``, ``stream`` and ``table`` as tags. A DynamoDB
connector's batches report the same names, ``stream`` tagged with the DynamoDB table's name
(:meth:`BatchFigures.from_table_batch`).

Counters, per batch: ``records`` (read from Kinesis), ``rows_loaded``, ``dead_letters`` (loaded
into the parse-failure table), ``bytes`` (of user-record payloads). Gauges: ``millis_behind_latest``
(the largest of the shards read, as Kinesis reports it; KCL's metric of the same name) and
``shards`` (shard ranges in the batch).

Per shard, gauges named ``kinesis_snowflake.<application>.shard.<shard id>.<figure>`` and tagged
``shard`` too: ``millis_behind_latest`` (shards the batch read) and ``checkpoint_age_seconds``
(every shard with a checkpoint: the time since it last moved). When a shard's lag passes half of the
stream's retention, the counter ``lag_retention_warning`` counts such shards; past 90 % of it,
``lag_retention_error`` (``core/lag.py``, ``docs/lag.md``): alert on the latter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from airflow_kinesis_snowflake.core.lag import LagLevel, LagReport
from airflow_kinesis_snowflake.core.model import BatchResult

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.core.dynamodb_sync import TableBatchFigures

PREFIX = "kinesis_snowflake"


class _Stats(Protocol):
    def incr(self, stat: str, count: int = ..., rate: float = ..., *, tags: dict[str, Any] | None = ...) -> None: ...

    def gauge(self, stat: str, value: float, rate: float = ..., *, tags: dict[str, Any] | None = ...) -> None: ...


@dataclass(frozen=True)
class BatchFigures:
    """What one batch read and loaded."""

    records: int
    rows_loaded: int
    dead_letters: int
    bytes: int | None
    shards: int
    millis_behind_latest: int | None

    @classmethod
    def from_result(cls, result: BatchResult) -> BatchFigures:
        """From the Spark job's batch result (``core.job.commit``)."""
        behind = [s.millis_behind_latest for s in result.shards if s.millis_behind_latest is not None]
        return cls(
            records=sum(s.records_read for s in result.shards),
            rows_loaded=result.rows_loaded,
            dead_letters=result.dead_letters_loaded,
            bytes=sum(s.bytes_read for s in result.shards),
            shards=len(result.shards),
            millis_behind_latest=max(behind) if behind else None,
        )

    @classmethod
    def from_table_batch(cls, batch: TableBatchFigures) -> BatchFigures:
        """From a DynamoDB table's batch: ``records`` are the items and stream records read,
        ``rows_loaded`` the changes applied, ``dead_letters`` the changes set aside, ``shards`` the
        snapshot segments and stream shards read; no ``bytes`` and no ``millis_behind_latest``
        (DynamoDB Streams reports no lag)."""
        return cls(
            records=batch.records,
            rows_loaded=batch.merge.changes_loaded,
            dead_letters=batch.merge.items_set_aside,
            bytes=None,
            shards=batch.units,
            millis_behind_latest=None,
        )


def metric_name(application_name: str, figure: str) -> str:
    # A dot would add a level to the StatsD hierarchy; Airflow writes it as '__' in its own names.
    return f"{PREFIX}.{application_name.replace('.', '__')}.{figure}"


def shard_metric_name(application_name: str, shard_id: str, figure: str) -> str:
    return metric_name(application_name, f"shard.{shard_id.replace('.', '__')}.{figure}")


def _airflow_stats() -> _Stats:
    from airflow.sdk.observability.stats import Stats

    return Stats


def emit_lag_metrics(
    report: LagReport, *, application_name: str, stream_name: str, table: str, stats: _Stats | None = None
) -> None:
    """Per-shard gauges of lag and checkpoint age, and the counters of shards near the retention."""
    stats = stats if stats is not None else _airflow_stats()
    tags = {"application": application_name, "stream": stream_name, "table": table}
    for shard in report.shards:
        shard_tags = {**tags, "shard": shard.shard_id}
        if shard.millis_behind_latest is not None:
            name = shard_metric_name(application_name, shard.shard_id, "millis_behind_latest")
            stats.gauge(name, shard.millis_behind_latest, tags=shard_tags)
        if shard.checkpoint_age_seconds is not None:
            name = shard_metric_name(application_name, shard.shard_id, "checkpoint_age_seconds")
            stats.gauge(name, round(shard.checkpoint_age_seconds, 3), tags=shard_tags)
    alerts = report.alerts
    for level in (LagLevel.WARNING, LagLevel.ERROR):
        if count := sum(1 for alert in alerts if alert.level is level):
            stats.incr(metric_name(application_name, f"lag_retention_{level.value}"), count, tags=tags)


def emit_batch_metrics(
    figures: BatchFigures, *, application_name: str, stream_name: str, table: str, stats: _Stats | None = None
) -> None:
    """Send the figures; ``stats`` defaults to Airflow's ``Stats``."""
    stats = stats if stats is not None else _airflow_stats()
    tags = {"application": application_name, "stream": stream_name, "table": table}
    for figure in ("records", "rows_loaded", "dead_letters", "bytes"):
        if (value := getattr(figures, figure)) is not None:
            stats.incr(metric_name(application_name, figure), value, tags=tags)
    stats.gauge(metric_name(application_name, "shards"), figures.shards, tags=tags)
    if figures.millis_behind_latest is not None:
        stats.gauge(metric_name(application_name, "millis_behind_latest"), figures.millis_behind_latest, tags=tags)
