"""The Spark connection type of this provider (``kinesis_snowflake_spark``): its host is the master, and
``test_connection`` says, without submitting anything, whether the job could be submitted with it.

Airflow's own path is used: ``Connection.test_connection()`` finds the hook class of the connection
type through the provider's metadata, as the UI's Test button does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from airflow.models.connection import Connection

from airflow_kinesis_snowflake.get_provider_info import SPARK_CONN_TYPE
from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook


def connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, host: str, **extra: Any) -> Connection:
    """A connection of the provider's Spark type, as the UI would save it (and as Airflow reads it by id)."""
    fields = {"conn_type": SPARK_CONN_TYPE, "host": host, "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
    return Connection(conn_id=conn_id, conn_type=SPARK_CONN_TYPE, host=host, extra=json.dumps(extra))


def test_the_host_of_a_connection_of_this_type_is_the_master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_TYPED",
        json.dumps({"conn_type": SPARK_CONN_TYPE, "host": "spark://spark-master", "port": 7077}),
    )
    hook = SparkJobSubmitHook(conn_id="spark_typed")
    # Not kinesis_snowflake_spark://spark://spark-master: the Spark provider reads only a "spark"
    # connection's host as a master URL.
    assert hook.master == "spark://spark-master:7077"
    connection(monkeypatch, "spark_local", "local[2]", queue="ingest", **{"deploy-mode": "client"})
    local = SparkJobSubmitHook(conn_id="spark_local")
    assert (local.master, local.deploy_mode, local._connection["queue"]) == ("local[2]", "client", "ingest")


def test_the_connection_test_passes_where_spark_submit_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = connection(monkeypatch, "spark_ok", "local[2]")
    ok, message = conn.test_connection()
    assert ok, message
    assert message.startswith("Spark connection 'spark_ok': master local[2], client deploy mode, ")
    assert message.endswith("spark-submit")

    identity = connection(
        monkeypatch, "spark_identity", "local[2]", driver_identity=True, snowflake_connection_ref="kinesis/sf"
    )
    ok, message = identity.test_connection()
    assert ok, message
    assert message.endswith(", driver identity, Snowflake from kinesis/sf")


@pytest.mark.parametrize(
    ("host", "extra", "expected"),
    [
        ("local[2]", {"driver_identity": True}, "extra driver_identity needs snowflake_connection_ref"),
        (
            "local[2]",
            {"deploy-mode": "cluster", "driver_identity": True, "snowflake_connection_ref": "kinesis/sf"},
            "which Spark refuses with a local master",
        ),
        ("yarn", {"deploy-mode": "cluster"}, '"driver_identity": true'),
        ("local[2]", {"spark-binary": "spark3-submit"}, "spark3-submit is not on the PATH"),
    ],
    ids=["identity without its secret", "cluster mode on a local master", "cluster mode without identity", "binary"],
)
def test_the_connection_test_fails_naming_the_connection_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, host: str, extra: dict[str, Any], expected: str
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # spark-submit is then found next to the interpreter only
    conn = connection(monkeypatch, "spark_bad", host, **extra)
    ok, message = conn.test_connection()
    assert not ok
    assert "'spark_bad'" in message and expected in message, message
