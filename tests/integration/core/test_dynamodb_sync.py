"""A DynamoDB table's Snowflake copy converges to the table, whatever dies when (moto server, fakesnow server).

The central proof of the DynamoDB source, at the level of :func:`~.core.dynamodb_sync.sync_table`:
a workload of puts, updates (an attribute changing type among them), user deletes and time-to-live
expiries runs while the snapshot and the stream batches proceed; the stream's shard closes and a
child takes over; runs die (the process exits at once, as on SIGKILL: no ``finally``, no release)
at every step of a batch. At the end the Snowflake table holds exactly the items a full Scan of the
DynamoDB table returns, item by item, value by value.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import random
import time
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from airflow_kinesis_snowflake.core import dynamodb_sync
from airflow_kinesis_snowflake.core.admin.dynamodb_reset import plan_table_reset
from airflow_kinesis_snowflake.core.dynamodb_job import ClientAccess, TableBatchPlan, TableBatchResult, load
from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync, sync_table
from airflow_kinesis_snowflake.core.engine.detached import DetachedRun, JobDetached
from airflow_kinesis_snowflake.core.engine.leases import LeaseHold, take_leases
from airflow_kinesis_snowflake.core.engine.local import LocalContext, SharedConnection
from airflow_kinesis_snowflake.core.load.dynamodb_rows import (
    WIDENING_SUFFIX,
    KeyAttribute,
    Layout,
    Widening,
    key_attributes,
)
from airflow_kinesis_snowflake.core.load.dynamodb_shape import DestinationShapeError
from airflow_kinesis_snowflake.core.load.dynamodb_sink import (
    Deletes,
    DynamoDBSink,
    DynamoDBTarget,
    KeyColumn,
    widening_sql,
)
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.sources.dynamodb import snapshot as dynamodb_snapshot
from airflow_kinesis_snowflake.core.sources.dynamodb import streams as dynamodb_streams
from airflow_kinesis_snowflake.core.sources.dynamodb import types
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation, OnGap, StreamGapError, SyncSettings
from airflow_kinesis_snowflake.core.sources.dynamodb.types import item_to_json
from airflow_kinesis_snowflake.core.state.dynamodb import delete_table
from airflow_kinesis_snowflake.core.state.errors import IdentityError
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.metadata import TableIdentity
from tests.conftest import query, unique
from tests.emulators import Emulators
from tests.emulators.dynamodb_streams import expire_item, remove_shard, roll_shard, trim

pytestmark = pytest.mark.integration

KILLED = 9
# Where a run dies: the function of the sync whose call (before or after it returns) ends the process
# (Class.method, or module.function for the readers the data plane calls).
STEPS: list[tuple[str, str, str]] = [
    ("after the generation is recorded", "DynamoDBSink.record_generation", "after"),
    ("after the leases are taken", "LeaseTable.take", "after"),
    ("in the middle of the Scan", "snapshot.scan_segment", "after"),
    ("in the middle of the stream's read", "streams.read_stream_shard", "after"),
    ("before the transaction", "DynamoDBSink.apply_batch", "before"),
    ("after the commit, before the lease table", "DynamoDBSink.apply_batch", "after"),
    ("after the lease table, before the release", "LeaseTable.release", "before"),
]


def client(emulators: Emulators, service: str) -> Any:
    return emulators.boto3_client(service, retries={"total_max_attempts": 2})


@dataclass
class Workload:
    """Puts, updates, deletes and expiries of a table with a partition and a sort key."""

    emulators: Emulators
    table: str
    dynamodb: Any
    rng: random.Random
    ever_put: set[str] = field(default_factory=set)

    def item(self, n: int, kind: int) -> dict[str, Any]:
        key = {"pk": {"S": f"user#{n % 7}"}, "sk": {"N": f"{n}.{kind}"}}
        attributes: dict[str, Any] = {
            "amount": {"N": f"{self.rng.randint(-(10**20), 10**20)}.{self.rng.randint(0, 10**17):017d}"},
            "doc": {"M": {"tags": {"SS": sorted({f"t{self.rng.randint(0, 5)}", "x"})}, "n": {"N": "1E+125"}}},
            "flag": {"BOOL": bool(kind % 2)},
            "blob": {"B": bytes([n % 256, kind])},
            "qty": {"N": str(n * 10 + kind)},
        }
        if kind % 3 == 0:  # the same attribute, another type
            attributes["amount"] = {"S": f"text {n}"}
        if kind in (3, 6):  # a whole number first (the snapshot's puts), text in a later change
            attributes["qty"] = {"S": f"{n} pieces"}
        return {**key, **attributes}

    def put_item(self, item: dict[str, Any]) -> None:
        self.dynamodb.put_item(TableName=self.table, Item=item)
        self.ever_put.add(key_text(item))

    def keys(self) -> list[dict[str, Any]]:
        items = self.scan()
        return [{"pk": i["pk"], "sk": i["sk"]} for i in items]

    def put(self, count: int, start: int) -> None:
        for n in range(start, start + count):
            self.put_item(self.item(n, 0))

    def churn(self, steps: int) -> None:
        """Updates (some changing a type), user deletes and time-to-live expiries of existing items."""
        for _ in range(steps):
            keys = self.keys()
            if not keys:
                return
            key = self.rng.choice(keys)
            roll = self.rng.random()
            n = int(Decimal(key["sk"]["N"]))
            if roll < 0.5:
                item = self.item(n, self.rng.randint(1, 6))
                item["sk"] = key["sk"]
                self.put_item(item)
            elif roll < 0.75:
                self.dynamodb.delete_item(TableName=self.table, Key=key)
            else:
                expire_item(self.emulators.aws_endpoint, self.table, key)

    def scan(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
        while True:
            page = self.dynamodb.scan(**kwargs)
            items += page["Items"]
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def create_table(dynamodb: Any, name: str) -> dict[str, Any]:
    """A table with a partition and a sort key, and a stream of new and old images; its description."""
    description: dict[str, Any] = dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]
    return description


def make_source(
    emulators: Emulators,
    layout: Layout = Layout.PACKED,
    deletes: Deletes = Deletes.HARD,
    settings: SyncSettings | None = None,
) -> tuple[Workload, TableSync]:
    """A table with a partition and a sort key, its stream, its destination, and its sync."""
    dynamodb = client(emulators, "dynamodb")
    name = unique("orders")
    description = create_table(dynamodb, name)
    keys = key_attributes(description)
    destination = Destination("ANALYTICS", "RAW", name.replace("-", "_").upper())
    target = DynamoDBTarget(destination, name, tuple(KeyColumn(k.column, k.sql_type) for k in keys), layout, deletes)
    conn = emulators.snowflake_connect()
    try:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    finally:
        conn.close()
    sync = TableSync(
        application_name=unique("ddb-app"),
        table=name,
        stream_arn=description["LatestStreamArn"],
        target=target,
        keys=keys,
        # By default one snapshot batch per run: the deaths of the convergence test are laid out so.
        settings=settings or SyncSettings(total_segments=3, max_segments_per_batch=2, max_snapshot_batches_per_run=1),
        max_items_per_segment=7,
        max_records_per_shard=25,
        lease_duration_seconds=2.0,
    )
    return Workload(emulators, name, dynamodb, random.Random(15)), sync


def run(
    emulators: Emulators, sync: TableSync, attempt: int, now: Callable[[], datetime] | None = None
) -> dynamodb_sync.TableOutcome:
    return sync_table(
        sync,
        lease_dynamodb=client(emulators, "dynamodb"),
        source_dynamodb=client(emulators, "dynamodb"),
        streams=client(emulators, "dynamodbstreams"),
        connect_snowflake=emulators.snowflake_connect,
        owner=f"ddb/sync/run/-1/try-{attempt}/{os.getpid()}",
        now=now or (lambda: datetime.now(UTC)),
    )


def current_generation(emulators: Emulators, sync: TableSync) -> Generation | None:
    conn = emulators.snowflake_connect()
    try:
        return DynamoDBSink(conn, sync.target).current_generation(sync.application_name)
    finally:
        conn.close()


def run_until_complete(
    emulators: Emulators, sync: TableSync, attempt: int, now: Callable[[], datetime] | None = None
) -> int:
    """Run until the current generation's snapshot is complete and a run loads nothing; the runs made."""
    for runs in range(1, 21):
        outcome = run(emulators, sync, attempt + runs, now)
        generation = current_generation(emulators, sync)
        if generation is not None and generation.completed and outcome.changes == 0:
            return runs
    raise AssertionError(f"the snapshot of {sync.table} did not complete in 20 runs")


