"""Shard discovery and lineage.

A shard closed by a split or merge has an EndingSequenceNumber; its children name it as parent.
Children are read only after every parent reached SHARD_END, so per-partition-key order holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Shard:
    """One shard of a stream, as ListShards describes it."""

    shard_id: str
    parent_shard_ids: tuple[str, ...] = ()
    starting_sequence_number: str = "0"
    ending_sequence_number: str | None = None
    hash_key_range: tuple[str, str] = field(default=("0", "0"))

    @property
    def is_closed(self) -> bool:
        return self.ending_sequence_number is not None

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> Shard:
        parents = tuple(p for p in (data.get("ParentShardId"), data.get("AdjacentParentShardId")) if p)
        seq = data.get("SequenceNumberRange", {})
        keys = data.get("HashKeyRange", {})
        return cls(
            shard_id=data["ShardId"],
            parent_shard_ids=parents,
            starting_sequence_number=seq.get("StartingSequenceNumber", "0"),
            ending_sequence_number=seq.get("EndingSequenceNumber"),
            hash_key_range=(keys.get("StartingHashKey", "0"), keys.get("EndingHashKey", "0")),
        )


def list_shards(kinesis_client: Any, stream_name: str) -> list[Shard]:
    """All shards of a stream that are still within the retention period, parents first."""
    shards: list[Shard] = []
    kwargs: dict[str, Any] = {"StreamName": stream_name}
    while True:
        page = kinesis_client.list_shards(**kwargs)
        shards.extend(Shard.from_api(s) for s in page.get("Shards", []))
        token = page.get("NextToken")
        if not token:
            return order_by_lineage(shards)
        # ListShards rejects StreamName together with NextToken.
        kwargs = {"NextToken": token}


def order_by_lineage(shards: Iterable[Shard]) -> list[Shard]:
    """Parents before children, otherwise in shard-id order; stable and deterministic."""
    by_id = {s.shard_id: s for s in shards}
    ordered: list[Shard] = []
    seen: set[str] = set()

    def visit(shard: Shard) -> None:
        if shard.shard_id in seen:
            return
        seen.add(shard.shard_id)
        for parent in shard.parent_shard_ids:
            if parent in by_id:
                visit(by_id[parent])
        ordered.append(shard)

    for shard_id in sorted(by_id):
        visit(by_id[shard_id])
    return ordered
