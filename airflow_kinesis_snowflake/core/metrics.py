"""What a connector measures: every metric's static name, type, unit and tags, and the points of a batch.

Names never carry an application, a shard or a table: those are **tags** (``application``,
``source_type``, ``source``, ``table`` and, per shard, ``shard``), so that one dashboard or alert
serves every connector and StatsD keys do not grow with shards. Both sources send the same names:
a DynamoDB connector's batches have no ``bytes`` and no ``millis_behind_latest``.

The catalogue :data:`METRICS` is the one list (``docs/operations.md``, *Metrics*, shows it as a
table). :func:`cloudwatch_requests` turns points into ``PutMetricData`` requests: the name without
the ``kinesis_snowflake.`` prefix (the namespace says whose it is), the tags as dimensions.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow_kinesis_snowflake import docs_url
from airflow_kinesis_snowflake.core.lag import LagLevel, LagReport
from airflow_kinesis_snowflake.core.model import BatchResult

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.core.dynamodb_sync import TableBatchFigures

PREFIX = "kinesis_snowflake"

# The tags, in the order they are sent (and become CloudWatch dimensions).
APPLICATION, SOURCE_TYPE, SOURCE, TABLE, SHARD = "application", "source_type", "source", "table", "shard"
BATCH_TAGS = (APPLICATION, SOURCE_TYPE, SOURCE, TABLE)
SHARD_TAGS = (*BATCH_TAGS, SHARD)
TAGS = SHARD_TAGS

DEFAULT_NAMESPACE = "KinesisSnowflake"
# PutMetricData: a namespace of 1-255 of these characters, not starting with "AWS/" (AWS's own).
_NAMESPACE = re.compile(r"^[A-Za-z0-9.\-_/#: ]{1,255}$")
NAMESPACE_RULE = (
    "must be 1-255 letters, digits or . - _ / # : and spaces, with a non-space character, and may not start "
    "with 'AWS/' (reserved for AWS services), e.g. KinesisSnowflake"
)
# PutMetricData takes at most 1000 data points per request and a 1 MB body; 500 points with five
# dimensions each stay far below the body limit.
POINTS_PER_REQUEST = 500
# A dimension value is 1-1024 characters.
DIMENSION_VALUE_MAX = 1024


class MetricKind(StrEnum):
    """How a backend aggregates a metric: a counter adds up (StatsD ``c``), a gauge keeps the latest (``g``)."""

    COUNTER = "counter"
    GAUGE = "gauge"


@dataclass(frozen=True)
class MetricSpec:
    """One metric of the catalogue.

    :param name: the name sent to Airflow's ``Stats`` (``kinesis_snowflake.<...>``), static.
    :param kind: counter or gauge.
    :param unit: the CloudWatch unit (``Count``, ``Bytes``, ``Milliseconds``, ``Seconds``).
    :param tags: the tags every point of it carries.
    :param meaning: what it measures, for the docs.
    :param sources: the source types that send it.
    """

    name: str
    kind: MetricKind
    unit: str
    tags: tuple[str, ...]
    meaning: str
    sources: tuple[str, ...] = ("kinesis", "dynamodb")

    @property
    def cloudwatch_name(self) -> str:
        return self.name.removeprefix(f"{PREFIX}.")


def _spec(*args: Any, **kwargs: Any) -> tuple[str, MetricSpec]:
    spec = MetricSpec(*args, **kwargs)
    return spec.name, spec


_COUNTER, _GAUGE = MetricKind.COUNTER, MetricKind.GAUGE
_KINESIS = ("kinesis",)
METRICS: dict[str, MetricSpec] = dict(
    [
        _spec(
            f"{PREFIX}.batch.records",
            _COUNTER,
            "Count",
            BATCH_TAGS,
            "Records read by a committed batch (Kinesis: user records after de-aggregation; DynamoDB: snapshot "
            "items and stream records).",
        ),
        _spec(
            f"{PREFIX}.batch.rows_loaded",
            _COUNTER,
            "Count",
            BATCH_TAGS,
            "Rows the batch loaded into the destination table (DynamoDB: changes applied by the MERGE).",
        ),
        _spec(
            f"{PREFIX}.batch.dead_letters",
            _COUNTER,
            "Count",
            BATCH_TAGS,
            "Records set aside (Kinesis: rows of <TABLE>_PARSE_FAILURES; DynamoDB: items of "
            "<TABLE>_DYNAMODB_FAILURES).",
        ),
        _spec(
            f"{PREFIX}.batch.bytes",
            _COUNTER,
            "Bytes",
            BATCH_TAGS,
            "Bytes of user-record payloads the batch read.",
            _KINESIS,
        ),
        _spec(
            f"{PREFIX}.batch.shards",
            _GAUGE,
            "Count",
            BATCH_TAGS,
            "Shard ranges in the batch (DynamoDB: snapshot segments and stream shards).",
        ),
        _spec(
            f"{PREFIX}.batch.millis_behind_latest",
            _GAUGE,
            "Milliseconds",
            BATCH_TAGS,
            "The largest MillisBehindLatest of the shards the batch read, as Kinesis reports it.",
            _KINESIS,
        ),
        _spec(
            f"{PREFIX}.shard.millis_behind_latest",
            _GAUGE,
            "Milliseconds",
            SHARD_TAGS,
            "How far behind the tip of its shard the batch's read ended (shards the batch read).",
            _KINESIS,
        ),
        _spec(
            f"{PREFIX}.shard.checkpoint_age_seconds",
            _GAUGE,
            "Seconds",
            SHARD_TAGS,
            "Time since the shard's checkpoint last moved (every shard with a checkpoint).",
            _KINESIS,
        ),
        _spec(
            f"{PREFIX}.lag_retention_warning",
            _COUNTER,
            "Count",
            BATCH_TAGS,
            "Shards whose lag passed half of the stream's retention "
            f"({docs_url('lag', 'near-the-retention-warning-and-error')}).",
            _KINESIS,
        ),
        _spec(
            f"{PREFIX}.lag_retention_error",
            _COUNTER,
            "Count",
            BATCH_TAGS,
            "Shards whose lag passed 90 % of the stream's retention: records are about to expire unread; alert on it.",
            _KINESIS,
        ),
    ]
)


@dataclass(frozen=True)
class MetricPoint:
    """One value of a catalogued metric, with its tags."""

    name: str
    value: float
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> MetricSpec:
        return METRICS[self.name]


def metric_tags(*, application: str, source_type: str, source: str, table: str) -> dict[str, str]:
    """The tags of every point of a connector's batch: the (active) application name, the source's
    type (``kinesis``, ``dynamodb``) and name (stream or DynamoDB table), and the Snowflake table."""
    return {APPLICATION: application, SOURCE_TYPE: source_type, SOURCE: source, TABLE: table}


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

    def points(self, tags: Mapping[str, str]) -> list[MetricPoint]:
        """The batch's points, in catalogue order; a figure the source has none of is left out."""
        points = []
        for figure in ("records", "rows_loaded", "dead_letters", "bytes", "shards", "millis_behind_latest"):
            if (value := getattr(self, figure)) is not None:
                points.append(MetricPoint(f"{PREFIX}.batch.{figure}", value, dict(tags)))
        return points


