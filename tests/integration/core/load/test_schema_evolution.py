"""Schema evolution DDL against the fakesnow server: adding columns, dropping NOT NULL, racing.

fakesnow runs ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` and ``ALTER COLUMN ... DROP NOT NULL``
for real. Its SHOW TABLES always answers ``enable_schema_evolution = 'N'`` and ``is_iceberg = 'N'``,
so reading a 'Y' is tested on SHOW TABLES output as text (tests/unit/core/test_evolution.py).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_kinesis_snowflake.core.job import evolve_schema
from airflow_kinesis_snowflake.core.load.evolution import (
    UnknownKeyError,
    UnknownKeys,
    resolve_policy,
    summarize,
)
from airflow_kinesis_snowflake.core.load.schema import ColumnMap, KeysDifferingByCaseError, TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    ROWS_DIR,
    EvolutionError,
    SnowflakeSink,
    add_column_sql,
    quote_identifier,
)
from airflow_kinesis_snowflake.core.load.transform import build_batch
from airflow_kinesis_snowflake.core.model import Checkpoint, Destination
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord
from tests.conftest import create_table, query, unique
from tests.emulators import Emulators

# The retry helper's logger: its lines, one per attempt (other loggers may write to the same capture).
RETRY_LOGGER = "airflow_kinesis_snowflake.core.retry"

pytestmark = pytest.mark.integration

HOSTILE = ['we"ird', "two words", "a.b", "SELECT", "CAFÉ", "X" * 255]


def new_table(emulators: Emulators, columns: str) -> str:
    table = unique("EVO").replace("-", "_").upper()
    create_table(emulators, "ANALYTICS", "RAW", table, columns)
    return table


@pytest.fixture
def connect(emulators: Emulators) -> Iterator[Any]:
    """Open sinks on their own connections, as racing batches have; closed afterwards."""
    connections: list[Any] = []

    def open_sink(table: str) -> SnowflakeSink:
        conn = emulators.snowflake_connect()
        connections.append(conn)
        return SnowflakeSink(conn, Destination("ANALYTICS", "RAW", table))

    yield open_sink
    for conn in connections:
        conn.close()


def described(sink: SnowflakeSink) -> dict[str, tuple[str, bool]]:
    return {c.name: (c.data_type, c.nullable) for c in sink.describe_columns()}


def no_sleep(_: float) -> None:
    return None


def test_table_properties_are_read_from_show_tables(emulators: Emulators, connect: Any) -> None:
    table = new_table(emulators, "ID NUMBER(38,0)")

    properties = connect(table).table_properties()

    assert properties.schema_evolution is False  # fakesnow's answer for every table
    assert properties.iceberg is False
    missing = connect("NO_SUCH_TABLE_" + table).table_properties()
    assert missing.schema_evolution is None


def test_columns_are_added_with_their_types_and_not_null_is_dropped(emulators: Emulators, connect: Any) -> None:
    table = new_table(emulators, "ID NUMBER(38,0) NOT NULL, NAME VARCHAR NOT NULL")
    sink = connect(table)
    add = [("QTY", "NUMBER(38,0)"), ("RATIO", "FLOAT"), ("PAID", "BOOLEAN"), ("AT", "TIMESTAMP_TZ")]
    add += [("ATTRS", "VARIANT"), ("COLOR", "VARCHAR")] + [(name, "VARCHAR") for name in HOSTILE]

    columns = sink.evolve(add, ["NAME"], sleep=no_sleep)

    assert described(sink) == {c.name: (c.data_type, c.nullable) for c in columns}
    assert described(sink) == {
        "ID": ("NUMBER", False),
        "NAME": ("TEXT", True),
        "KINESISMETADATA": ("VARIANT", True),
        "QTY": ("NUMBER", True),
        "RATIO": ("FLOAT", True),
        "PAID": ("BOOLEAN", True),
        "AT": ("TIMESTAMP_TZ", True),
        "ATTRS": ("VARIANT", True),
        "COLOR": ("TEXT", True),
        **{name: ("TEXT", True) for name in HOSTILE},
    }
    # Each name is one quoted identifier: the columns are reachable by it and nothing else happened.
    selected = ", ".join('"' + name.replace('"', '""') + '"' for name in HOSTILE)
    assert query(emulators, f"SELECT {selected} FROM ANALYTICS.RAW.{table}") == []

    # Idempotent: the same changes again change nothing.
    assert sink.evolve(add, ["NAME"], sleep=no_sleep) == columns


def test_two_batches_adding_the_same_columns_at_once_both_succeed(emulators: Emulators, connect: Any) -> None:
    table = new_table(emulators, "ID NUMBER(38,0) NOT NULL")
    sinks = [connect(table), connect(table)]
    results: dict[int, Any] = {}

    for round_ in range(3):
        add = [(f"COLOR{round_}", "VARCHAR"), (f"QTY{round_}", "NUMBER(38,0)"), ('odd "key"' + str(round_), "VARIANT")]
        start = threading.Barrier(len(sinks))

        def race(i: int, add: list[tuple[str, str]] = add, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                results[i] = sinks[i].evolve(add, ["ID"], sleep=no_sleep)
            except Exception as err:  # noqa: BLE001 - reported below
                results[i] = err

        threads = [threading.Thread(target=race, args=(i,)) for i in range(len(sinks))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert not [r for r in results.values() if isinstance(r, Exception)], results
        names = [c.name for c in sinks[0].describe_columns()]
        for name, _ in add:
            assert names.count(name) == 1
            assert any(c.name == name for c in results[0]) and any(c.name == name for c in results[1])
    assert described(sinks[0])["ID"] == ("NUMBER", True)


def test_a_change_that_failed_but_was_made_counts_as_done(emulators: Emulators, connect: Any) -> None:
    """As when a racing batch's statement got there first: the error is not the batch's problem."""
    table = new_table(emulators, "ID NUMBER(38,0)")
    sink = connect(table)
    emulators.inject_snowflake_faults(
        [{"match": rf'{table}" ADD COLUMN IF NOT EXISTS "LATE"', "when": "after", "action": "error"}]
    )
    try:
        columns = sink.evolve([("LATE", "FLOAT")], [], sleep=no_sleep)
        served = emulators.served_snowflake_faults()
    finally:
        emulators.inject_snowflake_faults([])

    assert len(served) == 1  # the statement ran, and its caller was told it failed
    assert ("LATE", "FLOAT") in [(c.name, c.data_type) for c in columns]


def test_a_change_that_keeps_failing_fails_the_batch(
    emulators: Emulators, connect: Any, caplog: pytest.LogCaptureFixture
) -> None:
    table = new_table(emulators, "ID NUMBER(38,0)")
    sink = connect(table)
    emulators.inject_snowflake_faults(
        [{"match": rf"{table}.*ADD COLUMN", "when": "before", "action": "error", "times": 5}]
    )
    waits: list[float] = []
    try:
        with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.retry"):
            with pytest.raises(EvolutionError, match="failed 3 times"):
                sink.evolve([("NEVER", "VARCHAR")], [], sleep=waits.append)
        served = emulators.served_snowflake_faults()
    finally:
        emulators.inject_snowflake_faults([])

    assert len(served) == 3
    assert len(waits) == 2
    # Exponential backoff from 1 s with jitter: each wait in [b/2, b] of b = 1, 2.
    assert 0.5 <= waits[0] <= 1.0 <= waits[1] <= 2.0
    lines = [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER]
    assert len(lines) == 3
    assert all(line.startswith(f"ALTER TABLE {sink.table} ADD COLUMN") for line in lines)
    assert [line.endswith(f"; retrying in {wait:.2f} s") for line, wait in zip(lines, waits, strict=False)] == [
        True
    ] * 2
    assert "(attempt 3 of 3)" in lines[-1] and lines[-1].endswith("; giving up")
    assert "NEVER" not in described(sink)
    # Failing twice and then succeeding is fine.
    emulators.inject_snowflake_faults(
        [{"match": rf"{table}.*ADD COLUMN", "when": "before", "action": "error", "times": 2}]
    )
    try:
        sink.evolve([("LATER", "VARCHAR")], [], sleep=no_sleep)
    finally:
        emulators.inject_snowflake_faults([])
    assert "LATER" in described(sink)


# -- the driver's step, then a load with the columns it made -----------------------------------------


ARRIVAL = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)


def kinesis_records(payloads: list[dict[str, Any]]) -> list[KinesisRecord]:
    return [
        KinesisRecord("shardId-000000000000", str(i), 0, "pk", ARRIVAL, json.dumps(p).encode())
        for i, p in enumerate(payloads, 1)
    ]


def test_evolved_columns_are_loaded(emulators: Emulators, connect: Any, tmp_path: Path) -> None:
    table = new_table(emulators, "ID NUMBER(38,0) NOT NULL, NAME VARCHAR NOT NULL")
    sink = connect(table)
    sink.ensure_support_objects()
    before = sink.describe_columns()
    payloads = [
        {"id": 1, "name": "a", "Qty": 2, "ratio": 1, "seen_at": "2026-01-31T12:00:00+02:00", "attrs": {"k": [1]}},
        {"id": 2, "QTY": 3, "ratio": 0.5, "seen_at": "2026-02-01T00:00:00Z", "attrs": [1], 'say "hi"': "x"},
        {"id": 3, "name": "c", "qty": None, "k" * 300: "lost", "kinesismetadata": {"forged": 1}},
    ]
    records = kinesis_records(payloads)
    policy = resolve_policy(
        destination_type="TABLE", configured=True, on_unknown_key=UnknownKeys.IGNORE, table_evolution=False
    )

    # Two tasks' summaries, merged by the driver.
    summaries = [summarize(records[:1], ColumnMap(before)), summarize(records[1:], ColumnMap(before))]
    columns, report = evolve_schema(sink, before, summaries, policy)

    assert [(c["column"], c["type"]) for c in report["columns_added"]] == [
        ("QTY", "NUMBER(38,0)"),
        ("RATIO", "FLOAT"),
        ("SEEN_AT", "TIMESTAMP_TZ"),
        ("ATTRS", "VARIANT"),
        ('SAY "HI"', "VARCHAR"),
    ]
    assert report["not_null_dropped"] == ["NAME"]
    assert report["keys_skipped_total"] == 2
    assert described(sink)["NAME"] == ("TEXT", True)

    batch = build_batch(records, "s", ColumnMap(columns))
    assert batch.dead_letters == []
    pq.write_table(batch.rows, tmp_path / "rows.parquet")
    sink.put_file(tmp_path / "rows.parquet", f"evo/{table}/{ROWS_DIR}")
    sink.commit_batch(
        application_name=table, generation_id="g", batch_id="b1", stage_dir=f"evo/{table}",
        starts={"shardId-000000000000": None}, ends={"shardId-000000000000": Checkpoint("3")}, rows=3, failures=0,
        columns=columns,
    )  # fmt: skip

    rows = query(
        emulators,
        f'SELECT ID, NAME, QTY, RATIO, SEEN_AT, ATTRS:k[0]::int, "SAY ""HI""" FROM ANALYTICS.RAW.{table} ORDER BY ID',
    )
    assert rows[0][:4] == (1, "a", 2, 1.0)
    assert rows[0][4] == datetime(2026, 1, 31, 10, 0, tzinfo=UTC)
    assert rows[0][5] == 1
    assert rows[1][:4] == (2, None, 3, 0.5)
    assert rows[1][6] == "x"
    assert rows[2][:4] == (3, "c", None, None)


