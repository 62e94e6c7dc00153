"""A DynamoDB deployment synced by an earlier release, upgraded: its marks carry over (moto and fakesnow servers).

The earlier release is this code with a DynamoDB connector's support objects named as the Kinesis
connectors' (``KINESIS_INGEST_*``) and no copy: what it wrote, it wrote with the same statements.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync, generation_id
from airflow_kinesis_snowflake.core.load import dynamodb_ledger_migration, dynamodb_sink
from airflow_kinesis_snowflake.core.load.dynamodb_ledger_migration import CopiedRows, copy_kinesis_named_rows
from airflow_kinesis_snowflake.core.load.dynamodb_sink import DynamoDBSink
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    DYNAMODB_SUPPORT_NAMES,
    KINESIS_SUPPORT_NAMES,
    OutcomeKey,
    SnowflakeSink,
)
from airflow_kinesis_snowflake.core.model import BatchResult, Destination
from tests.conftest import query, unique
from tests.emulators import Emulators
from tests.integration.core.test_dynamodb_sync import (
    KILLED,
    Workload,
    current_generation,
    destination_rows,
    make_source,
    run,
    run_until_complete,
    source_items,
)

pytestmark = pytest.mark.integration

LEDGER = "ANALYTICS.RAW.{}".format


def earlier_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DynamoDB sink as the earlier release had it: the Kinesis connectors' objects, no copy."""
    monkeypatch.setattr(dynamodb_sink, "DYNAMODB_SUPPORT_NAMES", KINESIS_SUPPORT_NAMES)
    monkeypatch.setattr(dynamodb_sink, "copy_kinesis_named_rows", lambda *args, **kwargs: CopiedRows())


def application_rows(emulators: Emulators, table: str, application: str) -> list[tuple[Any, ...]]:
    """Every row of ``application`` in ``table``, every column, in a fixed order."""
    rows = query(emulators, f"SELECT * FROM ANALYTICS.RAW.{table} WHERE APPLICATION_NAME = '{application}'")
    return sorted(rows, key=repr)


def ledger_rows(emulators: Emulators, table: str, application: str) -> list[tuple[Any, ...]]:
    return query(
        emulators,
        "SELECT APPLICATION_NAME, GENERATION_ID, SHARD_ID, SEQUENCE_NUMBER, SUB_SEQUENCE_NUMBER, BATCH_ID "
        f"FROM ANALYTICS.RAW.{table} WHERE APPLICATION_NAME = '{application}' ORDER BY GENERATION_ID, SHARD_ID",
    )


def outcome_rows(emulators: Emulators, table: str, application: str) -> list[tuple[Any, ...]]:
    return query(
        emulators,
        "SELECT APPLICATION_NAME, GENERATION_ID, BATCH_ID, ATTEMPT_ID, STAGE_DIR, COMMITTED, RESULT "
        f"FROM ANALYTICS.RAW.{table} WHERE APPLICATION_NAME = '{application}' "
        "ORDER BY GENERATION_ID, BATCH_ID, ATTEMPT_ID, COMMITTED",
    )


def stream_changes(workload: Workload, start: int) -> int:
    """New items, an update and a removal, after the earlier release's last run; the stream records made."""
    workload.put(4, start=start)
    keys = workload.keys()
    workload.put_item({**workload.item(int(keys[0]["sk"]["N"].split(".")[0]), 1), "sk": keys[0]["sk"]})
    workload.dynamodb.delete_item(TableName=workload.table, Key=keys[1])
    return 6


@pytest.fixture
def synced_by_earlier_release(
    emulators: Emulators, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Workload, TableSync, dict[str, Any]]]:
    """A table snapshotted and streamed by the earlier release; in the same schema, a Kinesis connector's
    rows and the application's rows of another DynamoDB table in the Kinesis-named tables."""
    workload, sync = make_source(emulators)
    with monkeypatch.context() as earlier:
        earlier_release(earlier)
        workload.put(15, start=0)
        run_until_complete(emulators, sync, 0)
        stream_changes(workload, start=100)
        assert run(emulators, sync, 30).changes > 0
        assert current_generation(emulators, sync) is not None
    old_marks = ledger_rows(emulators, KINESIS_SUPPORT_NAMES.ledger, sync.application_name)
    assert old_marks and all(r[1] == generation_id(sync.table, 0) for r in old_marks), old_marks
    assert outcome_rows(emulators, KINESIS_SUPPORT_NAMES.outcomes, sync.application_name)
    kinesis_app, other_table = unique("kinesis-app"), unique("other-table")
    # A Kinesis connector's mark and outcome, and this application's mark of another DynamoDB table.
    query(
        emulators,
        f"INSERT INTO {LEDGER(KINESIS_SUPPORT_NAMES.ledger)} (APPLICATION_NAME, GENERATION_ID, SHARD_ID, "
        "SEQUENCE_NUMBER, SUB_SEQUENCE_NUMBER, BATCH_ID) VALUES "
        f"('{kinesis_app}', 'g-1', 'shardId-000000000000', '4960', 0, 'b1'), "
        f"('{sync.application_name}', '{generation_id(other_table, 0)}', 'shardId-1', '1234', 0, 'b2')",
    )
    with emulators.snowflake_connect() as conn:
        SnowflakeSink(conn, Destination("ANALYTICS", "RAW", "ORDERS")).record_outcome_alone(
            OutcomeKey(kinesis_app, "g-1", "b1", "a1"),
            BatchResult("b1", "s/b1", True, 3, 0, (), datetime.now(UTC), {"evolution": False}),
        )
    kinesis_rows = {
        t: application_rows(emulators, t, kinesis_app)
        for t in (KINESIS_SUPPORT_NAMES.ledger, KINESIS_SUPPORT_NAMES.outcomes)
    }
    assert all(len(rows) == 1 for rows in kinesis_rows.values()), kinesis_rows
    old_rows = application_rows(emulators, KINESIS_SUPPORT_NAMES.ledger, sync.application_name)
    assert len(old_rows) == len(old_marks) + 1
    yield (
        workload,
        sync,
        {"kinesis_app": kinesis_app, "kinesis_rows": kinesis_rows, "old_marks": old_marks, "old_rows": old_rows},
    )


