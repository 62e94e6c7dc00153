"""The DynamoDB source's data plane: one batch of one table, on Spark or in-process.

:func:`~.dynamodb_sync.sync_table` decides, leases and plans a batch (the control plane); the plan
(:class:`TableBatchPlan`) says everything the data plane needs, and nothing secret: the table, its
stream, the generation, the cut-off, each snapshot segment's cursor and each stream shard's ledger
mark, the caps, the destination and its layout. The data plane reads every unit, stages the
changes as Parquet and applies them with the ledgers in one Snowflake transaction
(:meth:`~.load.dynamodb_sink.DynamoDBSink.apply_batch`); it answers a :class:`TableBatchResult`.

On Spark (:func:`load`, driven by :mod:`.dynamodb_driver`, submitted as
:mod:`airflow_kinesis_snowflake.spark_jobs.dynamodb_to_snowflake`):

* one Spark task per snapshot segment and per stream shard (``sc.parallelize(units, len(units))``):
  each reads its unit (:func:`~.sources.dynamodb.snapshot.scan_segment`, with a read-rate limiter
  sized for the segments read at once; :func:`~.sources.dynamodb.streams.read_stream_shard`);
* with the ``unpacked`` layout the driver first collects what the units' changes need of the
  table (widenings, new attributes) and makes the table fit, before anything is staged
  (:func:`staging_columns`, the same as in-process); the reads are kept (memory, then disk), so
  DynamoDB is read once;
* each task writes its changes' Parquet and PUTs it to the batch's stage directory;
* the driver applies the batch once, and records the :class:`TableBatchResult` in the batch
  outcomes table under the batch id and the submission's attempt id
  (:meth:`~.load.snowflake_sink.SnowflakeSink.read_outcome` reads it back).

A read that finds a gap (``TrimmedDataAccessException``) applies nothing: the result carries the
gap, and the control plane starts the next generation or stops, as in-process.

Credentials reach the driver as for the Kinesis job (:class:`~.job.JobCredentials`): the
spark-submit process's environment, or the driver's own identity with the Snowflake connection
read from Secrets Manager; never an argument or a Spark setting. The driver's output is redacted.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_kinesis_snowflake.core.engine.wire import Work, WorkKind
from airflow_kinesis_snowflake.core.load.dynamodb_failures import ItemFailure, set_aside
from airflow_kinesis_snowflake.core.load.dynamodb_rows import (
    ITEM_COLUMN,
    KeyAttribute,
    Layout,
    Widening,
    packed_rows,
    summarize,
    table_columns,
    unpacked_rows,
    widenings,
)
from airflow_kinesis_snowflake.core.load.dynamodb_sink import (
    Deletes,
    DynamoDBSink,
    DynamoDBTarget,
    GenerationSupersededError,
    KeyColumn,
    MergeResult,
    SegmentMark,
)
from airflow_kinesis_snowflake.core.load.evolution import KeySummary, merge, plan_changes
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import ROWS_DIR, OutcomeKey
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.model import ItemChange
from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateSettings
from airflow_kinesis_snowflake.registry import DYNAMODB_SOURCE

#: Where outcomes recorded by earlier releases kept the :class:`TableBatchResult`: under this key of the
#: recorded :class:`~.model.BatchResult`'s ``schema`` (it is its ``detail`` now).
LEGACY_RESULT_KEY = "dynamodb_batch"
#: Widenings a batch runs at most before it stages (each pass widens every column it can).
WIDENING_PASSES = 3
STREAMS_ENDPOINT_ENV = "AWS_ENDPOINT_URL_DYNAMODBSTREAMS"

log = logging.getLogger(__name__)


def generation_id(table: str, generation: int) -> str:
    """The ledger's generation of a table's stream marks."""
    return f"{table}/g{generation}"


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _parse_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass(frozen=True)
class SegmentUnit:
    """One snapshot segment of a batch: where it starts.

    :param number: the Scan's ``Segment``.
    :param cursor: the ``LastEvaluatedKey`` to resume after, as text; None from the segment's start.
    :param start: the snapshot ledger's mark the batch started from (None: never read).
    """

    number: int
    cursor: str | None
    start: SegmentMark | None = None

    def to_dict(self) -> dict[str, Any]:
        start = self.start
        mark = None if start is None else {"cursor": start.cursor, "done": start.done, "items": start.items}
        return {"number": self.number, "cursor": self.cursor, "start": mark}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SegmentUnit:
        mark = data.get("start")
        start = None if mark is None else SegmentMark(mark["cursor"], bool(mark["done"]), int(mark["items"]))
        return cls(int(data["number"]), data.get("cursor"), start)


@dataclass(frozen=True)
class ShardUnit:
    """One stream shard of a batch, read after its ledger mark.

    :param key: the shard's lease key (``<table>/g<n>/<shard>``), which its ledger mark is kept under.
    :param shard_id: the stream's shard id.
    :param start: the ledger's mark (None: from the shard's start, or the generation's start).
    :param first_record: with no mark, read from this sequence number, the shard's first, so that
        records trimmed before it are a gap (:func:`.sources.dynamodb.progress.reads_from_first_record`);
        None: from TRIM_HORIZON.
    """

    key: str
    shard_id: str
    start: Checkpoint | None = None
    first_record: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "shard_id": self.shard_id,
            "start": self.start.to_dict() if self.start else None,
            "first_record": self.first_record,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ShardUnit:
        start = data.get("start")
        return cls(
            data["key"],
            data["shard_id"],
            Checkpoint.from_dict(dict(start)) if start else None,
            data.get("first_record"),
        )


Unit = SegmentUnit | ShardUnit


def target_to_dict(target: DynamoDBTarget) -> dict[str, Any]:
    """The target as plain values (the inverse of :func:`target_from_dict`), for a plan or a run."""
    d = target.destination
    return {
        "destination": {"database": d.database, "schema": d.schema, "table": d.table},
        "source_table": target.source_table,
        "keys": [[k.name, k.column_type] for k in target.keys],
        "layout": target.layout.value,
        "deletes": target.deletes.value,
    }


def target_from_dict(data: Mapping[str, Any]) -> DynamoDBTarget:
    """The target a mapping of :func:`target_to_dict` holds."""
    d = data["destination"]
    return DynamoDBTarget(
        destination=Destination(d["database"], d["schema"], d["table"]),
        source_table=data["source_table"],
        keys=tuple(KeyColumn(name, column_type) for name, column_type in data["keys"]),
        layout=Layout(data["layout"]),
        deletes=Deletes(data["deletes"]),
    )


@dataclass(frozen=True)
class TableBatchPlan:
    """One batch of one table's sync: what the data plane reads, and where it applies it.

    Names, positions and settings only, no credential; the same marks give the same plan.

    :param application_name: the connector's application name.
    :param table: the DynamoDB table.
    :param region: the table's AWS region.
    :param stream_arn: the table's stream.
    :param generation: the sync generation the batch reads in.
    :param stream_not_before: stream records created before this are older than the generation's view.
    :param total_segments: the generation's snapshot segments (0 without a snapshot).
    :param cutoff: stream records created after it are left for the next batch.
    :param batch_id: named by where the batch starts.
    :param segments: the snapshot segments read, each from its cursor.
    :param shards: the stream shards read, each after its ledger mark.
    :param max_items_per_segment: items one segment yields at most.
    :param max_records_per_shard: records one shard yields at most.
    :param read_rate: the snapshot's read-rate limit; None reads as fast as the table answers.
    :param target: the destination, its layout and its deletes.
    :param keys: the table's key attributes and their types.
    :param generation_started_at: when the generation started (soft deletes: a removal made before it
        marks no row of the generation).
    """

    application_name: str
    table: str
    region: str
    stream_arn: str
    generation: int
    stream_not_before: datetime | None
    total_segments: int
    cutoff: datetime
    batch_id: str
    segments: tuple[SegmentUnit, ...]
    shards: tuple[ShardUnit, ...]
    max_items_per_segment: int
    max_records_per_shard: int
    read_rate: ReadRateSettings | None
    target: DynamoDBTarget
    keys: tuple[KeyAttribute, ...]
    generation_started_at: datetime | None = None

    @property
    def generation_id(self) -> str:
        return generation_id(self.table, self.generation)

    @property
    def units(self) -> list[Unit]:
        """Every unit of work: one per segment, one per shard (one Spark task each)."""
        return [*self.segments, *self.shards]

    @property
    def destination_columns(self) -> list[TableColumn]:
        soft = self.target.deletes is Deletes.SOFT
        return table_columns(self.keys, self.target.layout, soft_deletes=soft)

    def to_dict(self) -> dict[str, Any]:
        rate = self.read_rate
        return {
            "application_name": self.application_name,
            "table": self.table,
            "region": self.region,
            "stream_arn": self.stream_arn,
            "generation": self.generation,
            "stream_not_before": _time(self.stream_not_before),
            "total_segments": self.total_segments,
            "cutoff": _time(self.cutoff),
            "batch_id": self.batch_id,
            "segments": [s.to_dict() for s in self.segments],
            "shards": [s.to_dict() for s in self.shards],
            "max_items_per_segment": self.max_items_per_segment,
            "max_records_per_shard": self.max_records_per_shard,
            "read_rate": None
            if rate is None
            else {"read_fraction": rate.read_fraction, "read_units_per_second": rate.read_units_per_second},
            "target": target_to_dict(self.target),
            "keys": [k.to_list() for k in self.keys],
            "generation_started_at": _time(self.generation_started_at),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableBatchPlan:
        rate = data.get("read_rate")
        cutoff = _parse_time(data["cutoff"])
        assert cutoff is not None
        return cls(
            application_name=data["application_name"],
            table=data["table"],
            region=data["region"],
            stream_arn=data["stream_arn"],
            generation=int(data["generation"]),
            stream_not_before=_parse_time(data.get("stream_not_before")),
            total_segments=int(data["total_segments"]),
            cutoff=cutoff,
            batch_id=data["batch_id"],
            segments=tuple(SegmentUnit.from_dict(s) for s in data["segments"]),
            shards=tuple(ShardUnit.from_dict(s) for s in data["shards"]),
            max_items_per_segment=int(data["max_items_per_segment"]),
            max_records_per_shard=int(data["max_records_per_shard"]),
            read_rate=None if rate is None else ReadRateSettings(rate["read_fraction"], rate["read_units_per_second"]),
            target=target_from_dict(data["target"]),
            keys=tuple(KeyAttribute.from_list(k) for k in data["keys"]),
            generation_started_at=_parse_time(data.get("generation_started_at")),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TableBatchPlan:
        return cls.from_dict(json.loads(text))

    def work(self) -> Work:
        """This plan as a Spark job's work (:mod:`~.engine.wire`)."""
        return Work(DYNAMODB_SOURCE, WorkKind.BATCH, self.region, self.to_dict())

    def too_large(self, length: int, limit: int) -> str:
        """Why the plan cannot be sent, and what to lower."""
        return (
            f"the plan of batch {self.batch_id} of table {self.table} ({len(self.segments)} segments, "
            f"{len(self.shards)} stream shards) encodes to {length} characters, more than the {limit} one "
            "spark-submit argument may carry: lower snapshot_total_segments in the connector file"
        )

    @classmethod
    def from_work(cls, work: Work) -> TableBatchPlan:
        """The plan of a DynamoDB batch's work.

        :raises ValueError: ``work`` is not a DynamoDB batch.
        """
        return cls.from_dict(work.body_for(DYNAMODB_SOURCE, WorkKind.BATCH))


