"""`policy` grants cloudwatch:PutMetricData, limited to the connector's namespace, only with metrics.cloudwatch on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kinesis_snowflake.__main__ import main

KINESIS = {
    "connector_id": "orders",
    "source": {"stream_name": "orders", "region": "us-east-1", "application_name": "orders-app"},
    "destination": {"database": "A", "schema": "B", "table": "C"},
}
DYNAMODB = {
    "connector_id": "orders_ddb",
    "source": {"type": "dynamodb", "region": "eu-west-1", "application_name": "orders-ddb", "tables": ["orders"]},
    "destination": {"database": "A", "schema": "B"},
}


def policy(tmp_path: Path, capsys: pytest.CaptureFixture[str], connector: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "connector.yaml"
    path.write_text(yaml.safe_dump(connector), encoding="utf-8")
    assert main(["policy", str(path), "--account-id", "210987654321"]) == 0
    printed: dict[str, Any] = json.loads(capsys.readouterr().out)
    return printed


def cloudwatch_statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in document["Statement"] if any(a.startswith("cloudwatch:") for a in s["Action"])]


@pytest.mark.parametrize("connector", [KINESIS, DYNAMODB], ids=["kinesis", "dynamodb"])
def test_put_metric_data_only_when_cloudwatch_is_on_and_only_for_its_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], connector: dict[str, Any]
) -> None:
    off = policy(tmp_path, capsys, connector)
    assert cloudwatch_statements(off) == []

    on = policy(tmp_path, capsys, {**connector, "metrics": {"cloudwatch": True, "namespace": "Team/Orders"}})
    assert cloudwatch_statements(on) == [
        {
            "Sid": "CloudWatchMetrics",
            "Effect": "Allow",
            "Action": ["cloudwatch:PutMetricData"],
            "Resource": ["*"],
            "Condition": {"StringEquals": {"cloudwatch:namespace": "Team/Orders"}},
        }
    ]
    # Everything else is the policy without CloudWatch, unchanged.
    assert [s for s in on["Statement"] if s not in cloudwatch_statements(on)] == off["Statement"]


def test_the_default_namespace_is_the_one_granted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (statement,) = cloudwatch_statements(policy(tmp_path, capsys, {**KINESIS, "metrics": {"cloudwatch": True}}))
    assert statement["Condition"] == {"StringEquals": {"cloudwatch:namespace": "KinesisSnowflake"}}