def lag_points(report: LagReport, tags: Mapping[str, str]) -> list[MetricPoint]:
    """Each shard's lag and checkpoint age (tagged ``shard``), then the counts of shards near the retention."""
    points = []
    for shard in report.shards:
        shard_tags = {**tags, SHARD: shard.shard_id}
        if shard.millis_behind_latest is not None:
            points.append(MetricPoint(f"{PREFIX}.shard.millis_behind_latest", shard.millis_behind_latest, shard_tags))
        if shard.checkpoint_age_seconds is not None:
            age = round(shard.checkpoint_age_seconds, 3)
            points.append(MetricPoint(f"{PREFIX}.shard.checkpoint_age_seconds", age, shard_tags))
    alerts = report.alerts
    for level in (LagLevel.WARNING, LagLevel.ERROR):
        if count := sum(1 for alert in alerts if alert.level is level):
            points.append(MetricPoint(f"{PREFIX}.lag_retention_{level.value}", count, dict(tags)))
    return points


def check_namespace(value: str) -> str:
    """Return ``value`` if CloudWatch takes it as a custom namespace; :class:`ValueError` with the rule if not."""
    if not _NAMESPACE.match(value) or not value.strip() or value.upper().startswith("AWS/"):
        raise ValueError(NAMESPACE_RULE)
    return value


def check_dimensions(value: Sequence[str]) -> tuple[str, ...]:
    """Return ``value`` if it names tags, each once; :class:`ValueError` naming the allowed ones if not."""
    unknown = [name for name in value if name not in TAGS]
    if unknown:
        raise ValueError(f"{', '.join(map(repr, unknown))} is not a tag; the tags are {', '.join(TAGS)}")
    if len(set(value)) != len(value):
        raise ValueError("names a tag twice; list each once")
    return tuple(value)


def cloudwatch_datum(point: MetricPoint, dimensions: Sequence[str], timestamp: datetime) -> dict[str, Any]:
    """One ``MetricData`` entry: the point's tags among ``dimensions`` become its dimensions, in that order."""
    spec = point.spec
    return {
        "MetricName": spec.cloudwatch_name,
        "Dimensions": [
            {"Name": name, "Value": str(point.tags[name])[:DIMENSION_VALUE_MAX]}
            for name in dimensions
            if str(point.tags.get(name) or "").strip()
        ],
        "Timestamp": timestamp,
        "Value": float(point.value),
        "Unit": spec.unit,
    }


def cloudwatch_requests(
    points: Sequence[MetricPoint], *, namespace: str, dimensions: Sequence[str], timestamp: datetime
) -> Iterator[dict[str, Any]]:
    """The ``PutMetricData`` requests that publish ``points``, at most :data:`POINTS_PER_REQUEST` each."""
    data = [cloudwatch_datum(point, dimensions, timestamp) for point in points]
    for start in range(0, len(data), POINTS_PER_REQUEST):
        yield {"Namespace": namespace, "MetricData": data[start : start + POINTS_PER_REQUEST]}
