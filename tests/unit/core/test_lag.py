"""The lag decision against the stream's retention, and the per-shard lag report of a batch."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_kinesis_snowflake.core.lag import (
    LagLevel,
    LagReport,
    ShardLag,
    assess,
    format_millis,
    lag_level,
    shard_lags,
)
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, InitialPosition, ShardResult, StartPosition
from airflow_kinesis_snowflake.core.state.leases import Lease

HOUR = 3_600_000


@pytest.mark.parametrize(
    ("millis", "retention_hours", "level"),
    [
        (0, 24, LagLevel.OK),
        (12 * HOUR - 1, 24, LagLevel.OK),
        (12 * HOUR, 24, LagLevel.WARNING),  # half of the retention
        (int(21.6 * HOUR) - 1, 24, LagLevel.WARNING),
        (int(21.6 * HOUR), 24, LagLevel.ERROR),  # 90 %
        (30 * HOUR, 24, LagLevel.ERROR),  # past it: already losing records
        (84 * HOUR, 168, LagLevel.WARNING),  # a raised retention raises the thresholds
        (None, 24, LagLevel.OK),  # no lag reported
        (30 * HOUR, None, LagLevel.OK),  # retention unknown
    ],
)
def test_the_level_is_set_by_the_share_of_the_retention_the_lag_uses(
    millis: int | None, retention_hours: float | None, level: LagLevel
) -> None:
    assert lag_level(millis, retention_hours) is level


def _lag(shard_id: str, millis: int | None) -> ShardLag:
    return ShardLag(shard_id, millis, None, None)


def test_alerts_name_the_shards_past_a_threshold_worst_first_and_the_error_names_the_fixes() -> None:
    shards = [_lag("s0", 1000), _lag("s1", 13 * HOUR), _lag("s2", 23 * HOUR), _lag("s3", None)]

    alerts = assess(shards, 24)

    assert [(a.shard_id, a.level) for a in alerts] == [("s2", LagLevel.ERROR), ("s1", LagLevel.WARNING)]
    error, warning = (a.message for a in alerts)
    assert "shard s2 is 23h00m behind" in error and "96% of the stream's 24 h retention" in error
    for fix in ("batch.max_shards_per_batch", "batch.schedule", "increase-stream-retention-period"):
        assert fix in error
    assert "shard s1 is 13h00m behind" in warning and "past half" in warning
    assert "increase-stream-retention-period" not in warning
    assert LagReport(tuple(shards), 24).level is LagLevel.ERROR
    assert LagReport(tuple(shards[:1]), 24).level is LagLevel.OK


def _lease(shard_id: str, sequence: str | None, checkpointed_at: float) -> Lease:
    checkpoint = Checkpoint(sequence) if sequence else None
    return Lease(
        shard_id, 3, StartPosition(InitialPosition.TRIM_HORIZON), checkpoint=checkpoint, checkpointed_at=checkpointed_at
    )


def test_each_shard_of_the_table_gets_its_lag_from_the_batch_and_its_checkpoint_age_from_its_lease() -> None:
    read = ShardResult("s0", None, Checkpoint("49"), 5, 4, 1, 50, False, millis_behind_latest=2500)
    result = BatchResult("b1", "app/b1/a", True, 4, 1, (read,), datetime.now(UTC), {})
    leases = {
        "s0": _lease("s0", "49", checkpointed_at=1000.0),
        "s1": _lease("s1", "17", checkpointed_at=400.0),  # not taken by this batch
        "s2": _lease("s2", None, checkpointed_at=0.0),  # never checkpointed
    }

    lags = shard_lags(result, leases, now=1010.0)

    assert lags == (
        ShardLag("s0", 2500, Checkpoint("49"), 10.0, records=5, dead_letters=1),
        ShardLag("s1", None, Checkpoint("17"), 610.0),
        ShardLag("s2", None, None, None),
    )
    report = LagReport(lags, 24)
    assert report.to_dict() == {
        "retention_hours": 24,
        "level": "ok",
        "shards": {
            "s0": {
                "millis_behind_latest": 2500,
                "checkpoint": {"sequence_number": "49", "sub_sequence_number": 0},
                "checkpoint_age_seconds": 10,
                "records": 5,
                "dead_letters": 1,
            },
            "s1": {
                "millis_behind_latest": None,
                "checkpoint": {"sequence_number": "17", "sub_sequence_number": 0},
                "checkpoint_age_seconds": 610,
                "records": None,
                "dead_letters": None,
            },
            "s2": {
                "millis_behind_latest": None,
                "checkpoint": None,
                "checkpoint_age_seconds": None,
                "records": None,
                "dead_letters": None,
            },
        },
    }
    assert report.table().splitlines() == [
        "shard  records  lag  checkpoint age  checkpoint",
        "-----  -------  ---  --------------  ----------",
        "s0     5        2s   10s             49",
        "s1     -        -    10m10s          17",
        "s2     -        -    -               -",
    ]


@pytest.mark.parametrize(
    ("millis", "text"),
    [(0, "0s"), (59_999, "59s"), (185_000, "3m05s"), (7_620_000, "2h07m"), (3 * 24 * HOUR + 4 * HOUR, "3d04h")],
)
def test_durations_read_in_the_largest_two_units(millis: int, text: str) -> None:
    assert format_millis(millis) == text
