"""The lag page's HTML: a chart and a table per Kinesis connector, tables and stream shards per DynamoDB
connector, levels shown, text escaped."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from airflow_kinesis_snowflake.core.model import Checkpoint
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot_progress import SnapshotProgress
from airflow_kinesis_snowflake.plugins.render import chart, render_page
from airflow_kinesis_snowflake.status import (
    ConnectorStatus,
    DynamoDBConnectorStatus,
    ShardStatus,
    TableStatus,
)

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
HOUR = 3_600_000


def _shard(shard_id: str, lags: list[int | None]) -> ShardStatus:
    history = tuple((T0 + timedelta(minutes=5 * i), lag) for i, lag in enumerate(lags))
    return ShardStatus(shard_id, Checkpoint("42"), 30.0, lags[-1], "b9", history[-1][0], 10, 1, history)


def test_each_shard_is_a_line_of_its_batches_and_a_row_with_its_level() -> None:
    status = ConnectorStatus(
        "orders", "orders-app", "orders", "A.B.C", 24, (_shard("s0", [1000, 2000, 500]), _shard("s1", [13 * HOUR]))
    )
    html = render_page([status], T0)
    assert "data-connector='orders'" in html and "retention 24 h" in html
    assert re.findall(r"<tr class='(\w+)' data-shard='(\w+)' data-lag-ms='(\d+)'>", html) == [
        ("ok", "s0", "500"),
        ("warning", "s1", str(13 * HOUR)),  # past half of the retention
    ]
    assert len(re.findall(r"<polyline data-shard='s0'", html)) == 1  # three batches: a line
    assert len(re.findall(r"<circle data-shard='s0'", html)) == 3
    assert len(re.findall(r"<circle data-shard='s1'", html)) == 1 and "<polyline data-shard='s1'" not in html
    # The warning threshold (12 h) is within the chart's range (up to 13 h): drawn.
    assert "class='warning-threshold'" in html


def test_a_connector_that_could_not_be_read_says_why_and_text_is_escaped() -> None:
    status = ConnectorStatus("<x>", "app", "s", "A.B.C", error="ResourceNotFoundException: <stream> not found")
    html = render_page([status], T0)
    assert "Could not read it: ResourceNotFoundException: &lt;stream&gt; not found" in html
    assert "<x>" not in html and "&lt;x&gt;" in html
    assert "<svg class='lag-chart'" not in html


def test_no_chart_before_any_batch_reported_a_lag() -> None:
    assert "No batch reported a lag yet" in chart([_shard("s0", [None])], 24)


def test_a_dynamodb_connector_is_a_row_per_table_and_a_row_per_stream_shard_with_its_level() -> None:
    def shard(shard_id: str, hours_ago: float) -> ShardStatus:
        return ShardStatus(shard_id, Checkpoint("77"), hours_ago * 3600, None, "b2", T0, 4, None)

    orders = TableStatus(
        "orders",
        "ANALYTICS.RAW.ORDERS",
        1,
        T0,
        SnapshotProgress(4, 4, 250, True),
        (shard("shardId-a", 1), shard("shardId-b", 12)),
        "b2",
        T0,
        4,
    )
    fresh = TableStatus("<new>", "ANALYTICS.RAW.NEW")
    status = DynamoDBConnectorStatus("tables", "tables-app", 20, (orders, fresh), ("keys: KEYS_ONLY",))
    kinesis = ConnectorStatus("orders", "orders-app", "orders", "A.B.C", 24, (_shard("s0", [1000]),))

    html = render_page([kinesis, status], T0)

    # Both sources on one page: the Kinesis connector's chart, the DynamoDB connector's tables.
    assert "data-connector='orders'" in html and "<svg class='lag-chart'" in html
    assert "<section class='connector dynamodb' data-connector='tables'>" in html
    assert re.findall(r"<tr class='(\w+)' data-table='([^']+)'>", html) == [
        ("warning", "orders"),
        ("ok", "&lt;new&gt;"),
    ]
    assert "<td class='snapshot'>complete (250 items)</td>" in html
    assert re.findall(r"<tr class='(\w+)' data-table='orders' data-shard='([\w-]+)'>", html) == [
        ("ok", "shardId-a"),
        ("warning", "shardId-b"),  # 12 h of a safe age of 20 h
    ]
    assert "Not synced: keys: KEYS_ONLY" in html and "<new>" not in html


def test_a_dynamodb_connector_that_could_not_be_read_says_why() -> None:
    status = DynamoDBConnectorStatus("tables", "app", 20, error="AccessDeniedException: <Scan>")
    assert "Could not read it: AccessDeniedException: &lt;Scan&gt;" in render_page([status], T0)