def _die_at(target: str, when: str) -> None:
    """Make ``target`` (a class of dynamodb_sync's and its method, or a reader module and its function)
    end the process before or after it runs."""
    owner_name, _, name = target.partition(".")
    readers = {"snapshot": dynamodb_snapshot, "streams": dynamodb_streams}
    owner: Any = readers.get(owner_name) or getattr(dynamodb_sync, owner_name)
    original: Callable[..., Any] = getattr(owner, name)

    def dying(*args: Any, **kwargs: Any) -> Any:
        if when == "before":
            os._exit(KILLED)
        original(*args, **kwargs)
        os._exit(KILLED)

    setattr(owner, name, dying)


def _killed_run(emulators: Emulators, sync: TableSync, target: str, when: str) -> None:
    _die_at(target, when)
    run(emulators, sync, attempt=1)
    os._exit(0)


def run_dying(emulators: Emulators, sync: TableSync, target: str, when: str) -> int:
    """Run the sync in a child process that dies at ``target``; its exit code (KILLED if it died)."""
    process = multiprocessing.get_context("fork").Process(target=_killed_run, args=(emulators, sync, target, when))
    process.start()
    process.join(120)
    assert process.exitcode is not None, "the run did not end"
    return process.exitcode


def destination_rows(emulators: Emulators, sync: TableSync) -> tuple[dict[str, Any], set[str]]:
    """The destination's items by key, as JSON values (numbers exact), and the keys marked deleted.

    ``packed``: the ``ITEM`` column. ``unpacked``: each attribute column's value, named by the
    attribute; a column holds an N attribute as a number, or as its exact text in a ``VARCHAR``
    column (:func:`cell`).
    """
    table = sync.target.destination.qualified_name
    semi_structured = {n for n, t in column_types(emulators, sync).items() if t.startswith(("VARIANT", "OBJECT"))}
    cur = emulators.snowflake_connect().cursor()
    try:
        cur.execute(f"SELECT * FROM {table}")
        names = [str(c[0]) for c in cur.description]
        rows = cur.fetchall()
    finally:
        cur.connection.close()
    items: dict[str, Any] = {}
    deleted: set[str] = set()
    ours = {"PK", "SK", "DYNAMODB_VERSION", "DYNAMODB_DELETED", "DYNAMODB_DELETED_AT", "DYNAMODBMETADATA"}
    for row in rows:
        values = dict(zip(names, row, strict=True))
        key = f"{values['PK']}|{values['SK']}"
        if values.get("DYNAMODB_DELETED"):
            deleted.add(key)
            assert all(values[n] is None for n in names if n not in ours), f"the deleted row {key} holds attributes"
            continue
        if "ITEM" in values:
            items[key] = json.loads(values["ITEM"], parse_float=Decimal)
        else:
            attributes = {
                n.lower(): json.loads(v, parse_float=Decimal) if n in semi_structured else v
                for n, v in values.items()
                if n not in ours and v is not None
            }
            items[key] = {"pk": values["PK"], "sk": values["SK"], **attributes}
    return items, deleted


def source_items(
    workload: Workload, columns: dict[str, str] | None = None, without: Set[str] = frozenset()
) -> dict[str, Any]:
    """A full Scan's items by key as JSON values; with ``columns`` (attribute -> column type), as the
    unpacked layout holds them; ``without`` the items of these keys."""
    items: dict[str, Any] = {}
    for item in workload.scan():
        key = key_text(item)
        if key in without:
            continue
        if columns is None:
            items[key] = json.loads(item_to_json(item), parse_float=Decimal)
        else:
            items[key] = {
                name: cell(value, columns[name.upper()]) for name, value in item.items() if name not in ("pk", "sk")
            }
            items[key] |= {"pk": item["pk"]["S"], "sk": types.number_text(types.decimal_of(item["sk"]["N"]))}
    return items


def cell(value: dict[str, Any], column_type: str) -> Any:
    """What an unpacked column of ``column_type`` holds for an attribute value (docs/dynamodb.md's mapping)."""
    if column_type.startswith("VARIANT"):
        return json.loads(types.to_json(value), parse_float=Decimal)
    if column_type.startswith(("VARCHAR", "TEXT")):
        return types.text_of(value)
    if column_type.startswith("NUMBER"):
        return Decimal(value["N"])
    if column_type == "BOOLEAN":
        return value["BOOL"]
    raise AssertionError(f"an unexpected column type {column_type}")


def column_types(emulators: Emulators, sync: TableSync) -> dict[str, str]:
    conn = emulators.snowflake_connect()
    try:
        columns = DynamoDBSink(conn, sync.target).describe_columns()
    finally:
        conn.close()
    return {c.name: c.data_type for c in columns}


def key_text(item: dict[str, Any]) -> str:
    """``pk|sk``, the number as the SK column holds it (its canonical exact text)."""
    return f"{item['pk']['S']}|{types.number_text(types.decimal_of(item['sk']['N']))}"


@pytest.mark.parametrize(
    ("layout", "deletes"),
    [(Layout.PACKED, Deletes.HARD), (Layout.PACKED, Deletes.SOFT), (Layout.UNPACKED, Deletes.HARD)],
    ids=["packed-hard", "packed-soft", "unpacked-hard"],
)
def test_the_table_converges_through_snapshot_stream_reshard_and_a_death_at_every_step(
    emulators: Emulators, layout: Layout, deletes: Deletes
) -> None:
    workload, sync = make_source(emulators, layout, deletes)
    workload.put(40, start=0)
    deaths: list[str] = []
    attempt = 0
    for index, (step, target, when) in enumerate(STEPS):
        code = run_dying(emulators, sync, target, when)
        if code == KILLED:
            deaths.append(step)
        else:
            assert code == 0, f"the run meant to die {step} failed with exit code {code}"
        workload.churn(6)
        workload.put(3, start=100 + 10 * index)
        if index == 3:
            roll_shard(emulators.aws_endpoint, workload.table)
        attempt += 1
        run(emulators, sync, attempt + 1)
    # Every step's death happened (a run that had nothing to do at that step would not prove it).
    assert deaths == [step for step, _, _ in STEPS]
    workload.churn(10)
    run_until_complete(emulators, sync, attempt + 1)
    columns = None
    if layout is Layout.UNPACKED:
        columns = column_types(emulators, sync)
        # qty was a whole number in the snapshot's batches, text in a later one: its column was widened.
        assert columns["QTY"].startswith(("VARCHAR", "TEXT")), columns
        assert not [c for c in columns if c.endswith("__DYNAMODB_WIDENING")], columns
    expected = source_items(workload, columns)
    actual, deleted = destination_rows(emulators, sync)
    assert set(actual) == set(expected)
    assert actual == expected
    if deletes is Deletes.SOFT:
        # Every key put and no longer in the table (deleted by a user or by time to live) is marked.
        assert deleted == workload.ever_put - set(expected)
        assert deleted
    else:
        assert not deleted
    leases = LeaseTable(client(emulators, "dynamodb"), sync.application_name).leases()
    assert leases, "the sync kept no leases"


# -- soft deletes and time to live --------------------------------------------------------------


