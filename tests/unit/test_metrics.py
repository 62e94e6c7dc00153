"""Batch figures and the names they are sent under: static names, the application, source, table and shard as tags."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow_kinesis_snowflake.core.dynamodb_sync import TableBatchFigures
from airflow_kinesis_snowflake.core.lag import LagReport, ShardLag
from airflow_kinesis_snowflake.core.load.dynamodb_sink import MergeResult
from airflow_kinesis_snowflake.core.metrics import METRICS, MetricPoint
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, ShardResult
from airflow_kinesis_snowflake.metrics import BatchFigures, emit_batch_metrics, emit_lag_metrics


def _shard(shard_id: str, records: int, bytes_read: int = 0, millis_behind_latest: int | None = None) -> ShardResult:
    return ShardResult(shard_id, None, None, records, records, 0, bytes_read, False, 1, 0, millis_behind_latest)


def _result(rows_loaded: int, dead_letters: int, shards: list[ShardResult]) -> BatchResult:
    return BatchResult("b1", "app/b1/a", True, rows_loaded, dead_letters, tuple(shards), datetime.now(UTC), {})


RESULT = _result(
    rows_loaded=7,
    dead_letters=2,
    shards=[
        _shard("s0", records=5, bytes_read=500, millis_behind_latest=1200),
        _shard("s1", records=4, bytes_read=300, millis_behind_latest=0),
        _shard("s2", records=0, bytes_read=0, millis_behind_latest=None),
    ],
)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float, dict[str, Any] | None]] = []

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, Any] | None = None) -> None:
        self.sent.append(("incr", stat, count, tags))

    def gauge(self, stat: str, value: float, rate: float = 1, *, tags: dict[str, Any] | None = None) -> None:
        self.sent.append(("gauge", stat, value, tags))


def test_figures_sum_the_shards_and_keep_the_largest_lag() -> None:
    assert BatchFigures.from_result(RESULT) == BatchFigures(
        records=9, rows_loaded=7, dead_letters=2, bytes=800, shards=3, millis_behind_latest=1200
    )
    assert BatchFigures.from_result(_result(0, 0, [])).millis_behind_latest is None


def test_names_are_static_and_the_application_is_a_tag() -> None:
    sent: dict[str, list[tuple[str, str, float, dict[str, Any] | None]]] = {}
    for app in ("orders-to-snowflake", "orders.v2"):
        stats = Recorder()
        emit_batch_metrics(
            BatchFigures.from_result(RESULT), application_name=app, source_name="orders", table="A.B.C", stats=stats
        )
        sent[app] = stats.sent
    names = {app: [name for _, name, _, _ in calls] for app, calls in sent.items()}
    # The same names whatever the application (no level of the StatsD hierarchy per connector) ...
    assert names["orders-to-snowflake"] == names["orders.v2"]
    assert all(name in METRICS and "orders" not in name for name in names["orders.v2"])
    # ... which the tags tell apart, unchanged.
    assert {tags["application"] for _, _, _, tags in sent["orders.v2"] if tags} == {"orders.v2"}


def test_every_figure_is_sent_with_tags() -> None:
    stats = Recorder()
    points = emit_batch_metrics(
        BatchFigures.from_result(RESULT), application_name="app", source_name="orders", table="A.B.C", stats=stats
    )
    tags = {"application": "app", "source_type": "kinesis", "source": "orders", "table": "A.B.C"}
    assert stats.sent == [
        ("incr", "kinesis_snowflake.batch.records", 9, tags),
        ("incr", "kinesis_snowflake.batch.rows_loaded", 7, tags),
        ("incr", "kinesis_snowflake.batch.dead_letters", 2, tags),
        ("incr", "kinesis_snowflake.batch.bytes", 800, tags),
        ("gauge", "kinesis_snowflake.batch.shards", 3, tags),
        ("gauge", "kinesis_snowflake.batch.millis_behind_latest", 1200, tags),
    ]
    # What was sent is returned, for another publisher (CloudWatch).
    assert [(p.name, p.value, dict(p.tags)) for p in points] == [(name, v, t) for _, name, v, t in stats.sent]


def test_the_points_sent_are_handed_to_the_publisher_too() -> None:
    published: list[list[MetricPoint]] = []
    stats = Recorder()
    emit_batch_metrics(
        BatchFigures.from_result(RESULT),
        application_name="app",
        source_name="orders",
        table="A.B.C",
        stats=stats,
        publish=lambda points: published.append(list(points)),
    )
    assert len(published) == 1 and [p.name for p in published[0]] == [name for _, name, _, _ in stats.sent]


def test_no_lag_gauge_when_no_shard_reported_one() -> None:
    stats = Recorder()
    emit_batch_metrics(
        BatchFigures.from_result(_result(0, 0, [_shard("s0", records=0)])),
        application_name="app",
        source_name="orders",
        table="A.B.C",
        stats=stats,
    )
    assert [s[1] for s in stats.sent if s[0] == "gauge"] == ["kinesis_snowflake.batch.shards"]


def test_each_shard_gets_its_lag_and_checkpoint_age_as_gauges_tagged_with_the_shard() -> None:
    stats = Recorder()
    report = LagReport(
        (
            ShardLag("shardId-0", 1500, Checkpoint("7"), 2.5, records=3, dead_letters=0),
            ShardLag("shardId-1", None, Checkpoint("9"), 600.0),  # not read by this batch
            ShardLag("shardId-2", None, None, None),  # never checkpointed
        ),
        retention_hours=24,
    )
    emit_lag_metrics(report, application_name="app", source_name="orders", table="A.B.C", stats=stats)
    tags = {"application": "app", "source_type": "kinesis", "source": "orders", "table": "A.B.C"}
    s0, s1 = {**tags, "shard": "shardId-0"}, {**tags, "shard": "shardId-1"}
    assert stats.sent == [
        ("gauge", "kinesis_snowflake.shard.millis_behind_latest", 1500, s0),
        ("gauge", "kinesis_snowflake.shard.checkpoint_age_seconds", 2.5, s0),
        ("gauge", "kinesis_snowflake.shard.checkpoint_age_seconds", 600.0, s1),
    ]


def test_shards_near_the_retention_are_counted_under_a_warning_and_an_error_metric() -> None:
    hour = 3_600_000
    stats = Recorder()
    lags = {"s0": 13 * hour, "s1": 22 * hour, "s2": 23 * hour, "s3": 1000}
    shards = tuple(ShardLag(shard_id, lag, None, None) for shard_id, lag in lags.items())
    emit_lag_metrics(LagReport(shards, 24), application_name="app", source_name="orders", table="A.B.C", stats=stats)
    counters = [(name, count) for kind, name, count, _ in stats.sent if kind == "incr"]
    assert counters == [
        ("kinesis_snowflake.lag_retention_warning", 1),
        ("kinesis_snowflake.lag_retention_error", 2),
    ]


def test_a_dynamodb_batch_reports_the_ingest_names_without_bytes_or_lag() -> None:
    batch = TableBatchFigures("b1", records=12, units=3, merge=MergeResult(changes_loaded=11, items_set_aside=1))
    figures = BatchFigures.from_table_batch(batch)
    recorder = Recorder()

    emit_batch_metrics(
        figures,
        application_name="orders-ddb",
        source_name="orders",
        source_type="dynamodb",
        table="A.B.ORDERS",
        stats=recorder,
    )

    tags = {"application": "orders-ddb", "source_type": "dynamodb", "source": "orders", "table": "A.B.ORDERS"}
    assert recorder.sent == [
        ("incr", "kinesis_snowflake.batch.records", 12, tags),
        ("incr", "kinesis_snowflake.batch.rows_loaded", 11, tags),
        ("incr", "kinesis_snowflake.batch.dead_letters", 1, tags),
        ("gauge", "kinesis_snowflake.batch.shards", 3, tags),
    ]
