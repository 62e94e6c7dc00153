"""When a shard range stops: the record cap and the byte cap, checked after each record taken."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.core.sources.readers import caps_reached


@pytest.mark.parametrize(
    ("records_read", "bytes_read", "max_records", "max_bytes", "stops"),
    [
        (9, 100, 10, None, False),  # no byte cap: records alone
        (10, 100, 10, None, True),
        (3, 23, 100, 24, False),  # one byte short of the cap: the next record is read
        (3, 24, 100, 24, True),  # the record that reaches the cap is the last one
        (3, 25, 100, 24, True),  # ... also when it passes it
        (1, 5000, 100, 24, True),  # a record larger than the cap is read, alone
        (10, 1, 10, 24, True),  # whichever cap comes first
    ],
)
def test_a_range_stops_at_the_record_that_reaches_either_cap(
    records_read: int, bytes_read: int, max_records: int, max_bytes: int | None, stops: bool
) -> None:
    assert caps_reached(records_read, bytes_read, max_records, max_bytes) is stops
