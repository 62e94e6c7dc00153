"""How far behind each shard is, and whether the stream's retention is about to delete what is unread.

Kinesis keeps a record for the stream's retention period (24 hours unless raised), then deletes it
whether it was read or not. A shard whose lag (``millis_behind_latest``: how far the last read was
behind the shard's tip) approaches the retention period loses records for good once it passes it.
:func:`lag_level` is the decision: past :data:`WARNING_FRACTION` of the retention a warning, past
:data:`ERROR_FRACTION` an error that names the fixes. The ingest task reports the decision after
its batch committed (a log line at the level, a metric); it does not fail the task, since its batch
is loaded and a retry would only run again (``docs/lag.md``).

The checkpoint age is the time since a shard's checkpoint last moved (the lease's
``checkpointed_at``): a shard no batch took for a while (``max_shards_per_batch``) shows it even
though no read reported its lag.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint
from airflow_kinesis_snowflake.core.state.leases import Lease

WARNING_FRACTION = 0.5
ERROR_FRACTION = 0.9
MILLIS_PER_HOUR = 3_600_000

FIXES = (
    "take more shards per batch (batch.max_shards_per_batch, or leave it unset for all), "
    "run the ingest DAG more often (batch.schedule), read more per shard and batch "
    "(batch.max_records_per_shard), or raise the stream's retention "
    "(aws kinesis increase-stream-retention-period)"
)


class LagLevel(StrEnum):
    """How close a shard's lag is to the stream's retention period."""

    OK = "ok"
    WARNING = "warning"
    ERROR = "error"


_SEVERITY = {LagLevel.OK: 0, LagLevel.WARNING: 1, LagLevel.ERROR: 2}


def severity(level: LagLevel) -> int:
    """How bad ``level`` is: OK 0, WARNING 1, ERROR 2 (to find the worst of several)."""
    return _SEVERITY[level]


def lag_level(millis_behind_latest: int | None, retention_hours: float | None) -> LagLevel:
    """The level of one shard's lag against the stream's retention period.

    :param millis_behind_latest: the shard's lag as Kinesis reported it; None when unknown.
    :param retention_hours: the stream's ``RetentionPeriodHours``; None when unknown.
    :return: ERROR at or past :data:`ERROR_FRACTION` of the retention, WARNING at or past
        :data:`WARNING_FRACTION`, OK below it or when either figure is unknown.
    """
    if millis_behind_latest is None or not retention_hours or retention_hours <= 0:
        return LagLevel.OK
    used = millis_behind_latest / (retention_hours * MILLIS_PER_HOUR)
    if used >= ERROR_FRACTION:
        return LagLevel.ERROR
    if used >= WARNING_FRACTION:
        return LagLevel.WARNING
    return LagLevel.OK


@dataclass(frozen=True)
class ShardLag:
    """One shard after a batch.

    :param shard_id: the shard.
    :param millis_behind_latest: its lag as this batch's read reported it; None when the batch did
        not read it (or Kinesis reported none).
    :param checkpoint: its checkpoint; None when it has none.
    :param checkpoint_age_seconds: seconds since the checkpoint last moved; None when it never did.
    :param records: records the batch read from it; None when the batch did not take it.
    :param dead_letters: of those, records loaded into the parse-failure table.
    """

    shard_id: str
    millis_behind_latest: int | None
    checkpoint: Checkpoint | None
    checkpoint_age_seconds: float | None
    records: int | None = None
    dead_letters: int | None = None

    def to_dict(self) -> dict[str, Any]:
        age = self.checkpoint_age_seconds
        return {
            "shard_id": self.shard_id,
            "millis_behind_latest": self.millis_behind_latest,
            "checkpoint": self.checkpoint.to_dict() if self.checkpoint else None,
            "checkpoint_age_seconds": None if age is None else round(age),
            "records": self.records,
            "dead_letters": self.dead_letters,
        }


@dataclass(frozen=True)
class LagAlert:
    """A shard whose lag passed a threshold of the retention period."""

    level: LagLevel
    shard_id: str
    millis_behind_latest: int
    retention_hours: float

    @property
    def message(self) -> str:
        behind = format_millis(self.millis_behind_latest)
        used = self.millis_behind_latest / (self.retention_hours * MILLIS_PER_HOUR)
        head = (
            f"shard {self.shard_id} is {behind} behind the stream's tip, {used:.0%} of the stream's "
            f"{self.retention_hours:g} h retention"
        )
        if self.level is LagLevel.ERROR:
            return (
                f"{head}: Kinesis deletes records older than the retention whether they were loaded or not, "
                f"so records of this shard are about to be lost. To catch up: {FIXES}"
            )
        return f"{head}: past half of it; records older than the retention are deleted before they are loaded"


def assess(shards: Iterable[ShardLag], retention_hours: float | None) -> list[LagAlert]:
    """The shards whose lag passed a threshold, worst first.

    :param shards: the shards after a batch.
    :param retention_hours: the stream's retention period; None when unknown (no alert).
    """
    alerts = []
    for shard in shards:
        level = lag_level(shard.millis_behind_latest, retention_hours)
        if level is not LagLevel.OK:
            assert shard.millis_behind_latest is not None and retention_hours is not None
            alerts.append(LagAlert(level, shard.shard_id, shard.millis_behind_latest, retention_hours))
    return sorted(alerts, key=lambda a: (-_SEVERITY[a.level], -a.millis_behind_latest, a.shard_id))


@dataclass(frozen=True)
class LagReport:
    """Every shard of a connector after a batch, and the stream's retention period."""

    shards: tuple[ShardLag, ...]
    retention_hours: float | None

    @property
    def alerts(self) -> list[LagAlert]:
        return assess(self.shards, self.retention_hours)

    @property
    def level(self) -> LagLevel:
        """The worst level of any shard."""
        alerts = self.alerts
        return alerts[0].level if alerts else LagLevel.OK

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: part of the ingest task's XCom result."""
        return {
            "retention_hours": self.retention_hours,
            "level": self.level.value,
            "shards": {s.shard_id: {k: v for k, v in s.to_dict().items() if k != "shard_id"} for s in self.shards},
        }

    def table(self) -> str:
        """The shards as a small text table, for the task log."""
        header = ("shard", "records", "lag", "checkpoint age", "checkpoint")
        rows = [
            (
                s.shard_id,
                "-" if s.records is None else str(s.records),
                "-" if s.millis_behind_latest is None else format_millis(s.millis_behind_latest),
                "-" if s.checkpoint_age_seconds is None else format_millis(int(s.checkpoint_age_seconds * 1000)),
                s.checkpoint.sequence_number if s.checkpoint else "-",
            )
            for s in self.shards
        ]
        return format_table(header, rows)


