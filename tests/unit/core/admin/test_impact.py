"""The reset report: what a reset reads again and skips, and the ledger's note."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_kinesis_snowflake.core.admin.impact import (
    Count,
    ShardImpact,
    ledger_note,
    position_text,
    totals,
)
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
AT = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 31, 12, tzinfo=UTC))


def test_impact_lines_say_what_is_read_again_and_skipped() -> None:
    again = ShardImpact(
        "shardId-000000000000", TRIM, checkpoint=Checkpoint("120"), current_start=TRIM, read_again=Count(120)
    )
    assert again.describe() == (
        "shardId-000000000000: checkpoint 120; new start TRIM_HORIZON; "
        "120 records already loaded will be read and loaded again"
    )
    skipped = ShardImpact("s1", AT, current_start=TRIM, read_again=Count(0), skipped=Count(10_000, capped=True))
    assert skipped.describe() == (
        "s1: no checkpoint yet (starts at TRIM_HORIZON); new start AT_TIMESTAMP 2026-01-31T12:00:00+00:00; "
        "at least 10,000 records not loaded yet will be skipped and never loaded"
    )
    nothing = ShardImpact("s2", AT, current_start=TRIM, shard_ended=True, read_again=Count(0), skipped=Count(0))
    assert nothing.describe().endswith(
        "finished (SHARD_END); new start AT_TIMESTAMP 2026-01-31T12:00:00+00:00; no record read again or skipped"
    )
    assert ShardImpact("s3", TRIM).describe() == (
        "s3: no lease yet; new start TRIM_HORIZON; records read again or skipped: not estimated"
    )
    assert "no longer in the stream" in ShardImpact("s4", TRIM, in_stream=False).describe()
    assert totals([again, skipped, nothing]) == {
        "read_again": 120,
        "read_again_at_least": False,
        "skipped": 10_000,
        "skipped_at_least": True,
    }
    assert skipped.to_dict()["skipped"] == {"records": 10_000, "at_least": True}


def test_ledger_note_says_rows_are_loaded_again() -> None:
    note = ledger_note(old_application="a", old_generation="g1", new_application="b", new_generation="g2")
    assert "marks of 'a' (generation g1) do not apply to 'b' (generation g2)" in note
    assert "loaded again as new rows" in note
    assert position_text(TRIM) == "TRIM_HORIZON"
