"""Sequence numbers, checkpoints and initial positions.

Kinesis sequence numbers are decimal strings of up to 128 digits (56 today on AWS, small integers
on emulators). They are compared as integers everywhere, never as strings: "9" < "10" only as
numbers. A record inside a KPL aggregate is addressed by (sequence number, sub-sequence number).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import total_ordering

# Width used when sequence and sub-sequence are combined into one sortable string: the Kinesis API
# allows sequence numbers of up to 129 digits.
SEQUENCE_DIGITS = 129
SUB_SEQUENCE_DIGITS = 20


class InitialPosition(StrEnum):
    """Where an application with no checkpoint starts reading a shard."""

    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"
    AT_TIMESTAMP = "AT_TIMESTAMP"


def parse_sequence_number(value: str | int) -> int:
    """Return a sequence number as an int; reject anything that is not a non-negative decimal."""
    text = str(value)
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"not a Kinesis sequence number: {value!r}")
    return int(text)


@total_ordering
@dataclass(frozen=True)
class Checkpoint:
    """The last record delivered from a shard: everything at or below it is done."""

    sequence_number: str
    sub_sequence_number: int = 0

    def __post_init__(self) -> None:
        parse_sequence_number(self.sequence_number)
        if self.sub_sequence_number < 0:
            raise ValueError("sub_sequence_number must be >= 0")

    @property
    def key(self) -> tuple[int, int]:
        return parse_sequence_number(self.sequence_number), self.sub_sequence_number

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Checkpoint):
            return NotImplemented
        return self.key < other.key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Checkpoint):
            return NotImplemented
        return self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def covers(self, sequence_number: str, sub_sequence_number: int) -> bool:
        """True when the record (sequence, sub-sequence) is at or below this checkpoint."""
        return (parse_sequence_number(sequence_number), sub_sequence_number) <= self.key

    def to_dict(self) -> dict[str, object]:
        return {"sequence_number": self.sequence_number, "sub_sequence_number": self.sub_sequence_number}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Checkpoint:
        return cls(str(data["sequence_number"]), int(str(data.get("sub_sequence_number", 0))))


def sharded_sequence_number(sequence_number: str, sub_sequence_number: int) -> str:
    """Sequence and sub-sequence combined into one string that sorts in record order."""
    seq = parse_sequence_number(sequence_number)
    if not 0 <= sub_sequence_number < 10**SUB_SEQUENCE_DIGITS:
        raise ValueError(f"not a sub-sequence number: {sub_sequence_number!r}")
    return f"{seq:0{SEQUENCE_DIGITS}d}{sub_sequence_number:0{SUB_SEQUENCE_DIGITS}d}"
