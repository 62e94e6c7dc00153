"""GetRecords output to user records: KPL de-aggregation, JSON parsing and KINESISMETADATA."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import aws_kinesis_agg
import pyarrow as pa
import pytest
from aws_kinesis_agg import aggregator, messages_pb2  # aggregator first: it makes the messages importable

from airflow_kinesis_snowflake.core.load.schema import METADATA_TYPE
from airflow_kinesis_snowflake.core.model import Checkpoint
from airflow_kinesis_snowflake.core.sources.positions import sharded_sequence_number
from airflow_kinesis_snowflake.core.sources.records import (
    KinesisRecord,
    ParseError,
    kinesis_metadata,
    parse_payload,
    user_records,
)

SHARD = "shardId-000000000003"
AWS_SEQ = "49590338271490256608559692538361571095921575989136588898"
AWS_SEQ_NEXT = "49590338271490256608559692540361571095921575989136588898"
ARRIVAL = datetime(2026, 1, 31, 12, 0, 0, 250000, tzinfo=UTC)


def _api_record(sequence: str, data: bytes, partition_key: str, arrival: datetime = ARRIVAL) -> dict[str, Any]:
    """A record as boto3's GetRecords returns it."""
    return {
        "SequenceNumber": sequence,
        "ApproximateArrivalTimestamp": arrival,
        "Data": data,
        "PartitionKey": partition_key,
    }


