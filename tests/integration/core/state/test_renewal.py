"""LeaseKeeper renews held leases and heartbeats in the background (moto server)."""

from __future__ import annotations

import time

import pytest

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.renewal import LeaseKeeper
from tests.conftest import unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def test_keeper_renews_until_stopped_and_notices_a_stolen_lease(emulators: Emulators) -> None:
    name = unique("keep")
    table = LeaseTable(emulators.boto3_client("dynamodb"), name)
    table.create(stream_name="s", application_name=name)
    leases = table.sync_shards([Shard("a"), Shard("b")], StartPosition(InitialPosition.TRIM_HORIZON))
    held = [table.take(leases["a"], "w1", 0.6), table.take(leases["b"], "w1", 0.6)]
    assert all(h is not None for h in held)

    keeper = LeaseKeeper(table, "w1", duration_seconds=0.6)
    # Each wait ends when what it waits for happened: how soon depends on the machine, not the test.
    patience = 120
    with keeper.keep([h for h in held if h is not None]):
        assert "w1" in table.workers()
        deadline = time.monotonic() + patience
        while keeper.renewals < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        # Another worker takes "b" with its current counter, as after a failover.
        stolen = table.take(table.leases()["b"], "w2", 60)
        assert stolen is not None
        deadline = time.monotonic() + patience
        while "b" not in keeper.lost and time.monotonic() < deadline:
            time.sleep(0.05)
    assert keeper.renewals >= 6
    assert keeper.lost == {"b"}
    after = table.leases()
    assert after["a"].lease_owner == "w1" and after["a"].lease_counter == keeper.leases[0].lease_counter
    assert after["b"].lease_owner == "w2"
    # Stopped: no renewal after the block.
    counter = after["a"].lease_counter
    time.sleep(0.5)
    assert table.leases()["a"].lease_counter == counter
