"""SparkJobSubmitHook reads the batch's outcome from Snowflake, where the job recorded it."""

from __future__ import annotations

import re
from contextlib import closing
from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.core.load.snowflake_sink import OutcomeKey, SnowflakeSink
from airflow_kinesis_snowflake.core.model import BatchResult, Destination, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import BatchPlan, ShardRange
from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook
from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook
from tests.conftest import create_table, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def test_the_outcome_is_read_by_batch_and_attempt_and_a_missing_one_says_what_the_next_run_does(
    aws_connections: Emulators,
) -> None:
    table = unique("HOOK_OUTCOME").replace("-", "_").upper()
    create_table(aws_connections, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    plan = BatchPlan(
        application_name="hook-outcome",
        generation_id="g",
        stream_name="s",
        region="us-east-1",
        destination=Destination("ANALYTICS", "RAW", table),
        cutoff=datetime(2026, 1, 31, 12, tzinfo=UTC),
        max_records_per_call=100,
        ranges=(ShardRange("shard-1", None, StartPosition(InitialPosition.TRIM_HORIZON), 100),),
    )
    recorded = BatchResult(plan.batch_id, "hook-outcome/b/s1", True, 5, 1, (), datetime.now(UTC), {})
    with closing(aws_connections.snowflake_connect()) as conn:
        sink = SnowflakeSink(conn, plan.destination)
        sink.ensure_support_objects()
        sink.record_outcome(OutcomeKey("hook-outcome", "g", plan.batch_id, "attempt-1"), recorded)
    hook, snowflake = SparkJobSubmitHook(conn_id="spark_default"), KinesisSnowflakeHook()

    assert (
        hook.read_outcome(plan.destination, OutcomeKey("hook-outcome", "g", plan.batch_id, "attempt-1"), snowflake)
        == recorded
    )
    # A retry of the batch whose job exited successfully without recording its outcome.
    with pytest.raises(AirflowException) as raised:
        hook.read_outcome(plan.destination, OutcomeKey("hook-outcome", "g", plan.batch_id, "attempt-2"), snowflake)

    message = str(raised.value)
    assert f"the Spark job of batch {plan.batch_id} (attempt attempt-2) exited successfully" in message
    assert re.search(r'recorded no outcome in "ANALYTICS"\."RAW"\."KINESIS_INGEST_BATCH_OUTCOMES"', message)
    assert "nothing is lost or loaded twice: the next run fast-forwards each shard's checkpoint" in message
