"""A Kinesis data stream as a :class:`~..engine.source.Source`: its shards, their checkpoints, their reads.

A thin adapter over the stream's own functions: the units are the shards :func:`~.shards.list_shards`
lists (a split's or merge's children name their parents), a position is a
:class:`~..model.Checkpoint` (sequence and sub-sequence number, so a read may end inside a KPL
aggregate), and a unit's range is read by :func:`~.readers.read_shard_range` (GetRecords), or by
:func:`~.readers.read_shard_range_fan_out` through an enhanced fan-out consumer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from airflow_kinesis_snowflake.core.engine.source import (
    SourceUnit,
    UnitRange,
    checkpoint_from_text,
    checkpoint_to_text,
)
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import ShardRange
from airflow_kinesis_snowflake.core.sources.readers import read_shard_range, read_shard_range_fan_out
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.registry import KINESIS_SOURCE

#: The kind of a Kinesis unit.
SHARD = "shard"
#: GetRecords answers at most this many records a call.
MAX_RECORDS_PER_CALL = 10_000
#: Where a shard with no checkpoint is read from unless told otherwise: its oldest record kept.
FROM_TRIM_HORIZON = StartPosition(InitialPosition.TRIM_HORIZON)


@dataclass(frozen=True)
class KinesisSource:
    """One Kinesis data stream, read shard by shard.

    :param stream_name: the stream.
    :param client: makes a Kinesis client (on the executor that reads), e.g.
        ``functools.partial(JobCredentials.kinesis_client, credentials, region)``.
    :param start_position: where a shard with no checkpoint is read from.
    :param max_records_per_call: GetRecords' ``Limit``.
    :param consumer_arn: read through this enhanced fan-out consumer (SubscribeToShard) instead of GetRecords.
    """

    source_type: ClassVar[str] = KINESIS_SOURCE

    stream_name: str
    client: Callable[[], Any] = field(repr=False)
    start_position: StartPosition = FROM_TRIM_HORIZON
    max_records_per_call: int = MAX_RECORDS_PER_CALL
    consumer_arn: str | None = None

    def units(self) -> list[SourceUnit]:
        """The stream's shards within the retention period, parents first."""
        return [
            SourceUnit(s.shard_id, SHARD, s.parent_shard_ids, s.ending_sequence_number)
            for s in list_shards(self.client(), self.stream_name)
        ]

    def read(
        self, unit: SourceUnit, start: Checkpoint | None, *, cutoff: datetime, max_records: int
    ) -> UnitRange[Checkpoint, KinesisRecord]:
        """The shard's records after ``start`` that arrived at or before ``cutoff``, at most ``max_records``."""
        shard_range = ShardRange(unit.unit_id, start, self.start_position, max_records, unit.ending_sequence_number)
        if self.consumer_arn is not None:
            read = read_shard_range_fan_out(self.client(), self.consumer_arn, shard_range, cutoff=cutoff)
        else:
            read = read_shard_range(
                self.client(),
                self.stream_name,
                shard_range,
                cutoff=cutoff,
                max_records_per_call=self.max_records_per_call,
            )
        return UnitRange(unit.unit_id, start, read.last, read.records, read.shard_end)

    def position_to_text(self, unit: SourceUnit, position: Checkpoint) -> str:
        """The checkpoint as JSON: its sequence and sub-sequence number."""
        return checkpoint_to_text(position)

    def position_from_text(self, unit: SourceUnit, text: str) -> Checkpoint:
        return checkpoint_from_text(unit, text)
