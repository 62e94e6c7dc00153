"""Reset a DynamoDB table's sync: a new snapshot, as a gap in its stream would take.

A reset of table ``T`` records generation ``g + 1`` (``g`` the current one) with a snapshot of the
connector's ``total_segments``; the next sync run fixes its stream position, scans the table
segment by segment (resumable, as the first snapshot) and, when the last segment is done, removes
the rows of items the new snapshot and its stream did not see (or marks them, with
``deletes: soft``): exactly the re-snapshot a gap takes (:mod:`..sources.dynamodb.progress`).

**A reset never truncates or deletes in Snowflake.** Until the new snapshot completes, the rows stay
queryable as they are (rows drifted by hand stay drifted until the snapshot reads their item again);
each item the new snapshot reads overwrites its row, and its completion removes the rest. Before
the first sync there is nothing to reset: the first sync takes the snapshot.

A batch of generation ``g`` still in flight when the reset is recorded (a sync already running, a
zombie Spark job) is refused by the sink (:class:`~..load.dynamodb_sink.GenerationSupersededError`),
and its sync decides again in the new generation.

Pure decisions: the operator reads each table's current generation and records what these answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from airflow_kinesis_snowflake.core.admin.params import ParameterError, as_bool
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation, StartGeneration
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import SnapshotStart

#: What happens to the rows once the reset is recorded: said in every plan and dry run.
ROWS_NOTE = (
    "nothing is truncated or deleted now: the rows stay queryable until the new snapshot overwrites them, "
    "and rows not seen by the new snapshot are removed (or marked, with deletes: soft) when it completes"
)


@dataclass(frozen=True)
class ResetParams:
    """The reset DAG's parameters, checked.

    :param tables: the DynamoDB tables to reset, in name order.
    :param dry_run: only report what would happen.
    """

    tables: tuple[str, ...]
    dry_run: bool


def parse_reset_params(
    *,
    tables: Sequence[str] | str | None,
    available: Sequence[str],
    dry_run: bool | str,
    confirm: str | None,
    application_name: str,
) -> ResetParams:
    """Check the reset DAG's params against the tables the connector syncs now, before any side effect.

    :param tables: the ``tables`` param: a list, its JSON text as a template renders it, or
        None/empty for every table in ``available``.
    :param available: the tables the connector syncs now (the sync DAG's discovery).
    :param dry_run: the ``dry_run`` param (a bool, or its rendered text).
    :param confirm: the ``confirm`` param: must equal ``application_name`` unless a dry run.
    :param application_name: the connector's application name.
    :raises ParameterError: a param is wrong; the message names it, its value and the fix.
    """
    preview = as_bool(dry_run, "dry_run")
    wanted = _table_list(tables)
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        synced = ", ".join(sorted(available)) or "none"
        raise ParameterError(
            f"tables: {unknown} {'is' if len(unknown) == 1 else 'are'} not among the tables this connector syncs "
            f"now ({synced}); give only those, or leave tables empty to reset every one. Nothing was reset"
        )
    if not preview and (confirm or "").strip() != application_name:
        raise ParameterError(
            f"confirm: {confirm!r} is not the connector's application name; to reset, set dry_run false and "
            f"confirm to {application_name!r} (or run a dry run first). Nothing was reset"
        )
    return ResetParams(tuple(sorted(set(wanted or available))), preview)


def _table_list(value: Sequence[str] | str | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text in ("", "None", "null"):
            return []
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = [t.strip() for t in text.split(",")]
        if isinstance(parsed, str):
            parsed = [parsed]
        if not isinstance(parsed, list) or not all(isinstance(t, str) for t in parsed):
            raise ParameterError(f'tables: {value!r} is not a list of DynamoDB table names; give e.g. ["orders"]')
        return [t for t in parsed if t.strip()]
    return [str(t) for t in value if str(t).strip()]


@dataclass(frozen=True)
class TableReset:
    """What a reset does to one table.

    :param table: the DynamoDB table.
    :param current: its current generation; None before its first sync.
    :param start: the generation to record; None: nothing to do (the first sync takes the snapshot).
    """

    table: str
    current: Generation | None
    start: StartGeneration | None

    def describe(self) -> str:
        """One line: the current generation, its state, and what the reset does (or did)."""
        if self.current is None or self.start is None:
            return f"{self.table}: not synced yet, nothing to reset: its first sync takes the snapshot"
        return (
            f"{self.table}: generation {self.current.number} ({_state(self.current)}) -> generation "
            f"{self.start.generation.number}, a new snapshot of "
            f"{self.start.generation.snapshot.total_segments if self.start.generation.snapshot else 0} segments "
            f"taken by the next sync run; {ROWS_NOTE}"
        )


def _state(generation: Generation) -> str:
    if generation.snapshot is None:
        return "stream only, no snapshot"
    if generation.completed:
        return "snapshot completed, following the stream"
    return "snapshot in progress"


def plan_table_reset(
    table: str,
    current: Generation | None,
    total_segments: int,
    now: datetime,
    requested_by: str,
    stream_arn: str | None = None,
) -> TableReset:
    """What a reset of ``table`` does (see the module docstring).

    :param current: the table's current generation in Snowflake; None before its first sync.
    :param total_segments: the connector's ``snapshot_total_segments``.
    :param now: the reset's time: the new generation's start.
    :param requested_by: who asked (the DAG run), written into the generation's reason.
    :param stream_arn: the table's stream now, which the new generation follows.
    """
    if current is None:
        return TableReset(table, None, None)
    number = current.number + 1
    generation = Generation(number, now, SnapshotStart(number, now, total_segments), stream_arn=stream_arn)
    return TableReset(table, current, StartGeneration(generation, f"reset requested ({requested_by})"))
