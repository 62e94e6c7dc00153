"""From GetRecords output to user records: KPL de-aggregation, JSON parsing, KINESISMETADATA.

A record that cannot be used is never dropped: it becomes a :class:`DeadLetter` carrying its raw
bytes, its metadata and the reason, and is loaded into the parse-failure table.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aws_kinesis_agg.deaggregator import iter_deaggregate_records

from airflow_kinesis_snowflake.core.positions import Checkpoint, sharded_sequence_number


@dataclass(frozen=True)
class KinesisRecord:
    """One user record: a plain Kinesis record, or one record out of a KPL aggregate."""

    shard_id: str
    sequence_number: str
    sub_sequence_number: int
    partition_key: str
    approximate_arrival: datetime
    data: bytes

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.sequence_number, self.sub_sequence_number)


@dataclass(frozen=True)
class DeadLetter:
    """A record kept aside with the reason it could not be loaded."""

    record: KinesisRecord
    error: str


def user_records(shard_id: str, api_records: Iterable[dict[str, Any]]) -> Iterator[KinesisRecord]:
    """De-aggregate boto3 GetRecords records (KPL aggregates or plain ones) into user records."""
    for raw in api_records:
        for user in iter_deaggregate_records(raw, data_format="Boto3"):
            k = user["kinesis"]
            # The library hands aggregated sub-records back base64-encoded, plain ones as bytes.
            data = base64.b64decode(k["data"]) if k.get("aggregated") else k["data"]
            arrival = k["approximateArrivalTimestamp"]
            if isinstance(arrival, (int, float)):
                arrival = datetime.fromtimestamp(arrival, tz=UTC)
            elif arrival.tzinfo is None:
                arrival = arrival.replace(tzinfo=UTC)
            yield KinesisRecord(
                shard_id=shard_id,
                sequence_number=k["sequenceNumber"],
                sub_sequence_number=int(k.get("subSequenceNumber", 0)),
                partition_key=k["partitionKey"],
                approximate_arrival=arrival,
                data=bytes(data),
            )


class ParseError(ValueError):
    """The payload is not a UTF-8 JSON object."""


def parse_payload(data: bytes) -> dict[str, Any]:
    """Decode a payload as a UTF-8 JSON object; anything else raises :class:`ParseError`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ParseError(f"invalid UTF-8 at byte {err.start}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ParseError(f"invalid JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    if not isinstance(value, dict):
        raise ParseError(f"top level is a JSON {type(value).__name__}, not an object")
    return value


def kinesis_metadata(stream_name: str, record: KinesisRecord) -> dict[str, Any]:
    """The KINESISMETADATA object stored with every row."""
    return {
        "stream": stream_name,
        "shardId": record.shard_id,
        "approximateArrival": record.approximate_arrival.astimezone(UTC).isoformat(),
        "partitionKey": record.partition_key,
        "sequenceNumber": record.sequence_number,
        "subSequenceNumber": record.sub_sequence_number,
        "shardedSequenceNumber": sharded_sequence_number(record.sequence_number, record.sub_sequence_number),
    }
