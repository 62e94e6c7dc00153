"""The source contract: what the engine relies on of every registered source, checked on the emulators.

Every source in the registry (``registry.SOURCE_TYPES``) runs each check below through its
:class:`Harness`: the registered ``source`` class on the moto server, with a way to put records into
it and to reshard it. A source registered without a harness fails here; a new source passes this
suite before it is registered.

Per source:

* **units and lineage**: after a reshard (a Kinesis split, a DynamoDB Streams shard roll) the closed
  unit is closed and its children name it, listed after it;
* **a range read twice** from the same start gives the same records and the same end position;
* **positions round-trip** through their text, and a text that is no position is refused naming the unit;
* **a read from a range's end** gives nothing of the range again, only what was put after it;
* **a crash replays to the same result**: a read whose batch "crashed" before its checkpoint is read
  again from the same position, then the checkpoint is written as text and read back, range after
  range; the records taken are those of one read of the whole unit, each once. The crash at each
  step of a batch with Snowflake's ledger in the loop is the fault matrices' part
  (``tests/reliability/test_fault_matrix.py``, ``tests/reliability/test_fault_matrix_dynamodb.py``).

No Spark, no Airflow: each check reads a few records from the session's moto server in seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.engine.source import Source, SourceUnit, UnitRange
from airflow_kinesis_snowflake.core.sources.dynamodb.model import ItemChange
from airflow_kinesis_snowflake.core.sources.dynamodb.source import DynamoDBSource
from airflow_kinesis_snowflake.core.sources.kinesis import KinesisSource
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord
from airflow_kinesis_snowflake.registry import DYNAMODB_SOURCE, KINESIS_SOURCE, SOURCE_TYPES, registered
from tests.conftest import create_stream, unique
from tests.emulators import Emulators
from tests.emulators.dynamodb_streams import roll_shard

pytestmark = pytest.mark.integration

#: Records put before a check, and the cap of one read: several ranges make up a unit.
RECORDS = 12
CAP = 5
#: Every record put so far arrived before this.
LATER = datetime.now(UTC) + timedelta(days=1)
#: Splits a Kinesis shard's hash key range in two.
MIDDLE_HASH_KEY = str(2**127)


@dataclass
class Harness:
    """A registered source on the emulators, and the controls the contract drives it with.

    :param source: the source under contract (an instance of its registered ``source`` class).
    :param put: puts ``n`` new records into the source (every unit that takes new records gets some).
    :param reshard: closes an open unit; returns its id and its children's.
    :param identity: what makes a record the same record when read again (not the time it was read).
    :param takes_new_records: whether a unit of this kind gets the records put after it was read
        (a shard does; a snapshot segment was a copy of the table once, and is done when read).
    """

    source: Source[Any, Any]
    put: Callable[[int], None]
    reshard: Callable[[], tuple[str, tuple[str, ...]]]
    identity: Callable[[Any], Any]
    takes_new_records: Callable[[SourceUnit], bool]


def kinesis_harness(emulators: Emulators) -> Harness:
    stream = unique("contract")
    client = create_stream(emulators, stream, 1)
    counter = iter(range(1_000_000))

    def put(n: int) -> None:
        for _ in range(n):
            value = next(counter)
            client.put_record(StreamName=stream, Data=json.dumps({"v": value}).encode(), PartitionKey=f"k{value}")

    def reshard() -> tuple[str, tuple[str, ...]]:
        (open_shard,) = [s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]]
        client.split_shard(StreamName=stream, ShardToSplit=open_shard, NewStartingHashKey=MIDDLE_HASH_KEY)
        children = tuple(
            s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"] if s.get("ParentShardId")
        )
        return open_shard, children

    def identity(record: KinesisRecord) -> Any:
        return record.shard_id, record.sequence_number, record.sub_sequence_number, record.data

    return Harness(KinesisSource(stream, client=lambda: client), put, reshard, identity, lambda unit: True)


def dynamodb_harness(emulators: Emulators) -> Harness:
    table = unique("contract")
    dynamodb = emulators.boto3_client("dynamodb")
    dynamodb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    streams = emulators.boto3_client("dynamodbstreams")
    counter = iter(range(1_000_000))

    def put(n: int) -> None:
        for _ in range(n):
            value = next(counter)
            dynamodb.put_item(TableName=table, Item={"pk": {"S": f"item-{value}"}, "v": {"N": str(value)}})

    def reshard() -> tuple[str, tuple[str, ...]]:
        closed, child = roll_shard(emulators.aws_endpoint, table)
        return closed, (child,)

    def identity(change: ItemChange) -> Any:
        image = None if change.image is None else json.dumps(change.image, sort_keys=True)
        return change.shard_id, json.dumps(change.keys, sort_keys=True), change.event_name, change.version, image

    source = DynamoDBSource(table, dynamodb=lambda: dynamodb, streams=lambda: streams, total_segments=2)
    return Harness(source, put, reshard, identity, lambda unit: unit.kind == "stream-shard")


#: Every registered source's harness, by ``source.type``.
HARNESSES: dict[str, Callable[[Emulators], Harness]] = {
    KINESIS_SOURCE: kinesis_harness,
    DYNAMODB_SOURCE: dynamodb_harness,
}


@pytest.fixture(params=SOURCE_TYPES)
def harness(request: pytest.FixtureRequest, emulators: Emulators) -> Harness:
    source_type: str = request.param
    if source_type not in HARNESSES:
        pytest.fail(
            f"source {source_type!r} is registered without a contract harness: add one to HARNESSES in "
            f"{__name__.replace('.', '/')}.py (its registered source on the emulators, put and reshard)"
        )
    return HARNESSES[source_type](emulators)


def read(harness: Harness, unit: SourceUnit, start: Any, cap: int = CAP) -> UnitRange[Any, Any]:
    return harness.source.read(unit, start, cutoff=LATER, max_records=cap)


def identities(harness: Harness, records: Sequence[Any]) -> list[Any]:
    return [harness.identity(r) for r in records]


def read_whole(harness: Harness, unit: SourceUnit, start: Any = None) -> UnitRange[Any, Any]:
    return read(harness, unit, start, cap=10_000)


def units_with_records(harness: Harness) -> list[SourceUnit]:
    units = [u for u in harness.source.units() if read_whole(harness, u).records]
    assert units, "the harness put records that no unit holds"
    return units


def test_every_registered_source_has_a_harness_that_runs_its_registered_class() -> None:
    assert set(HARNESSES) == set(SOURCE_TYPES)
    for source_type in SOURCE_TYPES:
        assert registered(source_type).part("source").source_type == source_type


def test_the_harness_drives_the_registered_source(harness: Harness) -> None:
    registered_class = registered(harness.source.source_type).part("source")
    assert type(harness.source) is registered_class


def test_after_a_reshard_the_closed_unit_is_closed_and_its_children_name_it(harness: Harness) -> None:
    harness.put(3)
    before = harness.source.units()
    assert len({u.unit_id for u in before}) == len(before)
    parent, children = harness.reshard()
    harness.put(3)

    after = harness.source.units()
    by_id = {u.unit_id: u for u in after}
    assert not next(u for u in before if u.unit_id == parent).closed
    assert by_id[parent].closed
    assert children and all(by_id[child].parent_ids and parent in by_id[child].parent_ids for child in children)
    order = [u.unit_id for u in after]
    assert all(order.index(parent) < order.index(child) for child in children), order
    # The parent keeps what it held, and ends; its children get the later records.
    parent_read = read_whole(harness, by_id[parent])
    assert len(parent_read.records) == 3
    assert parent_read.unit_end
    assert sum(len(read_whole(harness, by_id[child]).records) for child in children) == 3


def test_a_range_read_twice_from_the_same_start_gives_the_same_records_and_end(harness: Harness) -> None:
    harness.put(RECORDS)
    for unit in units_with_records(harness):
        first = read(harness, unit, None)
        again = read(harness, unit, None)
        assert identities(harness, again.records) == identities(harness, first.records), unit
        assert again.end == first.end and again.unit_end == first.unit_end, unit
        assert first.start is None and first.end is not None
        # And from a position inside the unit.
        second = read(harness, unit, first.end)
        assert identities(harness, read(harness, unit, first.end).records) == identities(harness, second.records)
        assert read(harness, unit, first.end).end == second.end


def test_positions_round_trip_through_their_text(harness: Harness) -> None:
    harness.put(RECORDS)
    source = harness.source
    for unit in units_with_records(harness):
        positions = [read(harness, unit, None).end, read_whole(harness, unit).end]
        for position in positions:
            text = source.position_to_text(unit, position)
            assert isinstance(text, str)
            assert source.position_from_text(unit, text) == position, (unit, text)
            assert source.position_to_text(unit, source.position_from_text(unit, text)) == text
        for garbled in ("", "not json", "[]", '{"sequence_number": "x"}'):
            with pytest.raises(ValueError, match=unit.unit_id):
                source.position_from_text(unit, garbled)


def test_a_read_from_a_ranges_end_gives_nothing_of_it_again_only_what_was_put_after(harness: Harness) -> None:
    harness.put(RECORDS)
    units = units_with_records(harness)
    ends = {}
    for unit in units:
        whole = read_whole(harness, unit)
        nothing = read_whole(harness, unit, whole.end)
        if not harness.takes_new_records(unit):
            assert whole.unit_end and nothing.unit_end, unit
        assert list(nothing.records) == [], unit
        assert nothing.end == whole.end, unit
        ends[unit.unit_id] = (whole.end, set(identities(harness, whole.records)))

    harness.put(4)
    new = 0
    for unit in units:
        end, seen = ends[unit.unit_id]
        later = read_whole(harness, unit, end)
        assert not seen & set(identities(harness, later.records)), unit
        if harness.takes_new_records(unit):
            new += len(later.records)
        else:
            assert list(later.records) == [], unit
    assert new == 4


def test_a_crash_before_each_checkpoint_replays_to_the_same_records_each_once(harness: Harness) -> None:
    harness.put(RECORDS)
    source = harness.source
    for unit in units_with_records(harness):
        taken: list[Any] = []
        stored: str | None = None  # the checkpoint as the ledger keeps it
        for _ in range(RECORDS + 2):
            start = None if stored is None else source.position_from_text(unit, stored)
            attempt = read(harness, unit, start)
            # The batch crashes before its checkpoint: its retry reads from the same stored position.
            retry = read(harness, unit, None if stored is None else source.position_from_text(unit, stored))
            assert identities(harness, retry.records) == identities(harness, attempt.records), unit
            assert retry.end == attempt.end, unit
            if not retry.records:
                break
            taken.extend(identities(harness, retry.records))
            stored = source.position_to_text(unit, retry.end)
        else:
            pytest.fail(f"{unit.unit_id} was still giving records after {RECORDS + 2} ranges")
        assert taken == identities(harness, read_whole(harness, unit).records), unit
        assert len(set(taken)) == len(taken)