def test_soft_deletes_mark_rows_tell_ttl_expiries_apart_and_a_later_put_clears_the_mark(emulators: Emulators) -> None:
    workload, sync = make_source(emulators, deletes=Deletes.SOFT, settings=SyncSettings(total_segments=1))
    workload.put(3, start=0)
    keys = {key_text(workload.item(n, 0)): workload.item(n, 0) for n in range(3)}
    deleted, expired, kept = sorted(keys)
    run_until_complete(emulators, sync, 0)
    workload.dynamodb.delete_item(TableName=workload.table, Key=_key(keys[deleted]))
    assert expire_item(emulators.aws_endpoint, workload.table, _key(keys[expired]))
    run(emulators, sync, 30)
    rows = marked_rows(emulators, sync)
    assert set(rows) == {deleted, expired, kept}
    for key, ttl in ((deleted, False), (expired, True)):
        is_deleted, deleted_at, metadata = rows[key]
        assert is_deleted is True and deleted_at is True
        assert metadata["eventName"] == "REMOVE"
        assert metadata["ttlExpiry"] is ttl, f"{key}: {metadata}"
    assert rows[kept][:2] == (False, False)
    workload.put_item(keys[deleted])
    run(emulators, sync, 31)
    rows = marked_rows(emulators, sync)
    assert rows[deleted][:2] == (False, False)
    assert rows[deleted][2]["eventName"] == "INSERT"
    assert rows[expired][0] is True
    items, marked = destination_rows(emulators, sync)
    assert items == source_items(workload)
    assert marked == {expired}


def test_with_soft_deletes_a_key_the_destination_never_held_gets_no_marked_row(emulators: Emulators) -> None:
    # The stream is read from shortly before the first snapshot: items put and deleted just before it
    # are removed in the stream, and used to appear as marked rows of keys the table never held. A
    # removal made before the generation started marks nothing of it, whatever order the batches take.
    workload, sync = make_source(emulators, deletes=Deletes.SOFT, settings=SyncSettings(total_segments=1))
    workload.put(8, start=0)
    gone = [workload.item(n, 0) for n in (1, 4, 6)]
    for item in gone:
        workload.dynamodb.delete_item(TableName=workload.table, Key=_key(item))
    # Stream times are whole seconds: a removal in the second the sync starts in counts as after the start.
    time.sleep(1.1)

    run_until_complete(emulators, sync, 0)

    items, marked = destination_rows(emulators, sync)
    assert marked == set()
    assert items == source_items(workload)
    assert not {key_text(i) for i in gone} & set(marked_rows(emulators, sync))
    # A key the table held is marked when its item is deleted.
    kept = workload.item(2, 0)
    workload.dynamodb.delete_item(TableName=workload.table, Key=_key(kept))
    run(emulators, sync, 30)
    items, marked = destination_rows(emulators, sync)
    assert marked == {key_text(kept)} and items == source_items(workload)


def _key(item: dict[str, Any]) -> dict[str, Any]:
    return {"pk": item["pk"], "sk": item["sk"]}


def marked_rows(emulators: Emulators, sync: TableSync) -> dict[str, tuple[Any, Any, dict[str, Any]]]:
    """Per key: DYNAMODB_DELETED, whether DYNAMODB_DELETED_AT is set, DYNAMODBMETADATA."""
    rows = query(
        emulators,
        "SELECT PK, SK, DYNAMODB_DELETED, DYNAMODB_DELETED_AT IS NOT NULL, DYNAMODBMETADATA "
        f"FROM {sync.target.destination.qualified_name}",
    )
    return {f"{r[0]}|{r[1]}": (r[2], r[3], json.loads(r[4])) for r in rows}


# -- gaps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Positions:
    """A table's positions: the lease items by key, and the ledger's stream marks by generation."""

    leases: dict[str, Any]
    marks: dict[int, dict[str, Any]]


def positions(emulators: Emulators, sync: TableSync, generations: int) -> Positions:
    leases = LeaseTable(client(emulators, "dynamodb"), sync.application_name).leases()
    conn = emulators.snowflake_connect()
    try:
        sink = DynamoDBSink(conn, sync.target)
        marks = {
            g: dict(sink.read_ledger(sync.application_name, dynamodb_sync.generation_id(sync.table, g)))
            for g in range(generations)
        }
    finally:
        conn.close()
    return Positions(dict(leases), marks)


def synced_then_changed_unseen(emulators: Emulators, workload: Workload, sync: TableSync) -> set[str]:
    """Sync a table to the end of its first snapshot, then delete items and trim their REMOVE
    records (and every other record) away: the stream lost changes the ledger had not reached.
    The deleted keys."""
    workload.put(24, start=0)
    run_until_complete(emulators, sync, 0)
    gone = set()
    for item in [workload.item(n, 0) for n in (1, 5, 9, 14)]:
        workload.dynamodb.delete_item(TableName=workload.table, Key=_key(item))
        gone.add(key_text(item))
    workload.put(2, start=50)
    trim(emulators.aws_endpoint, workload.table, before=datetime.now(UTC) + timedelta(seconds=2))
    return gone


def test_a_trimmed_stream_with_on_gap_fail_stops_naming_the_table_cause_and_fix_and_changes_nothing(
    emulators: Emulators,
) -> None:
    workload, sync = make_source(emulators, settings=SyncSettings(total_segments=3, on_gap=OnGap.FAIL))
    gone = synced_then_changed_unseen(emulators, workload, sync)
    before_rows, before_generation = destination_rows(emulators, sync), current_generation(emulators, sync)
    before_positions = positions(emulators, sync, 2)
    with pytest.raises(StreamGapError) as raised:
        run(emulators, sync, 20)
    message = str(raised.value)
    assert sync.table in message
    assert "trim" in message.lower()  # the cause: the records after the checkpoint were trimmed
    assert "on_gap: resnapshot" in message  # the fix
    assert destination_rows(emulators, sync) == before_rows
    assert set(before_rows[0]) & gone == gone, "the deleted items' rows are still there"
    assert current_generation(emulators, sync) == before_generation
    after = positions(emulators, sync, 2)
    assert after.marks == before_positions.marks
    assert {k: v.checkpoint for k, v in after.leases.items()} == {
        k: v.checkpoint for k, v in before_positions.leases.items()
    }


@pytest.mark.parametrize("layout", [Layout.PACKED, Layout.UNPACKED], ids=["packed", "unpacked"])
def test_a_destination_table_dropped_by_hand_is_a_gap_and_the_next_run_resnapshots_it_whole(
    emulators: Emulators, layout: Layout
) -> None:
    # Without the check the table came back empty and only later changes arrived in it.
    workload, sync = make_source(emulators, layout=layout)
    workload.put(20, start=0)
    run_until_complete(emulators, sync, 0)
    workload.churn(6)
    run(emulators, sync, 30)
    query(emulators, f"DROP TABLE {sync.target.destination.qualified_name}")
    workload.churn(6)

    outcome = run(emulators, sync, 40)

    assert [r for r in outcome.generations_started if "was dropped" in r], outcome.generations_started
    run_until_complete(emulators, sync, 50)
    generation = current_generation(emulators, sync)
    assert generation is not None and generation.number == 1
    columns = column_types(emulators, sync) if layout is Layout.UNPACKED else None
    assert destination_rows(emulators, sync)[0] == source_items(workload, columns)


def test_a_destination_table_dropped_by_hand_with_on_gap_fail_stops_and_is_not_created_again(
    emulators: Emulators,
) -> None:
    workload, sync = make_source(emulators, settings=SyncSettings(total_segments=3, on_gap=OnGap.FAIL))
    workload.put(10, start=0)
    run_until_complete(emulators, sync, 0)
    destination = sync.target.destination
    query(emulators, f"DROP TABLE {destination.qualified_name}")

    with pytest.raises(StreamGapError) as raised:
        run(emulators, sync, 30)

    message = str(raised.value)
    assert f"the destination table {destination.qualified_name} was dropped" in message
    assert f"UNDROP TABLE {destination.qualified_name}" in message and "on_gap: resnapshot" in message
    # Not created again, so that UNDROP TABLE can bring it back; no generation started.
    assert destination.table not in tables_in(emulators, destination.schema)
    generation = current_generation(emulators, sync)
    assert generation is not None and generation.number == 0


