"""The Kinesis stream's shards and checkpoints, as the engine's Source protocol sees them (no emulator)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kinesis_snowflake.core.engine.source import SourceUnit
from airflow_kinesis_snowflake.core.model import Checkpoint
from airflow_kinesis_snowflake.core.sources.kinesis import SHARD, KinesisSource


class Stream:
    """A Kinesis client that answers ListShards: a shard split into two."""

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        ranges = {"StartingSequenceNumber": "1", "EndingSequenceNumber": "50"}
        return {
            "Shards": [
                {"ShardId": "shardId-000000000002", "ParentShardId": "shardId-000000000000"},
                {"ShardId": "shardId-000000000000", "SequenceNumberRange": ranges},
                {"ShardId": "shardId-000000000001", "ParentShardId": "shardId-000000000000"},
            ]
        }


def test_the_units_are_the_shards_parents_first_each_naming_its_parents() -> None:
    units = KinesisSource("orders", client=Stream).units()
    assert [u.unit_id for u in units] == ["shardId-000000000000", "shardId-000000000001", "shardId-000000000002"]
    assert units[0] == SourceUnit("shardId-000000000000", SHARD, (), "50")
    assert units[0].closed
    assert [u.parent_ids for u in units[1:]] == [("shardId-000000000000",)] * 2


@pytest.mark.parametrize("checkpoint", [Checkpoint("0"), Checkpoint("4965" + "0" * 52, 7), Checkpoint(str(10**128))])
def test_a_checkpoint_round_trips_through_its_text_sub_sequence_and_all(checkpoint: Checkpoint) -> None:
    unit = SourceUnit("shardId-000000000000", SHARD)
    source = KinesisSource("orders", client=Stream)
    text = source.position_to_text(unit, checkpoint)
    back = source.position_from_text(unit, text)
    assert (back.sequence_number, back.sub_sequence_number) == (
        checkpoint.sequence_number,
        checkpoint.sub_sequence_number,
    )


@pytest.mark.parametrize(
    "text", ["", "49650", '{"sequence_number": "-1"}', '{"sequence_number": "1", "sub": 2}', '["1", 0]']
)
def test_a_text_that_is_no_checkpoint_is_refused_naming_the_shard_and_the_form(text: str) -> None:
    unit = SourceUnit("shardId-000000000004", SHARD)
    with pytest.raises(ValueError, match=r"not a position of shard shardId-000000000004: expected .*sequence_number"):
        KinesisSource("orders", client=Stream).position_from_text(unit, text)
