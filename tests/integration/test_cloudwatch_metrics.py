"""``metrics.cloudwatch``: a real batch of each source publishes its metrics to CloudWatch (moto's, in the
project's moto server), read back with ``list_metrics`` and ``get_metric_data``; a CloudWatch that cannot
be reached fails no batch."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.config import DynamoDBConnectorConfig, load_any_connector_config
from airflow_kinesis_snowflake.dags import sync_dag_id
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.emulators.statsd import statsd_receiver
from tests.integration.core.sources.dynamodb.test_discovery import create
from tests.integration.test_ingest_dag import write_connector

pytestmark = pytest.mark.integration

BATCH_TAGS = ("application", "source_type", "source", "table")


def published(emulators: Emulators, namespace: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every metric of ``namespace``: (name, its dimensions in order) -> the sum of its data points."""
    cloudwatch = emulators.boto3_client("cloudwatch")
    metrics = [
        m for page in cloudwatch.get_paginator("list_metrics").paginate(Namespace=namespace) for m in page["Metrics"]
    ]
    if not metrics:
        return {}
    now = datetime.now(UTC)
    queries = [
        {"Id": f"m{n}", "MetricStat": {"Metric": metric, "Period": 60, "Stat": "Sum"}, "ReturnData": True}
        for n, metric in enumerate(metrics)
    ]
    results = cloudwatch.get_metric_data(
        MetricDataQueries=queries, StartTime=now - timedelta(hours=1), EndTime=now + timedelta(hours=1)
    )["MetricDataResults"]
    sums = {result["Id"]: sum(result["Values"]) for result in results}
    return {
        (metric["MetricName"], tuple((d["Name"], d["Value"]) for d in metric["Dimensions"])): sums[f"m{n}"]
        for n, metric in enumerate(metrics)
    }