def test_a_trimmed_stream_with_on_gap_resnapshot_takes_a_resumable_snapshot_that_removes_deleted_rows(
    emulators: Emulators,
) -> None:
    workload, sync = make_source(emulators)
    gone = synced_then_changed_unseen(emulators, workload, sync)
    old = positions(emulators, sync, 1)
    outcome = run(emulators, sync, 20)
    assert any("gap" in reason for reason in outcome.generations_started), outcome.generations_started
    generation = current_generation(emulators, sync)
    assert generation is not None and generation.number == 1 and not generation.completed
    # The batch that found the gap took and released the old generation's leases; none does again.
    old_leases = {k: v for k, v in positions(emulators, sync, 1).leases.items() if k.startswith(f"{sync.table}/g0/")}
    # The new snapshot resumes per segment from the ledger like the first: some segments have a
    # cursor, and the rows of the deleted items stay until it is complete.
    conn = emulators.snowflake_connect()
    try:
        segments = DynamoDBSink(conn, sync.target).read_segments(sync.application_name, 1)
    finally:
        conn.close()
    assert segments and any(not s.mark.done and s.mark.cursor for s in segments), segments
    assert gone <= set(destination_rows(emulators, sync)[0])
    workload.put(1, start=60)  # a change after the new generation started: read from its stream
    run_until_complete(emulators, sync, 21)
    actual, _ = destination_rows(emulators, sync)
    assert actual == source_items(workload)
    assert not gone & set(actual)
    # The new generation's positions are its own; the old generation's are left as they were
    # (harmless: no batch reads a generation's leases or marks once a newer one started).
    new = positions(emulators, sync, 2)
    assert new.marks[0] == old.marks[0]
    assert new.marks[1] and set(new.marks[1]) <= {k for k in new.leases if k.startswith(f"{sync.table}/g1/")}
    assert old_leases.keys() == old.leases.keys()
    assert {k: v for k, v in new.leases.items() if k.startswith(f"{sync.table}/g0/")} == old_leases
    assert {k for k in new.leases if k.startswith(f"{sync.table}/g1/")}


def assert_resnapshotted(emulators: Emulators, sync: TableSync, workload: Workload, gone: set[str]) -> None:
    """Runs complete generation 1's snapshot; then the table equals a Scan, without the ``gone`` keys."""
    run_until_complete(emulators, sync, 12)
    generation = current_generation(emulators, sync)
    assert generation is not None and generation.number == 1 and generation.completed
    actual, _ = destination_rows(emulators, sync)
    assert actual == source_items(workload)
    assert not gone & set(actual)


def test_a_shard_not_read_for_longer_than_the_safe_age_is_a_gap(emulators: Emulators) -> None:
    settings = SyncSettings(total_segments=2, max_checkpoint_age=timedelta(hours=20))
    workload, sync = make_source(emulators, settings=settings)
    workload.put(10, start=0)

    def yesterday() -> datetime:
        return datetime.now(UTC) - timedelta(hours=21)

    # The first snapshot and stream reads happen 21 hours ago, by the run's clock.
    run_until_complete(emulators, sync, 0, now=yesterday)
    gone = {key_text(workload.item(n, 0)) for n in (2, 7)}
    for n in (2, 7):
        workload.dynamodb.delete_item(TableName=workload.table, Key=_key(workload.item(n, 0)))
    failing = dataclasses.replace(sync, settings=dataclasses.replace(settings, on_gap=OnGap.FAIL))
    with pytest.raises(StreamGapError, match="older than"):
        run(emulators, failing, 10)
    generation = current_generation(emulators, sync)
    assert generation is not None and generation.number == 0
    # Now, by the real clock: the shard's last read is 21 hours old.
    outcome = run(emulators, sync, 11)
    assert any("gap" in reason for reason in outcome.generations_started), outcome.generations_started
    assert_resnapshotted(emulators, sync, workload, gone)


def delete_some(workload: Workload, numbers: tuple[int, ...]) -> set[str]:
    """Delete the items put as ``numbers``; their keys."""
    for n in numbers:
        workload.dynamodb.delete_item(TableName=workload.table, Key=_key(workload.item(n, 0)))
    return {key_text(workload.item(n, 0)) for n in numbers}


def test_a_child_shard_left_unread_until_its_changes_were_trimmed_is_a_gap_not_a_silent_loss(
    emulators: Emulators,
) -> None:
    settings = SyncSettings(total_segments=2, max_snapshot_batches_per_run=1)
    workload, sync = make_source(emulators, settings=settings)
    workload.put(10, start=0)

    def yesterday() -> datetime:
        return datetime.now(UTC) - timedelta(hours=21)

    # Generation 0 began 21 hours ago by the runs' clock, and its snapshot is complete.
    run_until_complete(emulators, sync, 0, now=yesterday)
    parent, child = roll_shard(emulators.aws_endpoint, workload.table)
    gone = delete_some(workload, (2, 7))
    workload.put(2, start=20)
    # Then, 21 hours ago, one batch reads the parent to its end and the run stops (as if it died):
    # the child, which holds the deletes and puts, is left unread.
    stopped = sync_table(
        sync,
        lease_dynamodb=client(emulators, "dynamodb"),
        source_dynamodb=client(emulators, "dynamodb"),
        streams=client(emulators, "dynamodbstreams"),
        connect_snowflake=emulators.snowflake_connect,
        owner="ddb/sync/run/-1/try-10/stopped",
        now=yesterday,
        cutoff=datetime.now(UTC),
        max_rounds=0,
    )
    assert [b.shards_ended for b in stopped.batches] == [(parent,)]
    leases = positions(emulators, sync, 1).leases
    assert not leases[f"{sync.table}/g0/{child}"].checkpointed_at, "the child was read"
    # Now, by the real clock, the child's records have passed the retention: TRIM_HORIZON would
    # start after them, silently; the read from the child's first record finds the gap.
    trim(emulators.aws_endpoint, workload.table, before=datetime.now(UTC) + timedelta(seconds=2))
    outcome = run(emulators, sync, 11)
    assert any("gap" in reason and child in reason for reason in outcome.generations_started), outcome
    assert_resnapshotted(emulators, sync, workload, gone)


def test_a_shard_that_left_the_stream_before_it_was_read_to_its_end_is_a_gap_and_its_child_is_not_stuck(
    emulators: Emulators,
) -> None:
    workload, sync = make_source(emulators, settings=SyncSettings(total_segments=2, max_snapshot_batches_per_run=1))
    workload.put(10, start=0)
    run_until_complete(emulators, sync, 0)
    workload.put(30, start=100)
    first = run(emulators, sync, 10)
    (read,) = first.batches
    assert list(read.shards.values()) == [sync.max_records_per_shard] and not read.shards_ended
    parent, child = roll_shard(emulators.aws_endpoint, workload.table)
    gone = delete_some(workload, (3, 8))
    workload.put(2, start=200)
    # AWS deletes a shard once its records passed the retention: the parent's last five are gone
    # with it, and its child waits for a parent that no batch can finish.
    remove_shard(emulators.aws_endpoint, workload.table, parent)
    outcome = run(emulators, sync, 11)
    assert any("gap" in r and "left the stream" in r for r in outcome.generations_started), outcome
    assert_resnapshotted(emulators, sync, workload, gone)
    assert f"{sync.table}/g1/{child}" in positions(emulators, sync, 2).leases