def _aggregate(user: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    """KPL-aggregate user records with the library's aggregator: (aggregate partition key, bytes)."""
    packer = aggregator.RecordAggregator()
    for partition_key, data in user:
        assert packer.add_user_record(partition_key, data) is None  # all fit in one aggregate
    agg = packer.clear_and_get()
    assert agg is not None
    partition_key, _explicit_hash_key, payload = agg.get_contents()
    assert payload.startswith(aws_kinesis_agg.MAGIC)
    return partition_key, payload


# -- plain records --------------------------------------------------------------------------------


def test_plain_records_get_sub_sequence_zero() -> None:
    raw = [
        _api_record("9", b'{"id": 1}', "pk-1"),
        _api_record("10", b'{"id": 2}', "pk-2"),
    ]

    records = list(user_records(SHARD, raw))

    assert records == [
        KinesisRecord(SHARD, "9", 0, "pk-1", ARRIVAL, b'{"id": 1}'),
        KinesisRecord(SHARD, "10", 0, "pk-2", ARRIVAL, b'{"id": 2}'),
    ]
    assert [r.checkpoint for r in records] == [Checkpoint("9", 0), Checkpoint("10", 0)]
    assert all(isinstance(r.data, bytes) for r in records)


def test_plain_record_keeps_bytes_that_are_not_json() -> None:
    payload = b"\xff\x00 not json"

    (record,) = user_records(SHARD, [_api_record(AWS_SEQ, payload, "k")])

    assert record.data == payload
    assert record.sequence_number == AWS_SEQ


def test_naive_arrival_is_taken_as_utc() -> None:
    (record,) = user_records(SHARD, [_api_record("1", b"{}", "k", arrival=datetime(2026, 1, 31, 12, 0))])

    assert record.approximate_arrival == datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
    assert record.approximate_arrival.tzinfo is not None


def test_aware_arrival_in_another_zone_is_kept() -> None:
    arrival = datetime(2026, 1, 31, 13, 0, tzinfo=timezone(timedelta(hours=1)))

    (record,) = user_records(SHARD, [_api_record("1", b"{}", "k", arrival=arrival)])

    assert record.approximate_arrival == datetime(2026, 1, 31, 12, 0, tzinfo=UTC)


def test_no_records() -> None:
    assert list(user_records(SHARD, [])) == []


# -- KPL aggregates -------------------------------------------------------------------------------


def test_kpl_aggregate_is_deaggregated_with_sub_sequence_numbers() -> None:
    user = [
        ("customer-1", b'{"order": 1}'),
        ("customer-2", b'{"order": 2, "note": "\xc3\xa9"}'),
        ("customer-1", b'{"order": 3}'),
        ("customer-3", b"[]"),
    ]
    agg_key, payload = _aggregate(user)

    records = list(user_records(SHARD, [_api_record(AWS_SEQ, payload, agg_key)]))

    assert [r.sub_sequence_number for r in records] == [0, 1, 2, 3]
    assert {r.sequence_number for r in records} == {AWS_SEQ}
    assert [(r.partition_key, r.data) for r in records] == user
    assert all(r.shard_id == SHARD for r in records)
    assert all(r.approximate_arrival == ARRIVAL for r in records)
    assert [r.checkpoint for r in records] == [Checkpoint(AWS_SEQ, i) for i in range(4)]


def test_aggregate_of_one_record() -> None:
    agg_key, payload = _aggregate([("only", b'{"x": true}')])

    (record,) = user_records(SHARD, [_api_record("77", payload, agg_key)])

    assert (record.sequence_number, record.sub_sequence_number) == ("77", 0)
    assert (record.partition_key, record.data) == ("only", b'{"x": true}')


def test_plain_and_aggregated_records_mixed_keep_their_order() -> None:
    agg_key, payload = _aggregate([("a", b'{"n": 2}'), ("b", b'{"n": 3}')])
    raw = [
        _api_record("100", b'{"n": 1}', "p"),
        _api_record("200", payload, agg_key),
        _api_record("300", b'{"n": 4}', "q"),
    ]

    records = list(user_records(SHARD, raw))

    assert [(r.sequence_number, r.sub_sequence_number) for r in records] == [
        ("100", 0),
        ("200", 0),
        ("200", 1),
        ("300", 0),
    ]
    assert [json.loads(r.data)["n"] for r in records] == [1, 2, 3, 4]
    assert [r.partition_key for r in records] == ["p", "a", "b", "q"]
    assert records == sorted(records, key=lambda r: r.checkpoint)


def test_magic_prefix_with_bad_digest_is_a_plain_record() -> None:
    _agg_key, payload = _aggregate([("a", b"{}")])
    tampered = payload[:-1] + bytes([payload[-1] ^ 0xFF])

    (record,) = user_records(SHARD, [_api_record("5", tampered, "outer")])

    assert record.data == tampered
    assert record.sub_sequence_number == 0
    assert record.partition_key == "outer"


def test_inconsistent_aggregate_is_not_silently_dropped() -> None:
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.append("pk")
    entry = message.records.add()
    entry.partition_key_index = 5  # no such partition key
    entry.data = b'{"id": 1}'
    body = message.SerializeToString()
    payload = aws_kinesis_agg.MAGIC + body + hashlib.md5(body).digest()

    records = list(user_records(SHARD, [_api_record("42", payload, "pk")]))

    assert records, "the aggregate vanished without a record or an error"
    assert {r.sequence_number for r in records} == {"42"}
    (kept,) = records
    assert kept.error is not None and "corrupt KPL aggregate: 0 of 1" in kept.error
    assert kept.data == payload


# -- parse_payload --------------------------------------------------------------------------------


def test_parse_payload_object() -> None:
    assert parse_payload(b'{"id": 1, "name": "caf\xc3\xa9", "tags": ["a"], "nested": {"x": null}}') == {
        "id": 1,
        "name": "café",
        "tags": ["a"],
        "nested": {"x": None},
    }


def test_parse_payload_empty_object() -> None:
    assert parse_payload(b"{}") == {}


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"id": 1', "invalid JSON"),
        (b"", "invalid JSON"),
        (b"not json", "invalid JSON"),
        (b'{"id": 1} trailing', "invalid JSON"),
        (b'{"name": "\xff"}', "invalid UTF-8 at byte 10"),
        (b"\xc3\x28", "invalid UTF-8 at byte 0"),
        (b"[1, 2]", "not an object"),
        (b"42", "not an object"),
        (b"3.5", "not an object"),
        (b'"text"', "not an object"),
        (b"null", "not an object"),
        (b"true", "not an object"),
    ],
)
def test_parse_payload_rejects_with_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_payload(data)

    assert reason in str(info.value)


def test_parse_error_names_line_and_column() -> None:
    with pytest.raises(ParseError, match=r"invalid JSON: .* at line 2 column \d+"):
        parse_payload(b'{"id": 1,\n oops}')


def test_parse_error_is_a_value_error() -> None:
    assert issubclass(ParseError, ValueError)


