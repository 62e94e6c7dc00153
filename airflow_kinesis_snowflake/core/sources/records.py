"""From GetRecords output to user records: KPL de-aggregation, JSON parsing, KINESISMETADATA.

A record that cannot be used is never dropped: it becomes a :class:`DeadLetter` carrying its raw
bytes, its metadata and the reason, and is loaded into the parse-failure table.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aws_kinesis_agg

# aws-kinesis-agg's public de-aggregator, and the protobuf message of the KPL format the package ships.
# In this order: importing the deaggregator puts the package's directory on sys.path, which its
# generated protobuf modules import each other through.
from aws_kinesis_agg import deaggregator, messages_pb2
from google.protobuf.message import DecodeError

from airflow_kinesis_snowflake.core.model import Checkpoint
from airflow_kinesis_snowflake.core.sources.positions import sharded_sequence_number

_set_attribute = object.__setattr__


@dataclass(frozen=True, init=False)
class KinesisRecord:
    """One user record: a plain Kinesis record, or one record out of a KPL aggregate."""

    shard_id: str
    sequence_number: str
    sub_sequence_number: int
    partition_key: str
    approximate_arrival: datetime
    data: bytes
    # Set when the record is a KPL aggregate that could not be fully de-aggregated; ``data`` then
    # holds the whole aggregate and the record becomes a dead letter.
    error: str | None = None

    def __init__(
        self,
        shard_id: str,
        sequence_number: str,
        sub_sequence_number: int,
        partition_key: str,
        approximate_arrival: datetime,
        data: bytes,
        error: str | None = None,
    ) -> None:
        # The generated frozen __init__ sets each field with its own object.__setattr__ call; one
        # for all of them halves the cost of a record, which is paid for every record read.
        _set_attribute(
            self,
            "__dict__",
            {
                "shard_id": shard_id,
                "sequence_number": sequence_number,
                "sub_sequence_number": sub_sequence_number,
                "partition_key": partition_key,
                "approximate_arrival": approximate_arrival,
                "data": data,
                "error": error,
            },
        )

    @property
    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.sequence_number, self.sub_sequence_number)


@dataclass(frozen=True)
class DeadLetter:
    """A record kept aside with the reason it could not be loaded.

    ``column`` names the destination column whose value did not fit; it is None when the payload
    itself could not be used (not UTF-8, not JSON, not an object, a corrupt KPL aggregate).
    """

    record: KinesisRecord
    error: str
    column: str | None = None


def _aggregate_size(data: bytes) -> int | None:
    """Number of user records in a well-formed KPL aggregate; None when ``data`` is not one."""
    magic, digest_size = aws_kinesis_agg.MAGIC, aws_kinesis_agg.DIGEST_SIZE
    if not data.startswith(magic) or len(data) <= len(magic) + digest_size:
        return None
    body, digest = data[len(magic) : -digest_size], data[-digest_size:]
    if hashlib.md5(body).digest() != digest:  # the KPL format's checksum
        return None
    aggregate = messages_pb2.AggregatedRecord()
    try:
        aggregate.ParseFromString(body)
    except DecodeError:
        return None
    return len(aggregate.records)


def _arrival(value: Any) -> datetime:
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, tz=UTC)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def user_records(shard_id: str, api_records: Iterable[dict[str, Any]]) -> Iterator[KinesisRecord]:
    """De-aggregate boto3 GetRecords records (KPL aggregates or plain ones) into user records.

    The library logs and skips an aggregate it cannot unpack; such an aggregate is returned here
    as one record carrying ``error``, so that it is kept as a dead letter and never lost.
    """
    for raw in api_records:
        with contextlib.redirect_stderr(io.StringIO()) as library_errors:
            users: list[dict[str, Any]] = []
            try:
                for user in deaggregator.iter_deaggregate_records(raw, data_format="Boto3"):
                    users.append(user)
            except Exception as err:  # noqa: BLE001 - its error report itself fails on some corrupt aggregates
                print(f"ERROR: {type(err).__name__}: {err}", file=library_errors)
        for user in users:
            k = user["kinesis"]
            # The library hands aggregated sub-records back base64-encoded, plain ones as bytes.
            data = base64.b64decode(k["data"]) if k.get("aggregated") else k["data"]
            yield KinesisRecord(
                shard_id=shard_id,
                sequence_number=k["sequenceNumber"],
                sub_sequence_number=int(k.get("subSequenceNumber", 0)),
                partition_key=k["partitionKey"],
                approximate_arrival=_arrival(k["approximateArrivalTimestamp"]),
                data=bytes(data),
            )
        expected = _aggregate_size(bytes(raw["Data"]))
        if expected is not None and len(users) < expected:
            detail = library_errors.getvalue().strip().splitlines()
            yield KinesisRecord(
                shard_id=shard_id,
                sequence_number=raw["SequenceNumber"],
                sub_sequence_number=len(users),
                partition_key=raw["PartitionKey"],
                approximate_arrival=_arrival(raw["ApproximateArrivalTimestamp"]),
                data=bytes(raw["Data"]),
                error=(
                    f"corrupt KPL aggregate: {len(users)} of {expected} user records could be read"
                    + (f" ({detail[0]})" if detail else "")
                ),
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
    except RecursionError:
        raise ParseError("invalid JSON: nested too deeply") from None
    if not isinstance(value, dict):
        kind = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(value), "null")
        raise ParseError(f"top level is a JSON {kind}, not an object")
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


_MAGIC: bytes = aws_kinesis_agg.MAGIC
_MAGIC_SIZE = len(_MAGIC)
_DIGEST_SIZE = aws_kinesis_agg.DIGEST_SIZE


def deaggregate(shard_id: str, api_records: Iterable[dict[str, Any]]) -> list[KinesisRecord]:
    """``list(user_records(shard_id, api_records))``, unpacking each well-formed KPL aggregate in one go.

    Anything else about an aggregate (a bad digest, an undecodable message, a key index out of
    range) is left to :func:`user_records`, so that it is handled exactly as there.
    """
    records: list[KinesisRecord] = []
    append, extend = records.append, records.extend
    for raw in api_records:
        data = raw["Data"]
        arrival = raw["ApproximateArrivalTimestamp"]
        if type(arrival) is not datetime or arrival.tzinfo is None:
            arrival = _arrival(arrival)
        if data[:_MAGIC_SIZE] != _MAGIC:
            append(KinesisRecord(shard_id, raw["SequenceNumber"], 0, raw["PartitionKey"], arrival, bytes(data)))
            continue
        users = _unpacked(shard_id, raw["SequenceNumber"], arrival, data)
        if users is None:
            extend(user_records(shard_id, [raw]))
        else:
            extend(users)
    return records


def _unpacked(shard_id: str, sequence: str, arrival: datetime, data: bytes) -> list[KinesisRecord] | None:
    """The user records of a well-formed aggregate; None otherwise."""
    if len(data) <= _MAGIC_SIZE + _DIGEST_SIZE:
        return None
    body = memoryview(data)[_MAGIC_SIZE:-_DIGEST_SIZE]
    if hashlib.md5(body).digest() != data[-_DIGEST_SIZE:]:  # the KPL format's checksum
        return None
    aggregate = messages_pb2.AggregatedRecord()
    try:
        aggregate.ParseFromString(body)
        keys, hash_keys = aggregate.partition_key_table, aggregate.explicit_hash_key_table
        users = aggregate.records
        if hash_keys:  # the library looks an explicit hash key up only when there is a table
            for user in users:
                hash_keys[user.explicit_hash_key_index]
        return [
            KinesisRecord(shard_id, sequence, sub, keys[user.partition_key_index], arrival, user.data)
            for sub, user in enumerate(users)
        ]
    except Exception:  # noqa: BLE001 - user_records meets the same message and decides
        return None
