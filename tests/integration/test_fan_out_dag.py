"""An ENHANCED_FAN_OUT connector end to end: the provisioning DAG's step registers its consumer, the
ingest DAG reads through it with SubscribeToShard (spark-submit, moto with the fan-out extension,
fakesnow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.config import load_connector_config
from airflow_kinesis_snowflake.dags import build_provision_dag
from airflow_kinesis_snowflake.operators.fan_out import RegisterStreamConsumerOperator
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.airflow_env import run_dag
from tests.integration.test_ingest_dag import checkpoints, shard_tips, write_connector

pytestmark = pytest.mark.integration


def faults(stream: str, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """GetRecords on the stream fails the run, were it used; subscriptions end every 2 events of 7 records."""
    return [
        {"operation": "GetRecords", "stream": stream, "error": "AccessDeniedException", "times": 1_000_000},
        {"operation": "SubscribeToShard", "stream": stream, "events_per_subscription": 2, "records_per_event": 7},
        *extra,
    ]


def test_two_runs_read_through_the_consumer_exactly_once(
    aws_connections: Emulators, dag_env: dict[str, str], tmp_path: Path
) -> None:
    emulators = aws_connections
    stream, app = unique("efo"), unique("efo-app")
    table = "EFO_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=2)
    connector = {
        "connector_id": app.replace("-", "_"),
        "source": {
            "stream_name": stream,
            "region": "us-east-1",
            "application_name": app,
            "consumer_type": "ENHANCED_FAN_OUT",
            "initial_position": "TRIM_HORIZON",
        },
        "destination": {"database": "ANALYTICS", "schema": "RAW", "table": table},
        "batch": {"schedule": None, "retry_delay_seconds": 0},
    }
    dag_file = write_connector(tmp_path / "dags", connector)
    ingest = f"kinesis_snowflake_{connector['connector_id']}_ingest"
    fqn = f"ANALYTICS.RAW.{table}"

    # The provisioning DAG's consumer step (its IAM check cannot simulate the emulator's root user).
    config = load_connector_config(dag_file.parent / "connectors" / f"{connector['connector_id']}.yaml")
    register = build_provision_dag(config).get_task("register_fan_out_consumer")
    assert isinstance(register, RegisterStreamConsumerOperator)
    register.execute(context={})
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    stream_arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    consumers = kinesis.list_stream_consumers(StreamARN=stream_arn)["Consumers"]
    assert [(c["ConsumerName"], c["ConsumerStatus"]) for c in consumers] == [(app, "ACTIVE")]

    put_json(kinesis, stream, [{"id": i} for i in range(120)])
    emulators.inject_kinesis_faults(faults(stream))
    try:
        proc = run_dag(ingest, dag_env, dag_file=dag_file, log_path=tmp_path / "run1.log")
        served = emulators.served_kinesis_faults()
    finally:
        emulators.inject_kinesis_faults([])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert served == []  # no GetRecords call
    assert [r[0] for r in query(emulators, f"SELECT ID FROM {fqn} ORDER BY ID")] == list(range(120))
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)

    put_json(kinesis, stream, [{"id": i} for i in range(120, 200)])
    # The second run also finds a shard held by another subscription once, and waits for it.
    in_use = {"operation": "SubscribeToShard", "stream": stream, "error": "ResourceInUseException", "times": 1}
    emulators.inject_kinesis_faults(faults(stream, in_use))
    try:
        proc = run_dag(ingest, dag_env, dag_file=dag_file, log_path=tmp_path / "run2.log")
        served = emulators.served_kinesis_faults()
    finally:
        emulators.inject_kinesis_faults([])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert served == [in_use]  # SubscribeToShard was called, GetRecords never
    assert [r[0] for r in query(emulators, f"SELECT ID FROM {fqn} ORDER BY ID")] == list(range(200))
    assert checkpoints(emulators, app) == shard_tips(kinesis, stream)
    assert "through fan-out consumer arn:aws:kinesis:" in proc.stdout + proc.stderr
