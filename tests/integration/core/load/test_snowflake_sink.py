"""Stage, COPY and ledger in one transaction (fakesnow server over HTTP)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_kinesis_snowflake.core.load.pipe import pipe_batch
from airflow_kinesis_snowflake.core.load.schema import ColumnMap
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    OUTCOME_RETENTION_DAYS,
    ROWS_DIR,
    CommitResult,
    OutcomeKey,
    SnowflakeSink,
    StaleBatchError,
)
from airflow_kinesis_snowflake.core.load.transform import build_batch
from airflow_kinesis_snowflake.core.model import (
    BatchResult,
    Checkpoint,
    Destination,
    GenerationReason,
    GenerationRecord,
    InitialPosition,
    StartPosition,
)
from airflow_kinesis_snowflake.core.sources.records import KinesisRecord
from tests.conftest import create_table, query, unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def metadata(shard: str, seq: int) -> dict[str, Any]:
    return {
        "stream": "s",
        "shardId": shard,
        "approximateArrival": "2026-01-01T00:00:00+00:00",
        "partitionKey": "k",
        "sequenceNumber": str(seq),
        "subSequenceNumber": 0,
        "shardedSequenceNumber": str(seq),
    }


@pytest.fixture
def sink(emulators: Emulators) -> Any:
    table = unique("T").replace("-", "_").upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0)")
    conn = emulators.snowflake_connect()
    sink = SnowflakeSink(conn, Destination("ANALYTICS", "RAW", table))
    sink.ensure_support_objects()
    yield sink
    conn.close()


def stage_rows(sink: SnowflakeSink, tmp_path: Path, stage_dir: str, ids: list[int]) -> None:
    columns = ColumnMap(sink.describe_columns())
    path = tmp_path / f"{stage_dir.replace('/', '_')}.parquet"
    pq.write_table(columns.to_arrow([{"ID": i} for i in ids], [metadata("shard-1", i) for i in ids]), path)
    sink.put_file(path, f"{stage_dir}/{ROWS_DIR}")


def test_commit_loads_rows_and_moves_the_ledger(emulators: Emulators, sink: SnowflakeSink, tmp_path: Path) -> None:
    stage_rows(sink, tmp_path, "app/b1/a1", [1, 2, 3])
    result = sink.commit_batch(
        application_name="app", generation_id="g", batch_id="b1", stage_dir="app/b1/a1",
        starts={"shard-1": None}, ends={"shard-1": Checkpoint("3")}, rows=3, failures=0, columns=(),
    )  # fmt: skip
    assert result.rows_loaded == 3
    assert sink.read_ledger("app", "g") == {"shard-1": Checkpoint("3")}
    assert sink.read_ledger("app", "other-generation") == {}
    assert query(emulators, f"SELECT ID FROM {sink.table} ORDER BY ID") == [(1,), (2,), (3,)]


def test_a_stale_batch_is_rolled_back_whole(emulators: Emulators, sink: SnowflakeSink, tmp_path: Path) -> None:
    stage_rows(sink, tmp_path, "app/b1/a1", [1, 2])
    sink.commit_batch(
        application_name="app-stale", generation_id="g", batch_id="b1", stage_dir="app/b1/a1",
        starts={"shard-1": None}, ends={"shard-1": Checkpoint("2")}, rows=2, failures=0, columns=(),
    )  # fmt: skip
    # A second writer planned from the same (empty) mark: it must add nothing.
    stage_rows(sink, tmp_path, "app/b1/a2", [1, 2])
    with pytest.raises(StaleBatchError, match="shard-1"):
        sink.commit_batch(
            application_name="app-stale", generation_id="g", batch_id="b1", stage_dir="app/b1/a2",
            starts={"shard-1": None}, ends={"shard-1": Checkpoint("2")}, rows=2, failures=0, columns=(),
        )  # fmt: skip
    # A writer whose start is behind the ledger is refused too.
    stage_rows(sink, tmp_path, "app/b2/a1", [2, 3])
    with pytest.raises(StaleBatchError):
        sink.commit_batch(
            application_name="app-stale", generation_id="g", batch_id="b2", stage_dir="app/b2/a1",
            starts={"shard-1": Checkpoint("1")}, ends={"shard-1": Checkpoint("3")}, rows=2, failures=0, columns=(),
        )  # fmt: skip
    assert query(emulators, f"SELECT ID FROM {sink.table} ORDER BY ID") == [(1,), (2,)]
    assert sink.read_ledger("app-stale", "g") == {"shard-1": Checkpoint("2")}


def test_a_checkpoint_the_ledger_never_saw_starts_its_mark(
    emulators: Emulators, sink: SnowflakeSink, tmp_path: Path
) -> None:
    # A shard whose checkpoint came from elsewhere (a migrated KCL lease table) has no ledger row.
    app = unique("app-migrated")
    stage_rows(sink, tmp_path, "app/m1/a1", [10, 11])
    result = sink.commit_batch(
        application_name=app, generation_id="g", batch_id="m1", stage_dir="app/m1/a1",
        starts={"shard-1": Checkpoint("9")}, ends={"shard-1": Checkpoint("11")}, rows=2, failures=0, columns=(),
    )  # fmt: skip
    assert result.rows_loaded == 2
    assert sink.read_ledger(app, "g") == {"shard-1": Checkpoint("11")}
    # Once the ledger holds a mark, a writer from the old checkpoint is stale and adds nothing.
    stage_rows(sink, tmp_path, "app/m1/a2", [10, 11])
    with pytest.raises(StaleBatchError, match="shard-1"):
        sink.commit_batch(
            application_name=app, generation_id="g", batch_id="m1", stage_dir="app/m1/a2",
            starts={"shard-1": Checkpoint("9")}, ends={"shard-1": Checkpoint("11")}, rows=2, failures=0, columns=(),
        )  # fmt: skip
    # And the next batch moves on from the mark.
    stage_rows(sink, tmp_path, "app/m2/a1", [12])
    sink.commit_batch(
        application_name=app, generation_id="g", batch_id="m2", stage_dir="app/m2/a1",
        starts={"shard-1": Checkpoint("11")}, ends={"shard-1": Checkpoint("12")}, rows=1, failures=0, columns=(),
    )  # fmt: skip
    assert query(emulators, f"SELECT ID FROM {sink.table} ORDER BY ID") == [(10,), (11,), (12,)]
    assert sink.read_ledger(app, "g") == {"shard-1": Checkpoint("12")}


def test_describe_columns_names_a_missing_table(emulators: Emulators) -> None:
    conn = emulators.snowflake_connect()
    try:
        # The schema exists (the table alone is missing), whichever test of this worker ran first.
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
        sink = SnowflakeSink(conn, Destination("ANALYTICS", "RAW", "NO_SUCH_TABLE"))
        with pytest.raises(LookupError, match='"NO_SUCH_TABLE" does not exist'):
            sink.describe_columns()
    finally:
        conn.close()


def test_semi_structured_columns_load_as_values_not_as_text(emulators: Emulators, tmp_path: Path) -> None:
    table = unique("V").replace("-", "_").upper()
    create_table(
        emulators, "ANALYTICS", "RAW", table, 'ID NUMBER(38,0), ADDRESS VARIANT, TAGS ARRAY, "odd ""key"" x" OBJECT'
    )
    conn = emulators.snowflake_connect()
    try:
        sink = SnowflakeSink(conn, Destination("ANALYTICS", "RAW", table))
        sink.ensure_support_objects()
        staged = sink.describe_columns()
        columns = ColumnMap(staged)
        rows = [
            columns.map_record({"id": 1, "address": {"city": "Berlin", "geo": [52.5, 13.4]}, "tags": ["a", "b"],
                                'odd "key" x': {"k": 1}}),
            columns.map_record({"id": 2, "address": "just a string", "tags": []}),
        ]  # fmt: skip
        path = tmp_path / "v.parquet"
        pq.write_table(columns.to_arrow(rows, [metadata("shard-1", 1), metadata("shard-1", 2)]), path)
        sink.put_file(path, f"app/v1/a1/{ROWS_DIR}")
        sink.commit_batch(
            application_name="app-v", generation_id="g", batch_id="v1", stage_dir="app/v1/a1",
            starts={"shard-1": None}, ends={"shard-1": Checkpoint("2")}, rows=2, failures=0, columns=staged,
        )  # fmt: skip
    finally:
        conn.close()

    fqn = f"ANALYTICS.RAW.{table}"
    assert query(
        emulators,
        f'SELECT ADDRESS:city::string, ADDRESS:geo[1]::float, TAGS[0]::string, "odd ""key"" x":k::int, '
        f"KINESISMETADATA:shardId::string FROM {fqn} WHERE ID = 1",
    ) == [("Berlin", 13.4, "a", 1, "shard-1")]
    # A JSON string stays a string value (a VARIANT reads back as its JSON text).
    assert query(emulators, f"SELECT ADDRESS, TAGS FROM {fqn} WHERE ID = 2") == [('"just a string"', "[]")]


def test_last_ledger_update_is_the_latest_commit_of_an_application_in_any_generation(
    emulators: Emulators, sink: SnowflakeSink, tmp_path: Path
) -> None:
    app = unique("ledger-app")
    assert sink.last_ledger_update(app) is None
    for generation, batch in (("g1", "b1"), ("g2", "b2")):
        stage_rows(sink, tmp_path, f"{app}/{batch}/a1", [1])
        sink.commit_batch(
            application_name=app, generation_id=generation, batch_id=batch, stage_dir=f"{app}/{batch}/a1",
            starts={"shard-1": None}, ends={"shard-1": Checkpoint("1")}, rows=1, failures=0, columns=(),
        )  # fmt: skip
    for generation, stamp in (("g1", "2026-03-01 10:00:00 +00:00"), ("g2", "2026-02-01 10:00:00 +00:00")):
        query(
            emulators,
            f"UPDATE {sink.ledger} SET UPDATED_AT = '{stamp}'::TIMESTAMP_TZ "
            f"WHERE APPLICATION_NAME = '{app}' AND GENERATION_ID = '{generation}'",
        )
    assert sink.last_ledger_update(app) == datetime(2026, 3, 1, 10, tzinfo=UTC)
    assert sink.last_ledger_update(unique("other-app")) is None


@pytest.mark.parametrize("destination", ["TABLE", "PIPE"])
def test_integers_of_38_digits_land_exactly(emulators: Emulators, tmp_path: Path, destination: str) -> None:
    """Staged as Parquet DECIMAL(38,0) for a table, as the producer's JSON text for a pipe."""
    table = unique("N").replace("-", "_").upper()
    create_table(emulators, "ANALYTICS", "RAW", table, "ID NUMBER(38,0), N INTEGER, W NUMBER(20,0)")
    fqn = f"ANALYTICS.RAW.{table}"
    definition = (
        f"COPY INTO {fqn} (ID, N, W, KINESISMETADATA) FROM (SELECT $1:id::NUMBER(38,0), $1:n::INT, $1:w, "
        "$1:KINESISMETADATA FROM @s)"
    )
    largest = 10**38 - 1
    payloads = [{"id": largest, "n": -largest, "w": 10**20 - 1}, {"id": 2**63, "n": 1, "w": None}]
    records = [
        KinesisRecord("shard-1", str(i), 0, "k", datetime(2026, 1, 1, tzinfo=UTC), json.dumps(p).encode())
        for i, p in enumerate(payloads, 1)
    ]
    conn = emulators.snowflake_connect()
    try:
        sink = SnowflakeSink(
            conn, Destination("ANALYTICS", "RAW", table), pipe_definition=definition if destination == "PIPE" else None
        )
        sink.ensure_support_objects()
        staged = sink.describe_columns()
        if destination == "PIPE":
            path = tmp_path / "rows.json"
            path.write_bytes(pipe_batch(records, "s").lines)
        else:
            batch = build_batch(records, "s", ColumnMap(staged))
            assert batch.dead_letters == []
            path = tmp_path / "rows.parquet"
            pq.write_table(batch.rows, path)
        sink.put_file(path, f"{table}/n1/{ROWS_DIR}")
        sink.commit_batch(
            application_name=table, generation_id="g", batch_id="n1", stage_dir=f"{table}/n1",
            starts={"shard-1": None}, ends={"shard-1": Checkpoint("2")}, rows=2, failures=0, columns=staged,
        )  # fmt: skip
    finally:
        conn.close()

    assert query(emulators, f"SELECT ID, N, W, ID::VARCHAR FROM {fqn} ORDER BY N") == [
        (largest, -largest, 10**20 - 1, str(largest)),
        (2**63, 1, None, str(2**63)),
    ]


