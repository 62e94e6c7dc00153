"""Continuous mode for a DynamoDB table: one Spark application syncs it run after run, then ends.

With ``batch.mode: continuous`` a DynamoDB connector's sync task submits one Spark application per
table, with a :class:`TableContinuousRun` instead of a plan. Its driver then runs the table's sync
itself, in the engine's loop (:func:`~.engine.continuous.run_back_to_back`, through
:func:`sync_continuously` here):

1. **A sync run**: :func:`~.dynamodb_sync.sync_table` with the cut-off *now*, each batch's data
   plane in the driver's live ``SparkContext`` (:func:`~.dynamodb_job.load`) instead of a
   spark-submit of its own. The steps, the ordering and the crash windows are a scheduled run's
   (:mod:`.dynamodb_sync`): each batch applies its changes and moves the ledgers in one Snowflake
   transaction, with its outcome recorded under the submission's attempt id.
2. **Idle**: after a run that applied nothing, started no generation and completed no snapshot,
   the driver sleeps ``idle_seconds`` (never past the end) before the next one.
3. **End**: once ``max_runtime_seconds`` have passed, no run starts; the one running finishes,
   the application ends, and the sync task reads every outcome of its attempt. The next DAG run
   submits again.

A gap with ``on_gap: fail`` (:class:`~.sources.dynamodb.progress.StreamGapError`) fails the
application, as it fails a scheduled run; a reset recording a new generation meanwhile is met by
the next run, which reads in the new generation. Killing the driver, spark-submit or the Airflow
task at any point loses and applies twice nothing: the leases expire, and the next run (of any
application) plans from the ledgers in Snowflake.

The driver needs the lease table besides the source table, its stream and Snowflake: in cluster
deploy mode its own AWS identity must be allowed the lease-table actions too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchResult
from airflow_kinesis_snowflake.core.dynamodb_sync import Submit, TableBatchFigures, TableOutcome, TableSync, sync_table
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS, Pace, check_pace, run_back_to_back
from airflow_kinesis_snowflake.core.engine.wire import Work, WorkKind
from airflow_kinesis_snowflake.registry import DYNAMODB_SOURCE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableContinuousRun:
    """What the driver of a table's continuous application needs besides credentials (it holds none).

    :param sync: the table's sync, as a scheduled run gets it.
    :param region: the table's region.
    :param owner: the lease owner of the application, the same for each run.
    :param max_runtime_seconds: no sync run starts after this long.
    :param idle_seconds: the sleep after a run that did nothing.
    """

    sync: TableSync
    region: str
    owner: str
    max_runtime_seconds: float
    idle_seconds: float = IDLE_SECONDS

    def __post_init__(self) -> None:
        check_pace(self.max_runtime_seconds, self.idle_seconds)

    @property
    def pace(self) -> Pace:
        return Pace(self.owner, self.max_runtime_seconds, self.idle_seconds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sync": self.sync.to_dict(),
            "region": self.region,
            "owner": self.owner,
            "max_runtime_seconds": self.max_runtime_seconds,
            "idle_seconds": self.idle_seconds,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableContinuousRun:
        return cls(**{**data, "sync": TableSync.from_dict(data["sync"])})

    def work(self) -> Work:
        """This run as a Spark job's work (:mod:`~.engine.wire`)."""
        return Work(DYNAMODB_SOURCE, WorkKind.CONTINUOUS, self.region, self.to_dict())

    def too_large(self, length: int, limit: int) -> str:
        return (
            f"the continuous run of table {self.sync.table} encodes to {length} characters, more than the {limit} "
            "one spark-submit argument may carry"
        )

    @classmethod
    def from_work(cls, work: Work) -> TableContinuousRun:
        """The run of a DynamoDB table's continuous work.

        :raises ValueError: ``work`` is not a DynamoDB continuous run.
        """
        return cls.from_dict(work.body_for(DYNAMODB_SOURCE, WorkKind.CONTINUOUS))


def did_something(outcome: TableOutcome) -> bool:
    """Whether a sync run applied changes, started a generation or completed a snapshot."""
    return bool(outcome.changes or outcome.generations_started or outcome.snapshots_completed)


def summary_of_results(sync: TableSync, results: Sequence[TableBatchResult]) -> dict[str, Any]:
    """A continuous application's figures, from the batch results it recorded (as
    :meth:`~.dynamodb_sync.TableOutcome.summary`, without the generations started: its driver's log
    tells them)."""
    applied = [r.merge for r in results if r.merge is not None]
    return {
        "table": sync.table,
        "destination": sync.target.table,
        "batches": len(applied),
        "changes": sum(m.changes_loaded for m in applied),
        "snapshots_completed": [m.completed_snapshot for m in applied if m.completed_snapshot is not None],
    }


def committed_batches(results: Sequence[TableBatchResult]) -> list[TableBatchFigures]:
    """The figures of the batches a continuous application committed, from the results it recorded."""
    return [f for r in results if (f := TableBatchFigures.of_result(r)) is not None]


def sync_continuously(
    run: TableContinuousRun,
    *,
    lease_dynamodb: Any,
    source_dynamodb: Any,
    streams: Any,
    connect_snowflake: Callable[[], Any],
    submit: Submit | None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[TableOutcome]:
    """Run the table's sync again and again until ``run.max_runtime_seconds`` (steps 1 to 3 of this module).

    :param lease_dynamodb: a DynamoDB client for the lease table.
    :param source_dynamodb: a DynamoDB client for the source table.
    :param streams: a DynamoDB Streams client.
    :param connect_snowflake: opens a Snowflake connection.
    :param submit: runs a batch's data plane in the live Spark application; None runs it here.
    :returns: every run's outcome, oldest first.
    :raises StreamGapError: the stream lost changes and ``on_gap: fail`` is set; the earlier
        batches are committed.
    """

    def sync_run() -> TableOutcome:
        return sync_table(
            run.sync,
            lease_dynamodb=lease_dynamodb,
            source_dynamodb=source_dynamodb,
            streams=streams,
            connect_snowflake=connect_snowflake,
            owner=run.owner,
            submit=submit,
            region=run.region,
        )

    return run_back_to_back(sync_run, did_something, run.pace, what=f"table {run.sync.table}", clock=clock, sleep=sleep)
