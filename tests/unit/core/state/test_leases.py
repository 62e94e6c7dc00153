"""Shard leases without AWS: where an application first started, and when a table was last active."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.state.leases import Lease, earliest_start, last_activity
from airflow_kinesis_snowflake.core.state.metadata import TableMarks


def test_earliest_start_prefers_trim_horizon_then_the_earliest_time() -> None:
    early = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 1, tzinfo=UTC))
    late = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 2, 1, tzinfo=UTC))
    trim = StartPosition(InitialPosition.TRIM_HORIZON)
    assert earliest_start([Lease("a", 0, late), Lease("b", 0, early)]) == early
    assert earliest_start([Lease("a", 0, late), Lease("b", 0, trim)]) == trim
    assert earliest_start([]) is None


TRIM = StartPosition(InitialPosition.TRIM_HORIZON)


def marks(**kwargs: object) -> TableMarks:
    base: dict[str, object] = {
        "table_name": "t",
        "application_name": "t",
        "stream_name": "s",
        "generation_id": "g",
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    return TableMarks(**(base | kwargs))  # type: ignore[arg-type]


def test_last_activity_is_the_latest_moment() -> None:
    created = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert last_activity(marks(), [], []) == created
    leases = [Lease("a", 0, TRIM, checkpointed_at=created + 10), Lease("b", 0, TRIM, checkpointed_at=created + 5)]
    assert last_activity(marks(), leases, [created + 20.0, created + 1.0]) == created + 20
    assert last_activity(marks(superseded_at=created + 99), leases, []) == created + 99
    # A hand-edited creation time does not hide the other moments.
    assert last_activity(marks(created_at="garbage"), leases, []) == created + 10
