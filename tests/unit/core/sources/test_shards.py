"""Shards from ListShards, and lineage order: parents before children."""

from __future__ import annotations

import itertools
import random
from typing import Any

from airflow_kinesis_snowflake.core.sources.shards import Shard, list_shards, order_by_lineage

AWS_START = "49590338271490256608559692538361571095921575989136588898"
AWS_END = "49590338271490256608559692540361571095921575989136588898"


def _sid(n: int) -> str:
    return f"shardId-{n:012d}"


def _assert_parents_first(ordered: list[Shard]) -> None:
    position = {s.shard_id: i for i, s in enumerate(ordered)}
    for shard in ordered:
        for parent in shard.parent_shard_ids:
            if parent in position:
                assert position[parent] < position[shard.shard_id], f"{parent} must come before {shard.shard_id}"


# -- Shard.from_api -------------------------------------------------------------------------------


def test_from_api_open_shard_without_parents() -> None:
    shard = Shard.from_api(
        {
            "ShardId": _sid(0),
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "340282366920938463463374607431768211455"},
            "SequenceNumberRange": {"StartingSequenceNumber": AWS_START},
        }
    )

    assert shard.shard_id == _sid(0)
    assert shard.parent_shard_ids == ()
    assert shard.starting_sequence_number == AWS_START
    assert shard.ending_sequence_number is None
    assert not shard.is_closed
    assert shard.hash_key_range == ("0", "340282366920938463463374607431768211455")


def test_from_api_closed_shard_with_ending_sequence_number() -> None:
    shard = Shard.from_api(
        {
            "ShardId": _sid(0),
            "SequenceNumberRange": {"StartingSequenceNumber": AWS_START, "EndingSequenceNumber": AWS_END},
        }
    )

    assert shard.ending_sequence_number == AWS_END
    assert shard.is_closed


def test_from_api_split_child_has_one_parent() -> None:
    shard = Shard.from_api(
        {
            "ShardId": _sid(1),
            "ParentShardId": _sid(0),
            "SequenceNumberRange": {"StartingSequenceNumber": AWS_END},
        }
    )

    assert shard.parent_shard_ids == (_sid(0),)


def test_from_api_merge_child_has_both_parents_in_order() -> None:
    shard = Shard.from_api(
        {
            "ShardId": _sid(5),
            "ParentShardId": _sid(3),
            "AdjacentParentShardId": _sid(4),
            "SequenceNumberRange": {"StartingSequenceNumber": AWS_END},
        }
    )

    assert shard.parent_shard_ids == (_sid(3), _sid(4))


def test_from_api_ignores_empty_parent_ids() -> None:
    shard = Shard.from_api({"ShardId": _sid(2), "ParentShardId": None, "AdjacentParentShardId": ""})

    assert shard.parent_shard_ids == ()
    assert shard.starting_sequence_number == "0"
    assert shard.ending_sequence_number is None


# -- order_by_lineage -----------------------------------------------------------------------------


def test_split_parent_before_both_children() -> None:
    parent = Shard(_sid(0), ending_sequence_number=AWS_END)
    left = Shard(_sid(1), parent_shard_ids=(_sid(0),))
    right = Shard(_sid(2), parent_shard_ids=(_sid(0),))

    ordered = order_by_lineage([right, left, parent])

    assert [s.shard_id for s in ordered] == [_sid(0), _sid(1), _sid(2)]


def test_merge_both_parents_before_child() -> None:
    a = Shard(_sid(3), ending_sequence_number=AWS_END)
    b = Shard(_sid(4), ending_sequence_number=AWS_END)
    child = Shard(_sid(5), parent_shard_ids=(_sid(3), _sid(4)))

    ordered = order_by_lineage([child, b, a])

    assert [s.shard_id for s in ordered] == [_sid(3), _sid(4), _sid(5)]


def test_lineage_wins_over_shard_id_order() -> None:
    # Ids chosen so that plain sorting would put each child before its parents.
    grandparent = Shard("shard-z", ending_sequence_number="100")
    parent_a = Shard("shard-y", parent_shard_ids=("shard-z",), ending_sequence_number="200")
    parent_b = Shard("shard-x", parent_shard_ids=("shard-z",), ending_sequence_number="210")
    merged = Shard("shard-a", parent_shard_ids=("shard-y", "shard-x"))
    unrelated = Shard("shard-m")

    ordered = order_by_lineage([merged, unrelated, parent_b, parent_a, grandparent])

    _assert_parents_first(ordered)
    assert ordered[0].shard_id == "shard-z"
    assert ordered[-1].shard_id == "shard-m"  # nothing forces it earlier than its id does
    assert ordered.index(merged) == 3
    assert {s.shard_id for s in ordered} == {"shard-z", "shard-y", "shard-x", "shard-a", "shard-m"}


def test_missing_parent_does_not_drop_the_child() -> None:
    # The parent has left the retention period and is no longer listed.
    child = Shard(_sid(7), parent_shard_ids=(_sid(2),))
    other = Shard(_sid(6))

    ordered = order_by_lineage([child, other])

    assert [s.shard_id for s in ordered] == [_sid(6), _sid(7)]


def test_unrelated_shards_in_shard_id_order() -> None:
    shards = [Shard(_sid(n)) for n in (3, 11, 0, 2)]

    assert [s.shard_id for s in order_by_lineage(shards)] == [_sid(0), _sid(2), _sid(3), _sid(11)]


def test_order_is_deterministic_for_any_input_order() -> None:
    shards = [
        Shard("shard-z", ending_sequence_number="1"),
        Shard("shard-y", ending_sequence_number="1"),
        Shard("shard-b", parent_shard_ids=("shard-z",), ending_sequence_number="2"),
        Shard("shard-c", parent_shard_ids=("shard-z",)),
        Shard("shard-a", parent_shard_ids=("shard-b", "shard-y")),
        Shard("shard-q"),
    ]
    expected = order_by_lineage(shards)
    _assert_parents_first(expected)

    for permutation in itertools.permutations(shards):
        assert order_by_lineage(permutation) == expected


def test_long_chain_in_reverse_id_order() -> None:
    count = 50
    shards = [
        Shard(f"s{count - i:03d}", parent_shard_ids=(f"s{count - i + 1:03d}",) if i else ()) for i in range(count)
    ]
    random.Random(3).shuffle(shards)

    ordered = order_by_lineage(shards)

    assert [s.shard_id for s in ordered] == [f"s{count - i:03d}" for i in range(count)]


# -- list_shards ----------------------------------------------------------------------------------


class _PagedKinesis:
    """A stand-in for the boto3 Kinesis client: ListShards in pages, recording the calls."""

    def __init__(self, pages: list[dict[str, Any]]) -> None:
        self.pages = pages
        self.calls: list[dict[str, Any]] = []

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return self.pages[len(self.calls) - 1]


def test_list_shards_follows_pages_and_orders_by_lineage() -> None:
    client = _PagedKinesis(
        [
            {
                "Shards": [{"ShardId": "shard-a", "ParentShardId": "shard-z"}],
                "NextToken": "token-1",
            },
            {
                "Shards": [
                    {
                        "ShardId": "shard-z",
                        "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"},
                    }
                ]
            },
        ]
    )

    shards = list_shards(client, "orders")

    assert [s.shard_id for s in shards] == ["shard-z", "shard-a"]
    assert client.calls == [{"StreamName": "orders"}, {"NextToken": "token-1"}]
