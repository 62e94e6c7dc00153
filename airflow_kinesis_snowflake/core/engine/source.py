"""What a source gives the engine: its units with their lineage, positions, and a reader of one unit's range.

A source is read in *units*, each the work of one Spark task: a Kinesis stream's shards; a DynamoDB
table's snapshot segments (one per parallel Scan segment) and its stream's shards. A shard closed by
a split, a merge or a DynamoDB Streams roll names its parents (:attr:`SourceUnit.parent_ids`), and
is read only after them, so each key's order holds.

A *position* says how far a unit was read: everything at or before it is done. It is the source's
own value (a Kinesis :class:`~..model.Checkpoint`, a DynamoDB segment's Scan cursor ...), and it is
stored as text (the ledger's marks, the lease table's checkpoints), so a source turns it into text
and back (:meth:`Source.position_to_text`, :meth:`Source.position_from_text`) without loss.

A *read* takes one unit from a start position (None: from the unit's start) up to a cut-off time
and a record cap, and answers the records and the end position (:class:`UnitRange`). It runs on an
executor: a source holds names, settings and client factories, never an open client. What the
engine relies on, and ``tests/contract`` checks for every source in the registry:

* the same unit read twice from the same start gives the same records and the same end (a batch
  retried after a crash reads what its first attempt read);
* a position written as text and read back is the same position;
* a read from a range's end gives nothing of that range again (only what arrived after it);
* after a reshard, the children name their parents.

The engine knows nothing of a source but this protocol; a source knows nothing of Airflow.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Generic, Protocol, TypeVar

from airflow_kinesis_snowflake.core.model import Checkpoint

PositionT = TypeVar("PositionT")
PositionT_co = TypeVar("PositionT_co", covariant=True)
RecordT_co = TypeVar("RecordT_co", covariant=True)


@dataclass(frozen=True)
class SourceUnit:
    """One unit of a source's work: a shard, or a snapshot segment.

    :param unit_id: the unit's id in its source (``shardId-000000000001``, ``segment-0-of-4``).
    :param kind: what the unit is, in the source's words (``shard``, ``snapshot-segment``, ``stream-shard``).
    :param parent_ids: the units this one follows (a split's parent, a merge's two parents, the
        shard a DynamoDB Streams roll closed); it is read only after they were read to their end.
    :param ending_sequence_number: a closed shard's last sequence number (its
        ``SequenceNumberRange.EndingSequenceNumber``); None while records may still be added, and
        for a snapshot segment.
    """

    unit_id: str
    kind: str
    parent_ids: tuple[str, ...] = ()
    ending_sequence_number: str | None = None

    @property
    def closed(self) -> bool:
        """No record will be added to the unit any more (a shard closed by a reshard or a roll)."""
        return self.ending_sequence_number is not None


@dataclass(frozen=True)
class UnitRange(Generic[PositionT_co, RecordT_co]):
    """What one read of one unit gave: the records after ``start``, up to the cut-off and the cap.

    :param unit_id: the unit read.
    :param start: the position the read started after (None: at the unit's start).
    :param end: the position after the last record read (or passed over); ``start`` when the read
        found nothing. What the batch checkpoints once its records are committed.
    :param records: the records read, in the unit's order.
    :param unit_end: the unit was read to its end: a closed shard's last record, a segment's last page.
    """

    unit_id: str
    start: PositionT_co | None
    end: PositionT_co | None
    records: Sequence[RecordT_co]
    unit_end: bool


class Source(Protocol[PositionT, RecordT_co]):
    """A source of records as the engine reads it (the registry's ``source`` role).

    ``PositionT`` is the source's position in a unit, ``RecordT_co`` the record it reads.
    """

    #: The ``source.type`` a connector file names it by (``kinesis``, ``dynamodb``).
    source_type: ClassVar[str]

    def units(self) -> list[SourceUnit]:
        """The units there are now, parents before children."""
        ...

    def read(
        self, unit: SourceUnit, start: PositionT | None, *, cutoff: datetime, max_records: int
    ) -> UnitRange[PositionT, RecordT_co]:
        """Read one unit's records after ``start`` (None: from the unit's start), on an executor.

        :param unit: the unit, as :meth:`units` listed it.
        :param start: the position the unit was read up to.
        :param cutoff: records that arrived after this are left for the next read.
        :param max_records: the most records the read takes (at least 1).
        """
        ...

    def position_to_text(self, unit: SourceUnit, position: PositionT) -> str:
        """``position`` in ``unit`` as the text a ledger or a lease table stores."""
        ...

    def position_from_text(self, unit: SourceUnit, text: str) -> PositionT:
        """The position :meth:`position_to_text` wrote.

        :raises ValueError: ``text`` is not a position of ``unit``; the message names both.
        """
        ...


def checkpoint_to_text(checkpoint: Checkpoint) -> str:
    """A sequence-number position as compact JSON: ``{"sequence_number":"…","sub_sequence_number":0}``."""
    return json.dumps(checkpoint.to_dict(), sort_keys=True, separators=(",", ":"))


def checkpoint_from_text(unit: SourceUnit, text: str) -> Checkpoint:
    """The checkpoint :func:`checkpoint_to_text` wrote.

    :raises ValueError: ``text`` is not such a checkpoint; the message names the unit and the text.
    """
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or set(data) - {"sequence_number", "sub_sequence_number"}:
            raise ValueError("expected an object of sequence_number and sub_sequence_number")
        return Checkpoint.from_dict(data)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"{text!r} is not a position of {unit.kind} {unit.unit_id}: expected "
            f'{{"sequence_number": "<decimal>", "sub_sequence_number": <int>}} ({err})'
        ) from None