def check_upgraded(
    emulators: Emulators, workload: Workload, sync: TableSync, before: dict[str, Any], changes: int
) -> None:
    """One run after the upgrade read the stream on from its marks, and touched nothing of another's."""
    outcome = run(emulators, sync, 60)
    # No new snapshot: no generation started, no segment read; only the stream's new records.
    assert outcome.generations_started == [] and not any(b.segments for b in outcome.batches)
    assert outcome.changes == changes
    generation = current_generation(emulators, sync)
    assert generation is not None and generation.number == 0 and generation.completed
    items, deleted = destination_rows(emulators, sync)
    assert items == source_items(workload) and not deleted
    # One row per key: ``items`` is by key, so as many rows as items means none twice.
    assert query(emulators, f"SELECT COUNT(*) FROM {sync.target.destination.qualified_name}") == [(len(items),)]
    # The new ledger moved on from the copied marks; the old rows are as the earlier release left them.
    new_marks = ledger_rows(emulators, DYNAMODB_SUPPORT_NAMES.ledger, sync.application_name)
    assert {(r[1], r[2]) for r in new_marks} == {(r[1], r[2]) for r in before["old_marks"]}
    assert new_marks != before["old_marks"]
    assert application_rows(emulators, KINESIS_SUPPORT_NAMES.ledger, sync.application_name) == before["old_rows"]
    # A Kinesis connector's rows are untouched, and none of them is in the DynamoDB tables.
    for table, rows_before in before["kinesis_rows"].items():
        assert application_rows(emulators, table, before["kinesis_app"]) == rows_before
    for table in (DYNAMODB_SUPPORT_NAMES.ledger, DYNAMODB_SUPPORT_NAMES.outcomes):
        assert application_rows(emulators, table, before["kinesis_app"]) == []


def test_an_upgraded_deployment_goes_on_from_its_stream_marks_and_leaves_a_kinesis_connectors_rows(
    emulators: Emulators, synced_by_earlier_release: tuple[Workload, TableSync, dict[str, Any]]
) -> None:
    workload, sync, before = synced_by_earlier_release
    old_outcomes = outcome_rows(emulators, KINESIS_SUPPORT_NAMES.outcomes, sync.application_name)
    changes = stream_changes(workload, start=200)

    # The upgrade's first step, on its own: the marks and outcomes of this table, exactly, and only them.
    with emulators.snowflake_connect() as conn:
        DynamoDBSink(conn, sync.target).ensure_support_objects_of(sync.application_name)
    assert ledger_rows(emulators, DYNAMODB_SUPPORT_NAMES.ledger, sync.application_name) == before["old_marks"]
    assert outcome_rows(emulators, DYNAMODB_SUPPORT_NAMES.outcomes, sync.application_name) == old_outcomes

    check_upgraded(emulators, workload, sync, before, changes)
    # Again after the new ledger moved: nothing is copied, no mark is put back.
    moved = ledger_rows(emulators, DYNAMODB_SUPPORT_NAMES.ledger, sync.application_name)
    with emulators.snowflake_connect() as conn:
        again = copy_kinesis_named_rows(conn, sync.target.destination, sync.application_name, sync.table)
    assert again == CopiedRows(0, 0)
    assert ledger_rows(emulators, DYNAMODB_SUPPORT_NAMES.ledger, sync.application_name) == moved


def _die_after_copy(emulators: Emulators, sync: TableSync, where: str) -> None:
    if where == "after the copy":
        original = dynamodb_sink.copy_kinesis_named_rows

        def copy_then_die(*args: Any, **kwargs: Any) -> Any:
            original(*args, **kwargs)
            os._exit(KILLED)

        dynamodb_sink.copy_kinesis_named_rows = copy_then_die
    else:  # between the ledger's copy and the outcomes' copy, inside the transaction

        def die(*args: Any, **kwargs: Any) -> str:
            os._exit(KILLED)

        dynamodb_ledger_migration.outcomes_copy_sql = die
    run(emulators, sync, attempt=50)
    os._exit(0)


@pytest.mark.parametrize("where", ["after the copy", "inside the copy"])
def test_a_run_killed_during_the_upgrade_replays_to_the_same_result(
    emulators: Emulators, synced_by_earlier_release: tuple[Workload, TableSync, dict[str, Any]], where: str
) -> None:
    workload, sync, before = synced_by_earlier_release
    changes = stream_changes(workload, start=200)
    process = multiprocessing.get_context("fork").Process(target=_die_after_copy, args=(emulators, sync, where))
    process.start()
    process.join(120)
    assert process.exitcode == KILLED
    copied = ledger_rows(emulators, DYNAMODB_SUPPORT_NAMES.ledger, sync.application_name)
    assert copied == (before["old_marks"] if where == "after the copy" else [])

    check_upgraded(emulators, workload, sync, before, changes)
