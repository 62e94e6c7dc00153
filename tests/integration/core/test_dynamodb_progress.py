"""A snapshot's progress while it runs: in the sync's log after each batch, and in ``status`` (moto server,
fakesnow server)."""

from __future__ import annotations

import logging
import re
import time

import pytest

from airflow_kinesis_snowflake.core.dynamodb_progress import read_table_size
from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync
from airflow_kinesis_snowflake.core.load.dynamodb_sink import DynamoDBSink
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import SyncSettings
from airflow_kinesis_snowflake.core.sources.dynamodb.snapshot_progress import TableSize
from airflow_kinesis_snowflake.status import TableStatus, table_status
from tests.emulators import Emulators
from tests.integration.core.test_dynamodb_sync import client, make_source, run

pytestmark = pytest.mark.integration

ITEMS = 30
PROGRESS = re.compile(r": snapshot of generation 0: (\d)/2 segments done, (\d+) of ~(\d+) items \((\d+)%\)(.*)$")


def table_now(emulators: Emulators, sync: TableSync) -> TableStatus:
    """The table's status as ``status`` reads it (Snowflake's records, DescribeTable's ItemCount)."""
    conn = emulators.snowflake_connect()
    try:
        sink = DynamoDBSink(conn, sync.target)
        app, table = sync.application_name, sync.table
        generation = sink.current_generation(app)
        assert generation is not None
        segments = sink.read_segments(app, generation.number)
    finally:
        conn.close()
    size = read_table_size(client(emulators, "dynamodb"), table)
    return table_status(table, "A.B.C", generation, segments, {}, [], time.time(), size)


def test_each_snapshot_batch_logs_its_segments_items_percentage_and_eta_and_status_shows_them(
    emulators: Emulators, caplog: pytest.LogCaptureFixture
) -> None:
    settings = SyncSettings(total_segments=2, max_segments_per_batch=1, max_snapshot_batches_per_run=1)
    workload, sync = make_source(emulators, settings=settings)
    workload.put(ITEMS, 0)
    assert read_table_size(client(emulators, "dynamodb"), sync.table) == TableSize(ITEMS, 0)  # moto counts live

    with caplog.at_level(logging.INFO, logger="airflow_kinesis_snowflake.core.dynamodb_progress"):
        run(emulators, sync, 1)
    (line,) = [r.getMessage() for r in caplog.records if PROGRESS.search(r.getMessage())]
    done, items, estimate, percent, rest = PROGRESS.search(line).groups()  # type: ignore[union-attr]
    assert line.startswith(f"{sync.table}: ")
    assert (int(estimate), int(percent)) == (ITEMS, int(items) * 100 // ITEMS)
    assert done in ("0", "1")  # the one segment read: up to its end, or to the batch's bound
    assert 0 < int(items) <= sync.max_items_per_segment
    assert re.fullmatch(r", ETA \w+ \(at [\d,.]+ items/s\)", rest), rest

    running = table_now(emulators, sync)
    assert running.snapshot is not None and running.snapshot.estimated_items == ITEMS
    assert running.snapshot.text().startswith(f"{done}/2 segments done, {items} of ~{ITEMS} items ({percent}%), ETA ")

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="airflow_kinesis_snowflake.core.dynamodb_progress"):
        for attempt in range(2, 12):
            run(emulators, sync, attempt)
    lines = [r.getMessage() for r in caplog.records if PROGRESS.search(r.getMessage())]
    assert lines, "no progress line"
    percents = [int(PROGRESS.search(line).group(4)) for line in lines]  # type: ignore[union-attr]
    assert percents == sorted(percents) and percents[-1] == 100
    assert f"2/2 segments done, {ITEMS} of ~{ITEMS} items (100%), completing" in lines[-1]
    finished = table_now(emulators, sync)
    assert finished.snapshot is not None and finished.snapshot.text() == f"complete ({ITEMS} items)"