def shard_lags(result: BatchResult, leases: Mapping[str, Lease], now: float) -> tuple[ShardLag, ...]:
    """Every shard of the lease table (and of the batch), in shard id order, after the batch ``result``.

    :param result: what the batch read, per shard.
    :param leases: the lease table's shard leases, read after the batch's checkpoints.
    :param now: the current time (seconds since the epoch), that checkpoint ages count from.
    """
    read = {s.shard_id: s for s in result.shards}
    lags = []
    for shard_id in sorted(read.keys() | leases.keys()):
        lease, shard = leases.get(shard_id), read.get(shard_id)
        checkpoint = lease.checkpoint if lease is not None else (shard.end if shard else None)
        age = max(0.0, now - lease.checkpointed_at) if lease is not None and lease.checkpointed_at else None
        lags.append(
            ShardLag(
                shard_id=shard_id,
                millis_behind_latest=shard.millis_behind_latest if shard else None,
                checkpoint=checkpoint,
                checkpoint_age_seconds=age,
                records=shard.records_read if shard else None,
                dead_letters=shard.dead_letters_staged if shard else None,
            )
        )
    return tuple(lags)


def format_millis(millis: int) -> str:
    """A duration for people: ``0s``, ``42s``, ``3m05s``, ``2h07m``, ``3d04h``."""
    seconds = max(0, millis) // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def format_table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell, a rule under the header."""
    rows = list(rows)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [header, tuple("-" * w for w in widths), *rows]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines)
