"""Lag you can see: after each batch (the ingest task), and on demand (``status``, the lag page).

After a batch, :func:`report_lag` reads the stream's retention period (one DescribeStreamSummary)
and the lease table's checkpoints (one read of the leases), logs the per-shard table and any shard
near the retention (:mod:`~airflow_kinesis_snowflake.core.lag` decides), sends the per-shard
metrics, and returns the report for the task's XCom result.

On demand, :func:`connector_status` gathers one connector's state from its two sources of truth:
the lease table (each shard's checkpoint and when it last moved) and Snowflake's batch outcomes
table (each recent batch's per-shard figures: records, rows, dead letters, lag). Connections
resolve through Airflow's connections, as the DAGs' tasks do.

A DynamoDB connector (:func:`dynamodb_connector_status`) is read per table, as its sync DAG finds
the tables: the table's sync generation and its snapshot's progress (Snowflake's generations and
snapshot ledger tables), each stream shard's checkpoint (the lease table) and the table's latest
batch (the outcomes table). DynamoDB Streams reports no lag, so a shard's level is its checkpoint
age against the connector's safe age (``max_checkpoint_age_hours``): past it, the next run finds
a gap and takes a new snapshot (``on_gap: resnapshot``) or stops (``on_gap: fail``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from airflow_kinesis_snowflake import docs_url
from airflow_kinesis_snowflake.config import (
    AnyConnectorConfig,
    ConnectorConfig,
    DynamoDBConnectorConfig,
    connector_files,
    load_any_connector_config,
)
from airflow_kinesis_snowflake.core.batch import BatchOutcome
from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchResult
from airflow_kinesis_snowflake.core.lag import (
    LagLevel,
    LagReport,
    format_millis,
    format_table,
    lag_level,
    severity,
    shard_lags,
)
from airflow_kinesis_snowflake.core.lag_page import ConnectorFolders, missing_connectors
from airflow_kinesis_snowflake.core.load.dynamodb_sink import SegmentRow
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation, lease_key
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot_progress import (
    SegmentCount,
    SnapshotProgress,
    TableSize,
    snapshot_progress,
)
from airflow_kinesis_snowflake.core.state.leases import Lease, lease_keys
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.metrics import Publish, emit_lag_metrics
from airflow_kinesis_snowflake.registry import DYNAMODB_SOURCE, KINESIS_SOURCE, source_of

RECENT_BATCHES = 20
#: The pages a warning of ``status`` points at.
LAG_DOC = docs_url("lag", "near-the-retention-warning-and-error")
GAPS_DOC = docs_url("dynamodb", "streams-and-gaps")
LAYOUTS_DOC = docs_url("dynamodb", "layouts")


def report_lag(
    outcome: BatchOutcome,
    kinesis: KinesisStreamHook,
    stream_name: str,
    table: str,
    log: logging.Logger | Any,
    publish: Publish | None = None,
) -> dict[str, Any] | None:
    """Log, measure and return the lag of every shard after the batch ``outcome`` committed.

    A shard past 90 % of the retention is logged at ERROR with the fixes, and counted in the
    ``lag_retention_error`` metric; the task does not fail, since its batch is loaded
    (https://airflow-provider-kinesis-snowflake.github.io/airflow-provider-kinesis-snowflake/lag/).
    The leases are read by key, for the shards the stream lists, so the cost does not grow with the
    lease table's history. Never raises: the batch is committed, so a failure here is logged and
    None returned. ``publish`` also gets the metrics (CloudWatch, ``metrics.cloudwatch``).
    """
    assert outcome.result is not None
    try:
        leases = LeaseTableHook(aws_conn_id=kinesis.aws_conn_id, region_name=kinesis.region_name)
        shards = kinesis.list_shards(stream_name)
        checkpoints = leases.table(outcome.application_name).leases_of(lease_keys(shards))
        report = LagReport(shard_lags(outcome.result, checkpoints, time.time()), kinesis.retention_hours(stream_name))
        batch_id, retention = outcome.result.batch_id, report.retention_hours
        log.info("Lag after batch %s (stream retention %s h):\n%s", batch_id, retention, report.table())
        for alert in report.alerts:
            (log.error if alert.level is LagLevel.ERROR else log.warning)("%s", alert.message)
        app = outcome.application_name
        emit_lag_metrics(report, application_name=app, source_name=stream_name, table=table, publish=publish)
    except Exception:
        log.warning("Could not report the lag after batch %s", outcome.result.batch_id, exc_info=True)
        return None
    return report.to_dict()


# -- on demand ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardStatus:
    """One shard of a connector: its checkpoint, and what the latest batches that took it did.

    :param history: (batch finished at, lag in ms) of the recent batches that read it, oldest first.
    """

    shard_id: str
    checkpoint: Checkpoint | None
    checkpoint_age_seconds: float | None
    millis_behind_latest: int | None
    last_batch_id: str | None
    last_batch_at: datetime | None
    rows: int | None
    dead_letters: int | None
    history: tuple[tuple[datetime, int | None], ...] = ()
    ended: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard_id": self.shard_id,
            "ended": self.ended,
            "checkpoint": self.checkpoint.to_dict() if self.checkpoint else None,
            "checkpoint_age_seconds": self.checkpoint_age_seconds,
            "millis_behind_latest": self.millis_behind_latest,
            "last_batch_id": self.last_batch_id,
            "last_batch_at": self.last_batch_at.isoformat() if self.last_batch_at else None,
            "rows": self.rows,
            "dead_letters": self.dead_letters,
            "history": [[at.isoformat(), lag] for at, lag in self.history],
        }


@dataclass(frozen=True)
class ConnectorStatus:
    """One connector's shards, or why they could not be read."""

    source_type: ClassVar[str] = KINESIS_SOURCE
    connector_id: str
    application_name: str
    stream_name: str
    table: str
    retention_hours: int | None = None
    shards: tuple[ShardStatus, ...] = ()
    error: str | None = None

    def level(self, shard: ShardStatus) -> LagLevel:
        return lag_level(shard.millis_behind_latest, self.retention_hours)

    def worst_level(self) -> LagLevel:
        return max((self.level(s) for s in self.shards), key=severity, default=LagLevel.OK)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": "kinesis",
            "connector_id": self.connector_id,
            "application_name": self.application_name,
            "stream_name": self.stream_name,
            "table": self.table,
            "retention_hours": self.retention_hours,
            "shards": [{**s.to_dict(), "level": self.level(s).value} for s in self.shards],
            "error": self.error,
        }

    def text(self) -> str:
        """The connector's heading and its shards as a table (the ``status`` command's output)."""
        retention = f"{self.retention_hours} h" if self.retention_hours is not None else "?"
        heading = (
            f"connector {self.connector_id}: stream {self.stream_name} -> {self.table}, "
            f"application {self.application_name}, retention {retention}"
        )
        if self.error is not None:
            return f"{heading}\n  error: {self.error}"
        header = ("shard", "checkpoint", "checkpoint age", "lag", "last batch", "finished", "rows", "dead letters")
        rows = [
            (
                s.shard_id,
                s.checkpoint.sequence_number if s.checkpoint else "-",
                "-" if s.checkpoint_age_seconds is None else format_millis(int(s.checkpoint_age_seconds * 1000)),
                "-" if s.millis_behind_latest is None else format_millis(s.millis_behind_latest),
                s.last_batch_id or "-",
                s.last_batch_at.strftime("%Y-%m-%d %H:%M:%S") if s.last_batch_at else "-",
                "-" if s.rows is None else str(s.rows),
                "-" if s.dead_letters is None else str(s.dead_letters),
            )
            for s in self.shards
        ]
        lines = [heading, *("  " + line for line in format_table(header, rows).splitlines())]
        for s in self.shards:
            if (level := self.level(s)) is not LagLevel.OK:
                lines.append(f"  {level.value}: shard {s.shard_id} is near the stream's retention ({LAG_DOC})")
        return "\n".join(lines)


