"""OpenLineage of the ingest and sync operators: dataset names, row counts, and no OpenLineage import up front.

The AWS account of the stream's namespace comes from STS, answered by the moto server."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from airflow_kinesis_snowflake.config import sync_target_to_dict
from airflow_kinesis_snowflake.core.batch import BatchOutcome
from airflow_kinesis_snowflake.core.dynamodb_sync import TableBatchFigures
from airflow_kinesis_snowflake.core.load.dynamodb_sink import MergeResult
from airflow_kinesis_snowflake.core.model import BatchResult, Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import KeyAttribute as DiscoveredKey
from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import SyncTarget
from airflow_kinesis_snowflake.lineage import (
    dynamodb_table_naming,
    ingest_lineage,
    kinesis_stream_naming,
    snowflake_namespace,
)
from airflow_kinesis_snowflake.operators.dynamodb import SyncDynamoDBTableOperator
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

REGION = "eu-west-1"
MOTO_ACCOUNT = "123456789012"  # the account moto's STS answers with


def _set_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, conn: dict[str, Any]) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return conn_id


@pytest.fixture
def snowflake_conn(monkeypatch: pytest.MonkeyPatch) -> str:
    return _set_conn(
        monkeypatch,
        "lineage_snowflake",
        {
            "conn_type": "snowflake",
            "login": "u",
            "password": "p",
            "extra": {"account": "myorg-acct", "database": "ANALYTICS"},
        },
    )


@pytest.fixture
def aws_conn(monkeypatch: pytest.MonkeyPatch, emulators: Emulators) -> str:
    conn = emulators.aws_connection()
    conn["extra"] = {**conn["extra"], "region_name": REGION}
    return _set_conn(monkeypatch, "lineage_aws", conn)


def _operator(aws_conn_id: str, snowflake_conn_id: str, **kwargs: Any) -> SparkKinesisIngestOperator:
    arguments: dict[str, Any] = {
        "stream_name": "orders",
        "application_name": "orders-to-snowflake",
        "database": "analytics",
        "schema": "raw",
        "table": "orders",
        "aws_conn_id": aws_conn_id,
        "snowflake_conn_id": snowflake_conn_id,
    }
    return SparkKinesisIngestOperator(task_id="ingest", **(arguments | kwargs))


def _summary(rows: int, dead_letters: int) -> BatchOutcome:
    result = BatchResult("b-1", "app/b-1/a", True, rows, dead_letters, (), datetime.now(UTC), {})
    return BatchOutcome("orders-to-snowflake", result)


def _row_count(dataset: Any) -> int | None:
    facet = dataset.outputFacets.get("outputStatistics")
    return None if facet is None else facet.rowCount


def test_stream_in_table_out_with_the_rows_of_the_batch(aws_conn: str, snowflake_conn: str) -> None:
    operator = _operator(aws_conn, snowflake_conn)
    operator._last_summary = _summary(rows=7, dead_letters=0)
    lineage = ingest_lineage(operator, None)

    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        (f"arn:aws:kinesis:{REGION}:{MOTO_ACCOUNT}", "stream/orders")
    ]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("snowflake://myorg-acct", "ANALYTICS.RAW.ORDERS")]
    assert _row_count(lineage.outputs[0]) == 7


def test_the_stream_dataset_is_the_stream_arn(aws_conn: str, snowflake_conn: str, emulators: Emulators) -> None:
    kinesis = boto3.client(
        "kinesis", region_name=REGION, endpoint_url=emulators.aws_endpoint,
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )  # fmt: skip
    kinesis.create_stream(StreamName="lineage-orders", ShardCount=1)
    arn = kinesis.describe_stream_summary(StreamName="lineage-orders")["StreamDescriptionSummary"]["StreamARN"]
    (stream,) = ingest_lineage(_operator(aws_conn, snowflake_conn, stream_name="lineage-orders"), None).inputs
    assert f"{stream.namespace}:{stream.name}" == arn


def test_dead_letters_add_the_parse_failure_table(aws_conn: str, snowflake_conn: str) -> None:
    operator = _operator(aws_conn, snowflake_conn)
    operator._last_summary = _summary(rows=5, dead_letters=2)
    lineage = ingest_lineage(operator, None)
    assert [(d.namespace, d.name, _row_count(d)) for d in lineage.outputs] == [
        ("snowflake://myorg-acct", "ANALYTICS.RAW.ORDERS", 5),
        ("snowflake://myorg-acct", "ANALYTICS.RAW.ORDERS_PARSE_FAILURES", 2),
    ]


def test_without_a_batch_the_table_has_no_statistics(aws_conn: str, snowflake_conn: str) -> None:
    operator = _operator(aws_conn, snowflake_conn)
    assert operator._last_summary is None  # nothing read, or failed before loading
    lineage = ingest_lineage(operator, None)
    assert [d.name for d in lineage.outputs] == ["ANALYTICS.RAW.ORDERS"]
    assert lineage.outputs[0].outputFacets == {}


def test_the_operator_region_wins_over_the_connection_and_picks_the_partition(
    aws_conn: str, snowflake_conn: str
) -> None:
    (stream,) = ingest_lineage(_operator(aws_conn, snowflake_conn, region_name="cn-north-1"), None).inputs
    assert stream.namespace == f"arn:aws-cn:kinesis:cn-north-1:{MOTO_ACCOUNT}"


def test_unreachable_sts_leaves_the_stream_out_and_says_why(
    monkeypatch: pytest.MonkeyPatch, snowflake_conn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens on the discard port: STS fails at once, as with no route to AWS.
    down = _set_conn(
        monkeypatch,
        "lineage_aws_down",
        {
            "conn_type": "aws",
            "login": "testing",
            "password": "testing",
            "extra": {"region_name": REGION, "endpoint_url": "http://127.0.0.1:9"},
        },
    )
    operator = _operator(down, snowflake_conn)
    operator._last_summary = _summary(rows=3, dead_letters=0)
    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.lineage"):
        lineage = ingest_lineage(operator, None)
    assert lineage.inputs == []
    assert [(d.name, _row_count(d)) for d in lineage.outputs] == [("ANALYTICS.RAW.ORDERS", 3)]
    assert "AWS account id of stream orders" in caplog.text


def test_a_snowflake_connection_without_account_leaves_the_table_out(
    monkeypatch: pytest.MonkeyPatch, aws_conn: str, caplog: pytest.LogCaptureFixture
) -> None:
    no_account = _set_conn(
        monkeypatch,
        "lineage_snowflake_no_account",
        {"conn_type": "snowflake", "login": "u", "password": "p", "extra": {"database": "ANALYTICS"}},
    )
    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.lineage"):
        lineage = ingest_lineage(_operator(aws_conn, no_account), None)
    assert lineage.outputs == []
    assert len(lineage.inputs) == 1
    assert "names no account" in caplog.text


@pytest.mark.parametrize(
    ("extra", "namespace"),
    [
        ({"account": "myorg-acct"}, "snowflake://myorg-acct"),
        ({"account": "MyOrg-MyAccount"}, "snowflake://myorg-myaccount"),
        ({"account": "xy12345", "region": "eu-central-1"}, "snowflake://xy12345.eu-central-1.aws"),
        ({"account": "xy12345.us-central1.gcp"}, "snowflake://xy12345.us-central1.gcp"),
        ({"account": "xy12345"}, "snowflake://xy12345.us-west-1.aws"),
    ],
)
def test_snowflake_namespace_matches_the_snowflake_provider(
    monkeypatch: pytest.MonkeyPatch, extra: dict[str, str], namespace: str
) -> None:
    conn_id = _set_conn(
        monkeypatch, "lineage_snowflake_ns", {"conn_type": "snowflake", "login": "u", "password": "p", "extra": extra}
    )
    from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

    provider_authority = KinesisSnowflakeHook(snowflake_conn_id=conn_id)._get_openlineage_authority(None)
    assert snowflake_namespace(extra["account"], extra.get("region")) == namespace
    assert namespace == f"snowflake://{provider_authority}"


def test_an_endpoint_host_does_not_replace_the_account(monkeypatch: pytest.MonkeyPatch, aws_conn: str) -> None:
    emulator = _set_conn(
        monkeypatch,
        "lineage_snowflake_emulator",
        {
            "conn_type": "snowflake",
            "login": "u",
            "password": "p",
            "extra": {"account": "myorg-acct", "host": "127.0.0.1", "port": 8080, "protocol": "http"},
        },
    )
    lineage = ingest_lineage(_operator(aws_conn, emulator), None)
    assert [d.namespace for d in lineage.outputs] == ["snowflake://myorg-acct"]


def test_kinesis_naming_joins_to_the_arn() -> None:
    namespace, name = kinesis_stream_naming("aws", "us-east-1", "111122223333", "clicks")
    assert f"{namespace}:{name}" == "arn:aws:kinesis:us-east-1:111122223333:stream/clicks"


def test_operator_method_returns_the_lineage(aws_conn: str, snowflake_conn: str) -> None:
    operator = _operator(aws_conn, snowflake_conn)
    if not hasattr(operator, "get_openlineage_facets_on_complete"):
        pytest.skip("SparkKinesisIngestOperator has no get_openlineage_facets_on_complete yet")
    operator._last_summary = _summary(rows=4, dead_letters=0)
    lineage = operator.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        (f"arn:aws:kinesis:{REGION}:{MOTO_ACCOUNT}", "stream/orders")
    ]
    assert [(d.namespace, d.name, _row_count(d)) for d in lineage.outputs] == [
        ("snowflake://myorg-acct", "ANALYTICS.RAW.ORDERS", 4)
    ]


def test_importing_the_operator_loads_no_openlineage() -> None:
    code = (
        "import sys, airflow_kinesis_snowflake.operators.ingest; "
        "print(any(m == 'openlineage' or m.startswith('openlineage.') for m in sys.modules), "
        "'airflow_kinesis_snowflake.lineage' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "False"]


# -- a DynamoDB connector's sync task --------------------------------------------------------------------------

TABLE_ARN = f"arn:aws:dynamodb:{REGION}:{MOTO_ACCOUNT}:table/orders"


def _sync_operator(snowflake_conn_id: str) -> SyncDynamoDBTableOperator:
    target = SyncTarget("orders", TABLE_ARN, TABLE_ARN + "/stream/2026-11-27T00:00:00.000",
                        (DiscoveredKey("pk", "HASH", "S"),), None, "ORDERS")  # fmt: skip
    options = {"application_name": "orders-ddb", "database": "ANALYTICS", "schema": "RAW", "layout": "packed",
               "deletes": "hard", "snapshot": "initial", "stream_start": None, "on_gap": "resnapshot",
               "max_checkpoint_age_hours": 20, "total_segments": 1, "read_fraction": None,
               "read_units_per_second": 100, "max_items_per_segment": 10, "max_snapshot_batches_per_run": 1,
               "max_records_per_shard": 10, "lease_duration_seconds": 60}  # fmt: skip
    return SyncDynamoDBTableOperator(
        task_id="sync_table", target=sync_target_to_dict(target), sync_options=options,
        snowflake_conn_id=snowflake_conn_id,
    )  # fmt: skip


def test_a_dynamodb_table_in_its_snowflake_table_out_with_the_changes_and_the_items_set_aside(
    snowflake_conn: str,
) -> None:
    operator = _sync_operator(snowflake_conn)
    operator._destination = Destination("ANALYTICS", "RAW", "ORDERS")
    operator._batches = [
        TableBatchFigures("b1", 10, 2, MergeResult(changes_loaded=8, items_set_aside=1)),
        TableBatchFigures("b2", 3, 1, MergeResult(changes_loaded=3)),
    ]

    lineage = operator.get_openlineage_facets_on_complete(None)

    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        (f"arn:aws:dynamodb:{REGION}:{MOTO_ACCOUNT}", "table/orders")
    ]
    assert [(d.namespace, d.name, _row_count(d)) for d in lineage.outputs] == [
        ("snowflake://myorg-acct", "ANALYTICS.RAW.ORDERS", 11),
        ("snowflake://myorg-acct", "ANALYTICS.RAW.ORDERS_DYNAMODB_FAILURES", 1),
    ]
    namespace, name = dynamodb_table_naming(TABLE_ARN)
    assert f"{namespace}:{name}" == TABLE_ARN


def test_a_dynamodb_sync_that_did_not_run_names_its_table_and_no_output(snowflake_conn: str) -> None:
    lineage = _sync_operator(snowflake_conn).get_openlineage_facets_on_complete(None)
    assert [d.name for d in lineage.inputs] == ["table/orders"] and lineage.outputs == []
