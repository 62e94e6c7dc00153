"""A DynamoDB table's changes applied by one MERGE with the ledger (fakesnow server over HTTP)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_kinesis_snowflake.core.load.dynamodb_sink import (
    Deletes,
    DynamoDBSink,
    DynamoDBTarget,
    GenerationSupersededError,
    KeyColumn,
    Layout,
    SegmentMark,
    SegmentRow,
)
from airflow_kinesis_snowflake.core.load.snowflake_sink import ROWS_DIR, StaleBatchError
from airflow_kinesis_snowflake.core.model import Checkpoint, Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, ItemChange, Version
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import Generation
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot import SnapshotStart
from tests.conftest import query, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def snapshot(key: str, generation: int = 0, **attributes: Any) -> ItemChange:
    return ItemChange(
        table="orders",
        keys={"id": {"S": key}},
        image={
            "id": {"S": key},
            **{k: {"N": str(v)} if isinstance(v, int) else {"S": v} for k, v in attributes.items()},
        },
        event_name=EventName.SNAPSHOT,
        version=Version.of_snapshot(generation),
        shard_id="segment-0-of-1",
        approximate_creation_time=T0,
    )


def stream(
    key: str, event: EventName, sequence: int, generation: int = 0, ttl: bool = False, **attributes: Any
) -> ItemChange:
    image = None
    if event is not EventName.REMOVE:
        image = {
            "id": {"S": key},
            **{k: {"N": str(v)} if isinstance(v, int) else {"S": v} for k, v in attributes.items()},
        }
    return ItemChange(
        table="orders",
        keys={"id": {"S": key}},
        image=image,
        event_name=event,
        version=Version.of_stream(generation, str(sequence)),
        event_id=f"ev-{sequence}",
        shard_id="shardId-1",
        approximate_creation_time=T0 + timedelta(seconds=sequence),
        ttl_expiry=ttl,
    )


def plain(image: dict[str, Any]) -> dict[str, Any]:
    """The item as plain JSON (the type mapping is not what these tests are about)."""
    return {k: int(v["N"]) if "N" in v else v["S"] for k, v in image.items()}


def metadata(change: ItemChange) -> dict[str, Any]:
    return {
        "table": change.table,
        "eventName": change.event_name.value,
        "eventID": change.event_id,
        "sequenceNumber": str(change.version.sequence) if change.version.sequence else None,
        "shardId": change.shard_id,
        "approximateCreationDateTime": change.approximate_creation_time.isoformat()
        if change.approximate_creation_time
        else None,
        "ttlExpiry": change.ttl_expiry,
    }


@dataclass
class Table:
    emulators: Emulators
    sink: DynamoDBSink
    tmp_path: Path
    attributes: tuple[str, ...] = ()
    #: the ledgers are one per schema: each table's batches run under an application of their own
    app: str = ""

    def __post_init__(self) -> None:
        self.app = self.app or unique("app")

    @property
    def target(self) -> DynamoDBTarget:
        return self.sink.target

    def stage(self, stage_dir: str, changes: Sequence[ItemChange], prefix: str = "") -> None:
        """Stage ``changes`` as one Parquet file, as the row builder does: one row per change."""
        key = lambda c: prefix + c.keys["id"]["S"]  # noqa: E731
        columns: dict[str, pa.Array] = {
            "ID": pa.array([key(c) for c in changes], pa.string()),
            "DYNAMODB_EVENT": pa.array([c.event_name.value for c in changes], pa.string()),
            "DYNAMODB_VERSION": pa.array([c.version.to_text() for c in changes], pa.string()),
            "DYNAMODBMETADATA": pa.array([json.dumps(metadata(c)) for c in changes], pa.string()),
        }
        items = [({**plain(c.image), "id": key(c)} if c.image else None) for c in changes]
        if self.target.layout is Layout.PACKED:
            columns["ITEM"] = pa.array([json.dumps(i) if i else None for i in items], pa.string())
        else:
            for name in self.attributes:
                values = [i.get(name.lower()) if i else None for i in items]
                kind = pa.int64() if name == "V" else pa.string()
                columns[name] = pa.array(values, kind)
        path = self.tmp_path / f"{stage_dir.replace('/', '_')}.parquet"
        pq.write_table(pa.table(columns), path)
        self.sink.put_file(path, f"{stage_dir}/{ROWS_DIR}")

    def stage_many(self, stage_dir: str, changes: Sequence[ItemChange], prefixes: Sequence[str]) -> None:
        """Stage changes of several key spaces (each change's key gets its own prefix) in one file."""
        renamed = [
            replace(c, keys={"id": {"S": p + c.keys["id"]["S"]}}) for c, p in zip(changes, prefixes, strict=True)
        ]
        self.stage(stage_dir, renamed)

    def apply(self, stage_dir: str, changes: Sequence[ItemChange], prefix: str = "", **kwargs: Any) -> Any:
        if changes:
            self.stage(stage_dir, changes, prefix)
        return self.sink.apply_batch(
            application_name=self.app,
            generation_id="g",
            batch_id=stage_dir,
            stage_dir=stage_dir,
            rows=len(changes),
            columns=self.sink.describe_columns(),
            **kwargs,
        )

    def rows(self) -> dict[str, dict[str, Any]]:
        """The destination's rows by key: the item, and whether (and when) it is deleted."""
        soft = self.target.deletes is Deletes.SOFT
        # fakesnow's server reads a NULL TIMESTAMP_TZ as 1970-01-01: ask whether it is NULL too.
        extra = ", DYNAMODB_DELETED, DYNAMODB_DELETED_AT, DYNAMODB_DELETED_AT IS NULL" if soft else ""
        item = "ITEM" if self.target.layout is Layout.PACKED else ", ".join(self.attributes)
        result = {}
        for row in query(
            self.emulators, f"SELECT ID, DYNAMODB_VERSION, DYNAMODBMETADATA, {item}{extra} FROM {self.target.table}"
        ):
            meta = json.loads(row[2]) if isinstance(row[2], str) else row[2]
            if self.target.layout is Layout.PACKED:
                image = json.loads(row[3]) if isinstance(row[3], str) else row[3]
                rest = row[4:]
            else:
                n = len(self.attributes)
                image = dict(zip([a.lower() for a in self.attributes], row[3 : 3 + n], strict=True))
                rest = row[3 + n :]
            result[row[0]] = {"version": row[1], "event": meta["eventName"], "ttl": meta["ttlExpiry"], "item": image}
            if soft:
                result[row[0]] |= {"deleted": bool(rest[0]), "deleted_at": None if rest[2] else rest[1]}
        return result

    def tombstones(self) -> dict[str, str]:
        return dict(query(self.emulators, f"SELECT ID, DYNAMODB_VERSION FROM {self.target.tombstones}"))


def make_table(
    emulators: Emulators, tmp_path: Path, layout: Layout, deletes: Deletes, attributes: str = ""
) -> Iterator[Table]:
    name = unique("DDB").replace("-", "_").upper()
    soft = ", DYNAMODB_DELETED BOOLEAN, DYNAMODB_DELETED_AT TIMESTAMP_TZ" if deletes is Deletes.SOFT else ""
    body = "ITEM VARIANT" if layout is Layout.PACKED else attributes
    conn = emulators.snowflake_connect()
    cur = conn.cursor()
    cur.execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
    cur.execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    cur.execute(
        f"CREATE TABLE ANALYTICS.RAW.{name} (ID VARCHAR NOT NULL, DYNAMODB_VERSION VARCHAR, "
        f"DYNAMODBMETADATA OBJECT{soft}, {body})"
    )
    target = DynamoDBTarget(
        Destination("ANALYTICS", "RAW", name), "orders", (KeyColumn("ID", "VARCHAR"),), layout, deletes
    )
    sink = DynamoDBSink(conn, target)
    sink.ensure_support_objects()
    names = tuple(re.findall(r"(?:^|,\s*)([A-Z_]+)\s", attributes))
    yield Table(emulators, sink, tmp_path, names)
    conn.close()


@pytest.fixture
def packed_hard(emulators: Emulators, tmp_path: Path) -> Iterator[Table]:
    yield from make_table(emulators, tmp_path, Layout.PACKED, Deletes.HARD)


@pytest.fixture
def packed_soft(emulators: Emulators, tmp_path: Path) -> Iterator[Table]:
    yield from make_table(emulators, tmp_path, Layout.PACKED, Deletes.SOFT)


LAYOUTS = {
    "packed-hard": (Layout.PACKED, Deletes.HARD, ""),
    "unpacked-soft": (Layout.UNPACKED, Deletes.SOFT, "V NUMBER(38,0), NAME VARCHAR"),
}


@pytest.fixture(params=sorted(LAYOUTS))
def any_table(request: pytest.FixtureRequest, emulators: Emulators, tmp_path: Path) -> Iterator[Table]:
    yield from make_table(emulators, tmp_path, *LAYOUTS[request.param])


def expected_rows(table: Table, changes: Sequence[ItemChange], prefix: str = "") -> dict[str, dict[str, Any]]:
    """What the specification says the table holds: each key's newest change, applied."""
    newest: dict[str, ItemChange] = {}
    for change in changes:
        key = prefix + change.keys["id"]["S"]
        if key not in newest or change.version > newest[key].version:
            newest[key] = change
    soft = table.target.deletes is Deletes.SOFT
    rows = {}
    for key, change in newest.items():
        if change.is_removal and not soft:
            continue
        if change.image is None:
            item: dict[str, Any] | None = (
                None if table.target.layout is Layout.PACKED else dict.fromkeys(a.lower() for a in table.attributes)
            )
        else:
            image = {**plain(change.image), "id": key}
            item = (
                image
                if table.target.layout is Layout.PACKED
                else {a.lower(): image.get(a.lower()) for a in table.attributes}
            )
        row: dict[str, Any] = {
            "version": change.version.to_text(),
            "event": change.event_name.value,
            "ttl": change.ttl_expiry,
            "item": item,
        }
        if soft:
            row |= {
                "deleted": change.is_removal,
                "deleted_at": change.approximate_creation_time if change.is_removal else None,
            }
        rows[key] = row
    return rows


def test_an_upsert_and_a_removal_apply_once(packed_hard: Table) -> None:
    table = packed_hard
    result = table.apply("app/b1", [snapshot("a", v=1), snapshot("b", v=1), stream("b", EventName.REMOVE, 10)])
    assert (result.changes_loaded, result.rows_inserted) == (3, 1)
    assert table.rows() == {
        "a": {
            "version": Version.of_snapshot(0).to_text(),
            "event": "SNAPSHOT",
            "ttl": False,
            "item": {"id": "a", "v": 1},
        }
    }
    assert table.tombstones() == {"b": Version.of_stream(0, "10").to_text()}


def test_replaying_a_batch_is_rejected_by_the_ledger(packed_hard: Table) -> None:
    table = packed_hard
    changes = [snapshot("a", v=1), stream("b", EventName.INSERT, 11, v=2)]
    marks: dict[str, Any] = {
        "shard_starts": {"shardId-1": None},
        "shard_ends": {"shardId-1": Checkpoint("11")},
        "snapshot_generation": 0,
        "total_segments": 2,
        "segment_starts": {0: None},
        "segment_ends": {0: SegmentMark('{"id": {"S": "a"}}', items=1)},
    }
    table.apply("app/b1", changes, **marks)
    before = table.rows()
    with pytest.raises(StaleBatchError, match="shardId-1"):
        table.apply("app/b1-again", [*changes, stream("b", EventName.MODIFY, 12, v=3)], **marks)
    with pytest.raises(StaleBatchError, match="segment 0"):
        table.apply("app/b1-segment", [stream("b", EventName.MODIFY, 12, v=3)], **{**marks, "shard_ends": {}})
    assert table.rows() == before
    assert table.sink.read_ledger(table.app, "g") == {"shardId-1": Checkpoint("11")}
    assert table.sink.read_segments(table.app, 0) == [
        SegmentRow(0, 2, SegmentMark('{"id": {"S": "a"}}', items=1), "app/b1")
    ]


def test_changes_converge_whatever_order_they_arrive_in(any_table: Table) -> None:
    """Every order of four batches, one of them retried, ends in the same table: the newest change
    per key. Each order writes its own keys, so one run of five batches applies all 60 orders."""
    table = any_table
    batches = {
        "snapshot": [snapshot("a", v=1, name="x"), snapshot("b", v=1), snapshot("c", v=5), snapshot("d", v=7)],
        "stream-1": [
            stream("a", EventName.MODIFY, 10, v=2, name="y"),
            stream("b", EventName.REMOVE, 11),
            stream("c", EventName.MODIFY, 12, v=5),
            stream("d", EventName.REMOVE, 13),
        ],
        "stream-2": [stream("a", EventName.MODIFY, 20, v=3), stream("b", EventName.INSERT, 21, v=9, name="z")],
        "stream-3": [
            stream("a", EventName.MODIFY, 31, v=5),
            stream("a", EventName.MODIFY, 30, v=4),
            stream("c", EventName.REMOVE, 32, ttl=True),
        ],
    }
    orders = sorted(set(itertools.permutations(["snapshot", "stream-1", "stream-2", "stream-3", "stream-1"])))
    assert len(orders) == 60
    for slot in range(5):
        staged = [replace(c, table="orders") for n, order in enumerate(orders) for c in batches[order[slot]]]
        prefixes = [f"o{n}-" for n, order in enumerate(orders) for _ in batches[order[slot]]]
        table.stage_many(f"app/slot{slot}", staged, prefixes)
        table.sink.apply_batch(
            application_name=table.app, generation_id="g", batch_id=f"slot{slot}", stage_dir=f"app/slot{slot}",
            rows=len(staged), columns=table.sink.describe_columns(),
        )  # fmt: skip
    every_change = [c for batch in batches.values() for c in batch]
    expected: dict[str, dict[str, Any]] = {}
    for n in range(len(orders)):
        expected |= expected_rows(table, every_change, f"o{n}-")
    rows = table.rows()
    assert sorted(rows) == sorted(expected)
    assert {k: (row, expected[k]) for k, row in rows.items() if row != expected[k]} == {}
    # The specification is not empty: an item modified, one deleted and recreated, one deleted.
    assert rows["o0-a"]["item"]["v"] == 5
    assert rows["o0-b"]["item"]["v"] == 9
    assert ("o0-d" in rows) is (table.target.deletes is Deletes.SOFT)


def test_a_soft_delete_marks_the_row_keeps_the_ttl_flag_and_a_later_insert_clears_it(packed_soft: Table) -> None:
    table = packed_soft
    table.apply("app/b1", [snapshot("a", v=1), snapshot("b", v=1)])
    table.apply("app/b2", [stream("a", EventName.REMOVE, 40, ttl=True), stream("b", EventName.REMOVE, 41)])
    rows = table.rows()
    assert rows["a"] == {
        "version": Version.of_stream(0, "40").to_text(), "event": "REMOVE", "ttl": True, "item": None,
        "deleted": True, "deleted_at": T0 + timedelta(seconds=40),
    }  # fmt: skip
    assert (rows["b"]["deleted"], rows["b"]["ttl"]) == (True, False)
    table.apply("app/b3", [stream("a", EventName.INSERT, 50, v=2), snapshot("b", v=1)])
    rows = table.rows()
    assert (rows["a"]["deleted"], rows["a"]["deleted_at"], rows["a"]["item"]) == (False, None, {"id": "a", "v": 2})
    assert rows["b"]["deleted"] is True  # the snapshot's item is older than the removal


@pytest.mark.parametrize("deletes", [Deletes.HARD, Deletes.SOFT])
def test_completing_a_resnapshot_removes_the_rows_it_did_not_see(
    emulators: Emulators, tmp_path: Path, deletes: Deletes
) -> None:
    table = next(make_table(emulators, tmp_path, Layout.PACKED, deletes))
    table.apply(
        "app/g0", [snapshot("a", v=1), snapshot("b", v=1), snapshot("c", v=1), stream("d", EventName.REMOVE, 5)]
    )
    cursor = '{"id": {"S": "a"}}'
    first = table.apply(
        "app/g1-1", [snapshot("a", generation=1, v=2), stream("c", EventName.MODIFY, 100, generation=1, v=3)],
        snapshot_generation=1, total_segments=2,
        segment_starts={0: None}, segment_ends={0: SegmentMark(cursor, items=1)},
    )  # fmt: skip
    assert first.completed_snapshot is None
    # Not complete yet: b may still be scanned.
    assert {k for k, row in table.rows().items() if not row.get("deleted")} == {"a", "b", "c"}
    gone_at = datetime(2026, 3, 2, tzinfo=UTC)
    last = table.apply(
        "app/g1-2", [], snapshot_generation=1, total_segments=2,
        segment_starts={0: SegmentMark(cursor, items=1), 1: None},
        segment_ends={0: SegmentMark(None, done=True, items=1), 1: SegmentMark(None, done=True)},
        deleted_at=gone_at,
    )  # fmt: skip
    assert last.completed_snapshot == 1
    rows = table.rows()
    assert (rows["a"]["item"], rows["c"]["item"]) == ({"id": "a", "v": 2}, {"id": "c", "v": 3})
    if deletes is Deletes.HARD:
        assert set(rows) == {"a", "c"}
        assert table.tombstones() == {}
    else:
        assert {k: r["deleted"] for k, r in rows.items()} == {"a": False, "b": True, "c": False, "d": True}
        assert (rows["b"]["deleted_at"], rows["b"]["item"]) == (gone_at, None)
        assert rows["d"]["deleted_at"] == T0 + timedelta(seconds=5)  # an earlier removal keeps its time
    assert [s.mark.done for s in table.sink.read_segments(table.app, 1)] == [True, True]
    table.sink.complete_snapshot(table.app, 1, 2, deleted_at=datetime(2026, 3, 3, tzinfo=UTC))
    assert table.rows() == rows
    with pytest.raises(StaleBatchError, match="not done"):
        table.sink.complete_snapshot(table.app, 2, 2)


def test_a_failing_merge_leaves_the_ledger_where_it_was(emulators: Emulators, tmp_path: Path) -> None:
    table = next(
        make_table(emulators, tmp_path, Layout.UNPACKED, Deletes.HARD, "V NUMBER(38,0), NAME VARCHAR NOT NULL")
    )
    table.apply("app/b1", [stream("a", EventName.INSERT, 1, v=1, name="x")], shard_starts={"shardId-1": None},
                shard_ends={"shardId-1": Checkpoint("1")})  # fmt: skip
    with pytest.raises(Exception, match="non-nullable"):
        table.apply(
            "app/b2", [stream("a", EventName.MODIFY, 2, v=2), stream("b", EventName.REMOVE, 3)],
            shard_starts={"shardId-1": Checkpoint("1")}, shard_ends={"shardId-1": Checkpoint("3")},
            snapshot_generation=0, total_segments=1,
            segment_starts={0: None}, segment_ends={0: SegmentMark(None, done=True)},
        )  # fmt: skip
    assert table.sink.read_ledger(table.app, "g") == {"shardId-1": Checkpoint("1")}
    assert table.sink.read_segments(table.app, 0) == []
    assert table.tombstones() == {}
    assert table.rows()["a"]["item"] == {"v": 1, "name": "x"}


def test_a_batch_of_a_superseded_generation_is_refused_and_applies_nothing(packed_hard: Table) -> None:
    table = packed_hard
    for number in (0, 1):
        started = T0 + timedelta(hours=number)
        generation = Generation(number, started, SnapshotStart(number, started, 2))
        assert table.sink.record_generation(table.app, generation, f"generation {number}")
    cursor = '{"id": {"S": "a"}}'
    table.apply("app/g1", [snapshot("a", generation=1, v=1)], generation=1, snapshot_generation=1, total_segments=2,
                segment_starts={0: None}, segment_ends={0: SegmentMark(cursor, items=1)},
                shard_starts={"shardId-1": None}, shard_ends={"shardId-1": Checkpoint("1")})  # fmt: skip
    before = (table.rows(), table.tombstones(), table.sink.read_ledger(table.app, "g"))
    segments = {g: table.sink.read_segments(table.app, g) for g in (0, 1)}
    # A batch planned in generation 0 (in flight while generation 1 was recorded): an upsert, a
    # removal, a shard mark and a segment that would complete generation 0's snapshot.
    with pytest.raises(GenerationSupersededError, match="generation 1 is recorded"):
        table.apply(
            "app/g0-late", [snapshot("b", v=9), stream("a", EventName.REMOVE, 7)], generation=0,
            shard_starts={"shardId-1": Checkpoint("1")}, shard_ends={"shardId-1": Checkpoint("7")},
            snapshot_generation=0, total_segments=1,
            segment_starts={0: None}, segment_ends={0: SegmentMark(None, done=True)},
        )  # fmt: skip
    # Without ``generation``, the snapshot's generation is the one guarded.
    with pytest.raises(GenerationSupersededError):
        table.apply("app/g0-snap", [snapshot("c", v=9)], snapshot_generation=0, total_segments=1,
                    segment_starts={0: None}, segment_ends={0: SegmentMark(None, done=True)})  # fmt: skip
    assert (table.rows(), table.tombstones(), table.sink.read_ledger(table.app, "g")) == before
    assert {g: table.sink.read_segments(table.app, g) for g in (0, 1)} == segments
    assert set(table.rows()) == {"a"}
    # Completing generation 0 is refused as well; the newest generation's batches go on.
    with pytest.raises(GenerationSupersededError):
        table.sink.complete_snapshot(table.app, 0, 1)
    assert table.sink.current_generation(table.app) == Generation(
        1, T0 + timedelta(hours=1), SnapshotStart(1, T0 + timedelta(hours=1), 2)
    )
    table.apply("app/g1-b", [snapshot("b", generation=1, v=2)], generation=1, snapshot_generation=1, total_segments=2,
                segment_starts={0: SegmentMark(cursor, items=1)},
                segment_ends={0: SegmentMark(None, done=True, items=2)})  # fmt: skip
    assert {k: r["item"] for k, r in table.rows().items()} == {"a": {"id": "a", "v": 1}, "b": {"id": "b", "v": 2}}


def test_a_generations_table_from_before_the_stream_was_recorded_gains_the_column_and_keeps_its_rows(
    emulators: Emulators,
) -> None:
    schema = unique("OLD").replace("-", "_").upper()
    target = DynamoDBTarget(
        Destination("ANALYTICS", schema, "ORDERS"), "orders", (KeyColumn("ID", "VARCHAR"),), Layout.PACKED
    )
    conn = emulators.snowflake_connect()
    try:
        cur = conn.cursor()
        cur.execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        cur.execute(f"CREATE SCHEMA ANALYTICS.{schema}")
        # As the first releases created it: no STREAM_ARN.
        cur.execute(
            f"CREATE TABLE {target.generations} (APPLICATION_NAME VARCHAR NOT NULL, TABLE_NAME VARCHAR NOT NULL, "
            "GENERATION NUMBER(10,0) NOT NULL, STARTED_AT VARCHAR NOT NULL, TOTAL_SEGMENTS NUMBER(10,0) NOT NULL, "
            "STREAM_FROM_TRIM_HORIZON BOOLEAN NOT NULL, REASON VARCHAR NOT NULL, COMPLETED BOOLEAN NOT NULL, "
            "RECORDED_AT TIMESTAMP_TZ DEFAULT CURRENT_TIMESTAMP())"
        )
        cur.execute(
            f"INSERT INTO {target.generations} (APPLICATION_NAME, TABLE_NAME, GENERATION, STARTED_AT, TOTAL_SEGMENTS, "
            "STREAM_FROM_TRIM_HORIZON, REASON, COMPLETED) VALUES ('app', 'orders', 0, %s, 2, FALSE, 'first', TRUE)",
            (T0.isoformat(),),
        )
        sink = DynamoDBSink(conn, target)
        sink.ensure_support_objects()
        sink.ensure_support_objects()  # idempotent
        assert sink.current_generation("app") == Generation(0, T0, SnapshotStart(0, T0, 2), completed=True)
        later = T0 + timedelta(hours=1)
        stream_arn = "arn:aws:dynamodb:eu-west-1:123456789012:table/orders/stream/2026-11-24T00:00:00.000"
        assert sink.record_generation(
            "app", Generation(1, later, SnapshotStart(1, later, 2), stream_arn=stream_arn), "a gap"
        )
        current = sink.current_generation("app")
        assert current is not None and (current.number, current.stream_arn) == (1, stream_arn)
    finally:
        conn.close()
