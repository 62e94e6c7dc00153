"""The Kinesis triggers' run(), driven against the moto server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.triggers.kinesis import FanOutConsumerActiveTrigger, KinesisNewRecordsTrigger
from tests.conftest import create_stream, put_json, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def first_event(trigger: BaseTrigger, within: float = 30) -> TriggerEvent:
    async def take() -> TriggerEvent:
        events: AsyncGenerator[TriggerEvent] = trigger.run()  # type: ignore[assignment]
        try:
            return await anext(events)
        finally:
            await events.aclose()

    return asyncio.run(asyncio.wait_for(take(), within))


def round_trip(trigger: BaseTrigger) -> BaseTrigger:
    classpath, kwargs = trigger.serialize()
    module, name = classpath.rsplit(".", 1)
    rebuilt: BaseTrigger = getattr(__import__(module, fromlist=[name]), name)(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    return rebuilt


def read_up_to_the_tips(emulators: Emulators, stream: str, app: str) -> LeaseTable:
    """A lease table whose every shard is checkpointed at its last record, as after a batch."""
    kinesis = emulators.boto3_client("kinesis")
    table = LeaseTable(emulators.boto3_client("dynamodb"), app)
    table.create(stream_name=stream, application_name=app)
    leases = table.sync_shards(list_shards(kinesis, stream), StartPosition(InitialPosition.TRIM_HORIZON))
    for shard_id, lease in leases.items():
        it = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
        records = kinesis.get_records(ShardIterator=it["ShardIterator"])["Records"]
        if records:
            taken = table.take(lease, "batch", 60)
            assert taken is not None
            table.release(table.checkpoint(taken, Checkpoint(records[-1]["SequenceNumber"])))
    return table


def new_records_trigger(stream: str, app: str, **kwargs: Any) -> KinesisNewRecordsTrigger:
    trigger = KinesisNewRecordsTrigger(stream_name=stream, application_name=app, region_name="us-east-1", **kwargs)
    rebuilt = round_trip(trigger)
    assert isinstance(rebuilt, KinesisNewRecordsTrigger)
    return rebuilt


def test_new_records_trigger_fires_on_a_put_and_times_out_without(aws_connections: Emulators) -> None:
    stream, app = unique("fresh"), unique("fresh-app")
    kinesis = create_stream(aws_connections, stream, 2)
    put_json(kinesis, stream, [{"id": i} for i in range(10)])
    read_up_to_the_tips(aws_connections, stream, app)

    event = first_event(new_records_trigger(stream, app, poke_interval=0.2, timeout=0.5))
    assert event.payload["status"] == "timeout"
    assert (event.payload["reason"], event.payload["shards_checked"]) == ("nothing_new", 2)

    put_json(kinesis, stream, [{"id": 10}])
    event = first_event(new_records_trigger(stream, app, poke_interval=0.2, timeout=30))
    assert event.payload["status"] == "success"
    assert (event.payload["reason"], event.payload["application_name"]) == ("new_record", app)
    shard_of_the_put = kinesis.put_record(StreamName=stream, Data=b"{}", PartitionKey="pk-10")["ShardId"]
    assert event.payload["shard_id"] == shard_of_the_put


def test_a_missing_lease_table_is_new_records(aws_connections: Emulators) -> None:
    stream = unique("fresh")
    create_stream(aws_connections, stream, 1)
    event = first_event(new_records_trigger(stream, unique("never-ran"), timeout=0))
    assert (event.payload["status"], event.payload["reason"]) == ("success", "no_lease_table")


def test_as_a_watcher_it_fires_when_a_record_is_put(aws_connections: Emulators) -> None:
    stream, app = unique("watch"), unique("watch-app")
    kinesis = create_stream(aws_connections, stream, 1)
    put_json(kinesis, stream, [{"id": 1}])
    read_up_to_the_tips(aws_connections, stream, app)
    trigger = new_records_trigger(stream, app, poke_interval=0.1)  # no timeout: runs until cancelled
    assert isinstance(trigger, BaseEventTrigger)
    checks: list[bool] = []
    check = trigger.check

    def counted() -> Any:
        answer = check()
        checks.append(answer.new)
        return answer

    trigger.check = counted  # type: ignore[method-assign]

    async def checked(times: int) -> None:
        """Until the trigger made ``times`` more checks."""
        target = len(checks) + times
        while len(checks) < target:
            await asyncio.sleep(0.05)

    async def watch() -> TriggerEvent:
        events: AsyncGenerator[TriggerEvent] = trigger.run()  # type: ignore[assignment]
        pending = asyncio.ensure_future(anext(events))
        try:
            await checked(2)
            assert not pending.done(), "fired with nothing new"
            await asyncio.to_thread(put_json, kinesis, stream, [{"id": 2}])
            first = await asyncio.wait_for(pending, 30)
            # The checkpoints did not move (no batch ran): the same news does not fire again.
            pending = asyncio.ensure_future(anext(events))
            await checked(3)
            assert checks[-3:] == [True, True, True]
            assert not pending.done(), "fired twice for the same records"
            return first
        finally:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
            await events.aclose()

    event = asyncio.run(watch())
    assert (event.payload["status"], event.payload["reason"]) == ("success", "new_record")


def test_consumer_trigger_reports_active_and_a_missing_consumer(aws_connections: Emulators) -> None:
    stream = unique("efo")
    kinesis = create_stream(aws_connections, stream, 1)
    stream_arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    arn = kinesis.register_stream_consumer(StreamARN=stream_arn, ConsumerName="app")["Consumer"]["ConsumerARN"]
    trigger = round_trip(FanOutConsumerActiveTrigger(consumer_arn=arn, region_name="us-east-1", poke_interval=0.2))
    assert first_event(trigger).payload == {"status": "success", "consumer_arn": arn}

    kinesis.deregister_stream_consumer(ConsumerARN=arn)
    event = first_event(FanOutConsumerActiveTrigger(consumer_arn=arn, region_name="us-east-1", poke_interval=0.2))
    assert event.payload["status"] == "error"
    assert "not ACTIVE" in event.payload["message"] and arn in event.payload["message"]
