"""A DynamoDB snapshot's progress, told in the task log after each batch that read segments.

The estimates are :mod:`.sources.dynamodb.snapshot_progress`'s; this module reads what they need
besides the snapshot ledger (the table's ``ItemCount`` and ``TableSizeBytes``, one ``DescribeTable``)
and writes the line. It never raises: the batch it reports on is committed already.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from airflow_kinesis_snowflake.core.load.dynamodb_sink import SegmentMark
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot_progress import (
    SegmentCount,
    SnapshotProgress,
    TableSize,
    after_batch,
    snapshot_progress,
)

log = logging.getLogger(__name__)


def read_table_size(dynamodb: Any, table: str) -> TableSize | None:
    """The table's approximate ``ItemCount`` and ``TableSizeBytes`` (``DescribeTable``); None when they
    could not be read (logged: the estimate then extrapolates from the segments read)."""
    try:
        return TableSize.from_description(dynamodb.describe_table(TableName=table)["Table"])
    except Exception:
        log.warning("%s: could not read the table's ItemCount (DescribeTable)", table, exc_info=True)
        return None


def segment_counts(marks: Mapping[int, SegmentMark]) -> list[SegmentCount]:
    """The snapshot ledger's marks, by segment number, as counts."""
    return [SegmentCount(number, mark.items, mark.done) for number, mark in sorted(marks.items())]


def report_snapshot_progress(
    table: str,
    generation: Generation,
    marks: Mapping[int, SegmentMark],
    read: Mapping[int, int],
    done: Iterable[int],
    dynamodb: Any,
    now: datetime,
) -> SnapshotProgress | None:
    """Log the snapshot's progress once a batch committed: segments and items done, percentage and ETA.

    :param generation: the generation whose snapshot the batch read.
    :param marks: the snapshot ledger's marks as the batch found them.
    :param read: items the batch read, by segment number.
    :param done: the segments the batch read to their end.
    :param dynamodb: a DynamoDB client (``DescribeTable`` of ``table``).
    :param now: the time of the estimate.
    :return: the progress logged; None when the generation has no snapshot or it could not be told.
    """
    snapshot = generation.snapshot
    if snapshot is None or not read:
        return None
    try:
        progress = snapshot_progress(
            snapshot.total_segments,
            after_batch(segment_counts(marks), read, done),
            started_at=snapshot.started_at,
            now=now,
            table_size=read_table_size(dynamodb, table),
        )
        rate = "" if progress.items_per_second is None else f" (at {progress.items_per_second:,.1f} items/s)"
        log.info("%s: snapshot of generation %d: %s%s", table, generation.number, progress.text(), rate)
    except Exception:
        log.warning("%s: could not tell the snapshot's progress", table, exc_info=True)
        return None
    return progress