def test_a_table_deleted_and_created_again_has_a_new_stream_and_gets_a_new_snapshot_not_a_mix(
    emulators: Emulators,
) -> None:
    workload, sync = make_source(emulators, settings=SyncSettings(total_segments=2, max_snapshot_batches_per_run=1))
    workload.put(12, start=0)
    run_until_complete(emulators, sync, 0)
    first = current_generation(emulators, sync)
    assert first is not None and first.stream_arn == sync.stream_arn
    # The table is deleted and created again under its name (restored from an older backup, say):
    # its new stream holds none of the old items' deletions.
    workload.dynamodb.delete_table(TableName=workload.table)
    description = create_table(workload.dynamodb, workload.table)
    workload.put(3, start=100)
    changed = workload.item(4, 1)
    workload.put_item(changed)  # a key the old table had, with other values
    renewed = dataclasses.replace(sync, stream_arn=description["LatestStreamArn"])  # as discovery finds it
    assert renewed.stream_arn != sync.stream_arn
    outcome = run(emulators, renewed, 10)
    assert any("stream is now" in r and sync.stream_arn in r for r in outcome.generations_started), outcome
    run_until_complete(emulators, renewed, 11)
    generation = current_generation(emulators, renewed)
    assert generation is not None and generation.number == 1 and generation.stream_arn == renewed.stream_arn
    actual, _ = destination_rows(emulators, renewed)
    assert actual == source_items(workload) and len(actual) == 4


# -- widening an unpacked column ----------------------------------------------------------------


@pytest.mark.parametrize("stopped", ["after the copy", "after the drop"])
def test_a_widening_cut_short_is_finished_by_the_next_batch(emulators: Emulators, stopped: str) -> None:
    _, sync = make_source(emulators, Layout.UNPACKED)
    conn = emulators.snowflake_connect()
    try:
        sink = DynamoDBSink(conn, sync.target)
        sink.ensure_destination([*sync.destination_columns, TableColumn("QTY", "NUMBER(38,0)")])
        table = sync.target.table
        sink._execute(f"INSERT INTO {table} (PK, SK, DYNAMODB_VERSION, QTY) VALUES ('a', '1', 'v', 42)")
        statements = widening_sql(sync.target, Widening("QTY", "VARCHAR"), added=False)
        for sql in statements[: 2 if stopped == "after the copy" else 3]:
            sink._execute(sql)
        columns = {c.name: c.data_type for c in sink.widen_columns(())}
        assert columns["QTY"].startswith(("VARCHAR", "TEXT")), columns
        assert not [c for c in columns if c.endswith(WIDENING_SUFFIX)], columns
        assert sink._execute(f"SELECT QTY FROM {table}") == [("42",)]
    finally:
        conn.close()


