"""How far a snapshot got, how many items it has left, and when it ends: pure estimates over recorded facts.

A snapshot's facts are its segments in the snapshot ledger (items read, read to their end or not),
when it started, and the table's own approximate figures from ``DescribeTable`` (``ItemCount`` and
``TableSizeBytes``, which AWS updates about every six hours, so they may lag behind the table and
are 0 for a table created or filled since). :func:`snapshot_progress` turns them into a
:class:`SnapshotProgress`:

* **Estimated total items**: the table's ``ItemCount``; when it is 0 (not counted yet), the items
  of the segments read to their end, extrapolated to every segment (a parallel Scan's segments are
  of about equal size); never fewer than the items read so far. None when neither is known.
* **Percent**: items read of that estimate; 100 only once every segment is read to its end, at
  most 99 before (a stale ``ItemCount`` can be below what is read).
* **ETA**: the items left at the rate observed since the snapshot started (items read over the time
  since then, which counts the pauses between scheduled runs, as the wall clock does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_kinesis_snowflake.core.lag import format_millis

#: The highest percentage shown while a segment is still being read.
MAX_PERCENT_BEFORE_DONE = 99


@dataclass(frozen=True)
class TableSize:
    """A table's approximate figures, as ``DescribeTable`` reports them (updated about every six hours).

    :param item_count: ``ItemCount``.
    :param size_bytes: ``TableSizeBytes``.
    """

    item_count: int
    size_bytes: int

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> TableSize:
        """From ``DescribeTable``'s ``Table``; a figure it leaves out counts as 0 (not known)."""
        return cls(int(description.get("ItemCount") or 0), int(description.get("TableSizeBytes") or 0))


@dataclass(frozen=True)
class SegmentCount:
    """One segment of a snapshot as the snapshot ledger holds it.

    :param number: the segment, from 0.
    :param items: the items read from it so far.
    :param done: it was read to its end.
    """

    number: int
    items: int
    done: bool


@dataclass(frozen=True)
class SnapshotProgress:
    """A generation's snapshot: its segments, those read to their end, the items read so far, and the estimates.

    :param total_segments: the segments of its parallel Scan.
    :param segments_done: those read to their end.
    :param items: the items read so far.
    :param completed: the snapshot's completion was committed (rows of items deleted meanwhile removed).
    :param estimated_items: the table's items, estimated (module docstring); None when not known.
    :param percent: items read of the estimate, 0 to 100; None when there is no estimate.
    :param eta: the time left at the observed rate; None when not known (nothing read yet, no estimate).
    :param items_per_second: the observed rate since the snapshot started; None before any item is read.
    :param size_bytes: the table's ``TableSizeBytes``; None when not known.
    """

    total_segments: int
    segments_done: int
    items: int
    completed: bool
    estimated_items: int | None = None
    percent: int | None = None
    eta: timedelta | None = None
    items_per_second: float | None = None
    size_bytes: int | None = None

    @property
    def all_segments_done(self) -> bool:
        return self.completed or self.segments_done >= self.total_segments

    def text(self) -> str:
        """One line for ``status``, the lag page and the task log."""
        if self.completed:
            return f"complete ({self.items:,} items)"
        line = f"{self.segments_done}/{self.total_segments} segments done, {self.items:,}"
        if self.estimated_items is not None and self.percent is not None:
            line += f" of ~{self.estimated_items:,} items ({self.percent}%)"
        else:
            line += " items (total not known yet)"
        if self.all_segments_done:
            return line + ", completing"
        if self.eta is not None:
            line += f", ETA {format_millis(int(self.eta.total_seconds() * 1000))}"
        return line

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (``status --json``): the ETA in seconds."""
        return {
            "total_segments": self.total_segments,
            "segments_done": self.segments_done,
            "items": self.items,
            "completed": self.completed,
            "estimated_items": self.estimated_items,
            "percent": self.percent,
            "eta_seconds": None if self.eta is None else round(self.eta.total_seconds()),
            "items_per_second": None if self.items_per_second is None else round(self.items_per_second, 1),
            "size_bytes": self.size_bytes,
        }


def estimate_total_items(
    total_segments: int, segments: Iterable[SegmentCount], table_size: TableSize | None
) -> int | None:
    """The table's items, estimated from ``ItemCount``, else from the segments read to their end (module
    docstring); never fewer than the items read; None when neither is known."""
    segments = list(segments)
    items = sum(s.items for s in segments)
    done = [s for s in segments if s.done]
    if len(done) >= total_segments:
        return items
    estimate: int | None = None
    if table_size is not None and table_size.item_count > 0:
        estimate = table_size.item_count
    elif done:
        per_segment = sum(s.items for s in done) / len(done)
        unread = total_segments - len(segments)
        estimate = round(sum(s.items if s.done else max(s.items, per_segment) for s in segments) + per_segment * unread)
    return None if estimate is None else max(estimate, items)


def snapshot_progress(
    total_segments: int,
    segments: Iterable[SegmentCount],
    *,
    started_at: datetime,
    now: datetime,
    table_size: TableSize | None = None,
    completed: bool = False,
) -> SnapshotProgress:
    """A snapshot's progress and estimates from its segments (a segment no batch read has none).

    :param total_segments: the segments of its parallel Scan.
    :param segments: its segments as the snapshot ledger holds them.
    :param started_at: when the snapshot started; the observed rate counts from it.
    :param now: the time of the estimate.
    :param table_size: ``DescribeTable``'s figures; None when not read.
    :param completed: the snapshot's completion was committed.
    """
    segments = list(segments)
    items = sum(s.items for s in segments)
    segments_done = sum(1 for s in segments if s.done)
    all_done = completed or segments_done >= total_segments
    estimate = estimate_total_items(total_segments, segments, table_size)
    percent = None
    if all_done:
        estimate, percent = items, 100
    elif estimate is not None:
        percent = min(MAX_PERCENT_BEFORE_DONE, int(100 * items / estimate)) if estimate else 0
    elapsed = (now - started_at).total_seconds()
    rate = items / elapsed if items and elapsed > 0 else None
    eta = None
    if all_done:
        eta = timedelta(0)
    elif rate is not None and estimate is not None and estimate > items:
        eta = timedelta(seconds=round((estimate - items) / rate))
    return SnapshotProgress(
        total_segments=total_segments,
        segments_done=min(segments_done, total_segments) if not completed else total_segments,
        items=items,
        completed=completed,
        estimated_items=estimate,
        percent=percent,
        eta=eta,
        items_per_second=rate,
        size_bytes=None if table_size is None or not table_size.size_bytes else table_size.size_bytes,
    )


def after_batch(before: Iterable[SegmentCount], read: Mapping[int, int], done: Iterable[int]) -> list[SegmentCount]:
    """The segments once a batch committed: ``before`` (the ledger as the batch found it), plus the items
    the batch read from each segment (``read``), and the segments it read to their end (``done``)."""
    counts = {s.number: s for s in before}
    finished = set(done)
    for number, items in read.items():
        earlier = counts.get(number)
        counts[number] = SegmentCount(
            number,
            (earlier.items if earlier else 0) + items,
            number in finished or (earlier is not None and earlier.done),
        )
    return [counts[n] for n in sorted(counts)]
