"""The metric catalogue, and the PutMetricData requests that publish a batch's points to CloudWatch."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.metrics import (
    METRICS,
    POINTS_PER_REQUEST,
    SHARD_TAGS,
    TAGS,
    BatchFigures,
    MetricPoint,
    check_dimensions,
    check_namespace,
    cloudwatch_requests,
    metric_tags,
)
from tests.emulators.servers import REPO_ROOT

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
TAGGED = metric_tags(application="orders-app", source_type="kinesis", source="orders", table="A.B.ORDERS")


def _docs_table() -> dict[str, list[str]]:
    """The rows of docs/operations.md's metric table: name -> [type, unit, tags, meaning]."""
    text = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if match := re.match(r"^\| `(kinesis_snowflake\.[a-z_.]+)` \|(.*)\|$", line):
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split("|")]
    return rows


def test_every_metric_is_documented_with_its_type_unit_and_tags() -> None:
    rows = _docs_table()
    assert sorted(rows) == sorted(METRICS)
    for name, spec in METRICS.items():
        kind, unit, tags, meaning = rows[name]
        assert (kind, unit) == (spec.kind.value, spec.unit), name
        assert re.findall(r"`([a-z_]+)`", tags) == list(spec.tags), name
        assert meaning.startswith("Kinesis only") == (spec.sources == ("kinesis",)), name


def test_names_are_static() -> None:
    # No placeholder, and every name is one StatsD and OpenTelemetry accept as it is.
    assert all(re.fullmatch(r"kinesis_snowflake(\.[a-z_]+)+", name) for name in METRICS)
    figures = BatchFigures(records=3, rows_loaded=2, dead_letters=1, bytes=10, shards=2, millis_behind_latest=5)
    one = figures.points(TAGGED)
    other = figures.points(metric_tags(application="x.y", source_type="kinesis", source="s", table="T"))
    assert [p.name for p in one] == [p.name for p in other] and all(p.name in METRICS for p in one)


def test_a_point_becomes_a_datum_with_its_tags_as_dimensions() -> None:
    point = MetricPoint(
        "kinesis_snowflake.shard.millis_behind_latest", 1500, {**TAGGED, "shard": "shardId-000000000001"}
    )
    (request,) = cloudwatch_requests([point], namespace="Team/Orders", dimensions=TAGS, timestamp=AT)
    assert request == {
        "Namespace": "Team/Orders",
        "MetricData": [
            {
                "MetricName": "shard.millis_behind_latest",
                "Dimensions": [
                    {"Name": "application", "Value": "orders-app"},
                    {"Name": "source_type", "Value": "kinesis"},
                    {"Name": "source", "Value": "orders"},
                    {"Name": "table", "Value": "A.B.ORDERS"},
                    {"Name": "shard", "Value": "shardId-000000000001"},
                ],
                "Timestamp": AT,
                "Value": 1500.0,
                "Unit": "Milliseconds",
            }
        ],
    }


def test_only_the_chosen_dimensions_in_their_order_and_a_batch_point_has_no_shard() -> None:
    points = BatchFigures(3, 2, 1, 10, 2, None).points(TAGGED)
    (request,) = cloudwatch_requests(points, namespace="N", dimensions=("table", "shard", "application"), timestamp=AT)
    assert {tuple(d["Name"] for d in datum["Dimensions"]) for datum in request["MetricData"]} == {
        ("table", "application")
    }
    assert [(d["MetricName"], d["Value"], d["Unit"]) for d in request["MetricData"]] == [
        ("batch.records", 3.0, "Count"),
        ("batch.rows_loaded", 2.0, "Count"),
        ("batch.dead_letters", 1.0, "Count"),
        ("batch.bytes", 10.0, "Bytes"),
        ("batch.shards", 2.0, "Count"),
    ]


def test_many_points_are_split_into_requests_put_metric_data_takes() -> None:
    points = [
        MetricPoint("kinesis_snowflake.shard.checkpoint_age_seconds", n, {**TAGGED, "shard": f"shardId-{n}"})
        for n in range(POINTS_PER_REQUEST * 2 + 1)
    ]
    requests = list(cloudwatch_requests(points, namespace="N", dimensions=SHARD_TAGS, timestamp=AT))
    assert [len(r["MetricData"]) for r in requests] == [POINTS_PER_REQUEST, POINTS_PER_REQUEST, 1]
    assert [d["Value"] for r in requests for d in r["MetricData"]] == [float(n) for n in range(len(points))]


@pytest.mark.parametrize("namespace", ["KinesisSnowflake", "Team/Orders", "a.b-c_d#e:f g"])
def test_namespaces_cloudwatch_takes(namespace: str) -> None:
    assert check_namespace(namespace) == namespace


@pytest.mark.parametrize("namespace", ["", " ", "AWS/Kinesis", "aws/kinesis", "orders!", "x" * 256])
def test_namespaces_cloudwatch_refuses(namespace: str) -> None:
    with pytest.raises(ValueError, match="may not start with 'AWS/'"):
        check_namespace(namespace)


def test_dimensions_are_tags_each_named_once() -> None:
    assert check_dimensions(["table", "application"]) == ("table", "application")
    with pytest.raises(ValueError, match="'stream' is not a tag; the tags are application, source_type"):
        check_dimensions(["application", "stream"])
    with pytest.raises(ValueError, match="names a tag twice"):
        check_dimensions(["table", "table"])
