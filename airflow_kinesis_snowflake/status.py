"""Lag you can see: after each batch (the ingest task), and on demand (``status``, the lag page).

After a batch, :func:`report_lag` reads the stream's retention period (one DescribeStreamSummary)
and the lease table's checkpoints (one read of the leases), logs the per-shard table and any shard
near the retention (:mod:`~airflow_kinesis_snowflake.core.lag` decides), sends the per-shard
metrics, and returns the report for the task's XCom result.

On demand, :func:`connector_status` gathers one connector's state from its two sources of truth:
the lease table (each shard's checkpoint and when it last moved) and Snowflake's batch outcomes
table (each recent batch's per-shard figures: records, rows, dead letters, lag). Connections
resolve through Airflow's connections, as the DAGs' tasks do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_kinesis_snowflake.config import ConnectorConfig, connector_files, load_connector_config
from airflow_kinesis_snowflake.core.batch import BatchOutcome
from airflow_kinesis_snowflake.core.lag import LagLevel, LagReport, format_millis, format_table, lag_level, shard_lags
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint, Destination
from airflow_kinesis_snowflake.core.state.leases import lease_keys
from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook
from airflow_kinesis_snowflake.metrics import emit_lag_metrics

RECENT_BATCHES = 20


def report_lag(
    outcome: BatchOutcome, kinesis: KinesisStreamHook, stream_name: str, table: str, log: logging.Logger | Any
) -> dict[str, Any] | None:
    """Log, measure and return the lag of every shard after the batch ``outcome`` committed.

    A shard past 90 % of the retention is logged at ERROR with the fixes, and counted in the
    ``lag_retention_error`` metric; the task does not fail, since its batch is loaded (``docs/lag.md``).
    The leases are read by key, for the shards the stream lists, so the cost does not grow with the
    lease table's history. Never raises: the batch is committed, so a failure here is logged and
    None returned.
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
        emit_lag_metrics(report, application_name=outcome.application_name, stream_name=stream_name, table=table)
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard_id": self.shard_id,
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

    connector_id: str
    application_name: str
    stream_name: str
    table: str
    retention_hours: int | None = None
    shards: tuple[ShardStatus, ...] = ()
    error: str | None = None

    def level(self, shard: ShardStatus) -> LagLevel:
        return lag_level(shard.millis_behind_latest, self.retention_hours)

    def to_dict(self) -> dict[str, Any]:
        return {
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
                lines.append(f"  {level.value}: shard {s.shard_id} is near the stream's retention (docs/lag.md)")
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


def connector_configs(path: str | Path) -> list[ConnectorConfig]:
    """The connectors of a connector file, or of a DAGs folder (its ``connectors/`` directory, else itself).

    :raises ConnectorConfigError: a connector file is invalid.
    :raises FileNotFoundError: no connector file there.
    """
    path = Path(path)
    if path.is_file():
        return [load_connector_config(path)]
    directory = path / "connectors" if (path / "connectors").is_dir() else path
    files = connector_files(directory)
    if not files:
        raise FileNotFoundError(f"{path}: no connector file (*.yaml, *.yml) in {directory}")
    return [load_connector_config(f) for f in files]