def test_the_newest_generation_record_wins_and_names_the_connector_by_either_name(sink: SnowflakeSink) -> None:
    configured = unique("gen-app")
    assert sink.latest_generation(configured) is None
    first = GenerationRecord(
        configured, configured, "g1", GenerationReason.FIRST_START, StartPosition(InitialPosition.TRIM_HORIZON),
        connector_id="orders", stream_arn="arn:aws:kinesis:us-east-1:1:stream/s",
        stream_created_at="2026-01-01T00:00:00+00:00",
    )  # fmt: skip
    sink.record_generation(first)
    assert sink.latest_generation(configured) == replace(
        first,
        recorded_at=sink.latest_generation(configured).recorded_at,  # type: ignore[union-attr]
    )
    at = datetime(2026, 1, 31, tzinfo=UTC)
    sink.record_generation(
        GenerationRecord(
            configured, configured + "-v2", "g2", GenerationReason.RESET_NEW_APPLICATION_NAME,
            StartPosition(InitialPosition.AT_TIMESTAMP, at),
        )
    )  # fmt: skip
    latest = sink.latest_generation(configured)
    assert latest is not None
    assert (latest.application_name, latest.generation_id, latest.reason) == (
        configured + "-v2",
        "g2",
        GenerationReason.RESET_NEW_APPLICATION_NAME,
    )
    assert latest.start == StartPosition(InitialPosition.AT_TIMESTAMP, at)
    # A connector file changed to the active name still finds the connector's history.
    assert sink.latest_generation(configured + "-v2") == latest