def shard_statuses(checkpoints: dict[str, Any], batches: Iterable[BatchResult], now: float) -> tuple[ShardStatus, ...]:
    """Every shard of the lease table and of the batches, from its lease and the newest batch that took it.

    :param checkpoints: the lease table's shard leases.
    :param batches: recent batch outcomes, newest first.
    :param now: the current time (seconds since the epoch), that checkpoint ages count from.
    """
    batches = list(batches)
    shard_ids = sorted(set(checkpoints) | {s.shard_id for b in batches for s in b.shards})
    statuses = []
    for shard_id in shard_ids:
        lease = checkpoints.get(shard_id)
        taken = [(b, s) for b in batches for s in b.shards if s.shard_id == shard_id]
        last = taken[0] if taken else None
        statuses.append(
            ShardStatus(
                shard_id=shard_id,
                checkpoint=lease.checkpoint if lease is not None else None,
                checkpoint_age_seconds=max(0.0, now - lease.checkpointed_at)
                if lease is not None and lease.checkpointed_at
                else None,
                millis_behind_latest=last[1].millis_behind_latest if last else None,
                last_batch_id=last[0].batch_id if last else None,
                last_batch_at=last[0].finished_at if last else None,
                rows=last[1].rows_staged if last else None,
                dead_letters=last[1].dead_letters_staged if last else None,
                history=tuple((b.finished_at, s.millis_behind_latest) for b, s in reversed(taken)),
                ended=lease.shard_ended if lease is not None else False,
            )
        )
    return tuple(statuses)


