"""What a person reads of the Spark job in the task log, through a real spark-submit (``local[2]``): no
Spark INFO line, the job's warnings at WARNING, and a failed job's last error lines in its exception,
secrets masked."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchResult
from airflow_kinesis_snowflake.core.dynamodb_sync import sync_table
from airflow_kinesis_snowflake.core.load.dynamodb_rows import Layout
from airflow_kinesis_snowflake.core.load.dynamodb_sink import Deletes
from airflow_kinesis_snowflake.core.model import Destination, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import BatchPlan, ShardRange
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import SyncSettings
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook, package_core
from tests.conftest import create_stream, create_table, put_json, unique
from tests.emulators import Emulators
from tests.emulators.servers import REGION
from tests.emulators.spark_env import spark_env
from tests.integration.core.test_dynamodb_sync import client, make_source

pytestmark = pytest.mark.integration

# A line of Spark's log4j2 layout (%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m).
SPARK_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")


# The Snowflake connection's password in these tests: long enough for Airflow's secret masker.
PASSWORD = "logs-password-Qw83Zt"


def use_spark_and_a_snowflake_password(emulators: Emulators, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' Spark settings, and snowflake_default with :data:`PASSWORD` (fakesnow takes any)."""
    for name, value in spark_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SNOWFLAKE_DEFAULT", json.dumps({**emulators.snowflake_connection(), "password": PASSWORD})
    )


def kinesis_plan(emulators: Emulators, records: list[dict[str, object]]) -> BatchPlan:
    """A one-shard stream holding ``records`` and a plan reading it into a new table (ID, NAME)."""
    stream, app = unique("logs"), unique("logs-app")
    table = "LOGS_" + app.split("-")[-1].upper()
    kinesis = create_stream(emulators, stream, shards=1)
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0), NAME VARCHAR")
    put_json(kinesis, stream, records)
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    return BatchPlan(
        application_name=app,
        generation_id="g",
        stream_name=stream,
        region="us-east-1",
        destination=Destination("ANALYTICS", "RAW", table),
        cutoff=datetime.now(UTC),
        max_records_per_call=100,
        ranges=(ShardRange(shard, None, StartPosition(InitialPosition.TRIM_HORIZON), 1000),),
    )


def test_a_batch_logs_no_spark_info_line(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch, hook_log: Callable[[], list[tuple[str, str]]]
) -> None:
    use_spark_and_a_snowflake_password(aws_connections, monkeypatch)
    plan = kinesis_plan(aws_connections, [{"id": i, "name": f"n{i}"} for i in range(5)])
    hook = SparkJobSubmitHook(conn_id="spark_default")

    result = hook.run_batch(
        plan, kinesis=KinesisStreamHook(aws_conn_id="aws_default"), snowflake=KinesisSnowflakeHook()
    )

    assert result.rows_loaded == 5
    lines = [message for _, message in hook_log()]
    assert f"batch {plan.batch_id}: 5 rows loaded, 0 dead letters, 1 shards" in lines
    spark_info = [line for line in lines if (m := SPARK_LINE.match(line)) and m.group(1) in ("INFO", "DEBUG", "TRACE")]
    assert spark_info == []


def test_a_failed_job_raises_with_its_last_error_lines(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch, hook_log: Callable[[], list[tuple[str, str]]]
) -> None:
    use_spark_and_a_snowflake_password(aws_connections, monkeypatch)
    plan = kinesis_plan(aws_connections, [{"id": 1, "name": "n1"}])
    plan = replace(plan, destination=Destination("NO_SUCH_DATABASE", "RAW", plan.destination.table))
    hook = SparkJobSubmitHook(conn_id="spark_default")

    with pytest.raises(AirflowException) as raised:
        hook.run_batch(plan, kinesis=KinesisStreamHook(aws_conn_id="aws_default"), snowflake=KinesisSnowflakeHook())

    message = str(raised.value)
    assert message.startswith(
        f"The Spark job kinesis-to-snowflake-{plan.application_name} failed: spark-submit exited with code 1. "
        "Its last error lines, of the output in the task log:\n"
    ), message
    assert "Cannot execute" not in message
    last = message.splitlines()[-1].strip()
    # The driver's traceback ends with Snowflake's refusal: the database does not exist.
    assert re.match(r"^[\w.]*(ProgrammingError|Error): .*NO_SUCH_DATABASE", last, re.IGNORECASE), message
    assert PASSWORD not in message
    # In the task log, the traceback is at ERROR.
    errors = [message for level, message in hook_log() if level == "error"]
    assert errors[0] == "Traceback (most recent call last):"
    assert last in [line.strip() for line in errors]


PROBE = """
import json, os, sys

password = json.loads(os.environ["SNOWFLAKE_CONNECTION_JSON"])["password"]
# Unmarked, so read at INFO: the exception then quotes the last lines.
print(f"connecting with {password}")
sys.stdout.flush()
sys.exit(3)
"""


def test_a_failed_jobs_lines_are_masked_in_its_exception(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_spark_and_a_snowflake_password(aws_connections, monkeypatch)
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    hook = SparkJobSubmitHook(conn_id="spark_default")

    with pytest.raises(AirflowException) as raised:
        hook.submit_job(
            str(probe),
            application_args=[],
            aws=KinesisStreamHook(aws_conn_id="aws_default"),
            snowflake=KinesisSnowflakeHook(),
            name="masking-probe",
            py_files=str(package_core(tmp_path)),
        )

    message = str(raised.value)
    assert message.startswith("The Spark job masking-probe failed: spark-submit exited with code 3. Its last lines")
    assert "connecting with ***" in message
    assert PASSWORD not in message


def test_a_warning_of_the_job_reaches_the_task_log_at_warning(
    aws_connections: Emulators, monkeypatch: pytest.MonkeyPatch, hook_log: Callable[[], list[tuple[str, str]]]
) -> None:
    use_spark_and_a_snowflake_password(aws_connections, monkeypatch)
    workload, sync = make_source(aws_connections, Layout.UNPACKED, Deletes.HARD, SyncSettings(total_segments=1))
    workload.put(3, start=0)
    workload.put_item({**workload.item(10, 0), "ITEM": {"S": "no column can be named ITEM"}})
    spark = SparkJobSubmitHook(conn_id="spark_default")
    aws, snowflake = KinesisStreamHook(aws_conn_id="aws_default"), KinesisSnowflakeHook()
    results: list[TableBatchResult] = []

    def submit(plan: object) -> TableBatchResult:
        results.append(spark.run_table_batch(plan, aws=aws, snowflake=snowflake))  # type: ignore[arg-type]
        return results[-1]

    sync_table(
        sync,
        lease_dynamodb=client(aws_connections, "dynamodb"),
        source_dynamodb=None,
        streams=client(aws_connections, "dynamodbstreams"),
        connect_snowflake=aws_connections.snowflake_connect,
        owner=f"logs/spark/{os.getpid()}",
        now=lambda: datetime.now(UTC),
        submit=submit,
        region=REGION,
    )

    # The item's put, read by the snapshot and from the stream.
    assert results and results[0].merge is not None and results[0].merge.items_set_aside == 2
    warnings = [message for level, message in hook_log() if level == "warning"]
    assert "2 item change(s) set aside: an attribute cannot be a column" in warnings
    infos = [message for level, message in hook_log() if level == "info"]
    assert not [line for line in infos if "set aside" in line]