def test_ledger_generations_are_listed_newest_mark_first(sink: SnowflakeSink, tmp_path: Path) -> None:
    app = unique("gens")
    for batch, generation in enumerate(("old", "new"), start=1):
        stage_rows(sink, tmp_path, f"{app}/b{batch}/a1", [batch])
        sink.commit_batch(
            application_name=app, generation_id=generation, batch_id=f"b{batch}", stage_dir=f"{app}/b{batch}/a1",
            starts={"shard-1": None}, ends={"shard-1": Checkpoint(str(batch))}, rows=1, failures=0, columns=(),
        )  # fmt: skip
    assert sink.ledger_generations(app) == ["new", "old"]
    assert sink.ledger_generations(unique("none")) == []


def outcome(batch_id: str, stage_dir: str, committed: bool, rows: int = 0) -> BatchResult:
    return BatchResult(batch_id, stage_dir, committed, rows, 0, (), datetime.now(UTC), {"evolution": False})


def test_a_batch_records_its_outcome_in_the_transaction_that_commits_it(
    emulators: Emulators, sink: SnowflakeSink, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = OutcomeKey("app-outcome", "g", "b1", "attempt-1")
    stage_rows(sink, tmp_path, "app/b1/a1", [1, 2, 3])
    recorded: list[BatchResult] = []

    def record(loaded: CommitResult) -> tuple[OutcomeKey, BatchResult]:
        recorded.append(outcome("b1", "app/b1/a1", True, loaded.rows_loaded))
        return key, recorded[-1]

    sink.commit_batch(
        application_name="app-outcome", generation_id="g", batch_id="b1", stage_dir="app/b1/a1",
        starts={"shard-1": None}, ends={"shard-1": Checkpoint("3")}, rows=3, failures=0, columns=(), outcome=record,
    )  # fmt: skip

    assert sink.read_outcome(key) == recorded[0] and recorded[0].rows_loaded == 3
    # The next batch's COMMIT fails: its outcome goes with its rows and its ledger marks.
    execute = sink._execute

    def commit_fails(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        if sql == "COMMIT":
            raise RuntimeError("COMMIT failed")
        return execute(sql, params)

    monkeypatch.setattr(sink, "_execute", commit_fails)
    stage_rows(sink, tmp_path, "app/b2/a1", [4, 5])
    second = OutcomeKey("app-outcome", "g", "b2", "attempt-1")
    with pytest.raises(RuntimeError, match="COMMIT failed"):
        sink.commit_batch(
            application_name="app-outcome", generation_id="g", batch_id="b2", stage_dir="app/b2/a1",
            starts={"shard-1": Checkpoint("3")}, ends={"shard-1": Checkpoint("5")}, rows=2, failures=0, columns=(),
            outcome=lambda loaded: (second, outcome("b2", "app/b2/a1", True, loaded.rows_loaded)),
        )  # fmt: skip
    monkeypatch.undo()
    # And when recording the outcome fails, the batch does not commit either.

    def outcome_fails(loaded: CommitResult) -> tuple[OutcomeKey, BatchResult]:
        raise RuntimeError("the outcome could not be recorded")

    with pytest.raises(RuntimeError, match="the outcome could not be recorded"):
        sink.commit_batch(
            application_name="app-outcome", generation_id="g", batch_id="b2", stage_dir="app/b2/a1",
            starts={"shard-1": Checkpoint("3")}, ends={"shard-1": Checkpoint("5")}, rows=2, failures=0, columns=(),
            outcome=outcome_fails,
        )  # fmt: skip

    assert sink.read_outcome(second) is None
    assert sink.read_ledger("app-outcome", "g") == {"shard-1": Checkpoint("3")}
    assert query(emulators, f"SELECT ID FROM {sink.table} ORDER BY ID") == [(1,), (2,), (3,)]


def test_a_retried_batch_reads_the_outcome_of_its_own_attempt(sink: SnowflakeSink) -> None:
    # Two submissions of batch b1: the first committed nothing, the retry committed.
    first, retry = OutcomeKey("app-retry", "g", "b1", "attempt-1"), OutcomeKey("app-retry", "g", "b1", "attempt-2")
    sink.record_outcome(first, outcome("b1", "app/b1/s1", False))
    sink.record_outcome(retry, outcome("b1", "app/b1/s2", True, rows=7))
    # One submission whose driver ran twice (YARN started the application master again after the
    # first had committed): the run that committed is the outcome, not the later one.
    rerun = OutcomeKey("app-retry", "g", "b1", "attempt-3")
    sink.record_outcome(rerun, outcome("b1", "app/b1/s3", True, rows=4))
    sink.record_outcome(rerun, outcome("b1", "app/b1/s4", False))

    read = [sink.read_outcome(k) for k in (first, retry, rerun)]

    assert [(r.stage_dir, r.committed, r.rows_loaded) for r in read if r is not None] == [
        ("app/b1/s1", False, 0),
        ("app/b1/s2", True, 7),
        ("app/b1/s3", True, 4),
    ]
    assert sink.read_outcome(OutcomeKey("app-retry", "g", "b1", "attempt-4")) is None
    assert sink.read_outcome(OutcomeKey("app-retry", "other-generation", "b1", "attempt-2")) is None


def test_a_continuous_submission_reads_every_micro_batch_it_recorded_in_order(sink: SnowflakeSink) -> None:
    # One submission (attempt) of a continuous application records a batch per micro-batch; a reset
    # switched the application name between two of them. Another submission's outcome is not read.
    attempt = "attempt-continuous"
    sink.record_outcome(OutcomeKey("app-cont", "g", "b1", attempt), outcome("b1", "app/b1/s1", True, rows=2))
    sink.record_outcome(OutcomeKey("app-cont", "g", "b2", "attempt-other"), outcome("b2", "app/b2/s1", True))
    sink.record_outcome(OutcomeKey("app-cont", "g", "b2", attempt), outcome("b2", "app/b2/s2", False))
    sink.record_outcome(OutcomeKey("app-cont-2", "g2", "b3", attempt), outcome("b3", "app/b3/s1", True, rows=5))

    read = sink.read_attempt_outcomes(attempt)

    assert [(name, r.batch_id, r.stage_dir, r.rows_loaded) for name, r in read] == [
        ("app-cont", "b1", "app/b1/s1", 2),
        ("app-cont", "b2", "app/b2/s2", 0),
        ("app-cont-2", "b3", "app/b3/s1", 5),
    ]
    assert sink.read_attempt_outcomes("attempt-none") == []


def test_the_outcome_of_a_batch_that_committed_nothing_is_kept_with_autocommit_off(
    emulators: Emulators, sink: SnowflakeSink
) -> None:
    key = OutcomeKey("app-empty", "g", "b1", "attempt-1")
    conn = emulators.snowflake_connect(autocommit=False)
    try:
        SnowflakeSink(conn, sink.destination).record_outcome_alone(key, outcome("b1", "app/b1/a1", False))
    finally:
        conn.close()  # a connection with autocommit off rolls back what it did not commit

    recorded = sink.read_outcome(key)  # read through another connection
    assert recorded is not None and (recorded.stage_dir, recorded.committed) == ("app/b1/a1", False)


def test_recording_an_outcome_deletes_the_applications_outcomes_past_the_retention(
    emulators: Emulators, sink: SnowflakeSink
) -> None:
    kept, pruned = unique("app-kept"), unique("app-pruned")
    old = (datetime.now(UTC) - timedelta(days=OUTCOME_RETENTION_DAYS + 1)).isoformat()
    recent = (datetime.now(UTC) - timedelta(days=OUTCOME_RETENTION_DAYS - 1)).isoformat()
    for application, batch, recorded_at in (
        (kept, "old", old),
        (pruned, "old", old),
        (pruned, "recent", recent),
    ):
        query(
            emulators,
            f"INSERT INTO {sink.outcomes} (APPLICATION_NAME, GENERATION_ID, BATCH_ID, ATTEMPT_ID, STAGE_DIR, "
            f"COMMITTED, RESULT, RECORDED_AT) VALUES ('{application}', 'g', '{batch}', 'a', 's', TRUE, '{{}}', "
            f"'{recorded_at}')",
        )

    sink.record_outcome_alone(OutcomeKey(pruned, "g", "new", "a"), outcome("new", "app/new/a", False))

    rows = query(
        emulators,
        f"SELECT APPLICATION_NAME, BATCH_ID FROM {sink.outcomes} WHERE APPLICATION_NAME IN ('{kept}', '{pruned}') "
        "ORDER BY 1, 2",
    )
    # The old outcome of the application that recorded one is gone; another application's is not.
    assert rows == [(kept, "old"), (pruned, "new"), (pruned, "recent")]


def test_removing_a_batchs_staged_files_leaves_the_other_batches_files(
    emulators: Emulators, sink: SnowflakeSink, tmp_path: Path
) -> None:
    app = unique("app")  # the schema's stage is shared with the other tests' batches
    stage_rows(sink, tmp_path, f"{app}/b1/a1", [1, 2])
    stage_rows(sink, tmp_path, f"{app}/b2/a1", [3])

    def staged(batch: str) -> list[str]:
        return [str(row[0]) for row in query(emulators, f"LIST @{sink.stage}") if f"/{app}/{batch}/" in str(row[0])]

    assert staged("b1")
    sink.remove_staged(f"{app}/b1/a1")
    assert not staged("b1")
    assert staged("b2")