def connector_status(config: ConnectorConfig, *, batches: int = RECENT_BATCHES) -> ConnectorStatus:
    """Read one connector's shards from its lease table and Snowflake's batch outcomes table."""
    from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink
    from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

    d = config.destination
    destination = Destination(d.database.upper(), d.schema_.upper(), d.table.upper())
    status = ConnectorStatus(
        connector_id=config.connector_id,
        application_name=config.source.application_name,
        stream_name=config.source.stream_name,
        table=destination.qualified_name,
    )
    try:
        kinesis = KinesisStreamHook(aws_conn_id=config.connections.aws, region_name=config.source.region)
        retention = kinesis.retention_hours(config.source.stream_name)
        connection = KinesisSnowflakeHook(snowflake_conn_id=config.connections.snowflake).get_conn()
        try:
            sink = SnowflakeSink(connection, destination)
            generation = sink.latest_generation(config.source.application_name)
            application = generation.application_name if generation else config.source.application_name
            recent = sink.recent_outcomes(application, batches)
        finally:
            connection.close()
        leases = LeaseTableHook(aws_conn_id=config.connections.aws, region_name=config.source.region).table(application)
        checkpoints = leases.leases() if leases.exists() else {}
    except Exception as err:  # noqa: BLE001  one connector's failure is shown, the others are still read
        return replace(status, error=f"{type(err).__name__}: {err}")
    return replace(
        status,
        application_name=application,
        retention_hours=retention,
        shards=shard_statuses(checkpoints, recent, time.time()),
    )


# -- DynamoDB connectors ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableStatus:
    """One DynamoDB table of a connector: its sync generation, its snapshot, its stream shards, its last batch.

    :param generation: the table's current sync generation; None before its first batch.
    :param snapshot: that generation's snapshot; None when it takes none (``snapshot: skip``) or
        before the first batch.
    :param shards: the stream's shards under the generation's leases (``rows``: the records the
        shard's last batch read).
    """

    table: str
    destination: str
    generation: int | None = None
    generation_started_at: datetime | None = None
    snapshot: SnapshotProgress | None = None
    shards: tuple[ShardStatus, ...] = ()
    last_batch_id: str | None = None
    last_batch_at: datetime | None = None
    last_batch_changes: int | None = None
    items_set_aside: int = 0
    set_aside_table: str | None = None

    def to_dict(self) -> dict[str, Any]:
        snapshot = self.snapshot
        return {
            "table": self.table,
            "destination": self.destination,
            "generation": self.generation,
            "generation_started_at": self.generation_started_at.isoformat() if self.generation_started_at else None,
            "snapshot": None if snapshot is None else snapshot.to_dict(),
            "last_batch_id": self.last_batch_id,
            "last_batch_at": self.last_batch_at.isoformat() if self.last_batch_at else None,
            "last_batch_changes": self.last_batch_changes,
            "items_set_aside": self.items_set_aside,
        }


