"""A connector's shards for `status` and the lag page, from its leases and its recent batch outcomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, InitialPosition, ShardResult, StartPosition
from airflow_kinesis_snowflake.core.state.leases import Lease
from airflow_kinesis_snowflake.status import ConnectorStatus, shard_statuses

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _batch(batch_id: str, minute: int, *shards: tuple[str, int, int, int]) -> BatchResult:
    results = tuple(
        ShardResult(sid, None, Checkpoint(str(rows)), rows + dead, rows, dead, 0, False, millis_behind_latest=lag)
        for sid, rows, dead, lag in shards
    )
    rows = sum(s.rows_staged for s in results)
    dead = sum(s.dead_letters_staged for s in results)
    return BatchResult(batch_id, "stage", True, rows, dead, results, T0 + timedelta(minutes=minute), {})


def test_each_shard_shows_its_checkpoint_and_the_newest_batch_that_took_it_with_its_lag_history() -> None:
    newest_first = [
        _batch("b3", 10, ("s0", 4, 0, 100)),  # s1 not taken
        _batch("b2", 5, ("s0", 7, 1, 2000), ("s1", 3, 2, 60_000)),
        _batch("b1", 0, ("s0", 1, 0, 9000)),
    ]
    start = StartPosition(InitialPosition.TRIM_HORIZON)
    leases = {
        "s0": Lease("s0", 5, start, checkpoint=Checkpoint("104"), checkpointed_at=1000.0),
        "s1": Lease("s1", 2, start, checkpoint=Checkpoint("33"), checkpointed_at=700.0),
        "s2": Lease("s2", 0, start),  # a child no batch took yet
    }

    s0, s1, s2 = shard_statuses(leases, newest_first, now=1300.0)

    assert (s0.checkpoint, s0.checkpoint_age_seconds, s0.last_batch_id, s0.rows, s0.dead_letters) == (
        Checkpoint("104"),
        300.0,
        "b3",
        4,
        0,
    )
    assert s0.millis_behind_latest == 100
    assert s0.history == ((T0, 9000), (T0 + timedelta(minutes=5), 2000), (T0 + timedelta(minutes=10), 100))
    assert (s1.last_batch_id, s1.rows, s1.dead_letters, s1.millis_behind_latest) == ("b2", 3, 2, 60_000)
    assert s1.checkpoint_age_seconds == 600.0
    assert (s2.checkpoint, s2.checkpoint_age_seconds, s2.last_batch_id, s2.history) == (None, None, None, ())

    text = ConnectorStatus("orders", "app", "orders", "A.B.C", 24, (s0, s1, s2)).text().splitlines()
    assert text[0] == "connector orders: stream orders -> A.B.C, application app, retention 24 h"
    assert text[3].split() == ["s0", "104", "5m00s", "0s", "b3", "2026-01-05", "12:10:00", "4", "0"]
    assert text[5].split() == ["s2", "-", "-", "-", "-", "-", "-", "-"]


def test_a_shard_near_the_retention_is_named_under_the_table() -> None:
    (shard,) = shard_statuses({}, [_batch("b1", 0, ("s0", 1, 0, 22 * 3_600_000))], now=0.0)
    status = ConnectorStatus("orders", "app", "orders", "A.B.C", 24, (shard,))
    assert status.text().splitlines()[-1] == "  error: shard s0 is near the stream's retention (docs/lag.md)"
    assert status.to_dict()["shards"][0]["level"] == "error"
