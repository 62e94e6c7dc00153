"""Reading across a split or merge (moto server with the AWS resharding behaviour restored)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.sources.readers import read_shard_range
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from tests.conftest import create_stream, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
MIDDLE = str(2**127)


def put(kinesis: Any, stream: str, values: range) -> None:
    for v in values:
        kinesis.put_record(StreamName=stream, Data=json.dumps({"v": v}).encode(), PartitionKey=f"k{v % 5}")


def read(kinesis: Any, stream: str, shard_id: str, ending: str | None = None) -> Any:
    return read_shard_range(
        kinesis,
        stream,
        ShardRange(shard_id, None, TRIM, 1000, ending),
        cutoff=datetime.now(UTC) + timedelta(hours=1),
        max_records_per_call=3,
        sleep=lambda _: None,
    )


def values(result: Any) -> list[int]:
    return [json.loads(r.data)["v"] for r in result.records]


def test_split_parent_keeps_its_records_and_ends_with_a_null_iterator(emulators: Emulators) -> None:
    stream = unique("split")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(10))
    parent = "shardId-000000000000"
    kinesis.split_shard(StreamName=stream, ShardToSplit=parent, NewStartingHashKey=MIDDLE)
    put(kinesis, stream, range(10, 30))

    shards = {s.shard_id: s for s in list_shards(kinesis, stream)}
    children = [s for s in shards.values() if s.parent_shard_ids == (parent,)]
    assert len(children) == 2
    # The plan was made before the split (no ending sequence number): the null iterator ends it.
    result = read(kinesis, stream, parent, ending=None)
    assert values(result) == list(range(10))
    assert result.shard_end
    child_values = [v for child in children for v in values(read(kinesis, stream, child.shard_id))]
    assert sorted(child_values) == list(range(10, 30))


def test_merge_parents_keep_their_records_and_the_child_gets_new_ones(emulators: Emulators) -> None:
    stream = unique("merge")
    kinesis = create_stream(emulators, stream, 2)
    put(kinesis, stream, range(20))
    first, second = "shardId-000000000000", "shardId-000000000001"
    before = {s: values(read(kinesis, stream, s)) for s in (first, second)}
    kinesis.merge_shards(StreamName=stream, ShardToMerge=first, AdjacentShardToMerge=second)
    put(kinesis, stream, range(20, 30))
    (child,) = [s for s in list_shards(kinesis, stream) if s.parent_shard_ids]
    assert set(child.parent_shard_ids) == {first, second}
    after = {s: read(kinesis, stream, s) for s in (first, second)}
    assert {s: values(r) for s, r in after.items()} == before
    assert all(r.shard_end for r in after.values())
    assert sorted(before[first] + before[second]) == list(range(20))
    assert values(read(kinesis, stream, child.shard_id)) == list(range(20, 30))


def test_shard_end_from_the_ending_sequence_number_when_no_null_iterator_comes(emulators: Emulators) -> None:
    stream = unique("ending")
    kinesis = create_stream(emulators, stream, 1)
    put(kinesis, stream, range(4))
    parent = "shardId-000000000000"
    kinesis.split_shard(StreamName=stream, ShardToSplit=parent, NewStartingHashKey=MIDDLE)
    # moto's own behaviour: an iterator forever at a closed shard's end, and no ChildShards.
    emulators.inject_kinesis_faults([{"operation": "GetRecords", "stream": stream, "shard_end": "moto"}])
    try:
        ending = next(s for s in list_shards(kinesis, stream) if s.shard_id == parent).ending_sequence_number
        assert ending is not None
        result = read(kinesis, stream, parent, ending=ending)
        assert values(result) == [0, 1, 2, 3] and result.shard_end
        # Without the ending sequence number nothing says the shard ended: it is only caught up.
        assert not read(kinesis, stream, parent, ending=None).shard_end
    finally:
        emulators.inject_kinesis_faults([])