@dataclass(frozen=True)
class DynamoDBConnectorStatus:
    """One DynamoDB connector's tables, those its discovery skips (with why), or why it could not be read.

    :param safe_age_hours: ``max_checkpoint_age_hours``: a stream shard's checkpoint older than this
        is a gap at the next run.
    """

    source_type: ClassVar[str] = DYNAMODB_SOURCE
    connector_id: str
    application_name: str
    safe_age_hours: float
    tables: tuple[TableStatus, ...] = ()
    skipped: tuple[str, ...] = ()
    error: str | None = None

    def level(self, shard: ShardStatus) -> LagLevel:
        """The shard's checkpoint age against the safe age (a closed shard read to its end is OK)."""
        if shard.ended or shard.checkpoint_age_seconds is None:
            return LagLevel.OK
        return lag_level(int(shard.checkpoint_age_seconds * 1000), self.safe_age_hours)

    def worst_level(self) -> LagLevel:
        levels = (self.level(s) for t in self.tables for s in t.shards)
        return max(levels, key=severity, default=LagLevel.OK)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": "dynamodb",
            "connector_id": self.connector_id,
            "application_name": self.application_name,
            "safe_age_hours": self.safe_age_hours,
            "tables": [
                {**t.to_dict(), "shards": [{**s.to_dict(), "level": self.level(s).value} for s in t.shards]}
                for t in self.tables
            ],
            "skipped": list(self.skipped),
            "error": self.error,
        }

    def text(self) -> str:
        """The connector's heading, a line per table, and each table's stream shards (the ``status`` output)."""
        heading = (
            f"connector {self.connector_id}: DynamoDB tables, application {self.application_name}, "
            f"safe age {self.safe_age_hours:g} h"
        )
        if self.error is not None:
            return f"{heading}\n  error: {self.error}"
        header = ("table", "destination", "generation", "snapshot", "last batch", "finished", "changes")
        rows = [
            (
                t.table,
                t.destination,
                "-" if t.generation is None else str(t.generation),
                "-" if t.snapshot is None else t.snapshot.text(),
                t.last_batch_id or "-",
                t.last_batch_at.strftime("%Y-%m-%d %H:%M:%S") if t.last_batch_at else "-",
                "-" if t.last_batch_changes is None else str(t.last_batch_changes),
            )
            for t in self.tables
        ]
        lines = [heading, *("  " + line for line in format_table(header, rows).splitlines())]
        shard_header = ("table", "stream shard", "checkpoint", "checkpoint age", "last batch", "records")
        shard_rows = [
            (
                t.table,
                s.shard_id + (" (ended)" if s.ended else ""),
                s.checkpoint.sequence_number if s.checkpoint else "-",
                "-" if s.checkpoint_age_seconds is None else format_millis(int(s.checkpoint_age_seconds * 1000)),
                s.last_batch_id or "-",
                "-" if s.rows is None else str(s.rows),
            )
            for t in self.tables
            for s in t.shards
        ]
        if shard_rows:
            lines += ["", *("  " + line for line in format_table(shard_header, shard_rows).splitlines())]
        for t in self.tables:
            for s in t.shards:
                if (level := self.level(s)) is not LagLevel.OK:
                    lines.append(
                        f"  {level.value}: {t.table} shard {s.shard_id} was last read "
                        f"{format_millis(int((s.checkpoint_age_seconds or 0) * 1000))} ago; at the safe age of "
                        f"{self.safe_age_hours:g} h the next run finds a gap ({GAPS_DOC})"
                    )
        lines += [
            f"  warning: {t.table}: {t.items_set_aside} item(s) set aside in {t.set_aside_table}: an attribute "
            f"cannot be a column of the unpacked layout ({LAYOUTS_DOC})"
            for t in self.tables
            if t.items_set_aside
        ]
        lines += [f"  not synced: {reason}" for reason in self.skipped]
        return "\n".join(lines)


