"""The vocabulary of the DynamoDB source: an item's change and the order that makes changes converge.

Plain data with no I/O; both sides of the Spark boundary import it.

**The order.** Every change carries a :class:`Version` ``(snapshot, origin, sequence)``:

* ``snapshot`` is the table's snapshot generation: 0 for the first snapshot (or for a connector
  that skipped it), one more for each snapshot taken again after a gap in the stream;
* ``origin`` is 0 for an item read by that snapshot's Scan, 1 for a stream record read from the
  stream position fixed *before* that snapshot started;
* ``sequence`` is the stream record's sequence number (0 for a snapshot item). DynamoDB Streams
  numbers records in the order they were published, so a later change of an item has a larger one.

A change is applied to a row only when its version is greater than the row's. So a stream record
always wins over the same generation's snapshot item: the snapshot may have read the item before
or after that change, and every change made after the fixed position is in the stream, so the row
ends at the item's last change either way. A snapshot taken after a gap wins over everything of
the generations before it, and rows it did not see (and no later change touched) are items deleted
meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import total_ordering
from typing import Any

#: A DynamoDB attribute value in the wire format, e.g. ``{"N": "1.50"}`` or ``{"M": {...}}``.
AttributeValue = dict[str, Any]
#: An item, or an item's primary key, in the wire format: attribute name -> attribute value.
Item = dict[str, AttributeValue]

SEQUENCE_DIGITS = 40  # DynamoDB Streams sequence numbers have 21 to 40 digits


class EventName(StrEnum):
    """What a change does to its item: the stream's event names, and an item read by a snapshot."""

    INSERT = "INSERT"
    MODIFY = "MODIFY"
    REMOVE = "REMOVE"
    SNAPSHOT = "SNAPSHOT"


#: Where a change was read: the snapshot's Scan, or the stream (see the module docstring).
SNAPSHOT_ORIGIN = 0
STREAM_ORIGIN = 1


@total_ordering
@dataclass(frozen=True)
class Version:
    """A change's place in its item's history (the module docstring tells the order)."""

    snapshot: int
    origin: int
    sequence: int = 0

    def __post_init__(self) -> None:
        if self.snapshot < 0:
            raise ValueError(f"snapshot generation must be >= 0, got {self.snapshot}")
        if self.origin not in (SNAPSHOT_ORIGIN, STREAM_ORIGIN):
            raise ValueError(f"origin must be 0 (snapshot) or 1 (stream), got {self.origin}")
        if self.sequence < 0 or len(str(self.sequence)) > SEQUENCE_DIGITS:
            raise ValueError(f"not a DynamoDB Streams sequence number: {self.sequence}")
        if self.origin == SNAPSHOT_ORIGIN and self.sequence:
            raise ValueError("a snapshot item has no sequence number")

    @property
    def key(self) -> tuple[int, int, int]:
        return self.snapshot, self.origin, self.sequence

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.key < other.key

    @classmethod
    def of_snapshot(cls, snapshot: int) -> Version:
        return cls(snapshot, SNAPSHOT_ORIGIN, 0)

    @classmethod
    def of_stream(cls, snapshot: int, sequence_number: str) -> Version:
        if not (sequence_number.isascii() and sequence_number.isdigit()):
            raise ValueError(f"not a DynamoDB Streams sequence number: {sequence_number!r}")
        return cls(snapshot, STREAM_ORIGIN, int(sequence_number))

    def to_text(self) -> str:
        """A string whose byte order is this order, for a destination column compared with ``>``."""
        return f"{self.snapshot:010d}.{self.origin}.{self.sequence:0{SEQUENCE_DIGITS}d}"

    @classmethod
    def from_text(cls, text: str) -> Version:
        snapshot, origin, sequence = text.split(".")
        return cls(int(snapshot), int(origin), int(sequence))


@dataclass(frozen=True)
class ItemChange:
    """One change of one item, from the snapshot or the stream, as the destination applies it.

    :param table: the DynamoDB table's name.
    :param keys: the item's primary key (partition key, and sort key if the table has one).
    :param image: the item after the change (the whole item), None for a removal.
    :param event_name: INSERT, MODIFY, REMOVE, or SNAPSHOT for an item read by a Scan.
    :param version: the change's place in the item's history.
    :param event_id: the stream record's ``eventID`` (None for a snapshot item).
    :param shard_id: the stream shard, or the snapshot segment (``segment-<n>-of-<total>``).
    :param approximate_creation_time: the stream record's time (the Scan's time for a snapshot item).
    :param ttl_expiry: a removal made by DynamoDB's time to live, not by a user.
    """

    table: str
    keys: Item
    image: Item | None
    event_name: EventName
    version: Version
    event_id: str | None = None
    shard_id: str | None = None
    approximate_creation_time: datetime | None = None
    ttl_expiry: bool = False

    def __post_init__(self) -> None:
        if self.event_name is EventName.REMOVE and self.image is not None:
            raise ValueError(f"a removal of {self.keys} carries no image")
        if self.event_name is not EventName.REMOVE and self.image is None:
            raise ValueError(f"a {self.event_name} change of {self.keys} needs the item's new image")
        if self.ttl_expiry and self.event_name is not EventName.REMOVE:
            raise ValueError("only a removal can be a time-to-live expiry")

    @property
    def is_removal(self) -> bool:
        return self.event_name is EventName.REMOVE
