"""Triggers on a connector's DynamoDB lease table."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kinesis_snowflake.core.state.holding import held_by_others
from airflow_kinesis_snowflake.hooks.kinesis import LeaseTableHook


class LeasesReleasedTrigger(BaseTrigger):
    """Wait until no worker but ``owner`` holds a lease of a lease table (released or expired).

    What a reset waits for before it holds every lease itself. Yields ``status`` ``success``, or
    ``timeout`` with the leases still held (``holders``: shard id and owner) after ``timeout`` seconds.

    :param table_name: the lease table (the active application name).
    :param owner: leases this owner holds do not count.
    :param aws_conn_id: the AWS connection.
    :param region_name: AWS region; defaults to the connection's.
    :param poke_interval: seconds between reads of the leases.
    :param timeout: seconds until the trigger gives up.
    """

    def __init__(
        self,
        *,
        table_name: str,
        owner: str | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poke_interval: float = 5,
        timeout: float = 600,
    ) -> None:
        super().__init__()
        self.table_name = table_name
        self.owner = owner
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.poke_interval = poke_interval
        self.timeout = timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{self.__class__.__module__}.{self.__class__.__qualname__}",
            {
                "table_name": self.table_name,
                "owner": self.owner,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "poke_interval": self.poke_interval,
                "timeout": self.timeout,
            },
        )

    def _holders(self) -> list[tuple[str, str]]:
        table = LeaseTableHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name).table(self.table_name)
        busy = held_by_others(table.leases().values(), self.owner, time.time())
        return [(lease.shard_id, lease.lease_owner or "") for lease in busy]

    async def run(self) -> AsyncIterator[TriggerEvent]:
        deadline = time.monotonic() + self.timeout
        while True:
            holders = await asyncio.to_thread(self._holders)
            if not holders:
                yield TriggerEvent({"status": "success", "table_name": self.table_name})
                return
            if time.monotonic() >= deadline:
                held = ", ".join(f"{shard} by {owner}" for shard, owner in holders)
                message = (
                    f"leases of {self.table_name!r} still held after {self.timeout}s: {held}. A batch is running; "
                    "wait for it to finish (or for its leases to expire) and trigger again; nothing was changed"
                )
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "table_name": self.table_name,
                        "holders": [list(h) for h in holders],
                        "message": message,
                    }
                )
                return
            self.log.info("Waiting for %d lease(s) of %s to be released", len(holders), self.table_name)
            await asyncio.sleep(self.poke_interval)