def test_names_with_a_single_quote_are_added_and_loaded(emulators: Emulators, tmp_path: Path) -> None:
    """Snowflake takes a quoted identifier with a single quote in it; so does the emulator."""
    table = new_table(emulators, "ID NUMBER(38,0) NOT NULL")
    fqn = f"ANALYTICS.RAW.{table}"
    who = quote_identifier("WHO'S")
    # A connection that gives up on a failing statement soon: a failure is an error, not a hang.
    conn = emulators.snowflake_connect(network_timeout=30)
    try:
        # The DDL schema evolution runs (twice: the second changes nothing), a row, a read.
        conn.cursor().execute(add_column_sql(fqn, "WHO'S", "VARCHAR"))
        conn.cursor().execute(add_column_sql(fqn, "WHO'S", "VARCHAR"))
        conn.cursor().execute(f"INSERT INTO {fqn} (ID, {who}) VALUES (0, 'direct')")
        assert conn.cursor().execute(f"SELECT ID, {who} FROM {fqn}").fetchall() == [(0, "direct")]

        # Keys of Kinesis JSON records that add columns, then load into them.
        sink = SnowflakeSink(conn, Destination("ANALYTICS", "RAW", table))
        sink.ensure_support_objects()
        before = sink.describe_columns()
        records = kinesis_records([{"id": 1, "it's": "a", "o'brien's \"pub\"": 1}, {"id": 2, "it's": "b"}])
        policy = resolve_policy(
            destination_type="TABLE", configured=True, on_unknown_key=UnknownKeys.FAIL, table_evolution=False
        )
        columns, report = evolve_schema(sink, before, [summarize(records, ColumnMap(before))], policy)
        assert [(c["column"], c["type"]) for c in report["columns_added"]] == [
            ("IT'S", "VARCHAR"),
            ("O'BRIEN'S \"PUB\"", "NUMBER(38,0)"),
        ]
        batch = build_batch(records, "s", ColumnMap(columns))
        assert batch.dead_letters == []
        pq.write_table(batch.rows, tmp_path / "rows.parquet")
        sink.put_file(tmp_path / "rows.parquet", f"evo/{table}/{ROWS_DIR}")
        sink.commit_batch(
            application_name=table, generation_id="g", batch_id="b1", stage_dir=f"evo/{table}",
            starts={"shardId-000000000000": None}, ends={"shardId-000000000000": Checkpoint("2")}, rows=2,
            failures=0, columns=columns,
        )  # fmt: skip
    finally:
        conn.close()

    selected = ", ".join(quote_identifier(name) for name in ("ID", "WHO'S", "IT'S", "O'BRIEN'S \"PUB\""))
    rows = query(emulators, f"SELECT {selected} FROM {fqn} ORDER BY ID")
    assert rows == [(0, "direct", None, None), (1, None, "a", 1), (2, None, "b", None)]