def table_status(
    table: str,
    destination: str,
    generation: Generation | None,
    segments: list[SegmentRow],
    shard_leases: dict[str, Lease],
    batches: Iterable[BatchResult],
    now: float,
    table_size: TableSize | None = None,
) -> TableStatus:
    """Where one table's sync stands, from what its sync recorded.

    :param generation: the table's current generation (Snowflake's generations table).
    :param segments: that generation's snapshot ledger rows.
    :param shard_leases: by stream shard id, the shard's lease under the generation's lease key.
    :param batches: the connector's recent batch outcomes, newest first; a table's are those that
        read one of its stream shards or wrote one of its segments' marks.
    :param now: the current time (seconds since the epoch), that checkpoint ages and the snapshot's
        ETA count from.
    :param table_size: the table's ``ItemCount`` and ``TableSizeBytes``, that the snapshot's percentage
        is estimated from (:mod:`~.core.sources.dynamodb.snapshot_progress`); None when not read.
    """
    status = TableStatus(table, destination)
    if generation is None:
        return status
    prefix = lease_key(table, generation.number, "")
    segment_batches = {row.batch_id for row in segments}
    own: list[tuple[BatchResult, TableBatchResult]] = []
    for batch in batches:
        try:
            result = TableBatchResult.from_batch_result(batch)
        except ValueError:  # a Kinesis connector's batch under the same application name
            continue
        if batch.batch_id in segment_batches or any(s.key.startswith(prefix) for s in result.shards):
            own.append((batch, result))
    snapshot = None
    if generation.snapshot is not None:
        snapshot = snapshot_progress(
            generation.snapshot.total_segments,
            [SegmentCount(row.segment, row.mark.items, row.mark.done) for row in segments],
            started_at=generation.snapshot.started_at,
            now=datetime.fromtimestamp(now, UTC),
            table_size=table_size,
            completed=generation.completed,
        )
    shards = []
    for shard_id, lease in sorted(shard_leases.items()):
        read = [(b, s) for b, r in own for s in r.shards if s.key == lease_key(table, generation.number, shard_id)]
        last = read[0] if read else None
        shards.append(
            ShardStatus(
                shard_id=shard_id,
                checkpoint=lease.checkpoint,
                checkpoint_age_seconds=max(0.0, now - lease.checkpointed_at) if lease.checkpointed_at else None,
                millis_behind_latest=None,
                last_batch_id=last[0].batch_id if last else None,
                last_batch_at=last[0].finished_at if last else None,
                rows=last[1].records_read if last else None,
                dead_letters=None,
                ended=lease.shard_ended,
            )
        )
    newest = own[0][0] if own else None
    return replace(
        status,
        generation=generation.number,
        generation_started_at=generation.started_at,
        snapshot=snapshot,
        shards=tuple(shards),
        last_batch_id=newest.batch_id if newest else None,
        last_batch_at=newest.finished_at if newest else None,
        last_batch_changes=newest.rows_loaded if newest else None,
    )