# -- KINESISMETADATA -------------------------------------------------------------------------------


def _record(sequence: str = AWS_SEQ, sub: int = 2, arrival: datetime = ARRIVAL) -> KinesisRecord:
    return KinesisRecord(SHARD, sequence, sub, "customer-9", arrival, b"{}")


def test_kinesis_metadata_keys_and_values() -> None:
    metadata = kinesis_metadata("orders", _record())

    assert set(metadata) == {
        "stream",
        "shardId",
        "approximateArrival",
        "partitionKey",
        "sequenceNumber",
        "subSequenceNumber",
        "shardedSequenceNumber",
    }
    assert metadata["stream"] == "orders"
    assert metadata["shardId"] == SHARD
    assert metadata["partitionKey"] == "customer-9"
    assert metadata["sequenceNumber"] == AWS_SEQ
    assert metadata["subSequenceNumber"] == 2
    assert type(metadata["subSequenceNumber"]) is int
    assert metadata["shardedSequenceNumber"] == sharded_sequence_number(AWS_SEQ, 2)


def test_kinesis_metadata_arrival_is_iso_8601_utc() -> None:
    arrival = datetime(2026, 1, 31, 13, 0, 0, 250000, tzinfo=timezone(timedelta(hours=1)))

    text = kinesis_metadata("orders", _record(arrival=arrival))["approximateArrival"]

    assert text == "2026-01-31T12:00:00.250000+00:00"
    assert datetime.fromisoformat(text) == arrival


def test_kinesis_metadata_sharded_sequence_numbers_sort_in_record_order() -> None:
    ordered = [_record("9", 0), _record("9", 1), _record("10", 0), _record(AWS_SEQ, 0), _record(AWS_SEQ_NEXT, 0)]

    keys = [kinesis_metadata("orders", r)["shardedSequenceNumber"] for r in ordered]

    assert keys == sorted(keys)


def test_kinesis_metadata_fits_the_metadata_column_type() -> None:
    metadata = kinesis_metadata("orders", _record())

    array = pa.array([metadata], type=METADATA_TYPE)

    assert array.to_pylist() == [metadata]


def test_aggregate_whose_hash_key_index_is_out_of_range_is_kept_as_an_error() -> None:
    # The library's own error report fails on this aggregate; it must still not be lost.
    message = messages_pb2.AggregatedRecord()
    message.partition_key_table.append("pk")
    message.explicit_hash_key_table.append("1")
    message.records.add(partition_key_index=0, data=b'{"id": 1}')
    message.records.add(partition_key_index=0, explicit_hash_key_index=3, data=b'{"id": 2}')
    body = message.SerializeToString()
    payload = aws_kinesis_agg.MAGIC + body + hashlib.md5(body).digest()

    first, kept = user_records(SHARD, [_api_record("42", payload, "pk")])

    assert (first.sub_sequence_number, first.data, first.error) == (0, b'{"id": 1}', None)
    assert kept.error is not None and "corrupt KPL aggregate: 1 of 2" in kept.error
    assert "IndexError" in kept.error
    assert kept.data == payload


def test_parse_payload_nested_too_deeply_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="nested too deeply"):
        parse_payload(b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")


def test_a_kinesis_record_is_a_frozen_dataclass_by_position_or_keyword() -> None:
    import dataclasses
    import pickle

    record = KinesisRecord(SHARD, AWS_SEQ, 2, "pk", ARRIVAL, b"{}")
    by_keyword = KinesisRecord(
        shard_id=SHARD,
        sequence_number=AWS_SEQ,
        sub_sequence_number=2,
        partition_key="pk",
        approximate_arrival=ARRIVAL,
        data=b"{}",
    )
    assert record == by_keyword and hash(record) == hash(by_keyword)
    assert record.error is None and record.checkpoint == Checkpoint(AWS_SEQ, 2)
    assert [f.name for f in dataclasses.fields(record)][-1] == "error"
    assert dataclasses.replace(record, error="bad").error == "bad"
    assert record != dataclasses.replace(record, data=b"[]")
    assert pickle.loads(pickle.dumps(record)) == record
    assert repr(record).startswith("KinesisRecord(shard_id='shardId-000000000003'")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.data = b"changed"  # type: ignore[misc]
