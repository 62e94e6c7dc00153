"""The new-records sensor, in the worker and deferred, against the moto server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_kinesis_snowflake.compat import AirflowSkipException, TaskDeferred
from airflow_kinesis_snowflake.sensors.kinesis import KinesisNewRecordsSensor
from airflow_kinesis_snowflake.triggers.kinesis import KinesisNewRecordsTrigger
from tests.conftest import create_stream, put_json, unique
from tests.emulators import Emulators
from tests.integration.triggers.test_kinesis import read_up_to_the_tips

pytestmark = pytest.mark.integration


def sensor(stream: str, app: str, **kwargs: Any) -> KinesisNewRecordsSensor:
    return KinesisNewRecordsSensor(
        task_id="wait", stream_name=stream, application_name=app, region_name="us-east-1", soft_fail=True, **kwargs
    )


def run_context(started: datetime) -> Any:
    return {"dag_run": SimpleNamespace(start_date=started)}


def test_pokes_in_the_worker_and_defers_to_its_trigger(aws_connections: Emulators) -> None:
    stream, app = unique("sense"), unique("sense-app")
    kinesis = create_stream(aws_connections, stream, 2)
    put_json(kinesis, stream, [{"id": i} for i in range(4)])
    read_up_to_the_tips(aws_connections, stream, app)

    # Nothing new: a deferrable sensor hands the wait to its trigger, with its interval and timeout.
    deferring = sensor(stream, app, deferrable=True, poke_interval=7, timeout=90)
    with pytest.raises(TaskDeferred) as deferred:
        deferring.execute(context={})
    trigger = deferred.value.trigger
    assert isinstance(trigger, KinesisNewRecordsTrigger)
    assert (trigger.stream_name, trigger.application_name, trigger.poke_interval, trigger.timeout) == (
        stream,
        app,
        7,
        90,
    )
    assert deferred.value.timeout == timedelta(seconds=90)
    with pytest.raises(AirflowSkipException, match="within 90s"):
        deferring.execute_complete({}, {"status": "timeout", "application_name": app})

    # In the worker with no time to wait: skipped.
    with pytest.raises(AirflowSkipException):
        sensor(stream, app, deferrable=False, timeout=0).execute(context={})

    put_json(kinesis, stream, [{"id": 99}])
    result = sensor(stream, app, deferrable=True).execute(context={})  # answered by the first check, no deferral
    assert (result["new"], result["reason"], result["application_name"]) == (True, "new_record", app)
    assert sensor(stream, app, deferrable=False, timeout=0).execute(context={})["reason"] == "new_record"


def test_records_after_the_run_started_are_for_the_next_run(aws_connections: Emulators) -> None:
    stream, app = unique("sense"), unique("sense-app")
    kinesis = create_stream(aws_connections, stream, 1)
    put_json(kinesis, stream, [{"id": 1}])
    read_up_to_the_tips(aws_connections, stream, app)
    started = datetime.now(UTC) - timedelta(minutes=5)
    put_json(kinesis, stream, [{"id": 2}])

    # Waiting cannot help: it ends at once, even deferrable and with time to wait.
    for deferrable in (True, False):
        waiting = sensor(stream, app, only_before_run_start=True, deferrable=deferrable, timeout=600)
        with pytest.raises(AirflowSkipException, match="before this run started"):
            waiting.execute(context=run_context(started))
    answer = sensor(stream, app, only_before_run_start=True, timeout=0).execute(context=run_context(datetime.now(UTC)))
    assert answer["reason"] == "new_record"


def test_a_reshard_no_batch_has_synced_yet_counts_as_new(aws_connections: Emulators) -> None:
    """The children of a split have no lease until a batch syncs them; their records must not be missed."""
    stream, app = unique("sense-split"), unique("sense-split-app")
    kinesis = create_stream(aws_connections, stream, 1)
    put_json(kinesis, stream, [{"id": i} for i in range(3)])
    read_up_to_the_tips(aws_connections, stream, app)
    with pytest.raises(AirflowSkipException):
        sensor(stream, app, deferrable=False, timeout=0).execute(context={})

    kinesis.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**127))
    put_json(kinesis, stream, [{"id": 3}])
    result = sensor(stream, app, deferrable=False, timeout=0).execute(context={})
    assert (result["new"], result["reason"]) == (True, "unleased_shard")
    assert result["shard_id"] in {"shardId-000000000001", "shardId-000000000002"}
