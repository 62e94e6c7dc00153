"""A DynamoDB table's changes applied by one MERGE with the ledger (fakesnow server over HTTP)."""

from __future__ import annotations

import itertools
import json
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
    KeyColumn,
    Layout,
    SegmentMark,
)
from airflow_kinesis_snowflake.core.load.snowflake_sink import ROWS_DIR, StaleBatchError
from airflow_kinesis_snowflake.core.model import Checkpoint, Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, ItemChange, Version
from tests.conftest import query, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def snapshot(key: str, generation: int = 0, **attributes: Any) -> ItemChange:
    return ItemChange(
        table="orders",
        keys={"id": {"S": key}},
        image={"id": {"S": key}, **{k: {"N": str(v)} if isinstance(v, int) else {"S": v} for k, v in attributes.items()}},
        event_name=EventName.SNAPSHOT,
        version=Version.of_snapshot(generation),
        shard_id=f"segment-0-of-1",
        approximate_creation_time=T0,
    )


def stream(key: str, event: EventName, sequence: int, generation: int = 0, ttl: bool = False, **attributes: Any) -> ItemChange:
    image = None
    if event is not EventName.REMOVE:
        image = {"id": {"S": key}, **{k: {"N": str(v)} if isinstance(v, int) else {"S": v} for k, v in attributes.items()}}
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
        self.sink.sink.put_file(path, f"{stage_dir}/{ROWS_DIR}")

    def apply(self, stage_dir: str, changes: Sequence[ItemChange], prefix: str = "", **kwargs: Any) -> Any:
        if changes:
            self.stage(stage_dir, changes, prefix)
        return self.sink.apply_batch(
            application_name="app",
            generation_id="g",
            batch_id=stage_dir,
            stage_dir=stage_dir,
            rows=len(changes),
            columns=self.sink.sink.describe_columns(),
            **kwargs,
        )

    def rows(self) -> dict[str, dict[str, Any]]:
        """The destination's rows by key: the item, and whether (and when) it is deleted."""
        soft = self.target.deletes is Deletes.SOFT
        extra = ", DYNAMODB_DELETED, DYNAMODB_DELETED_AT" if soft else ""
        item = "ITEM" if self.target.layout is Layout.PACKED else ", ".join(self.attributes)
        result = {}
        for row in query(self.emulators, f"SELECT ID, DYNAMODB_VERSION, DYNAMODBMETADATA, {item}{extra} FROM {self.target.table}"):
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
                result[row[0]] |= {"deleted": bool(rest[0]), "deleted_at": rest[1]}
        return result

    def tombstones(self) -> dict[str, str]:
        return dict(query(self.emulators, f"SELECT ID, DYNAMODB_VERSION FROM {self.target.tombstones}"))  # type: ignore[arg-type]


def make_table(emulators: Emulators, tmp_path: Path, layout: Layout, deletes: Deletes, attributes: str = "") -> Iterator[Table]:
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
    target = DynamoDBTarget(Destination("ANALYTICS", "RAW", name), "orders", (KeyColumn("ID", "VARCHAR"),), layout, deletes)
    sink = DynamoDBSink(conn, target)
    sink.ensure_support_objects()
    names = tuple(part.split()[0] for part in attributes.split(",")) if attributes else ()
    yield Table(emulators, sink, tmp_path, names)
    conn.close()


@pytest.fixture
def packed_hard(emulators: Emulators, tmp_path: Path) -> Iterator[Table]:
    yield from make_table(emulators, tmp_path, Layout.PACKED, Deletes.HARD)


@pytest.fixture
def packed_soft(emulators: Emulators, tmp_path: Path) -> Iterator[Table]:
    yield from make_table(emulators, tmp_path, Layout.PACKED, Deletes.SOFT)


def test_an_upsert_and_a_removal_apply_once(packed_hard: Table) -> None:
    table = packed_hard
    result = table.apply("app/b1", [snapshot("a", v=1), snapshot("b", v=1), stream("b", EventName.REMOVE, 10)])
    assert result.changes_loaded == 3
    rows = table.rows()
    assert rows == {"a": {"version": Version.of_snapshot(0).to_text(), "event": "SNAPSHOT", "ttl": False, "item": {"id": "a", "v": 1}}}
    assert table.tombstones() == {"b": Version.of_stream(0, "10").to_text()}