def test_a_kinesis_batch_publishes_its_metrics_with_their_dimensions(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    stream, app, namespace = unique("cw-orders"), unique("cw-app"), unique("Orders/Metrics")
    table = "CW_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=2)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {"stream_name": stream, "region": "us-east-1", "application_name": app},
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retry_delay_seconds": 0},
        "metrics": {"cloudwatch": True, "namespace": namespace},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    put_json(kinesis, stream, [{"id": n} for n in range(25)])

    proc = run_dag(f"kinesis_snowflake_{connector['connector_id']}_ingest", dag_env, dag_file=dag_file)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert len(query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table}")) == 25

    metrics = published(emulators, namespace)
    fqn = f"ANALYTICS.RAW.{table}"
    tags = (("application", app), ("source_type", "kinesis"), ("source", stream), ("table", fqn))
    batch = {name: value for (name, dimensions), value in metrics.items() if dimensions == tags}
    assert batch == {
        "batch.records": 25.0,
        "batch.rows_loaded": 25.0,
        "batch.dead_letters": 0.0,
        "batch.bytes": float(sum(len(json.dumps({"id": n}).encode()) for n in range(25))),
        "batch.shards": 2.0,
        "batch.millis_behind_latest": 0.0,
    }
    # Per shard, the shard is a dimension too.
    shard_ids = sorted(s["ShardId"] for s in kinesis.list_shards(StreamName=stream)["Shards"])
    per_shard = sorted((name, dimensions[-1][1]) for name, dimensions in metrics if dimensions != tags)
    assert per_shard == sorted(
        (name, shard_id)
        for shard_id in shard_ids
        for name in ("shard.checkpoint_age_seconds", "shard.millis_behind_latest")
    )
    assert all(dimensions == (*tags, ("shard", dimensions[-1][1])) for _, dimensions in metrics if dimensions != tags)


def _dynamodb_connector(
    emulators: Emulators, tmp_path: Path, metrics: dict[str, Any]
) -> tuple[Path, str, str, str, str]:
    """A DynamoDB connector syncing one new table of 7 items (in the task, no Spark): its DAG file, sync DAG
    id, application, DynamoDB table and Snowflake table."""
    dynamodb = emulators.boto3_client("dynamodb")
    prefix = unique("cwddb")
    source = f"{prefix}-orders"
    create(dynamodb, source)
    for n in range(7):
        dynamodb.put_item(TableName=source, Item={"pk": {"S": f"o{n}"}})
    with emulators.snowflake_connect() as conn:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    connector = {
        "connector_id": prefix.replace("-", "_"),
        "source": {
            "type": "dynamodb",
            "region": "us-east-1",
            "application_name": f"{prefix}-app",
            "tables": [source],
            "layout": "packed",
            "engine": "worker",
            "snapshot_total_segments": 2,
            "snapshot_read_units_per_second": 10000,
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW"},
        "batch": {"schedule": None, "retries": 0},
        "metrics": metrics,
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    config = load_any_connector_config(dag_file.parent / "connectors" / f"{connector['connector_id']}.yaml")
    assert isinstance(config, DynamoDBConnectorConfig)
    dag_id = sync_dag_id(config)
    return dag_file, dag_id, f"{prefix}-app", source, source.replace("-", "_").upper()


def test_a_dynamodb_batch_publishes_the_same_names_with_its_dimensions(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    namespace = unique("Orders/Metrics")
    dag_file, dag_id, app, _, table = _dynamodb_connector(
        emulators, tmp_path, {"cloudwatch": True, "namespace": namespace, "dimensions": ["table", "source_type"]}
    )

    with statsd_receiver() as statsd:
        proc = run_dag(dag_id, {**dag_env, **statsd.airflow_env(tags=True)}, dag_file=dag_file)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert len(query(emulators, f"SELECT ITEM FROM ANALYTICS.RAW.{table}")) == 7

    # Only the dimensions asked for, in their order; the names are the Kinesis batch's, without bytes and lag ...
    dimensions = (("table", f"ANALYTICS.RAW.{table}"), ("source_type", "dynamodb"))
    metrics = published(emulators, namespace)
    assert {dims for _, dims in metrics} == {dimensions}
    figures = {name: value for (name, _), value in metrics.items()}
    assert set(figures) == {"batch.records", "batch.rows_loaded", "batch.dead_letters", "batch.shards"}
    # ... and the counters add up to what Airflow's metrics backend got of the run's batches.
    sent: dict[str, float] = {}
    for name, tags, value, _ in statsd.tagged("airflow.kinesis_snowflake."):
        if tags["application"] == app:
            key = name.removeprefix("airflow.kinesis_snowflake.")
            sent[key] = sent.get(key, 0.0) + value
    counters = ("batch.records", "batch.rows_loaded", "batch.dead_letters")
    assert {name: figures[name] for name in counters} == {name: sent[name] for name in counters}
    assert figures["batch.rows_loaded"] >= 7 and figures["batch.dead_letters"] == 0


def test_a_cloudwatch_that_cannot_be_reached_fails_no_batch(
    emulators: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    namespace = unique("Orders/Metrics")
    dag_file, dag_id, _, _, table = _dynamodb_connector(
        emulators, tmp_path, {"cloudwatch": True, "namespace": namespace}
    )
    # The AWS connection sends CloudWatch's requests to a port nothing listens on; every other service works.
    connection = emulators.aws_connection()
    connection["extra"]["service_config"]["cloudwatch"] = {"endpoint_url": "http://127.0.0.1:9"}
    env = {**dag_env, "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(connection)}

    proc = run_dag(dag_id, env, dag_file=dag_file, log_path=tmp_path / "run.log")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert len(query(emulators, f"SELECT ITEM FROM ANALYTICS.RAW.{table}")) == 7
    # The task logged why, at WARNING, and succeeded.
    warning = rf"\[warning *\] Could not publish 4 metric point\(s\) to CloudWatch namespace '{re.escape(namespace)}'"
    assert re.search(warning, output), output[-4000:]
    assert published(emulators, namespace) == {}
