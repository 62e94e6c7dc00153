"""Is anything new? The decision over what one GetRecords per shard returned, with plain values."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from airflow_kinesis_snowflake.core.freshness import (
    Reason,
    ShardLook,
    decide,
    iterator_request,
    positions,
    unfinished,
)
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.state.leases import STATE_SHARD_END, Lease

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TRIM = StartPosition(InitialPosition.TRIM_HORIZON)


def lease(shard: str, checkpoint: str | None = None, *, sub: int = 0, **kwargs: object) -> Lease:
    return Lease(shard, 1, TRIM, checkpoint=Checkpoint(checkpoint, sub) if checkpoint else None, **kwargs)  # type: ignore[arg-type]


def record(sequence: str, arrival: datetime = T0) -> dict[str, object]:
    return {"SequenceNumber": sequence, "PartitionKey": "k", "Data": b"{}", "ApproximateArrivalTimestamp": arrival}


LEASES = {"s0": lease("s0", "100"), "s1": lease("s1", "200")}


def test_a_record_beyond_a_checkpoint_is_new() -> None:
    looks = [ShardLook("s0"), ShardLook("s1", (record("201"),))]
    answer = decide(LEASES, looks, application_name="app", arrived_before=None)
    assert (answer.new, answer.reason, answer.shard_id, answer.shards_checked) == (True, Reason.NEW_RECORD, "s1", 2)


def test_nothing_beyond_any_checkpoint_is_nothing_new() -> None:
    answer = decide(LEASES, [ShardLook("s0"), ShardLook("s1")], application_name="app", arrived_before=None)
    assert (answer.new, answer.reason, answer.shard_id) == (False, Reason.NOTHING_NEW, None)


def test_the_first_shard_with_a_record_ends_the_look() -> None:
    looked: list[str] = []

    def looks() -> Iterator[ShardLook]:
        for shard in ("s0", "s1"):
            looked.append(shard)
            yield ShardLook(shard, (record("500"),))

    assert decide(LEASES, looks(), application_name="app", arrived_before=None).shard_id == "s0"
    assert looked == ["s0"]


def test_a_record_that_arrived_after_the_cut_off_does_not_count() -> None:
    looks = [ShardLook("s0", (record("101", T0 + timedelta(seconds=1)),)), ShardLook("s1")]
    answer = decide(LEASES, looks, application_name="app", arrived_before=T0)
    assert (answer.new, answer.reason, answer.shard_id) == (False, Reason.ARRIVED_LATER, "s0")
    # At the cut-off itself it counts, as the batch reads it.
    on_time = [ShardLook("s0", (record("101", T0),))]
    assert decide(LEASES, on_time, application_name="app", arrived_before=T0).new


def test_a_shard_read_to_its_end_but_not_marked_ended_needs_a_batch() -> None:
    answer = decide(LEASES, [ShardLook("s0", ended=True)], application_name="app", arrived_before=None)
    assert (answer.new, answer.reason, answer.shard_id) == (True, Reason.SHARD_ENDED, "s0")


def test_a_failed_read_lets_the_batch_decide() -> None:
    looks = [ShardLook("s0", error="InvalidArgumentException")]
    answer = decide(LEASES, looks, application_name="app", arrived_before=None)
    assert (answer.new, answer.reason, answer.detail) == (True, Reason.UNCERTAIN, "InvalidArgumentException")


def test_inside_an_aggregate_only_a_later_user_record_is_new() -> None:
    # AT_SEQUENCE_NUMBER returns the checkpointed record itself first: it is not new, the next one is.
    leases = {"s0": lease("s0", "100", sub=3)}
    assert not decide(leases, [ShardLook("s0", (record("100"),))], application_name="a", arrived_before=None).new
    assert decide(
        leases, [ShardLook("s0", (record("100"), record("101")))], application_name="a", arrived_before=None
    ).new


def test_no_checkpoint_any_record_is_new() -> None:
    leases = {"s0": lease("s0")}
    assert decide(leases, [ShardLook("s0", (record("1"),))], application_name="a", arrived_before=None).new


@pytest.mark.parametrize(
    ("the_lease", "expected"),
    [
        # At the checkpoint's record, as the reader resumes: it may be the first user record of an aggregate.
        (lease("s0", "100"), {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": "100"}),
        (lease("s0", "100", sub=2), {"ShardIteratorType": "AT_SEQUENCE_NUMBER", "StartingSequenceNumber": "100"}),
        (lease("s0"), {"ShardIteratorType": "TRIM_HORIZON"}),
        (
            Lease("s0", 0, StartPosition(InitialPosition.AT_TIMESTAMP, T0)),
            {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": T0},
        ),
    ],
)
def test_the_iterator_starts_where_a_batch_would_read(the_lease: Lease, expected: dict[str, object]) -> None:
    assert iterator_request("orders", the_lease) == {"StreamName": "orders", "ShardId": "s0", **expected}


def test_ended_shards_are_not_looked_at_and_the_oldest_checkpoint_comes_first() -> None:
    leases = {
        "a": lease("a", "1", checkpointed_at=50.0),
        "b": lease("b", "2", checkpointed_at=10.0),
        "c": lease("c", "3", state=STATE_SHARD_END),
    }
    assert [x.shard_id for x in unfinished(leases)] == ["b", "a"]
    assert positions(leases) == (("a", "1/0"), ("b", "2/0"), ("c", "end"))


def test_an_empty_page_behind_the_tip_counts_as_new() -> None:
    """GetRecords may return nothing while records lie further on; MillisBehindLatest tells."""
    leases = {"s0": lease("s0", "100")}
    behind = decide(leases, [ShardLook("s0", (), behind=True)], application_name="a", arrived_before=None)
    assert (behind.new, behind.reason.value, behind.shard_id) == (True, "behind", "s0")
    caught_up = decide(leases, [ShardLook("s0", ())], application_name="a", arrived_before=None)
    assert (caught_up.new, caught_up.reason.value) == (False, "nothing_new")