def test_an_iceberg_table_set_to_fail_is_left_alone_and_the_batch_fails(emulators: Emulators, connect: Any) -> None:
    table = new_table(emulators, "ID NUMBER(38,0) NOT NULL")
    sink = connect(table)
    before = sink.describe_columns()
    policy = resolve_policy(
        destination_type="ICEBERG", configured=True, on_unknown_key=UnknownKeys.FAIL, table_evolution=True
    )
    summary = summarize(kinesis_records([{"color": "red"}]), ColumnMap(before))

    with pytest.raises(UnknownKeyError, match=r'"color" \(an Iceberg table is never altered\)'):
        evolve_schema(sink, before, [summary], policy)

    assert sink.describe_columns() == before  # nothing added, NOT NULL kept

    ignoring = resolve_policy(
        destination_type="ICEBERG", configured=True, on_unknown_key=UnknownKeys.IGNORE, table_evolution=True
    )
    columns, report = evolve_schema(sink, before, [summary], ignoring)
    assert columns == before
    assert report["columns_added"] == []
    assert report["keys_skipped"] == [{"key": '"color"', "reason": "an Iceberg table is never altered"}]


def test_columns_named_alike_by_a_racing_batch_are_used_as_they_are(emulators: Emulators, connect: Any) -> None:
    """Another batch added COLOR as a number first: this batch loads into it what fits."""
    table = new_table(emulators, "ID NUMBER(38,0)")
    sink = connect(table)
    before = sink.describe_columns()
    records = kinesis_records([{"id": 1, "color": "red"}, {"id": 2, "color": "7"}])
    summary = summarize(records, ColumnMap(before))
    connect(table).evolve([("COLOR", "NUMBER(38,0)")], [], sleep=no_sleep)  # the other batch

    columns, report = evolve_schema(
        sink,
        before,
        [summary],
        resolve_policy(
            destination_type="TABLE", configured=True, on_unknown_key=UnknownKeys.FAIL, table_evolution=None
        ),
    )

    assert report["columns_added"] == [
        {"column": "COLOR", "type": "VARCHAR", "key": '"color"', "type_in_table": "NUMBER"}
    ]
    assert [(c.name, c.data_type) for c in columns if c.name == "COLOR"] == [("COLOR", "NUMBER")]
    batch = build_batch(records, "s", ColumnMap(columns))
    assert batch.rows.column("COLOR").to_pylist() == [7]
    assert [d.error for d in batch.dead_letters] == ["column COLOR: expected a whole number for NUMBER, got 'red'"]


def test_the_table_columns_match_case_insensitively_after_evolution(connect: Any, emulators: Emulators) -> None:
    table = new_table(emulators, "ID NUMBER(38,0)")
    sink = connect(table)
    columns = sink.evolve([("COLOR", "VARCHAR")], [], sleep=no_sleep)

    mapping = ColumnMap(columns)

    assert mapping.map_record({"Color": "a"}) == {"COLOR": "a"}
    with pytest.raises(KeysDifferingByCaseError, match=r'^keys "color", "Color" and "COLOR" all map to column COLOR;'):
        mapping.map_record({"color": "a", "Color": "b", "COLOR": "c"})
    assert [TableColumn(**c.__dict__) for c in columns] == columns
