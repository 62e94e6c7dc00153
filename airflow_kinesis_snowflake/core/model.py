"""The shared vocabulary: positions in a shard, where a batch writes, why a generation exists.

Everything here is plain data with no I/O, used on both sides of the Spark boundary (the executors
import it) and by the control plane.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import total_ordering
from typing import Any


class ConsumerType(StrEnum):
    """How a connector reads a stream: GetRecords, or SubscribeToShard through a fan-out consumer."""

    SHARED_THROUGHPUT = "SHARED_THROUGHPUT"
    ENHANCED_FAN_OUT = "ENHANCED_FAN_OUT"


class InitialPosition(StrEnum):
    """Where an application with no checkpoint starts reading a shard."""

    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"


def parse_sequence_number(value: str | int) -> int:
    """Return a sequence number as an int; reject anything that is not a non-negative decimal."""
    text = str(value)
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"not a Kinesis sequence number: {value!r}")
    return int(text)


@total_ordering
@dataclass(frozen=True)
class Checkpoint:
    """The last record delivered from a shard: everything at or below it is done."""

    sequence_number: str
    sub_sequence_number: int = 0

    def __post_init__(self) -> None:
        parse_sequence_number(self.sequence_number)
        if self.sub_sequence_number < 0:
            raise ValueError("sub_sequence_number must be >= 0")

    @property
    def key(self) -> tuple[int, int]:
        return parse_sequence_number(self.sequence_number), self.sub_sequence_number

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Checkpoint):
            return NotImplemented
        return self.key < other.key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Checkpoint):
            return NotImplemented
        return self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def covers(self, sequence_number: str, sub_sequence_number: int) -> bool:
        """True when the record (sequence, sub-sequence) is at or below this checkpoint."""
        return (parse_sequence_number(sequence_number), sub_sequence_number) <= self.key

    def to_dict(self) -> dict[str, object]:
        return {"sequence_number": self.sequence_number, "sub_sequence_number": self.sub_sequence_number}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Checkpoint:
        return cls(str(data["sequence_number"]), int(str(data.get("sub_sequence_number", 0))))


@dataclass(frozen=True)
class StartPosition:
    """Where a shard with no checkpoint is read from.

    LATEST is resolved once, when the lease is created, to AT_TIMESTAMP of that moment: a batch
    that runs later then still reads what arrived after the application started, and a retry of a
    batch reads the same records.
    """

    position: InitialPosition
    timestamp: datetime | None = None

    @classmethod
    def resolve(cls, initial: InitialPosition, timestamp: datetime | None, now: datetime) -> StartPosition:
        if initial is InitialPosition.LATEST:
            return cls(InitialPosition.AT_TIMESTAMP, now)
        if initial is InitialPosition.AT_TIMESTAMP:
            if timestamp is None:
                raise ValueError("AT_TIMESTAMP needs a timestamp")
            return cls(initial, timestamp)
        return cls(InitialPosition.TRIM_HORIZON)

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position.value,
            "timestamp": self.timestamp.isoformat() if self.timestamp else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StartPosition:
        ts = data.get("timestamp")
        return cls(InitialPosition(data["position"]), datetime.fromisoformat(ts) if ts else None)


@dataclass(frozen=True)
class Destination:
    database: str
    schema: str
    table: str

    @property
    def qualified_name(self) -> str:
        """``DATABASE.SCHEMA.TABLE``."""
        return f"{self.database}.{self.schema}.{self.table}"


class DestinationType(StrEnum):
    """What the connector writes into, as the Openflow connector names it."""

    TABLE = "TABLE"
    ICEBERG = "ICEBERG"
    INTERACTIVE = "INTERACTIVE"
    PIPE = "PIPE"


class GenerationReason(StrEnum):
    """Why a connector reads with an application name and generation."""

    FIRST_START = "first-start"  # the connector's first ingest run (or the first since this was recorded)
    ADOPTED = "adopted-from-ledger"  # a lost lease table, rebuilt from the ledger's newest generation
    RESET_NEW_APPLICATION_NAME = "reset-new_application_name"
    RESET_DELETE_TABLE = "reset-delete_table"
    RESET_WITHDRAWN = "reset-withdrawn"  # a reset that stopped before it changed anything
    RESTORE = "restore"

    @property
    def starts_over(self) -> bool:
        """A deliberate new generation: its shards start at the recorded position, not at a ledger mark."""
        return self in (GenerationReason.RESET_NEW_APPLICATION_NAME, GenerationReason.RESET_DELETE_TABLE)


@dataclass(frozen=True)
class GenerationRecord:
    """One row of the generations table.

    :param configured_application_name: the connector file's application name, where ingest
        runs start resolving.
    :param application_name: the application name (lease table) the connector reads with.
    :param generation_id: the lease-table generation that keys the ledger's marks.
    :param reason: why (see :class:`GenerationReason`).
    :param start: where shards with no ledger mark start in this generation.
    :param connector_id: the connector that recorded it.
    :param stream_arn: the stream read, as DescribeStreamSummary names it.
    :param stream_created_at: the stream's creation time (ISO 8601 UTC): a stream deleted and
        created again under the same name has another.
    :param recorded_at: when (set by Snowflake; None before it is written).
    :param replaces: a reset's or restore's: the generation the lease table held when it was
        recorded. While the table still holds it, the change was not carried out.
    :param destination: the table the connector loads, ``DATABASE.SCHEMA.TABLE``: an application
        name serves one destination, and another connector's rows are never adopted.
    """

    configured_application_name: str
    application_name: str
    generation_id: str
    reason: GenerationReason
    start: StartPosition | None = None
    connector_id: str | None = None
    stream_arn: str | None = None
    stream_created_at: str | None = None
    recorded_at: datetime | None = None
    replaces: str | None = None
    destination: str | None = None


@dataclass(frozen=True)
class ShardResult:
    """What one Spark task did with one shard range: read, and staged (nothing is loaded yet).

    :param shard_id: the shard.
    :param start: the checkpoint the range started after; None when it started at its start position.
    :param end: the last record read; None when the range read none (the checkpoint stays).
    :param records_read: user records read (after de-aggregation) up to the caps and the cut-off.
    :param rows_staged: rows staged for the destination table.
    :param dead_letters_staged: records staged for the parse-failure table.
    :param bytes_read: bytes of the user records' payloads.
    :param shard_end: the shard is closed and its last record was read.
    :param get_records_calls: GetRecords calls made (shared throughput).
    :param subscriptions: SubscribeToShard subscriptions made (enhanced fan-out).
    :param millis_behind_latest: how far behind the stream's tip the read ended, as Kinesis reports it.
    """

    shard_id: str
    start: Checkpoint | None
    end: Checkpoint | None
    records_read: int
    rows_staged: int
    dead_letters_staged: int
    bytes_read: int
    shard_end: bool
    get_records_calls: int = 0
    subscriptions: int = 0
    millis_behind_latest: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard_id": self.shard_id,
            "start": self.start.to_dict() if self.start else None,
            "end": self.end.to_dict() if self.end else None,
            "records_read": self.records_read,
            "rows_staged": self.rows_staged,
            "dead_letters_staged": self.dead_letters_staged,
            "bytes_read": self.bytes_read,
            "shard_end": self.shard_end,
            "get_records_calls": self.get_records_calls,
            "subscriptions": self.subscriptions,
            "millis_behind_latest": self.millis_behind_latest,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardResult:
        behind = data.get("millis_behind_latest")
        return cls(
            shard_id=str(data["shard_id"]),
            start=Checkpoint.from_dict(data["start"]) if data.get("start") else None,
            end=Checkpoint.from_dict(data["end"]) if data.get("end") else None,
            records_read=int(data["records_read"]),
            rows_staged=int(data["rows_staged"]),
            dead_letters_staged=int(data["dead_letters_staged"]),
            bytes_read=int(data["bytes_read"]),
            shard_end=bool(data["shard_end"]),
            get_records_calls=int(data.get("get_records_calls", 0)),
            subscriptions=int(data.get("subscriptions", 0)),
            millis_behind_latest=int(behind) if behind is not None else None,
        )


@dataclass(frozen=True)
class BatchResult:
    """What the Spark job of one batch loaded: recorded by its driver as JSON in Snowflake's batch
    outcomes table, next to the ledger (in the transaction that commits the batch), and read back by
    the control plane after spark-submit returns.

    :param batch_id: the plan's id.
    :param stage_dir: where this attempt staged its files.
    :param committed: the load transaction ran (some shard delivered records); rows and the
        ledger's marks moved together in it.
    :param rows_loaded: rows loaded into the destination table.
    :param dead_letters_loaded: rows loaded into the parse-failure table.
    :param shards: per shard range, what was read and staged.
    :param finished_at: when the driver finished the commit.
    :param schema: how the table's schema evolved (the report of
        :func:`~airflow_kinesis_snowflake.core.job.evolve_schema`).
    :param source: the ``source.type`` whose batch it was (``kinesis``, ``dynamodb``).
    :param detail: what the source's own result holds beyond these figures (a DynamoDB batch's
        :class:`~airflow_kinesis_snowflake.core.dynamodb_job.TableBatchResult`); empty for Kinesis.
    """

    batch_id: str
    stage_dir: str
    committed: bool
    rows_loaded: int
    dead_letters_loaded: int
    shards: tuple[ShardResult, ...]
    finished_at: datetime
    schema: dict[str, Any]
    # registry.KINESIS_SOURCE (this module imports nothing of the package; a test holds them equal).
    source: str = "kinesis"
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: what the job records as the batch's outcome."""
        return {
            "batch_id": self.batch_id,
            "stage_dir": self.stage_dir,
            "committed": self.committed,
            "rows_loaded": self.rows_loaded,
            "dead_letters_loaded": self.dead_letters_loaded,
            "shards": [s.to_dict() for s in self.shards],
            "finished_at": self.finished_at.isoformat(),
            "schema": self.schema,
            "source": self.source,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchResult:
        return cls(
            batch_id=str(data["batch_id"]),
            stage_dir=str(data["stage_dir"]),
            committed=bool(data["committed"]),
            rows_loaded=int(data["rows_loaded"]),
            dead_letters_loaded=int(data["dead_letters_loaded"]),
            shards=tuple(ShardResult.from_dict(s) for s in data["shards"]),
            finished_at=datetime.fromisoformat(data["finished_at"]),
            schema=dict(data.get("schema") or {}),
            source=str(data.get("source") or "kinesis"),  # outcomes recorded before sources were named
            detail=dict(data.get("detail") or {}),
        )