def dynamodb_connector_status(
    config: DynamoDBConnectorConfig, *, batches: int = RECENT_BATCHES
) -> DynamoDBConnectorStatus:
    """Read one DynamoDB connector's tables: found as its sync DAG finds them, each read from Snowflake's
    generations, snapshot ledger and outcomes tables and from the lease table."""
    from airflow_kinesis_snowflake.core.dynamodb_progress import read_table_size
    from airflow_kinesis_snowflake.core.load.dynamodb_sink import DynamoDBSink
    from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import TableSelection
    from airflow_kinesis_snowflake.core.sources.dynamodb.streams import list_stream_shards
    from airflow_kinesis_snowflake.hooks.dynamodb import DynamoDBSourceHook, DynamoDBStreamsHook
    from airflow_kinesis_snowflake.hooks.snowflake import KinesisSnowflakeHook

    src, aws = config.source, config.connections.aws
    status = DynamoDBConnectorStatus(config.connector_id, src.application_name, src.max_checkpoint_age_hours)
    try:
        selection = TableSelection(
            src.tables, src.ingestion_tag_key, src.environment_tag_key, src.environment_tag_value
        )
        source = DynamoDBSourceHook(aws_conn_id=aws, region_name=src.region)
        found = source.discover(selection, src.destination_table_template)
        streams = DynamoDBStreamsHook(aws_conn_id=aws, region_name=src.region).conn
        leases = LeaseTableHook(aws_conn_id=aws, region_name=src.region).table(src.application_name)
        leases_exist = leases.exists()
        tables = []
        connection = KinesisSnowflakeHook(snowflake_conn_id=config.connections.snowflake).get_conn()
        try:
            recent: list[BatchResult] | None = None
            for target in found.targets:
                sync = config.table_sync(target)
                sink = DynamoDBSink(connection, sync.target)
                if recent is None:
                    recent = sink.recent_outcomes(src.application_name, batches)
                generation = sink.current_generation(src.application_name)
                segments = sink.read_segments(src.application_name, generation.number) if generation else []
                shard_leases: dict[str, Lease] = {}
                if generation is not None and leases_exist:
                    keys = {
                        lease_key(target.table, generation.number, shard.shard_id): shard.shard_id
                        for shard in list_stream_shards(streams, target.stream_arn)
                    }
                    shard_leases = {keys[k]: lease for k, lease in leases.leases_of(list(keys)).items() if k in keys}
                destination = sync.target.table
                # A snapshot under way: its percentage and ETA need the table's ItemCount (DescribeTable).
                running = generation is not None and generation.snapshot is not None and not generation.completed
                size = read_table_size(source.conn, target.table) if running else None
                found_status = table_status(
                    target.table, destination, generation, segments, shard_leases, recent, time.time(), size
                )
                set_aside = sink.items_set_aside(generation.number if generation else 0)
                if set_aside:
                    found_status = replace(
                        found_status, items_set_aside=set_aside, set_aside_table=sync.target.failures
                    )
                tables.append(found_status)
        finally:
            connection.close()
    except Exception as err:  # noqa: BLE001  one connector's failure is shown, the others are still read
        return replace(status, error=f"{type(err).__name__}: {err}")
    return replace(status, tables=tuple(tables), skipped=tuple(s.describe() for s in found.skipped))


AnyConnectorStatus = ConnectorStatus | DynamoDBConnectorStatus


def any_connector_status(config: AnyConnectorConfig, *, batches: int = RECENT_BATCHES) -> AnyConnectorStatus:
    """The status of a connector of any source (its registry part ``status``)."""
    status: AnyConnectorStatus = source_of(config).part("status")(config, batches=batches)
    return status


def connector_configs(path: str | Path) -> list[AnyConnectorConfig]:
    """The connectors of a connector file, or of a DAGs folder (its ``connectors/`` directory, else
    itself), of either source.

    :raises ConnectorConfigError: a connector file is invalid.
    :raises FileNotFoundError: no connector file there.
    """
    path = Path(path)
    if path.is_file():
        return [load_any_connector_config(path)]
    directory = path / "connectors" if (path / "connectors").is_dir() else path
    files = connector_files(directory)
    if not files:
        raise FileNotFoundError(f"{path}: no connector file (*.yaml, *.yml) in {directory}")
    return [load_any_connector_config(f) for f in files]


def find_connector_configs(where: ConnectorFolders) -> list[AnyConnectorConfig]:
    """The connectors of every folder of ``where`` that holds connector files (the lag page's read).

    :raises ConnectorConfigError: a connector file is invalid.
    :raises FileNotFoundError: no folder holds a connector file; the message says what to set
        (:func:`~.core.lag_page.missing_connectors`).
    """
    configs: list[AnyConnectorConfig] = []
    for folder in where.folders:
        path = Path(folder)
        if path.is_dir() and connector_files(path / "connectors" if (path / "connectors").is_dir() else path):
            configs += connector_configs(path)
    if not configs:
        raise FileNotFoundError(missing_connectors(where))
    return configs
