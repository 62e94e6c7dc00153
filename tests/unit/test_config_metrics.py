"""The ``metrics:`` section of a connector file: CloudWatch on request, with its namespace and dimensions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.config import ConnectorConfigError, load_any_connector_config
from airflow_kinesis_snowflake.core.metrics import DEFAULT_NAMESPACE, TAGS

KINESIS = {
    "connector_id": "orders",
    "source": {"stream_name": "orders", "region": "us-east-1", "application_name": "orders-app"},
    "destination": {"database": "A", "schema": "B", "table": "C"},
}
DYNAMODB = {
    "connector_id": "orders_ddb",
    "source": {"type": "dynamodb", "region": "us-east-1", "application_name": "orders-ddb", "tables": ["orders"]},
    "destination": {"database": "A", "schema": "B"},
}


def load(tmp_path: Path, base: dict[str, Any], metrics: dict[str, Any] | None) -> Any:
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump(base if metrics is None else {**base, "metrics": metrics}), encoding="utf-8")
    return load_any_connector_config(path)


@pytest.mark.parametrize("base", [KINESIS, DYNAMODB], ids=["kinesis", "dynamodb"])
def test_cloudwatch_is_off_unless_asked_and_then_has_the_default_namespace_and_every_tag(
    tmp_path: Path, base: dict[str, Any]
) -> None:
    assert load(tmp_path, base, None).metrics.cloudwatch_namespace is None
    on = load(tmp_path, base, {"cloudwatch": True}).metrics
    assert (on.cloudwatch_namespace, on.dimensions) == (DEFAULT_NAMESPACE, TAGS)
    chosen = load(tmp_path, base, {"cloudwatch": True, "namespace": "Team/Orders", "dimensions": ["table"]}).metrics
    assert (chosen.cloudwatch_namespace, chosen.dimensions) == ("Team/Orders", ("table",))


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        (
            {"cloudwatch": True, "namespace": "AWS/Kinesis"},
            "metrics.namespace: must be 1-255 letters, digits or . - _ / # : and spaces, with a non-space character, "
            "and may not start with 'AWS/' (reserved for AWS services), e.g. KinesisSnowflake (got 'AWS/Kinesis')",
        ),
        (
            {"namespace": "Team/Orders"},
            "metrics: namespace 'Team/Orders' has no effect while cloudwatch is false (only CloudWatch uses it); "
            "set metrics.cloudwatch: true, or remove metrics.namespace",
        ),
        (
            {"cloudwatch": False, "dimensions": ["table"]},
            "metrics: dimensions ['table'] has no effect while cloudwatch is false (only CloudWatch uses it); "
            "set metrics.cloudwatch: true, or remove metrics.dimensions",
        ),
        (
            {"cloudwatch": True, "dimensions": ["application", "stream"]},
            "metrics.dimensions: 'stream' is not a tag; the tags are application, source_type, source, table, shard "
            "(got ['application', 'stream'])",
        ),
        ({"cloudwatch": True, "dimension": ["table"]}, "metrics.dimension: unknown field; check its spelling"),
    ],
)
def test_a_mistake_names_the_file_the_field_the_value_and_the_fix(
    tmp_path: Path, metrics: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConnectorConfigError) as info:
        load(tmp_path, KINESIS, metrics)
    assert str(info.value).startswith(f"{tmp_path / 'orders.yaml'}: invalid connector configuration\n")
    assert expected in str(info.value)
