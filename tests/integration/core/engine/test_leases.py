"""The units a batch holds, for every source: taken, kept alive while the batch runs, released (moto server)."""

from __future__ import annotations

import logging
import time

import pytest

from airflow_kinesis_snowflake.core.engine.detached import DetachedRun, JobDetached, recorded_run
from airflow_kinesis_snowflake.core.engine.leases import (
    HeldLeases,
    LeaseHold,
    forget_run,
    renew_hold,
    resume_hold,
    take_leases,
)
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from tests.conftest import unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)


def lease_table(emulators: Emulators, *units: Shard) -> LeaseTable:
    name = unique("units")
    table = LeaseTable(emulators.boto3_client("dynamodb"), name)
    table.create(stream_name="s", application_name=name)
    table.sync_shards(list(units), TRIM)
    return table


def test_take_skips_what_the_run_read_takes_only_what_is_wanted_and_stops_at_the_cap(emulators: Emulators) -> None:
    table = lease_table(emulators, Shard("a"), Shard("b"), Shard("c"), Shard("d"))
    leases = table.leases()

    taken = take_leases(table, leases, "w1", 60, max_units=2, skip={"a"})
    assert sorted(lease.shard_id for lease in taken) == ["b", "c"]
    assert all(lease.lease_owner == "w1" for lease in taken)

    wanted = take_leases(table, table.leases(), "w2", 60, wanted={"a"})
    assert [lease.shard_id for lease in wanted] == ["a"]
    assert table.leases()["d"].lease_owner is None  # neither wanted nor within the cap: left free


def test_a_child_waits_for_its_parent_even_when_the_run_skips_the_parent(emulators: Emulators) -> None:
    table = lease_table(emulators, Shard("parent"), Shard("child", parent_shard_ids=("parent",)))
    assert take_leases(table, table.leases(), "w1", 60, skip={"parent"}) == []


def test_held_leases_are_released_with_the_heartbeat_when_the_batch_fails(emulators: Emulators) -> None:
    table = lease_table(emulators, Shard("a"), Shard("b"))
    taken = take_leases(table, table.leases(), "w1", 60)

    def failing_batch() -> None:
        assert "w1" in table.workers()  # the heartbeat is written while the batch runs
        raise RuntimeError("the job failed")

    with pytest.raises(RuntimeError, match="the job failed"), HeldLeases(table, "w1", 60, taken) as held:
        held.run(failing_batch)

    assert all(lease.lease_owner is None for lease in table.leases().values())
    assert table.workers() == {}


def test_a_checkpoint_written_in_the_batch_is_released_from_its_new_counter(emulators: Emulators) -> None:
    table = lease_table(emulators, Shard("a"))
    (lease,) = take_leases(table, table.leases(), "w1", 60)
    with HeldLeases(table, "w1", 60, [lease]) as held:
        held.run(lambda: None)
        held.update(table.checkpoint(held.held["a"], Checkpoint("42")))
    after = table.leases()["a"]
    assert after.lease_owner is None and after.checkpoint == Checkpoint("42")


def test_a_lease_lost_during_the_batch_is_left_to_its_new_owner_and_logged(
    emulators: Emulators, caplog: pytest.LogCaptureFixture
) -> None:
    table = lease_table(emulators, Shard("a"), Shard("b"))
    taken = take_leases(table, table.leases(), "w1", 0.6)  # renewed every 0.2 s

    def stalled_batch() -> str:
        # Another worker takes "b" after a stall, with its current counter; the keeper's next renewal fails.
        assert table.take(table.leases()["b"], "w2", 60) is not None
        assert held.keeper is not None
        deadline = time.monotonic() + 120  # ends when the renewal saw it, however loaded the machine
        while "b" not in held.keeper.lost and time.monotonic() < deadline:
            time.sleep(0.05)
        return "done"

    caplog.set_level(logging.WARNING)
    with HeldLeases(table, "w1", 0.6, taken, what="orders") as held:
        assert held.run(stalled_batch) == "done"
        assert held.lost == {"b"} and sorted(held.held) == ["a"]

    leases = table.leases()
    assert leases["a"].lease_owner is None  # released
    assert leases["b"].lease_owner == "w2"  # not released from under its new owner
    assert "orders: Leases lost during the batch" in caplog.text and "'b'" in caplog.text


def detached_run(batch_id: str = "batch-1") -> DetachedRun:
    return DetachedRun("emr_serverless", "00run1", "attempt-1", "app", "g1", batch_id, "kinesis-to-snowflake-app")


def test_a_batch_whose_job_run_goes_on_keeps_its_leases_and_records_the_run(emulators: Emulators) -> None:
    table = lease_table(emulators, Shard("a"), Shard("b"))
    taken = take_leases(table, table.leases(), "w1", 60)
    run = detached_run()

    def detach() -> None:
        raise JobDetached(run)

    with pytest.raises(JobDetached) as raised, HeldLeases(table, "w1", 60, taken) as held:
        held.run(detach)

    assert raised.value.hold == LeaseHold(table.table_name, "w1", ("a", "b"), 60)
    assert {lease.lease_owner for lease in table.leases().values()} == {"w1"}  # not released
    assert table.recorded_run("batch-1") == run.to_dict()  # where a later try of the task finds it
    assert recorded_run(table.recorded_run("batch-1"), "emr_serverless") == run
    assert recorded_run(table.recorded_run("batch-1"), "glue") is None  # another platform's id means nothing
    assert table.recorded_run("batch-2") is None


def test_the_waiter_renews_a_detached_batch_s_leases_and_the_task_holds_them_again_to_release_them(
    emulators: Emulators, caplog: pytest.LogCaptureFixture
) -> None:
    table = lease_table(emulators, Shard("a"), Shard("b"), Shard("c"))
    assert len(take_leases(table, table.leases(), "w1", 60)) == 3
    hold = LeaseHold(table.table_name, "w1", ("a", "b", "c"), 60)
    before = table.leases()
    # "c" expired and another worker took it (the waiter had stopped for longer than the duration).
    assert table.take(before["c"], "w2", 60) is not None

    assert renew_hold(table, LeaseHold.from_dict(hold.to_dict())) == {"c"}

    renewed = table.leases()
    assert [renewed[u].lease_counter for u in "ab"] == [before[u].lease_counter + 1 for u in "ab"]
    assert all(renewed[u].lease_expires_at >= before[u].lease_expires_at for u in "ab")
    assert "w1" in table.workers()  # the owner's heartbeat, as while the batch ran here
    caplog.set_level(logging.WARNING)
    with resume_hold(table, hold, what="orders") as held:
        assert sorted(held.held) == ["a", "b"] and held.lost == {"c"}
        held.update(table.checkpoint(held.held["a"], Checkpoint("7")))  # with the counter the renewals left
    leases = table.leases()
    assert (leases["a"].lease_owner, leases["a"].checkpoint) == (None, Checkpoint("7"))
    assert leases["b"].lease_owner is None and leases["c"].lease_owner == "w2"
    assert "w1" not in table.workers()  # its heartbeat item removed with the release
    assert "orders: Leases lost while the job ran" in caplog.text and "'c'" in caplog.text


def test_a_finished_run_s_record_is_removed(emulators: Emulators) -> None:
    table = lease_table(emulators, Shard("a"))
    run = detached_run("batch-9")
    table.record_run(run.batch_id, run.to_dict())
    forget_run(table, run)
    assert table.recorded_run("batch-9") is None
    forget_run(table, run)  # once more: nothing to remove, nothing raised
