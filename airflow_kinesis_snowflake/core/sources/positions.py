"""Sequence and sub-sequence numbers combined into one string that sorts in record order.

Kinesis sequence numbers are decimal strings of up to 128 digits (56 today on AWS, small integers
on emulators). They are compared as integers everywhere, never as strings: "9" < "10" only as
numbers. A record inside a KPL aggregate is addressed by (sequence number, sub-sequence number).
"""

from __future__ import annotations

from airflow_kinesis_snowflake.core.model import parse_sequence_number

# Width used when sequence and sub-sequence are combined into one sortable string: the Kinesis API
# allows sequence numbers of up to 129 digits.
SEQUENCE_DIGITS = 129
SUB_SEQUENCE_DIGITS = 20


def sharded_sequence_number(sequence_number: str, sub_sequence_number: int) -> str:
    """Sequence and sub-sequence combined into one string that sorts in record order."""
    seq = parse_sequence_number(sequence_number)
    if not 0 <= sub_sequence_number < 10**SUB_SEQUENCE_DIGITS:
        raise ValueError(f"not a sub-sequence number: {sub_sequence_number!r}")
    return f"{seq:0{SEQUENCE_DIGITS}d}{sub_sequence_number:0{SUB_SEQUENCE_DIGITS}d}"
