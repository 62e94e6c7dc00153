"""Triggers on a connector's Kinesis stream: new records beyond the checkpoints, a fan-out consumer ACTIVE."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from airflow_kinesis_snowflake.core.freshness import Freshness
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook


class KinesisNewRecordsTrigger(BaseEventTrigger):
    """Wait until any shard of a connector has records beyond its checkpoint.

    Every ``poke_interval`` seconds, one ``GetShardIterator`` and one ``GetRecords`` (``Limit=1``)
    per unfinished shard lease, stopping at the first shard with a record
    (:func:`~airflow_kinesis_snowflake.core.freshness.check_new_records`). A lease table that does
    not exist yet counts as new records: the first ingest run creates it.

    As a deferred sensor's trigger (``timeout`` set), it yields one event: ``status`` ``success``
    when records are new, ``timeout`` when none came in time. As an asset watcher's trigger
    (``timeout`` None), it runs until cancelled and yields an event each time records are new and
    the checkpoints moved since its last event (a batch ran), or ``refire_seconds`` passed without
    them moving (the run it started may have failed).

    :param stream_name: the Kinesis data stream.
    :param application_name: the connector's configured application name (its lease table).
    :param aws_conn_id: the AWS connection for Kinesis and DynamoDB.
    :param region_name: AWS region; defaults to the connection's.
    :param poke_interval: seconds between checks.
    :param timeout: seconds until the trigger gives up with a ``timeout`` event; None: never.
    :param arrived_before: ISO 8601 time: count only records that arrived at or before it.
    :param refire_seconds: watcher only: seconds after which new records fire again though no batch
        moved a checkpoint.
    """

    def __init__(
        self,
        *,
        stream_name: str,
        application_name: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poke_interval: float = 30,
        timeout: float | None = None,
        arrived_before: str | None = None,
        refire_seconds: float = 600,
    ) -> None:
        super().__init__()
        self.stream_name = stream_name
        self.application_name = application_name
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.poke_interval = poke_interval
        self.timeout = timeout
        self.arrived_before = arrived_before
        self.refire_seconds = refire_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "stream_name": self.stream_name,
                "application_name": self.application_name,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "poke_interval": self.poke_interval,
                "timeout": self.timeout,
                "arrived_before": self.arrived_before,
                "refire_seconds": self.refire_seconds,
            },
        )

    def check(self) -> Freshness:
        """One check, blocking (the trigger runs it in a thread)."""
        kinesis = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        dynamodb = LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).conn
        before = datetime.fromisoformat(self.arrived_before) if self.arrived_before else None
        return kinesis.check_new_records(
            self.stream_name, self.application_name, dynamodb=dynamodb, arrived_before=before
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        fired: tuple[tuple[str, str], ...] | None = None
        fired_at = 0.0
        while True:
            answer = await asyncio.to_thread(self.check)
            if answer.new:
                self.log.info("New records: %s", answer.describe())
                event = {"status": "success", **answer.to_dict()}
                if deadline is not None:
                    yield TriggerEvent(event)
                    return
                if answer.positions != fired or time.monotonic() - fired_at >= self.refire_seconds:
                    fired, fired_at = answer.positions, time.monotonic()
                    yield TriggerEvent(event)
            else:
                self.log.info("Nothing new: %s", answer.describe())
            if deadline is not None and time.monotonic() >= deadline:
                yield TriggerEvent({"status": "timeout", **answer.to_dict()})
                return
            await asyncio.sleep(self.poke_interval)


class FanOutConsumerActiveTrigger(BaseTrigger):
    """Wait until an enhanced fan-out consumer is ACTIVE.

    Yields ``status`` ``success`` with the consumer's ARN, or ``error`` (DELETING, gone, or still
    not ACTIVE after ``timeout`` seconds) with a message.

    :param consumer_arn: the consumer.
    :param aws_conn_id: the AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    :param poke_interval: seconds between DescribeStreamConsumer calls.
    :param timeout: seconds until the trigger gives up.
    """

    def __init__(
        self,
        *,
        consumer_arn: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poke_interval: float = 2,
        timeout: float = 300,
    ) -> None:
        super().__init__()
        self.consumer_arn = consumer_arn
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.poke_interval = poke_interval
        self.timeout = timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "consumer_arn": self.consumer_arn,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "poke_interval": self.poke_interval,
                "timeout": self.timeout,
            },
        )

    def _status(self) -> str:
        hook = KinesisStreamHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name)
        try:
            return str(hook.consumer_status(self.consumer_arn)["ConsumerStatus"])
        except hook.conn.exceptions.ResourceNotFoundException:
            return "NOT_FOUND"

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = time.monotonic() + self.timeout
        while True:
            status = await asyncio.to_thread(self._status)
            if status == "ACTIVE":
                yield TriggerEvent({"status": "success", "consumer_arn": self.consumer_arn})
                return
            if status in ("DELETING", "NOT_FOUND") or time.monotonic() >= deadline:
                message = f"fan-out consumer {self.consumer_arn} is {status}, not ACTIVE"
                if status == "CREATING":
                    message += f" after {self.timeout:.0f}s"
                yield TriggerEvent({"status": "error", "consumer_arn": self.consumer_arn, "message": message})
                return
            await asyncio.sleep(self.poke_interval)