def test_a_reset_recorded_while_a_batch_is_in_flight_refuses_it_and_the_run_goes_on_in_the_new_generation(
    emulators: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload, sync = make_source(emulators)
    workload.put(30, start=0)
    first = run(emulators, sync, 1)
    assert len(first.batches) == 1
    in_progress = current_generation(emulators, sync)
    assert in_progress is not None and in_progress.number == 0 and not in_progress.completed
    workload.churn(10)
    original = DynamoDBSink.apply_batch
    resets: list[int] = []

    def reset_then_apply(sink: DynamoDBSink, **kwargs: Any) -> Any:
        # The reset DAG records the next generation after this batch was planned in generation 0.
        if not resets:
            current = sink.current_generation(sync.application_name)
            reset = plan_table_reset(sync.table, current, sync.settings.total_segments, datetime.now(UTC), "test")
            assert reset.start is not None
            assert sink.record_generation(sync.application_name, reset.start.generation, reset.start.reason)
            resets.append(reset.start.generation.number)
        return original(sink, **kwargs)

    monkeypatch.setattr(DynamoDBSink, "apply_batch", reset_then_apply)
    second = run(emulators, sync, 2)
    monkeypatch.setattr(DynamoDBSink, "apply_batch", original)
    assert resets == [1]
    assert second.generations_superseded == [0]
    # The run went on in generation 1: its batch read generation 1's segments.
    assert [b.generation for b in second.batches] == [1]
    conn = emulators.snowflake_connect()
    try:
        sink = DynamoDBSink(conn, sync.target)
        # Generation 0's refused batch moved nothing: its segments stand where the first run left them.
        assert all(not s.mark.done for s in sink.read_segments(sync.application_name, 0))
        assert {s.segment for s in sink.read_segments(sync.application_name, 0)} == {0, 1}
    finally:
        conn.close()
    generation = current_generation(emulators, sync)
    assert generation is not None and generation.number == 1
    workload.churn(10)
    run_until_complete(emulators, sync, 3)
    actual, _ = destination_rows(emulators, sync)
    assert actual == source_items(workload)


# -- several snapshot batches in one run --------------------------------------------------------------


def test_a_run_reads_snapshot_batches_up_to_its_bound_and_the_next_runs_read_on_from_the_cursors(
    emulators: Emulators,
) -> None:
    settings = SyncSettings(total_segments=2, max_segments_per_batch=2, max_snapshot_batches_per_run=3)
    workload, sync = make_source(emulators, settings=settings)
    # 60 items; a batch reads at most 7 of each of the 2 segments: 3 batches read at most 42.
    workload.put(60, start=0)

    outcomes = []
    for attempt in range(10):
        outcomes.append(run(emulators, sync, attempt))
        generation = current_generation(emulators, sync)
        assert generation is not None
        if generation.completed:
            break

    def snapshot_batches(outcome: dynamodb_sync.TableOutcome) -> list[dynamodb_sync.BatchFigures]:
        return [b for b in outcome.batches if b.segments]

    # Each run but the last reads three snapshot batches, each committed on its own; the last
    # completes the snapshot. Every item is read by the snapshot exactly once, across the runs.
    assert len(outcomes) >= 2
    assert [len(snapshot_batches(o)) for o in outcomes[:-1]] == [3] * (len(outcomes) - 1)
    assert 1 <= len(snapshot_batches(outcomes[-1])) <= 3 and outcomes[-1].snapshots_completed == [0]
    batch_ids = [b.batch_id for o in outcomes for b in snapshot_batches(o)]
    assert len(set(batch_ids)) == len(batch_ids)
    assert sum(sum(b.segments.values()) for o in outcomes for b in snapshot_batches(o)) == 60
    actual, _ = destination_rows(emulators, sync)
    assert actual == source_items(workload)


# -- one application name, one copy of each table ---------------------------------------------------


def second_destination(emulators: Emulators, sync: TableSync, schema: str) -> TableSync:
    """The same table under the same application name, synced by another connector into ``schema``."""
    query(emulators, f"CREATE SCHEMA IF NOT EXISTS ANALYTICS.{schema}")
    other = Destination("ANALYTICS", schema, sync.target.destination.table + "_COPY")
    return dataclasses.replace(
        sync, target=dataclasses.replace(sync.target, destination=other), connector_id="orders_copy"
    )


def tables_in(emulators: Emulators, schema: str) -> set[str]:
    rows = query(
        emulators, f"SELECT TABLE_NAME FROM ANALYTICS.INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = '{schema}'"
    )
    return {str(r[0]) for r in rows}


@pytest.mark.parametrize("schema", ["RAW", "COPIES"], ids=["same-schema", "another-schema"])
def test_a_second_destination_of_a_table_under_one_application_name_is_refused_before_anything_is_read(
    emulators: Emulators, schema: str
) -> None:
    # Without the refusal, the second connector's table stayed empty: in the same schema it took the
    # first one's snapshot as its own; in another, the first one's finished segments were never read.
    workload, sync = make_source(emulators)
    sync = dataclasses.replace(sync, connector_id="orders")
    workload.put(20, start=0)
    run_until_complete(emulators, sync, 0)
    copy = second_destination(emulators, sync, schema)
    leases_before = LeaseTable(client(emulators, "dynamodb"), sync.application_name).leases()

    with pytest.raises(IdentityError) as refused:
        run(emulators, copy, 50)

    message = str(refused.value)
    assert f"already syncs DynamoDB table {sync.table!r} into {sync.target.destination.qualified_name}" in message
    assert f"connector 'orders_copy' syncs it into {copy.target.destination.qualified_name}" in message
    assert "give connector 'orders_copy' an application_name of its own" in message
    # Nothing of the copy was created, recorded or taken.
    assert copy.target.destination.table not in tables_in(emulators, schema)
    generations = f"SELECT COUNT(*) FROM {copy.target.generations} WHERE DESTINATION = "
    assert query(emulators, generations + f"'{copy.target.destination.qualified_name}'") == [(0,)]
    assert LeaseTable(client(emulators, "dynamodb"), sync.application_name).leases() == leases_before
    # The first connector syncs on.
    workload.churn(6)
    run(emulators, sync, 60)
    assert destination_rows(emulators, sync)[0] == source_items(workload)


def test_with_the_lease_table_lost_snowflakes_record_still_refuses_a_second_destination_in_the_schema(
    emulators: Emulators,
) -> None:
    workload, sync = make_source(emulators)
    workload.put(15, start=0)
    run_until_complete(emulators, sync, 0)
    delete_table(client(emulators, "dynamodb"), sync.application_name)
    copy = second_destination(emulators, sync, "RAW")

    # Snowflake's record names the destination, not the connector: it is not called '(unknown)', nor said to keep it.
    with pytest.raises(IdentityError) as refused:
        run(emulators, copy, 50)
    message = str(refused.value)
    assert f"into {sync.target.destination.qualified_name} for a connector whose id was not recorded" in message
    assert "needs no change" not in message and "(unknown)" not in message

    # The refused run claimed nothing: the first connector's next run claims the new lease table.
    workload.churn(6)
    run(emulators, sync, 60)
    assert destination_rows(emulators, sync)[0] == source_items(workload)
    metadata = LeaseTable(client(emulators, "dynamodb"), sync.application_name).metadata()
    assert metadata is not None
    assert [(c.table, c.destination) for c in metadata.table_claims] == [
        (sync.table, sync.target.destination.qualified_name)
    ]


def test_a_kinesis_connectors_lease_table_is_refused_before_anything_is_read(emulators: Emulators) -> None:
    workload, sync = make_source(emulators)
    workload.put(5, start=0)
    leases = LeaseTable(client(emulators, "dynamodb"), sync.application_name)
    leases.create(stream_name="clicks", application_name=sync.application_name)
    stream_arn = "arn:aws:kinesis:us-east-1:123456789012:stream/clicks"
    leases.record_identity(TableIdentity("clicks", "ANALYTICS.RAW.CLICKS", stream_arn))

    with pytest.raises(IdentityError, match="already used by Kinesis connector 'clicks' for stream 'clicks'"):
        run(emulators, sync, 0)

    assert current_generation(emulators, sync) is None
    assert leases.leases() == {}
    metadata = leases.metadata()
    assert metadata is not None and metadata.table_claims == ()


# -- operator mistakes: a changed setting or a renamed application is refused, never loaded wrong --------------


@pytest.mark.parametrize(
    ("created", "changed", "told"),
    [
        ({"layout": Layout.UNPACKED}, {"layout": Layout.PACKED}, "created with layout: unpacked"),
        ({"layout": Layout.PACKED}, {"layout": Layout.UNPACKED}, "created with layout: packed"),
        ({"deletes": Deletes.SOFT}, {"deletes": Deletes.HARD}, "created with deletes: soft"),
    ],
    ids=["unpacked-to-packed", "packed-to-unpacked", "soft-to-hard-deletes"],
)
def test_a_changed_layout_or_deletes_is_refused_before_anything_and_dropping_the_table_moves_it_to_the_new_one(
    emulators: Emulators, created: dict[str, Any], changed: dict[str, Any], told: str
) -> None:
    # Without the check, unpacked -> packed loaded "1 change(s)" and set every attribute column to NULL.
    workload, sync = make_source(emulators, **created)
    workload.put(12, start=0)
    run_until_complete(emulators, sync, 0)
    before, generation = destination_rows(emulators, sync), current_generation(emulators, sync)
    changed_sync = dataclasses.replace(
        sync, target=dataclasses.replace(sync.target, **changed), connector_id="customers"
    )
    workload.churn(6)

    with pytest.raises(DestinationShapeError) as refused:
        run(emulators, changed_sync, 30)

    message = str(refused.value)
    table = sync.target.destination.qualified_name
    assert f"destination table {table} cannot be loaded by connector 'customers'" in message
    assert told in message and "Nothing was created, claimed or recorded" in message
    assert "point destination.table at a new table" in message and "drop or rename it" in message
    assert destination_rows(emulators, sync) == before
    assert current_generation(emulators, sync) == generation
    # The way to change a table's layout: drop it; the next sync snapshots into a table of the new layout.
    query(emulators, f"DROP TABLE {table}")
    run_until_complete(emulators, changed_sync, 40)
    columns = column_types(emulators, changed_sync) if changed_sync.target.layout is Layout.UNPACKED else None
    assert destination_rows(emulators, changed_sync)[0] == source_items(workload, columns)


def test_a_dynamodb_connector_pointed_at_a_kinesis_destination_is_refused_naming_what_the_table_lacks(
    emulators: Emulators,
) -> None:
    # Without the check, generation 0 was recorded and the MERGE then failed with the emulator's binder error.
    workload, sync = make_source(emulators)
    workload.put(5, start=0)
    table = sync.target.destination.qualified_name
    query(emulators, f"CREATE TABLE {table} (ORDER_ID NUMBER(38,0), KINESISMETADATA OBJECT)")

    with pytest.raises(DestinationShapeError) as refused:
        run(emulators, sync, 0)

    message = str(refused.value)
    assert "it is a Kinesis connector's destination" in message
    assert "it lacks the column(s) PK VARCHAR, SK VARCHAR, DYNAMODB_VERSION VARCHAR, DYNAMODBMETADATA OBJECT" in message
    assert set(column_types(emulators, sync)) == {"ORDER_ID", "KINESISMETADATA"}
    assert not LeaseTable(client(emulators, "dynamodb"), sync.application_name).exists()


def test_an_application_renamed_without_the_reset_dag_is_refused_and_the_table_moves_only_when_dropped(
    emulators: Emulators,
) -> None:
    # Without the refusal the renamed application's snapshot (version 0.0.x) sorted below the rows the old
    # name's stream wrote (0.1.x): updated items kept old values and deleted items stayed, and the run succeeded.
    workload, sync = make_source(emulators)
    workload.put(12, start=0)
    run_until_complete(emulators, sync, 0)
    workload.churn(8)
    run(emulators, sync, 30)
    before = destination_rows(emulators, sync)
    renamed = dataclasses.replace(sync, application_name=unique("ddb-app-renamed"))
    workload.churn(4)

    with pytest.raises(IdentityError) as refused:
        run(emulators, renamed, 40)

    message = str(refused.value)
    table = sync.target.destination.qualified_name
    assert f"destination {table} is loaded by application {sync.application_name!r}" in message
    assert f"Set application_name back to {sync.application_name!r}" in message
    assert f"drop or rename {table} first" in message and "Nothing was read or recorded" in message
    assert destination_rows(emulators, sync) == before
    assert current_generation(emulators, renamed) is None
    assert not LeaseTable(client(emulators, "dynamodb"), renamed.application_name).exists()
    # The old name syncs on and converges.
    run(emulators, sync, 50)
    assert destination_rows(emulators, sync)[0] == source_items(workload)
    # Moving the table to the new name: once it is dropped, the new name snapshots into a new one ...
    query(emulators, f"DROP TABLE {table}")
    run_until_complete(emulators, renamed, 60)
    workload.churn(4)
    run(emulators, renamed, 90)
    assert destination_rows(emulators, renamed)[0] == source_items(workload)
    # ... and from then on the old name is the one refused.
    with pytest.raises(IdentityError, match=f"is loaded by application {renamed.application_name!r}"):
        run(emulators, sync, 100)
    assert destination_rows(emulators, renamed)[0] == source_items(workload)


# -- hostile attribute names: set aside whole, never blocking the table ------------------------------------------

HOSTILE: dict[str, dict[str, Any]] = {
    "300 characters": {"x" * 300: {"S": "long"}},
    "a newline": {"line\nbreak": {"S": "nl"}},
    "KINESISMETADATA": {"KINESISMETADATA": {"S": "k"}},
    "DYNAMODBMETADATA": {"DYNAMODBMETADATA": {"S": "d"}},
    "ITEM": {"ITEM": {"S": "i"}},
    "dynamodb_deleted": {"dynamodb_deleted": {"BOOL": True}},
    "PK beside pk": {"PK": {"S": "shadow"}},
    "Name beside name": {"Name": {"S": "a"}, "name": {"S": "b"}},
    "ß beside SS": {"ß": {"S": "a"}, "SS": {"S": "b"}},
}


def set_aside_rows(emulators: Emulators, sync: TableSync) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """The failures table's newest change per key: its attribute, reason and item."""
    rows = query(
        emulators,
        f"SELECT KEY_TEXT, ERROR_ATTRIBUTE, ERROR_MESSAGE, ITEM FROM {sync.target.failures} "
        "QUALIFY ROW_NUMBER() OVER (PARTITION BY KEY_TEXT ORDER BY DYNAMODB_VERSION DESC) = 1",
    )
    return {str(r[0]): (str(r[1]), str(r[2]), json.loads(r[3], parse_float=Decimal)) for r in rows}


def key_json(item: dict[str, Any]) -> str:
    """The item's key as the failures table's KEY_TEXT holds it."""
    return item_to_json({"pk": item["pk"], "sk": item["sk"]})


def test_items_whose_attributes_cannot_be_columns_are_set_aside_whole_while_the_rest_of_the_table_syncs(
    emulators: Emulators,
) -> None:
    # Each of these used to fail the table's run, blocking every valid sibling item.
    workload, sync = make_source(emulators, layout=Layout.UNPACKED, settings=SyncSettings(total_segments=2))
    workload.put(6, start=0)
    hostile = {}
    for n, attributes in enumerate(HOSTILE.values(), start=100):
        item = {**workload.item(n, 0), **attributes}
        workload.put_item(item)
        hostile[key_json(item)] = item
    in_stream = {**workload.item(200, 0), "ITEM": {"S": "from the stream"}}

    run_until_complete(emulators, sync, 0)
    workload.put_item(in_stream)
    hostile[key_json(in_stream)] = in_stream
    outcome = run(emulators, sync, 30)

    assert outcome.items_set_aside == 1 and outcome.summary(sync)["items_set_aside"] == 1
    kept = set_aside_rows(emulators, sync)
    assert set(kept) == set(hostile)
    for key, (attribute, reason, item) in kept.items():
        assert reason.startswith(f"item {key} of DynamoDB table {sync.table!r}: attribute ")
        assert "use layout: packed" in reason and attribute in hostile[key]
        assert item == json.loads(item_to_json(hostile[key]), parse_float=Decimal)
    hostile_keys = {key_text(i) for i in hostile.values()}
    columns = column_types(emulators, sync)
    expected = source_items(workload, columns, without=hostile_keys)
    assert destination_rows(emulators, sync)[0] == expected
    # A later change of a set-aside item that can be loaded puts its row back; a change that makes a
    # loaded item unloadable takes its row away (no stale value stays) and is set aside in turn.
    fixed = next(iter(hostile.values()))
    fixed = {k: v for k, v in fixed.items() if len(k) < 100}
    workload.put_item(fixed)
    broken = {**workload.item(3, 0), "Name": {"S": "a"}, "name": {"S": "b"}}
    workload.put_item(broken)
    run(emulators, sync, 40)
    hostile_keys = (hostile_keys - {key_text(fixed)}) | {key_text(broken)}
    columns = column_types(emulators, sync)
    expected = source_items(workload, columns, without=hostile_keys)
    assert destination_rows(emulators, sync)[0] == expected
    assert key_json(broken) in set_aside_rows(emulators, sync)
    conn = emulators.snowflake_connect()
    try:
        assert DynamoDBSink(conn, sync.target).items_set_aside() == len(hostile_keys)  # what status shows
    finally:
        conn.close()
    # Replayed: nothing is kept twice.
    count = query(
        emulators, f"SELECT COUNT(*), COUNT(DISTINCT KEY_TEXT || DYNAMODB_VERSION) FROM {sync.target.failures}"
    )
    assert count[0][0] == count[0][1]


# -- leases: a batch that outlives their duration keeps them --------------------------------------------------


def test_a_batch_that_outlives_the_lease_duration_keeps_its_leases_and_another_worker_takes_none(
    emulators: Emulators, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without renewal the batch's leases expired mid-batch: another worker could take its segments and
    # shards, and only the ledger's guard stopped a second apply.
    workload, sync = make_source(emulators, settings=SyncSettings(total_segments=2))
    sync = dataclasses.replace(sync, lease_duration_seconds=6.0)
    workload.put(10, start=0)
    table = LeaseTable(client(emulators, "dynamodb"), sync.application_name)
    seen: dict[str, Any] = {}
    load = dynamodb_sync.load  # the data plane, here run in the task's process

    def slow_data_plane(context: Any, plan: Any, *args: Any, **kwargs: Any) -> Any:
        held = {k: v for k, v in table.leases().items() if v.lease_owner is not None}
        taken_until = max(lease.lease_expires_at for lease in held.values())
        deadline = time.time() + 120
        while time.time() < taken_until + 1 and time.time() < deadline:  # past the expiry they were taken with
            time.sleep(0.2)
        now = time.time()
        after = table.leases()
        seen["expired"] = sorted(k for k in held if not after[k].is_held(now))
        seen["workers"] = [w for w in table.workers()]
        # Another worker's sync, taking what is free as sync_table does.
        stolen = take_leases(table, after, "another-worker/try-1", 60, wanted=set(held))
        seen["stolen"] = sorted(lease.shard_id for lease in stolen)
        return load(context, plan, *args, **kwargs)

    monkeypatch.setattr(dynamodb_sync, "load", slow_data_plane)
    outcome = run(emulators, sync, 0)

    assert seen["expired"] == [] and seen["stolen"] == []
    assert len(seen["workers"]) == 1  # the batch's heartbeat, written while it ran ...
    assert table.workers() == {}  # ... and deleted once it ended
    assert outcome.batches and outcome.batches[0].merge.changes_loaded > 0
    assert all(lease.lease_owner is None for lease in table.leases().values())  # released, none lost


# -- number keys ----------------------------------------------------------------------------------------------


def with_number_keys(sync: TableSync) -> TableSync:
    keys = tuple(KeyAttribute(k.name, k.type, numeric=k.type == "N") for k in sync.keys)
    target = dataclasses.replace(sync.target, keys=tuple(KeyColumn(k.column, k.sql_type) for k in keys))
    return dataclasses.replace(sync, keys=keys, target=target)


def test_number_keys_are_number_columns_sql_can_order_and_a_key_they_cannot_hold_is_set_aside(
    emulators: Emulators,
) -> None:
    workload, sync = make_source(emulators, layout=Layout.PACKED, settings=SyncSettings(total_segments=1))
    sync = with_number_keys(sync)
    for n in (2, 10, 1):
        workload.put_item(workload.item(n, 0))
    fraction = {**workload.item(7, 0), "sk": {"N": "7.5"}}
    workload.put_item(fraction)

    run_until_complete(emulators, sync, 0)

    assert column_types(emulators, sync)["SK"] == "NUMBER"
    table = sync.target.destination.qualified_name
    assert [int(r[0]) for r in query(emulators, f"SELECT SK FROM {table} ORDER BY SK")] == [1, 2, 10]
    kept = query(emulators, f"SELECT KEY_TEXT, ERROR_ATTRIBUTE, ERROR_MESSAGE FROM {sync.target.failures}")
    # Once per change: the snapshot's read of it, and the stream's INSERT read from before the snapshot.
    assert {(r[0], r[1]) for r in kept} == {(key_json(fraction), "sk")}
    assert "key attribute 'sk' is 7.5, which its NUMBER(38,0) key column cannot hold" in kept[0][2]
    # Its removal is kept too (no row of it exists to remove), and the rest syncs on.
    workload.dynamodb.delete_item(TableName=workload.table, Key=_key(fraction))
    workload.dynamodb.delete_item(TableName=workload.table, Key=_key(workload.item(2, 0)))
    run(emulators, sync, 30)
    assert [int(r[0]) for r in query(emulators, f"SELECT SK FROM {table} ORDER BY SK")] == [1, 10]
    newest = query(
        emulators,
        f"SELECT DYNAMODBMETADATA:eventName::VARCHAR, ITEM IS NULL FROM {sync.target.failures} "
        "ORDER BY DYNAMODB_VERSION DESC LIMIT 1",
    )
    assert newest == [("REMOVE", True)]
    conn = emulators.snowflake_connect()
    try:
        assert DynamoDBSink(conn, sync.target).items_set_aside() == 0  # its newest change is its removal
    finally:
        conn.close()


def test_a_destination_created_with_text_number_keys_keeps_them(emulators: Emulators) -> None:
    workload, sync = make_source(emulators, layout=Layout.PACKED, settings=SyncSettings(total_segments=1))
    workload.put(5, start=0)
    run_until_complete(emulators, sync, 0)  # text keys, as before number_keys
    workload.churn(4)

    run_until_complete(emulators, with_number_keys(sync), 10)

    assert column_types(emulators, sync)["SK"].startswith(("VARCHAR", "TEXT"))
    assert destination_rows(emulators, sync)[0] == source_items(workload)


def test_a_lost_lease_table_is_rebuilt_from_snowflakes_ledgers_with_no_new_snapshot_and_no_change_twice(
    emulators: Emulators,
) -> None:
    """A DynamoDB source has nothing to restore: its progress is in Snowflake (the generations, each
    snapshot segment's mark and each stream shard's mark), the lease table holds only leases. Lost in
    the middle of the snapshot and again while following the stream, the next runs go on from
    Snowflake's marks: the same generation, the snapshot resumed, each stream change applied once."""
    workload, sync = make_source(emulators)
    workload.put(30, start=0)
    run(emulators, sync, 0)  # one snapshot batch of three segments' seven items: not complete
    generation = current_generation(emulators, sync)
    assert generation is not None and not generation.completed
    segment_marks = positions(emulators, sync, 1).marks[0]

    delete_table(client(emulators, "dynamodb"), sync.application_name)
    run_until_complete(emulators, sync, 1)
    resumed = current_generation(emulators, sync)
    assert resumed is not None and resumed.completed and resumed.number == generation.number == 0
    assert destination_rows(emulators, sync)[0] == source_items(workload)

    workload.churn(8)
    first = run(emulators, sync, 2)
    assert first.changes > 0
    marks = positions(emulators, sync, 1).marks[0]
    delete_table(client(emulators, "dynamodb"), sync.application_name)
    again = run(emulators, sync, 3)
    # Nothing already applied is applied again, and no generation starts.
    assert (again.changes, again.generations_started) == (0, [])
    assert positions(emulators, sync, 1).marks[0] == marks != segment_marks
    workload.churn(5)
    after = run(emulators, sync, 4)
    assert after.changes > 0 and after.generations_started == []
    current = current_generation(emulators, sync)
    assert current is not None and current.number == 0
    assert destination_rows(emulators, sync)[0] == source_items(workload)


# -- a batch whose job run goes on without the run (a deferred task) ------------------------------------


def test_a_run_whose_every_batch_s_job_run_goes_on_elsewhere_syncs_what_a_waiting_run_syncs(
    emulators: Emulators,
) -> None:
    """A deferred task's run: each batch's submit leaves the job run (JobDetached); once the run ended,
    ``sync_table`` finishes the batch from what the task carried as plain JSON, and goes on."""
    settings = SyncSettings(total_segments=2, max_segments_per_batch=2, max_snapshot_batches_per_run=2)
    workload, sync = make_source(emulators, settings=settings)
    workload.put(30, start=0)  # 30 items, at most 7 a segment a batch: two snapshot batches a run
    plans: list[TableBatchPlan] = []

    def detach(plan: TableBatchPlan) -> TableBatchResult:
        plans.append(plan)
        key = ("emr_serverless", f"run-{len(plans)}", f"attempt-{len(plans)}", plan.application_name)
        raise JobDetached(DetachedRun(*key, plan.generation_id, plan.batch_id))

    def job(plan: TableBatchPlan) -> TableBatchResult:
        """The batch's job run, wherever it ran: the data plane's steps in this process."""
        conn = emulators.snowflake_connect()
        try:
            access = ClientAccess(client(emulators, "dynamodb"), client(emulators, "dynamodbstreams"))
            return load(LocalContext(), plan, SharedConnection(conn), access=access)
        finally:
            conn.close()

    def ended(result: TableBatchResult) -> Callable[[], TableBatchResult]:
        """The job run's outcome, once it ended."""
        return lambda: result

    def sync_run(attempt: int, detached: dynamodb_sync.DetachedBatch | None = None) -> dynamodb_sync.TableOutcome:
        return sync_table(
            sync,
            lease_dynamodb=client(emulators, "dynamodb"),
            source_dynamodb=client(emulators, "dynamodb"),
            streams=client(emulators, "dynamodbstreams"),
            connect_snowflake=emulators.snowflake_connect,
            owner=f"ddb/sync/run/-1/try-{attempt}/{os.getpid()}",
            submit=detach,
            region="us-east-1",
            detached=detached,
        )

    outcomes, detached, resumes = [], None, 0
    for attempt in range(1, 6):
        while True:
            try:
                outcomes.append(sync_run(attempt, detached))
                detached = None
                break
            except JobDetached as raised:
                carried = json.loads(json.dumps({"run": raised.run.to_dict(), "hold": raised.hold.to_dict()}))
                progress = dynamodb_sync.SyncProgress.from_dict(json.loads(json.dumps(raised.progress)))
                leases = LeaseTable(client(emulators, "dynamodb"), sync.application_name).leases()
                hold = LeaseHold.from_dict(carried["hold"])
                assert {leases[unit].lease_owner for unit in hold.units} == {hold.owner}  # kept for the run
                detached = dynamodb_sync.DetachedBatch(
                    progress, hold, DetachedRun.from_dict(carried["run"]), ended(job(plans[-1]))
                )
                resumes += 1
        generation = current_generation(emulators, sync)
        if generation is not None and generation.completed and outcomes[-1].changes == 0:
            break

    assert resumes == len(plans) >= 3
    # The first run read two snapshot batches (its bound), each finished after its job run ended.
    assert [len([b for b in outcomes[0].batches if b.segments])] == [2]
    assert [b.batch_id for o in outcomes for b in o.batches] == [plan.batch_id for plan in plans]
    assert sum(sum(b.segments.values()) for o in outcomes for b in o.batches) == 30  # each item read once
    actual, _ = destination_rows(emulators, sync)
    assert actual == source_items(workload)
    leases = LeaseTable(client(emulators, "dynamodb"), sync.application_name).leases()
    assert {lease.lease_owner for lease in leases.values()} == {None}
    table = LeaseTable(client(emulators, "dynamodb"), sync.application_name)
    assert [table.recorded_run(plan.batch_id) for plan in plans] == [None] * len(plans)