@dataclass(frozen=True)
class SegmentOutcome:
    """What a batch read of one segment: its items, and where it left the segment.

    :param cursor: the cursor after the read; None when the segment was read to its end.
    """

    number: int
    items: int
    cursor: str | None

    @property
    def done(self) -> bool:
        return self.cursor is None


@dataclass(frozen=True)
class ShardOutcome:
    """What a batch read of one stream shard.

    :param last_sequence_number: the checkpoint after the read (the last record read or skipped).
    :param shard_end: the shard is closed and was read to its end.
    """

    key: str
    shard_id: str
    records_read: int
    last_sequence_number: str | None
    shard_end: bool


@dataclass(frozen=True)
class GapFound:
    """A read that found the stream's records after its mark trimmed (:class:`~.streams.StreamGap`)."""

    shard_id: str
    checkpoint: str | None
    reason: str


@dataclass(frozen=True)
class TableBatchResult:
    """What the data plane did with one plan: the MERGE's figures and each unit's read.

    :param merge: None when nothing was applied (a gap was found, or the generation was superseded).
    :param gap: the gap a read found; nothing was applied then.
    :param superseded: why the batch was refused: a newer generation was recorded since it was
        planned (:class:`~.load.dynamodb_sink.GenerationSupersededError`); nothing was applied.
    """

    batch_id: str
    merge: MergeResult | None
    segments: tuple[SegmentOutcome, ...] = ()
    shards: tuple[ShardOutcome, ...] = ()
    gap: GapFound | None = None
    superseded: str | None = None

    def to_dict(self) -> dict[str, Any]:
        m = self.merge
        return {
            "batch_id": self.batch_id,
            "merge": None
            if m is None
            else {
                "changes_loaded": m.changes_loaded,
                "rows_inserted": m.rows_inserted,
                "rows_updated": m.rows_updated,
                "rows_deleted": m.rows_deleted,
                "completed_snapshot": m.completed_snapshot,
                "items_set_aside": m.items_set_aside,
            },
            "segments": [{"number": s.number, "items": s.items, "cursor": s.cursor} for s in self.segments],
            "shards": [
                {
                    "key": s.key,
                    "shard_id": s.shard_id,
                    "records_read": s.records_read,
                    "last_sequence_number": s.last_sequence_number,
                    "shard_end": s.shard_end,
                }
                for s in self.shards
            ],
            "gap": None
            if self.gap is None
            else {"shard_id": self.gap.shard_id, "checkpoint": self.gap.checkpoint, "reason": self.gap.reason},
            "superseded": self.superseded,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableBatchResult:
        m, gap = data.get("merge"), data.get("gap")
        return cls(
            batch_id=data["batch_id"],
            merge=None if m is None else MergeResult(**m),
            segments=tuple(SegmentOutcome(**s) for s in data["segments"]),
            shards=tuple(ShardOutcome(**s) for s in data["shards"]),
            gap=None if gap is None else GapFound(**gap),
            superseded=data.get("superseded"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TableBatchResult:
        return cls.from_dict(json.loads(text))

    def as_batch_result(self, stage_dir: str) -> BatchResult:
        """The outcome as the batch outcomes table holds it: a DynamoDB source's, this result its ``detail``."""
        return BatchResult(
            batch_id=self.batch_id,
            stage_dir=stage_dir,
            committed=self.merge is not None,
            rows_loaded=self.merge.changes_loaded if self.merge else 0,
            dead_letters_loaded=0,
            shards=(),
            finished_at=datetime.now(UTC),
            schema={},
            source=DYNAMODB_SOURCE,
            detail=self.to_dict(),
        )

    @classmethod
    def from_batch_result(cls, result: BatchResult) -> TableBatchResult:
        """The result :meth:`as_batch_result` recorded (or an earlier release, under :data:`LEGACY_RESULT_KEY`).

        :raises ValueError: the outcome is not a DynamoDB batch's.
        """
        if result.source == DYNAMODB_SOURCE and result.detail:
            return cls.from_dict(result.detail)
        if LEGACY_RESULT_KEY in result.schema:
            return cls.from_dict(result.schema[LEGACY_RESULT_KEY])
        raise ValueError(f"the outcome of batch {result.batch_id} holds no DynamoDB batch result")


# -- the data plane's steps, shared by Spark and the in-process run ---------------------------------------------


def staging_columns(
    sink: DynamoDBSink,
    plan: TableBatchPlan,
    widenings_for: Callable[[list[TableColumn]], list[Widening]],
    summary_for: Callable[[list[TableColumn]], KeySummary],
) -> list[TableColumn]:
    """The columns the batch is staged with; with ``unpacked``, the destination's once it fits them.

    As for Kinesis records (:func:`~.job.evolve_schema`), before anything is staged: an attribute
    column that cannot hold a value of the batch exactly is widened (``NUMBER(38,0)`` and an S value
    give ``VARCHAR``; :func:`~.load.dynamodb_rows.widenings`), then a column is added for each new
    attribute (:func:`~.load.dynamodb_rows.summarize`, :func:`~.load.evolution.plan_changes`; all
    of the batch's, so that no value is left without a column).

    :param widenings_for: the widenings the batch's changes need of these columns (in-process: of
        all changes; on Spark: each unit's, joined by :func:`join_widenings`).
    :param summary_for: the batch's attributes without a column (on Spark: the units' summaries merged).
    """
    if plan.target.layout is Layout.PACKED:
        return plan.destination_columns
    columns = sink.widen_columns(())
    for _ in range(WIDENING_PASSES):
        wider = widenings_for(columns)
        if not wider:
            break
        log.info("%s: widening %s", plan.table, ", ".join(f"{w.column} to {w.sql_type}" for w in wider))
        columns = sink.widen_columns(wider)
    summary = summary_for(columns)
    changes = plan_changes(summary, columns, evolve=True, max_new_columns=max(len(summary.keys), 1))
    if changes.add:
        log.info("%s: adding columns %s", plan.table, ", ".join(f"{c.name} {c.type.sql}" for c in changes.add))
        columns = sink.add_columns([(c.name, c.type.sql) for c in changes.add])
    return columns


def join_widenings(per_unit: Sequence[Sequence[Widening]], columns: Sequence[TableColumn]) -> list[Widening]:
    """The units' widenings as one batch's: a column that one unit wants ``VARIANT`` is ``VARIANT``.

    A unit's widening is ``VARCHAR`` or ``VARIANT`` (the lattice's join with the column's type), and
    ``VARIANT`` holds whatever ``VARCHAR`` holds; in column order.
    """
    wanted: dict[str, str] = {}
    for unit in per_unit:
        for w in unit:
            if wanted.get(w.column) != "VARIANT":
                wanted[w.column] = w.sql_type
    order = [c.name for c in columns]
    return [Widening(name, wanted[name]) for name in sorted(wanted, key=lambda n: order.index(n) if n in order else 0)]


def rows_of(changes: Sequence[ItemChange], keys: Sequence[KeyAttribute], columns: Sequence[TableColumn]) -> Any:
    """The Arrow table of ``changes`` staged with ``columns`` (packed when they hold ``ITEM``)."""
    if any(c.name == ITEM_COLUMN for c in columns):
        return packed_rows(changes, keys)
    return unpacked_rows(changes, keys, columns)


def stage_changes(
    put_file: Callable[[Path, str], None],
    changes: Sequence[ItemChange],
    keys: Sequence[KeyAttribute],
    columns: Sequence[TableColumn],
    stage_dir: str,
    name: str = "changes",
) -> int:
    """Write ``changes`` as one Parquet file and PUT it to ``<stage_dir>/rows/``; the rows staged."""
    import pyarrow.parquet as pq

    if not changes:
        return 0
    with tempfile.TemporaryDirectory(prefix="dynamodb-batch-") as tmp:
        path = Path(tmp) / f"{name}.parquet"
        pq.write_table(rows_of(changes, keys, columns), path)
        put_file(path, f"{stage_dir}/{ROWS_DIR}")
    return len(changes)


def apply_units(
    plan: TableBatchPlan,
    sink: DynamoDBSink,
    *,
    stage_dir: str,
    rows: int,
    columns: Sequence[TableColumn],
    segments: Sequence[SegmentOutcome],
    shards: Sequence[ShardOutcome],
    outcome: Callable[[MergeResult], tuple[OutcomeKey, BatchResult]] | None = None,
    failures: Sequence[ItemFailure] = (),
) -> MergeResult:
    """Apply the staged changes and move both ledgers in one transaction, guarded by the plan's marks.

    A shard's mark moves when its read got past the mark; a segment's moves to its new cursor (or
    done), counting its items.

    :param outcome: the batch's outcome, recorded in the same transaction
        (:meth:`.load.dynamodb_sink.DynamoDBSink.apply_batch`).
    :param failures: the changes set aside (:func:`~.load.dynamodb_failures.set_aside`), kept in the
        same transaction.
    """
    starts = {s.key: s.start for s in plan.shards}
    shard_ends = {}
    for shard in shards:
        start = starts.get(shard.key)
        if shard.last_sequence_number is not None and (
            start is None or start.sequence_number != shard.last_sequence_number
        ):
            shard_ends[shard.key] = Checkpoint(shard.last_sequence_number)
    segment_starts = {s.number: s.start for s in plan.segments}
    segment_ends = {}
    for segment in segments:
        before = segment_starts.get(segment.number)
        items = (before.items if before else 0) + segment.items
        segment_ends[segment.number] = SegmentMark(segment.cursor, done=segment.done, items=items)
    return sink.apply_batch(
        application_name=plan.application_name,
        generation_id=plan.generation_id,
        batch_id=plan.batch_id,
        stage_dir=stage_dir,
        rows=rows,
        columns=columns,
        shard_starts={k: starts.get(k) for k in shard_ends},
        shard_ends=shard_ends,
        snapshot_generation=plan.generation if segment_ends else None,
        total_segments=plan.total_segments,
        segment_starts={n: segment_starts.get(n) for n in segment_ends},
        segment_ends=segment_ends,
        generation=plan.generation,
        outcome=outcome,
        failures=failures,
        generation_started_at=plan.generation_started_at,
    )


def new_stage_dir(plan: TableBatchPlan) -> str:
    """A fresh stage directory per attempt: a retried batch never mixes with a failed attempt's files."""
    return f"{plan.application_name}/{plan.table}/{plan.batch_id}/{uuid.uuid4().hex[:12]}"


# -- Spark ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AwsAccess:
    """How a task reaches DynamoDB and its stream: the job's credentials, and the endpoints.

    Travels inside the serialised task, never on a command line or in a Spark setting.
    """

    credentials: Any = field(repr=False)  # JobCredentials
    region: str
    streams_endpoint: str | None = None

    def dynamodb(self) -> Any:
        from botocore.config import Config

        aws = self.credentials.aws
        import boto3

        # One attempt per call: scan_segment counts and backs off from throttles itself.
        return boto3.client(
            "dynamodb",
            region_name=self.region,
            aws_access_key_id=aws.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=aws.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=aws.get("AWS_SESSION_TOKEN"),
            endpoint_url=aws.get("AWS_ENDPOINT_URL_DYNAMODB"),
            config=Config(retries={"total_max_attempts": 1}),
        )

    def streams(self) -> Any:
        import boto3

        aws = self.credentials.aws
        return boto3.client(
            "dynamodbstreams",
            region_name=self.region,
            aws_access_key_id=aws.get("AWS_ACCESS_KEY_ID"),
            aws_secret_access_key=aws.get("AWS_SECRET_ACCESS_KEY"),
            aws_session_token=aws.get("AWS_SESSION_TOKEN"),
            endpoint_url=self.streams_endpoint,
        )


@dataclass(frozen=True)
class ClientAccess:
    """How the units are read in the Airflow task's process: with the clients given (its hooks')."""

    dynamodb_client: Any
    streams_client: Any

    def dynamodb(self) -> Any:
        return self.dynamodb_client

    def streams(self) -> Any:
        return self.streams_client


@dataclass
class UnitRead:
    """A Spark task's read of one unit: its changes and figures, or the gap it found."""

    unit: Unit
    changes: list[ItemChange]
    segment: SegmentOutcome | None = None
    shard: ShardOutcome | None = None
    gap: GapFound | None = None
    failures: list[ItemFailure] = field(default_factory=list)


def read_unit(unit: Unit, plan: TableBatchPlan, access: Any, snapshot_table: Any, rate: float | None) -> UnitRead:
    """Spark task: read one segment (from its cursor, at ``rate``) or one shard (after its mark).

    :param access: makes the task's DynamoDB and DynamoDB Streams clients (:class:`AwsAccess` on Spark).
    """
    from airflow_kinesis_snowflake.core.sources.dynamodb.rate import ReadRateLimiter
    from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import Segment, SegmentCursor, scan_segment
    from airflow_kinesis_snowflake.core.sources.dynamodb.streams import StreamGap, read_stream_shard

    if isinstance(unit, SegmentUnit):
        segment = Segment(plan.generation, unit.number, plan.total_segments)
        cursor = SegmentCursor.from_text(unit.cursor) if unit.cursor is not None else None
        limiter = ReadRateLimiter(rate) if rate is not None else None
        read = scan_segment(access.dynamodb(), snapshot_table, segment, cursor, plan.max_items_per_segment, limiter)
        after = None if read.cursor is None else read.cursor.to_text()
        staged, failures = set_aside(read.changes, plan.keys, plan.target.layout)
        return UnitRead(unit, staged, segment=SegmentOutcome(unit.number, len(read.changes), after), failures=failures)
    after_mark = unit.start.sequence_number if unit.start else None
    try:
        got = read_stream_shard(
            access.streams(),
            plan.stream_arn,
            unit.shard_id,
            table=plan.table,
            snapshot=plan.generation,
            cutoff=plan.cutoff,
            max_records=plan.max_records_per_shard,
            after=after_mark,
            not_before=plan.stream_not_before,
            first_record=unit.first_record,
        )
    except StreamGap as err:
        return UnitRead(unit, [], gap=GapFound(err.shard_id, err.checkpoint, err.reason))
    outcome = ShardOutcome(unit.key, unit.shard_id, got.records_read, got.last_sequence_number, got.shard_end)
    staged, failures = set_aside(got.changes, plan.keys, plan.target.layout)
    return UnitRead(unit, staged, shard=outcome, failures=failures)


def _unit_name(unit: Unit) -> str:
    if isinstance(unit, SegmentUnit):
        return f"segment-{unit.number}"
    return "shard-" + "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in unit.shard_id)


def stage_unit(
    read: UnitRead, plan: TableBatchPlan, columns: Sequence[TableColumn], stage_dir: str, credentials: Any
) -> int:
    """Spark task: build the unit's Parquet and PUT it to the batch's stage directory; the rows staged."""
    if not read.changes:
        return 0
    with credentials.snowflake_connection() as conn:
        sink = DynamoDBSink(conn, plan.target)
        return stage_changes(
            sink.put_file, read.changes, plan.keys, columns, stage_dir, f"{_unit_name(read.unit)}-{plan.batch_id}"
        )


def load(
    sc: Any, plan: TableBatchPlan, credentials: Any, attempt_id: str | None = None, access: Any = None
) -> TableBatchResult:
    """Driver: read every unit (one task each), stage, apply once; the result recorded in Snowflake.

    The same steps run on Spark (``sc`` a SparkContext) and in the Airflow task's process (``sc`` a
    :class:`~.engine.local.LocalContext`, when the connector has no Spark connection).

    :param credentials: the job's :class:`~.engine.credentials.JobCredentials`, or anything whose
        ``snowflake_connection()`` gives a Snowflake connection (:class:`~.engine.local.SharedConnection`).
    :param attempt_id: the submission's attempt id, which the result is recorded under.
    :param access: the DynamoDB and DynamoDB Streams clients' maker (``dynamodb()``, ``streams()``);
        an :class:`AwsAccess` with ``credentials`` when None.
    """
    from airflow_kinesis_snowflake.core.engine.local import kept
    from airflow_kinesis_snowflake.core.sources.dynamodb.rate import segment_read_rate
    from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import SnapshotTable

    if access is None:
        endpoint = credentials.aws.get(STREAMS_ENDPOINT_ENV) or os.environ.get(STREAMS_ENDPOINT_ENV)
        access = AwsAccess(credentials, plan.region, endpoint)
    snapshot_table, rate = None, None
    if plan.segments:
        snapshot_table = SnapshotTable.from_description(access.dynamodb().describe_table(TableName=plan.table)["Table"])
        if plan.read_rate is not None:
            # Every segment of the batch reads at once, each with its share of the table's rate.
            rate = segment_read_rate(snapshot_table.capacity, plan.read_rate, len(plan.segments))
    units = plan.units
    stage_dir = new_stage_dir(plan)
    parallel = sc.parallelize(units, max(1, len(units)))
    reads = kept(parallel.map(lambda u: read_unit(u, plan, access, snapshot_table, rate)))
    try:
        figures = reads.map(lambda r: (r.segment, r.shard, r.gap, r.failures)).collect()
        failures = [f for *_, unit_failures in figures for f in unit_failures]
        figures = [(s, sh, g) for s, sh, g, _ in figures]
        gaps = [g for _, _, g in figures if g is not None]
        segments = tuple(s for s, _, _ in figures if s is not None)
        shards = tuple(s for _, s, _ in figures if s is not None)
        if gaps:
            result = TableBatchResult(plan.batch_id, None, segments, shards, gaps[0])
            _record(plan, credentials, result, stage_dir, attempt_id)
            return result
        with credentials.snowflake_connection() as conn:
            sink = DynamoDBSink(conn, plan.target)
            keys = plan.keys

            def widenings_for(columns: list[TableColumn]) -> list[Widening]:
                per_unit = reads.map(lambda r: widenings(r.changes, columns, keys)).collect()
                return join_widenings(per_unit, columns)

            def summary_for(columns: list[TableColumn]) -> KeySummary:
                return merge(reads.map(lambda r: summarize(r.changes, columns, keys)).collect())

            columns = staging_columns(sink, plan, widenings_for, summary_for)
        staged = columns
        rows = sum(reads.map(lambda r: stage_unit(r, plan, staged, stage_dir, credentials)).collect())
    finally:
        reads.unpersist()
    committed = committed_outcome(plan, segments, shards, stage_dir, attempt_id)
    try:
        with credentials.snowflake_connection() as conn:
            sink = DynamoDBSink(conn, plan.target)
            merged = apply_units(
                plan,
                sink,
                stage_dir=stage_dir,
                rows=rows,
                columns=columns,
                segments=segments,
                shards=shards,
                outcome=committed,
                failures=failures,
            )
    except GenerationSupersededError as err:
        # Nothing applied: the control plane decides again in the newer generation.
        result = TableBatchResult(plan.batch_id, None, segments, shards, superseded=str(err))
        _record(plan, credentials, result, stage_dir, attempt_id)
        return result
    return TableBatchResult(plan.batch_id, merged, segments, shards)


def _outcome_key(plan: TableBatchPlan, stage_dir: str, attempt_id: str | None) -> OutcomeKey:
    return OutcomeKey(plan.application_name, plan.generation_id, plan.batch_id, attempt_id or stage_dir)


def committed_outcome(
    plan: TableBatchPlan,
    segments: Sequence[SegmentOutcome],
    shards: Sequence[ShardOutcome],
    stage_dir: str,
    attempt_id: str | None = None,
) -> Callable[[MergeResult], tuple[OutcomeKey, BatchResult]]:
    """The ``outcome`` of :func:`apply_units` for a batch that read ``segments`` and ``shards``: given what
    it applied, its outcome and whose it is, recorded in the transaction that commits it (on Spark and
    in the Airflow task alike: ``status`` and the lag page read a table's latest batch from it)."""
    key = _outcome_key(plan, stage_dir, attempt_id)

    def committed(merged: MergeResult) -> tuple[OutcomeKey, BatchResult]:
        return key, TableBatchResult(plan.batch_id, merged, tuple(segments), tuple(shards)).as_batch_result(stage_dir)

    return committed


def _record(
    plan: TableBatchPlan, credentials: Any, result: TableBatchResult, stage_dir: str, attempt_id: str | None
) -> None:
    """Record the result of a batch that applied nothing (a gap found, a superseded generation).

    A batch that applies its changes records its outcome in the transaction that commits them
    (:func:`apply_units`), so a crash after the commit leaves the outcome with the batch.
    """
    key = _outcome_key(plan, stage_dir, attempt_id)
    with credentials.snowflake_connection() as conn:
        DynamoDBSink(conn, plan.target).record_outcome_alone(key, result.as_batch_result(stage_dir))


def report_lines(result: TableBatchResult) -> list[str]:
    """What a batch read and applied, one line each (:func:`report_entries` without their levels)."""
    return [line for _, line in report_entries(result)]


def report_entries(result: TableBatchResult) -> list[tuple[int, str]]:
    """What a batch read and applied, one line each with its :mod:`logging` level: items set aside are
    a WARNING, the rest INFO."""
    if result.merge is None:
        gap = result.gap
        why = f": gap in shard {gap.shard_id}" if gap else f": {result.superseded}" if result.superseded else ""
        return [(logging.INFO, f"batch {result.batch_id}: nothing applied" + why)]
    m = result.merge
    entries = [
        (
            logging.INFO,
            f"batch {result.batch_id}: {m.changes_loaded} changes applied ({m.rows_inserted} rows inserted, "
            f"{m.rows_updated} updated, {m.rows_deleted} deleted), {len(result.segments)} segments, "
            f"{len(result.shards)} stream shards",
        )
    ]
    if m.completed_snapshot is not None:
        entries.append((logging.INFO, f"snapshot of generation {m.completed_snapshot} completed"))
    if m.items_set_aside:
        entries.append(
            (logging.WARNING, f"{m.items_set_aside} item change(s) set aside: an attribute cannot be a column")
        )
    return entries
