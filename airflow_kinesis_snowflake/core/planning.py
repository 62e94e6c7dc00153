"""BatchPlan: which shard ranges one micro-batch covers.

A plan is plain JSON and fully determined by the checkpoints, the cut-off time and the caps, so a
retry of the same batch reads the same records and stages them under the same batch id.

A plan travels to the Spark driver inside the submission, as one application argument (its
:meth:`BatchPlan.work`, encoded by :func:`~.engine.wire.encode`), so that a driver on a cluster node
needs no disk shared with the Airflow worker. It holds no credential: names, positions, settings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_kinesis_snowflake.core.engine.wire import Work, WorkKind
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.model import Checkpoint, ConsumerType, Destination, DestinationType, StartPosition
from airflow_kinesis_snowflake.registry import KINESIS_SOURCE

if TYPE_CHECKING:  # the executors read plans and need no lease-table code
    from airflow_kinesis_snowflake.core.state.leases import Lease

# How a batch reads its shards: GetRecords, or SubscribeToShard through a registered consumer.

# ``batch.max_bytes_per_shard``'s default: user-record payload bytes one batch reads of one shard
# at most. The README's "Performance" (benchmarks/memory.py) has the measurements it was chosen from.
DEFAULT_MAX_BYTES_PER_SHARD = 64 * 2**20


@dataclass(frozen=True)
class ShardRange:
    """Records of one shard after ``start`` (or from ``start_position``), up to the caps.

    ``max_bytes`` caps the user records' payload bytes (None: no cap); a range stops after the
    record that reaches it.
    """

    shard_id: str
    start: Checkpoint | None
    start_position: StartPosition
    max_records: int
    ending_sequence_number: str | None = None
    max_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {
            "shard_id": self.shard_id,
            "start": self.start.to_dict() if self.start else None,
            "start_position": self.start_position.to_dict(),
            "max_records": self.max_records,
            "ending_sequence_number": self.ending_sequence_number,
        }
        if self.max_bytes is not None:  # absent without a cap: such a plan keeps its batch id
            data["max_bytes"] = self.max_bytes
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ShardRange:
        return cls(
            shard_id=data["shard_id"],
            start=Checkpoint.from_dict(data["start"]) if data.get("start") else None,
            start_position=StartPosition.from_dict(data["start_position"]),
            max_records=int(data["max_records"]),
            ending_sequence_number=data.get("ending_sequence_number"),
            max_bytes=None if data.get("max_bytes") is None else int(data["max_bytes"]),
        )


@dataclass(frozen=True)
class BatchPlan:
    """One micro-batch: the shard ranges, where they go, and the bounds shared by all ranges.

    ``destination_type``, ``schema_evolution`` (None: as the table's ENABLE_SCHEMA_EVOLUTION says)
    and ``on_unknown_key`` decide schema evolution (see :mod:`~.evolution`), ``pipe_definition``
    how a PIPE destination loads; they do not change what the batch reads, so they are not part
    of its id. Neither do ``consumer_type`` and ``consumer_arn`` (the ENHANCED_FAN_OUT consumer the
    ranges are read through): both readers take the same records of a range.
    """

    application_name: str
    generation_id: str
    stream_name: str
    region: str
    destination: Destination
    cutoff: datetime
    max_records_per_call: int
    ranges: tuple[ShardRange, ...] = field(default=())
    destination_type: str = DestinationType.TABLE
    schema_evolution: bool | None = None
    on_unknown_key: UnknownKeys = UnknownKeys.IGNORE
    # PIPE: the pipe's COPY statement, applied to the batch's staged files (see :mod:`~.pipe`).
    pipe_definition: str | None = None
    consumer_type: str = ConsumerType.SHARED_THROUGHPUT
    consumer_arn: str | None = None
    table_columns: tuple[TableColumn, ...] = ()

    def __post_init__(self) -> None:
        if self.consumer_type not in tuple(ConsumerType):
            raise ValueError(f"consumer_type {self.consumer_type!r} is not one of {', '.join(ConsumerType)}")
        if self.consumer_type == ConsumerType.ENHANCED_FAN_OUT and not self.consumer_arn:
            raise ValueError("an ENHANCED_FAN_OUT plan needs the consumer_arn its ranges are read through")

    @property
    def batch_id(self) -> str:
        """Stable id of this plan: same checkpoints, cut-off and caps give the same id."""
        digest = hashlib.sha256(
            json.dumps(
                {
                    "app": self.application_name,
                    "gen": self.generation_id,
                    "cutoff": self.cutoff.isoformat(),
                    "ranges": [r.to_dict() for r in self.ranges],
                },
                sort_keys=True,
            ).encode()
        ).hexdigest()
        return digest[:20]

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON values (:meth:`from_dict` reads them back)."""
        return {
            "batch_id": self.batch_id,
            "application_name": self.application_name,
            "generation_id": self.generation_id,
            "stream_name": self.stream_name,
            "region": self.region,
            "destination": {
                "database": self.destination.database,
                "schema": self.destination.schema,
                "table": self.destination.table,
            },
            "cutoff": self.cutoff.isoformat(),
            "max_records_per_call": self.max_records_per_call,
            "ranges": [r.to_dict() for r in self.ranges],
            "destination_type": self.destination_type,
            "schema_evolution": self.schema_evolution,
            "on_unknown_key": self.on_unknown_key.value,
            "pipe_definition": self.pipe_definition,
            "consumer_type": self.consumer_type,
            "consumer_arn": self.consumer_arn,
            "table_columns": [asdict(c) for c in self.table_columns],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """The plan as JSON; ``indent=None`` gives the compact form."""
        return json.dumps(self.to_dict(), indent=indent, separators=None if indent is not None else (",", ":"))

    def work(self) -> Work:
        """This plan as a Spark job's work (:mod:`~.engine.wire`)."""
        return Work(KINESIS_SOURCE, WorkKind.BATCH, self.region, self.to_dict())

    def too_large(self, length: int, limit: int) -> str:
        """Why the plan cannot be sent, and how many shards a batch may take instead."""
        ranges = len(self.ranges)
        # Ranges make up nearly all of a large plan: scale down, with a margin for their spread.
        fits = max(1, int(ranges * limit / length * 0.9))
        return (
            f"the plan of batch {self.batch_id} ({ranges} shard ranges) encodes to {length} characters, more than "
            f"the {limit} one spark-submit argument may carry (the plan travels inside the submission, so that a "
            f"driver on a cluster node can read it): set batch.max_shards_per_batch in the connector file to at "
            f"most {fits}"
        )

    @classmethod
    def from_work(cls, work: Work) -> BatchPlan:
        """The plan of a Kinesis batch's work.

        :raises ValueError: ``work`` is not a Kinesis batch.
        """
        return cls.from_dict(work.body_for(KINESIS_SOURCE, WorkKind.BATCH))

    @classmethod
    def from_json(cls, text: str) -> BatchPlan:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BatchPlan:
        return cls(
            application_name=data["application_name"],
            generation_id=data["generation_id"],
            stream_name=data["stream_name"],
            region=data["region"],
            destination=Destination(**data["destination"]),
            cutoff=datetime.fromisoformat(data["cutoff"]),
            max_records_per_call=int(data["max_records_per_call"]),
            ranges=tuple(ShardRange.from_dict(r) for r in data["ranges"]),
            # Absent from plans written before these fields existed.
            destination_type=data.get("destination_type", DestinationType.TABLE),
            schema_evolution=data.get("schema_evolution"),
            on_unknown_key=UnknownKeys(data.get("on_unknown_key", UnknownKeys.IGNORE.value)),
            pipe_definition=data.get("pipe_definition"),
            consumer_type=data.get("consumer_type", ConsumerType.SHARED_THROUGHPUT),
            consumer_arn=data.get("consumer_arn"),
            table_columns=tuple(TableColumn(**c) for c in data.get("table_columns", ())),
        )


def eligible_leases(leases: Mapping[str, Lease], now: float) -> list[Lease]:
    """Leases this batch may take: not finished, free or expired, and with every parent finished.

    A parent with no lease has left the stream's retention period and counts as finished. The
    longest-waiting shards come first, so that batches capped by ``max_shards_per_batch`` (or
    running side by side) share the stream fairly.
    """
    eligible = []
    for shard_id in sorted(leases, key=lambda k: (leases[k].checkpointed_at, k)):
        lease = leases[shard_id]
        if lease.shard_ended or lease.is_held(now):
            continue
        if all(leases[p].shard_ended for p in lease.parent_shard_ids if p in leases):
            eligible.append(lease)
    return eligible


def plan_ranges(
    leases: Iterable[Lease],
    *,
    max_records_per_shard: int,
    ending_sequence_numbers: Mapping[str, str | None] | None = None,
    max_bytes_per_shard: int | None = None,
) -> tuple[ShardRange, ...]:
    """One range per held lease, starting after its checkpoint, capped in records and payload bytes."""
    ends = ending_sequence_numbers or {}
    return tuple(
        ShardRange(
            shard_id=lease.shard_id,
            start=lease.checkpoint,
            start_position=lease.start,
            max_records=max_records_per_shard,
            ending_sequence_number=ends.get(lease.shard_id),
            max_bytes=max_bytes_per_shard,
        )
        for lease in sorted(leases, key=lambda lease: lease.shard_id)
    )
