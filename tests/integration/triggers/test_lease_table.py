"""The lease-table trigger's run(), driven against the moto server."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.triggers.lease_table import LeasesReleasedTrigger
from tests.conftest import unique
from tests.emulators import Emulators
from tests.integration.triggers.test_kinesis import first_event, round_trip

pytestmark = pytest.mark.integration


def test_waits_for_a_batch_to_release_its_lease(aws_connections: Emulators) -> None:
    name = unique("held")
    table = LeaseTable(aws_connections.boto3_client("dynamodb"), name)
    table.create(stream_name="orders", application_name=name)
    leases = table.sync_shards(
        [Shard("shardId-000000000000"), Shard("shardId-000000000001")], StartPosition(InitialPosition.TRIM_HORIZON)
    )
    running = table.take(leases["shardId-000000000001"], "batch/running", 600)
    assert running is not None

    def trigger(timeout: float) -> LeasesReleasedTrigger:
        built = round_trip(
            LeasesReleasedTrigger(table_name=name, region_name="us-east-1", poke_interval=0.2, timeout=timeout)
        )
        assert isinstance(built, LeasesReleasedTrigger)
        return built

    event = first_event(trigger(0.5))
    message = event.payload.pop("message")
    assert event.payload == {
        "status": "timeout",
        "table_name": name,
        "holders": [["shardId-000000000001", "batch/running"]],
    }
    assert "shardId-000000000001 by batch/running" in message and "nothing was changed" in message

    table.release(running)
    assert first_event(trigger(30)).payload == {"status": "success", "table_name": name}
