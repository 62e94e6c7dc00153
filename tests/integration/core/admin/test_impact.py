"""The reset estimate against moto: records read again and skipped."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.admin.impact import Count, estimate_impact
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.core.state.leases import STATE_SHARD_END, Lease
from tests.conftest import create_stream, put_json, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)


def sequence_numbers(kinesis: Any, stream: str, shard_id: str) -> list[str]:
    it = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
    return [r["SequenceNumber"] for r in kinesis.get_records(ShardIterator=it["ShardIterator"])["Records"]]


def test_estimate_counts_records_read_again_and_skipped(emulators: Emulators) -> None:
    stream = unique("estimate")
    kinesis = create_stream(emulators, stream, 1)
    put_json(kinesis, stream, [{"id": i} for i in range(8)])
    time.sleep(1.1)  # arrival times are what AT_TIMESTAMP compares
    between = datetime.now(UTC)
    time.sleep(0.1)
    put_json(kinesis, stream, [{"id": i} for i in range(8, 10)])
    shards = list_shards(kinesis, stream)
    (shard_id,) = [s.shard_id for s in shards]
    sequences = sequence_numbers(kinesis, stream, shard_id)
    assert len(sequences) == 10
    # Six records delivered (0..5); 6..9 not yet.
    leases = {shard_id: Lease(shard_id, 1, TRIM, checkpoint=Checkpoint(sequences[5]))}

    def estimate(start: StartPosition, **kwargs: Any) -> tuple[Count | None, Count | None]:
        (impact,) = estimate_impact(kinesis, stream, shards, leases, start, **kwargs)
        return impact.read_again, impact.skipped

    assert estimate(TRIM) == (Count(6), Count(0))
    assert estimate(StartPosition(InitialPosition.AT_TIMESTAMP, between)) == (Count(0), Count(2))
    assert estimate(StartPosition.resolve(InitialPosition.LATEST, None, datetime.now(UTC))) == (Count(0), Count(4))
    assert estimate(TRIM, max_records=3) == (Count(3, capped=True), Count(0))
    assert estimate(TRIM, max_records=0) == (None, None)

    # A finished shard is read again entirely; a shard with no lease starts at the new position anyway.
    finished = {shard_id: Lease(shard_id, 1, TRIM, state=STATE_SHARD_END)}
    (impact,) = estimate_impact(kinesis, stream, shards, finished, TRIM)
    assert (impact.read_again, impact.skipped) == (Count(10), Count(0))
    (impact,) = estimate_impact(kinesis, stream, shards, {}, TRIM)
    assert (impact.current_start, impact.read_again, impact.skipped) == (None, Count(0), Count(0))
    # A lease whose shard left the stream's retention is listed, not read.
    gone = estimate_impact(kinesis, stream, shards, {**leases, "shardId-old": Lease("shardId-old", 0, TRIM)}, TRIM)
    assert [(i.shard_id, i.in_stream, i.read_again) for i in gone][1] == ("shardId-old", False, None)
