"""Deferrable waits on a managed Spark platform (``spark.deferrable``): the ingest and sync tasks submit
their batch's job run to the emulated EMR Serverless (``tests/emulators/emr_serverless.py``: a real
local spark-submit per run), defer, and resume once the trigger saw the run end, as Airflow's
triggerer runs it: ``run()`` driven here, its kwargs through Airflow's serde in between.

The Kinesis test is the crash story of a deferred task in one job run: the triggerer restarts (the
trigger is dropped mid-wait and built again from what Airflow stored), the task is retried while the
run goes on (the retry finds the run through the lease table and waits for it instead of starting
another), and the run's records are loaded once.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
from airflow.sdk import Context
from airflow.sdk.exceptions import TaskDeferred
from airflow.triggers.base import TriggerEvent

from airflow_kinesis_snowflake.config import parse_dynamodb_connector_config
from airflow_kinesis_snowflake.core.engine.detached import DetachedRun
from airflow_kinesis_snowflake.core.engine.leases import LeaseHold
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.operators.dynamodb import SyncDynamoDBTableOperator
from airflow_kinesis_snowflake.operators.dynamodb_discovery import DiscoverDynamoDBTablesOperator
from airflow_kinesis_snowflake.operators.ingest import SparkKinesisIngestOperator
from airflow_kinesis_snowflake.operators.lease_table import CreateLeaseTableOperator
from airflow_kinesis_snowflake.triggers.spark_job import SparkJobRunTrigger
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.servers import AWS_KEY, REGION
from tests.integration.core.test_dynamodb_sync import Workload, destination_rows, source_items
from tests.integration.core.test_dynamodb_sync import create_table as create_dynamodb_table
from tests.integration.hooks.test_emr_serverless import SPARK_CONN, EmrServerless, emr_serverless, spark_connection
from tests.integration.triggers.test_kinesis import first_event
from tests.integration.triggers.test_spark_job import rebuilt

pytestmark = pytest.mark.integration


@pytest.fixture
def emr(aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch) -> EmrServerless:
    platform = emr_serverless(aws_connections)
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", spark_connection(platform.secret_id))
    return platform


def context(task_id: str, try_number: int, started: datetime) -> Context:
    """What the tasks read of Airflow's context: their try (the lease owner) and the DAG run's start (the cut-off)."""
    ti = SimpleNamespace(dag_id="deferred", task_id=task_id, run_id="manual__1", map_index=-1, try_number=try_number)
    return cast(Context, {"ti": ti, "dag_run": SimpleNamespace(start_date=started)})


def deferred(execute: Any) -> SparkJobRunTrigger:
    """The trigger ``execute()`` deferred to, resuming in ``execute_complete``."""
    with pytest.raises(TaskDeferred) as raised:
        execute()
    assert raised.value.method_name == "execute_complete" and not raised.value.kwargs
    trigger = raised.value.trigger
    assert isinstance(trigger, SparkJobRunTrigger)
    return trigger


def drop_after_a_renewal(trigger: SparkJobRunTrigger, table: LeaseTable) -> None:
    """Run the trigger as the triggerer does until it renewed the batch's leases once, then drop it (the
    triggerer stopped): it yields no event."""
    hold = LeaseHold.from_dict(trigger.leases or {})
    counters = {unit: table.leases()[unit].lease_counter for unit in hold.units}

    async def wait_then_drop() -> None:
        events: AsyncGenerator[TriggerEvent] = trigger.run()  # type: ignore[assignment]
        waiting = asyncio.ensure_future(anext(events))
        while not waiting.done():
            await asyncio.sleep(0.1)
            renewed = {unit: table.leases()[unit].lease_counter for unit in hold.units}
            if all(renewed[unit] > counters[unit] for unit in hold.units):
                break
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await events.aclose()

    asyncio.run(asyncio.wait_for(wait_then_drop(), 120))


def test_a_deferred_ingest_task_survives_a_triggerer_restart_and_a_retry_and_loads_each_record_once(
    emr: EmrServerless, capfd: pytest.CaptureFixture[str]
) -> None:
    emulators = emr.emulators
    stream, app = unique("deferred"), unique("deferred-app")
    table = "DEFERRED_" + app.split("-")[-1].upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    put_json(create_stream(emulators, stream, 2), stream, [{"id": i} for i in range(20)])
    CreateLeaseTableOperator(task_id="lease_table", application_name=app, stream_name=stream).execute(context={})
    leases = LeaseTable(emulators.boto3_client("dynamodb"), app)
    started = datetime.now(UTC)

    def ingest() -> SparkKinesisIngestOperator:
        return SparkKinesisIngestOperator(
            task_id="ingest",
            stream_name=stream,
            application_name=app,
            database="ANALYTICS",
            schema="RAW",
            table=table,
            region_name=REGION,
            spark_conn_id=SPARK_CONN,
            spark_platform=emr.platform,
            deferrable=True,
        )

    # Try 1 submits the batch's job run and defers, its leases held for the run.
    first = deferred(lambda: ingest().execute(context("ingest", 1, started)))
    (run,) = emr.job_runs()
    assert first.job_run_id == run["jobRunId"]
    hold = LeaseHold.from_dict(first.leases or {})
    assert hold.owner.startswith("deferred/ingest/manual__1/-1/try-1/")
    assert {leases.leases()[unit].lease_owner for unit in hold.units} == {hold.owner} and len(hold.units) == 2
    batch = DetachedRun.from_dict(first.batch["run"])
    assert leases.recorded_run(batch.batch_id) == batch.to_dict()
    # Nothing secret in what Airflow stores for the trigger and the task: ids, names, figures.
    stored = json.dumps(first.serialize()[1])
    assert "snow" not in stored.replace("snowflake", "") and AWS_KEY not in stored
    assert emr.secret_id not in stored and "SNOWFLAKE_CONNECTION_JSON" not in stored

    # A wait that runs out yields a timeout event, the run still going.
    assert first_event(SparkJobRunTrigger(**{**first.serialize()[1], "timeout": 0})).payload["status"] == "timeout"
    # The triggerer restarts: the trigger is dropped mid-wait, after it renewed the leases.
    drop_after_a_renewal(rebuilt(first), leases)

    # Try 2 (the task was retried) takes the leases over, plans the same batch, finds the run in the
    # lease table and waits for it: no second job run.
    capfd.readouterr()
    second = deferred(lambda: ingest().execute(context("ingest", 2, started)))
    assert second.job_run_id == run["jobRunId"] and len(emr.job_runs()) == 1
    assert DetachedRun.from_dict(second.batch["run"]) == batch
    assert f"job run {run['jobRunId']} of an earlier try is" in "".join(capfd.readouterr())
    assert LeaseHold.from_dict(second.leases or {}).owner.startswith("deferred/ingest/manual__1/-1/try-2/")

    # A triggerer built from what Airflow stored waits for the run to end, and the task resumes.
    event = first_event(rebuilt(second), within=600)
    assert (event.payload["status"], event.payload["state"]) == ("success", "SUCCESS")
    summary = ingest().execute_complete(context("ingest", 2, started), json.loads(json.dumps(event.payload)))

    assert summary["rows_loaded"] == 20 and summary["batch_id"] == batch.batch_id
    assert [r[0] for r in query(emulators, f"SELECT ID FROM ANALYTICS.RAW.{table} ORDER BY ID")] == list(range(20))
    after = leases.leases()
    assert all(lease.checkpoint for lease in after.values()) and {lease.lease_owner for lease in after.values()} == {
        None
    }
    # The try that resumed removed its heartbeat item; the dead try's ends with its time to live.
    assert leases.recorded_run(batch.batch_id) is None and set(leases.workers()) == {hold.owner}
    (ended,) = emr.job_runs()
    assert ended["state"] == "SUCCESS"


def test_a_deferred_sync_task_syncs_a_dynamodb_table_through_one_job_run(emr: EmrServerless) -> None:
    emulators = emr.emulators
    dynamodb = emulators.boto3_client("dynamodb")
    name = unique("deferred-orders")
    create_dynamodb_table(dynamodb, name)
    workload = Workload(emulators, name, dynamodb, random.Random(7))
    workload.put(8, start=0)
    with emulators.snowflake_connect() as conn:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    platform = {k: v for k, v in emr.platform.items() if k != "platform"}
    config = parse_dynamodb_connector_config(
        {
            "connector_id": "deferred",
            "source": {
                "type": "dynamodb",
                "region": REGION,
                "application_name": unique("deferred-ddb-app"),
                "tables": [name],
                "layout": "packed",
                "snapshot_total_segments": 1,
                "snapshot_read_units_per_second": 1000,  # an on-demand table
            },
            "destination": {"database": "ANALYTICS", "schema": "RAW"},
            "spark": {"platform": "emr_serverless", "emr_serverless": platform, "deferrable": True},
        }
    )
    (target,) = DiscoverDynamoDBTablesOperator(task_id="discover_tables", tables=config.source.tables).execute({})

    def sync() -> SyncDynamoDBTableOperator:
        return SyncDynamoDBTableOperator(
            task_id="sync_table",
            target=target,
            sync_options=config.sync_options(),
            region_name=REGION,
            spark_conn_id=SPARK_CONN,
            spark_platform=config.spark.platform_arguments(),
            deferrable=config.spark.deferrable,
        )

    started = datetime.now(UTC)
    trigger = deferred(lambda: sync().execute(context("sync_table", 1, started)))
    event = first_event(rebuilt(trigger), within=600)
    assert event.payload["status"] == "success", event.payload
    figures = sync().execute_complete(context("sync_table", 1, started), json.loads(json.dumps(event.payload)))

    assert (figures["table"], figures["batches"], figures["snapshots_completed"]) == (name, 1, [0])
    actual, deleted = destination_rows(emulators, sync().table_sync())
    assert actual == source_items(workload) and not deleted
    (run,) = emr.job_runs()
    assert run["state"] == "SUCCESS" and run["jobDriver"]["sparkSubmit"]["entryPoint"].endswith(
        "/dynamodb_to_snowflake.py"
    )
    owners = {lease.lease_owner for lease in LeaseTable(dynamodb, config.source.application_name).leases().values()}
    assert owners == {None}
