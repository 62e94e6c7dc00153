"""The Kinesis source's Spark job: one task per shard range reads and stages; the driver commits once.

The engine's driver (:mod:`~.engine.driver`) opens the submission's work and hands a Kinesis batch
or continuous run to :func:`kinesis_job`:

* one batch: its :class:`~.planning.BatchPlan` (:func:`run`) is read one Spark task per shard range
  (:func:`process_range`: read, build Parquet, PUT to the batch's stage directory), then committed
  once by the driver (:func:`commit`): rows, ledger and the batch's :class:`~.model.BatchResult` in
  Snowflake's batch outcomes table, under the batch id and the submission's attempt id, in one
  transaction (or the outcome on its own when nothing was committed). The Airflow worker reads it
  from there once spark-submit returns (:meth:`~.snowflake_sink.SnowflakeSink.read_outcome`);
* a continuous run: micro-batches back to back in one SparkContext (:func:`run_continuous`).

How credentials reach the driver and its tasks, and why never as an argument or a Spark setting:
:mod:`~.engine.credentials`.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_kinesis_snowflake.core.engine.credentials import JobCredentials
from airflow_kinesis_snowflake.core.engine.driver import JobRefused, package_log_to_stdout, spark_application
from airflow_kinesis_snowflake.core.engine.wire import Work, WorkKind
from airflow_kinesis_snowflake.core.job_log import say
from airflow_kinesis_snowflake.core.load.evolution import (
    NEVER_EVOLVED,
    EvolutionPolicy,
    KeySummary,
    UnknownKeyError,
    check_unknown_keys,
    held_back,
    merge,
    plan_changes,
    resolve_policy,
    summarize,
    takes_like,
)
from airflow_kinesis_snowflake.core.load.schema import ColumnMap, TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import (
    FAILURES_DIR,
    ROWS_DIR,
    CommitResult,
    OutcomeKey,
    SnowflakeSink,
)
from airflow_kinesis_snowflake.core.load.transform import BatchFiles, chunks_of
from airflow_kinesis_snowflake.core.model import BatchResult, ConsumerType, ShardResult
from airflow_kinesis_snowflake.core.planning import BatchPlan, ShardRange

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.core.continuous import ContinuousRun
from airflow_kinesis_snowflake.core.sources.readers import (
    CHUNK_BYTES,
    ChunkConsumer,
    RangeRead,
    read_shard_range,
    read_shard_range_fan_out,
)


def read_range(
    shard_range: ShardRange, plan: BatchPlan, credentials: JobCredentials, on_chunk: ChunkConsumer | None = None
) -> RangeRead:
    """Spark task: the records of one shard range. A plan's ranges are fixed, so reading one again
    (after its cached partition was lost) gives the same records.

    :param on_chunk: takes the records in chunks as they are read (the result then holds none).
    """
    client = credentials.kinesis_client(plan.region)
    if plan.consumer_type == ConsumerType.ENHANCED_FAN_OUT:
        assert plan.consumer_arn is not None  # BatchPlan refuses a fan-out plan without one
        return read_shard_range_fan_out(client, plan.consumer_arn, shard_range, cutoff=plan.cutoff, on_chunk=on_chunk)
    return read_shard_range(
        client,
        plan.stream_name,
        shard_range,
        cutoff=plan.cutoff,
        max_records_per_call=plan.max_records_per_call,
        on_chunk=on_chunk,
    )


def summarize_range(read: RangeRead, columns: Sequence[TableColumn]) -> KeySummary:
    """Spark task: the range's unknown keys and empty NOT NULL columns, for schema evolution."""
    return summarize(read.records, ColumnMap(list(columns)))


def _batch_files(
    directory: str,
    shard_range: ShardRange,
    plan: BatchPlan,
    columns: Sequence[TableColumn],
    held_back_reason: str | None = None,
) -> BatchFiles:
    """The staging files of a range: Parquet rows for the columns, or JSON lines for a pipe's SELECT."""
    column_map = None if plan.pipe_definition is not None else ColumnMap(list(columns), held_back(held_back_reason))
    return BatchFiles(Path(directory), f"{shard_range.shard_id}-{plan.batch_id}", plan.stream_name, column_map)


def _put(files: BatchFiles, stage_dir: str, plan: BatchPlan, credentials: JobCredentials) -> None:
    """PUT the range's files that got rows to the batch's stage directory."""
    if not files.rows and not files.dead_letters:
        return
    with credentials.snowflake_connection() as conn:
        sink = SnowflakeSink(conn, plan.destination)
        if files.rows:
            sink.put_file(files.rows_path, f"{stage_dir}/{ROWS_DIR}")
        if files.dead_letters:
            sink.put_file(files.failures_path, f"{stage_dir}/{FAILURES_DIR}")


def _shard_result(read: RangeRead, shard_range: ShardRange, files: BatchFiles) -> ShardResult:
    return ShardResult(
        shard_id=shard_range.shard_id,
        start=shard_range.start,
        end=read.last if read.last and read.records_read else None,
        records_read=read.records_read,
        rows_staged=files.rows,
        dead_letters_staged=files.dead_letters,
        bytes_read=read.bytes_read,
        shard_end=read.shard_end,
        get_records_calls=read.get_records_calls,
        subscriptions=read.subscriptions,
        millis_behind_latest=read.millis_behind_latest,
    )


def stage_range(
    read: RangeRead,
    shard_range: ShardRange,
    plan: BatchPlan,
    columns: Sequence[TableColumn],
    stage_dir: str,
    credentials: JobCredentials,
    held_back_reason: str | None = None,
) -> ShardResult:
    """Spark task: build a range's Parquet (JSON lines for a pipe) from records read before, and stage it.

    The records are built chunk by chunk (:class:`~.transform.BatchFiles`), as :func:`process_range`
    builds them while it reads.

    :param held_back_reason: set when schema evolution's cap left keys without a column: records
        with a value for such a key are then dead letters, kept whole (see :class:`~.schema.HeldBack`).
    """
    with tempfile.TemporaryDirectory(prefix="kinesis-batch-") as tmp:
        with _batch_files(tmp, shard_range, plan, columns, held_back_reason) as files:
            for chunk in chunks_of(read.records, CHUNK_BYTES):
                files.add(chunk)
        _put(files, stage_dir, plan, credentials)
    return _shard_result(read, shard_range, files)


def process_range(
    shard_range: ShardRange,
    plan: BatchPlan,
    columns: Sequence[TableColumn],
    stage_dir: str,
    credentials: JobCredentials,
) -> ShardResult:
    """Spark task: read one shard range, build Parquet, stage it. Returns what it read and staged.

    Records are built and written chunk by chunk as pages arrive (the next page is fetched
    meanwhile), so the task holds about one chunk of records and its rows, not the range.
    """
    with tempfile.TemporaryDirectory(prefix="kinesis-batch-") as tmp:
        with _batch_files(tmp, shard_range, plan, columns) as files:
            read = read_range(shard_range, plan, credentials, on_chunk=files.add)
        _put(files, stage_dir, plan, credentials)
    return _shard_result(read, shard_range, files)


def evolution_policy(plan: BatchPlan, sink: SnowflakeSink) -> EvolutionPolicy:
    """Whether this batch may alter its table. The table is not asked when its type settles it."""
    never = plan.destination_type.upper() in NEVER_EVOLVED
    properties = None if never else sink.table_properties()
    return resolve_policy(
        destination_type=plan.destination_type,
        configured=plan.schema_evolution,
        on_unknown_key=plan.on_unknown_key,
        table_evolution=properties.schema_evolution if properties else None,
        table_iceberg=properties.iceberg if properties else None,
    )


def evolve_schema(
    sink: SnowflakeSink, columns: list[TableColumn], summaries: list[KeySummary], policy: EvolutionPolicy
) -> tuple[list[TableColumn], dict[str, Any]]:
    """Driver: make the table fit the summarised records, before anything is staged.

    Returns the columns the table has afterwards (a racing batch may have added a column first,
    perhaps with another type: values then fit that type or become dead letters) and a report for
    the batch result; its ``records_held_back``, when present, is the ``held_back_reason`` to stage
    the records with (the cap on new columns left keys without one). Raises
    :class:`~.evolution.UnknownKeyError` when values would not load and ``on_unknown_key`` is FAIL;
    nothing is altered then.
    """
    changes = plan_changes(merge(summaries), columns, evolve=policy.evolve, why_not=policy.reason)
    check_unknown_keys(changes, policy, sink.table)
    report = changes.report()
    if changes.add or changes.drop_not_null:
        columns = sink.evolve([(c.name, c.type.sql) for c in changes.add], changes.drop_not_null)
        by_name = {c.name.casefold(): c for c in columns}
        for entry, new in zip(report["columns_added"], changes.add, strict=True):
            actual = by_name.get(new.name.casefold())
            if actual is not None and not takes_like(actual, new.type):
                entry["type_in_table"] = actual.data_type
    return columns, report


def commit(
    plan: BatchPlan,
    stage_dir: str,
    shard_results: Sequence[ShardResult],
    credentials: JobCredentials,
    columns: Sequence[TableColumn] = (),
    schema: dict[str, Any] | None = None,
    attempt_id: str | None = None,
) -> BatchResult:
    """Driver: load everything staged and move the ledger in one transaction, and record the outcome.

    The batch's :class:`BatchResult` is recorded in the batch outcomes table under the batch id and
    ``attempt_id``: in the load transaction when something was committed, on its own otherwise.

    :param columns: the destination columns the rows were staged for.
    :param schema: the schema evolution report, carried into the result.
    :param attempt_id: the submission's attempt id (``--attempt``); the stage directory, itself
        unique per run, when None.
    """
    ends = {r.shard_id: r.end for r in shard_results if r.end is not None}
    starts = {r.shard_id: r.start for r in shard_results}
    rows = sum(r.rows_staged for r in shard_results)
    failures = sum(r.dead_letters_staged for r in shard_results)
    key = OutcomeKey(plan.application_name, plan.generation_id, plan.batch_id, attempt_id or stage_dir)

    def outcome(loaded: CommitResult, committed: bool = True) -> BatchResult:
        return BatchResult(
            batch_id=plan.batch_id,
            stage_dir=stage_dir,
            committed=committed,
            rows_loaded=loaded.rows_loaded,
            dead_letters_loaded=loaded.failures_loaded,
            shards=tuple(shard_results),
            finished_at=datetime.now(UTC),
            schema=schema or {},
        )

    recorded: list[BatchResult] = []

    def record(loaded: CommitResult) -> tuple[OutcomeKey, BatchResult]:
        recorded.append(outcome(loaded))
        return key, recorded[-1]

    with credentials.snowflake_connection() as conn:
        sink = SnowflakeSink(conn, plan.destination, pipe_definition=plan.pipe_definition)
        if not ends:
            result = outcome(CommitResult(rows_loaded=0, failures_loaded=0), committed=False)
            sink.record_outcome_alone(key, result)
            return result
        sink.commit_batch(
            application_name=plan.application_name,
            generation_id=plan.generation_id,
            batch_id=plan.batch_id,
            stage_dir=stage_dir,
            starts=starts,
            ends=ends,
            rows=rows,
            failures=failures,
            columns=list(columns),
            outcome=record,
        )
        # Staged files are only needed until the commit; a leftover is harmless (each attempt
        # has its own directory), so failing to remove it must not fail a committed batch.
        try:
            sink.remove_staged(stage_dir)
        except Exception as err:  # noqa: BLE001
            say(logging.WARNING, f"staged files under {stage_dir} were not removed: {err}")
    return recorded[-1]


def run(plan: BatchPlan, credentials: JobCredentials, attempt_id: str | None = None) -> BatchResult:
    """Driver: read, stage and commit the batch of ``plan``; its outcome is recorded in Snowflake.

    :param attempt_id: the submission's attempt id, which the outcome is recorded under.
    """
    with spark_application(f"kinesis-to-snowflake:{plan.application_name}:{plan.batch_id}") as sc:
        return load(sc, plan, credentials, attempt_id)


def run_continuous(run_spec: ContinuousRun, credentials: JobCredentials, attempt_id: str) -> list[BatchResult]:
    """Driver, continuous mode: micro-batches back to back in one SparkContext
    (:func:`~.continuous.run_continuously`), each recorded in Snowflake under its batch id and ``attempt_id``."""
    from airflow_kinesis_snowflake.core.continuous import KinesisStream, run_continuously

    # The protocol's steps are logged as a scheduled run's task log shows them, through the redacted
    # stdout of the driver.
    name = f"kinesis-to-snowflake:{run_spec.settings.application_name}:continuous"
    with package_log_to_stdout(), spark_application(name) as sc:

        def submit(plan: BatchPlan) -> BatchResult:
            result = load(sc, plan, credentials, attempt_id)
            report(result)
            return result

        outcomes = run_continuously(
            run_spec,
            dynamodb=credentials.dynamodb_client(run_spec.region),
            stream=KinesisStream(credentials.kinesis_client(run_spec.region), run_spec.region),
            connect_snowflake=credentials.connect_snowflake,
            submit=submit,
        )
    return [batch.result for outcome in outcomes for batch in outcome.batches if batch.result is not None]


def load(sc: Any, plan: BatchPlan, credentials: JobCredentials, attempt_id: str | None = None) -> BatchResult:
    """Driver: read, stage and commit the batch of ``plan`` with the live SparkContext ``sc``."""
    from pyspark import StorageLevel

    with credentials.snowflake_connection() as conn:
        sink = SnowflakeSink(conn, plan.destination)
        sink.ensure_support_objects()
        # Described when the batch was planned; a plan written by hand may leave them out.
        columns = list(plan.table_columns) or sink.describe_columns()
        policy = evolution_policy(plan, sink)
    # A fresh directory per attempt: a retried batch never mixes with a failed attempt's files.
    stage_dir = f"{plan.application_name}/{plan.batch_id}/{uuid.uuid4().hex[:12]}"
    # Tasks get the plan and their range as objects (pickled with the task), not as JSON.
    ranges = list(plan.ranges)
    started = time.monotonic()
    schema: dict[str, Any] = {"evolution": policy.evolve, "why": policy.reason}
    shard_results: list[ShardResult] = []
    known = columns
    if ranges and not policy.examines_keys:
        shard_results = (
            sc.parallelize(ranges, max(1, len(ranges)))
            .map(lambda r: process_range(r, plan, known, stage_dir, credentials))
            .collect()
        )
    elif ranges:
        # Two passes over records read once: their keys decide the schema changes, which are
        # made before anything is staged; then they are staged with the columns that resulted.
        # Spilled to disk rather than dropped, so that Kinesis is not read a second time.
        reads = (
            sc.parallelize(ranges, max(1, len(ranges)))
            .map(lambda r: (r, read_range(r, plan, credentials)))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        try:
            summaries = reads.map(lambda pair: summarize_range(pair[1], known)).collect()
            with credentials.snowflake_connection() as conn:
                evolved, changes = evolve_schema(SnowflakeSink(conn, plan.destination), known, summaries, policy)
            schema.update(changes)
            columns = evolved
            held_back_reason = changes.get("records_held_back")
            shard_results = reads.map(
                lambda pair: stage_range(pair[1], pair[0], plan, evolved, stage_dir, credentials, held_back_reason)
            ).collect()
        finally:
            reads.unpersist()
    records = sum(r.records_read for r in shard_results)
    print(f"phase read+stage took {time.monotonic() - started:.3f} s: {records} records", flush=True)
    started = time.monotonic()
    result = commit(plan, stage_dir, shard_results, credentials, columns, schema, attempt_id)
    print(f"commit took {time.monotonic() - started:.3f} s: {result.rows_loaded} rows", flush=True)
    return result


def kinesis_job(work: Work, *, credentials: JobCredentials, attempt_id: str) -> int:
    """The Kinesis source's job on the driver (the registry's ``job`` role,
    :class:`~.engine.driver.SourceJob`): one micro-batch (:func:`run`), or micro-batches back to back
    (:func:`run_continuous`), each reported as it commits.

    :raises JobRefused: ``on_unknown_key: fail`` and values that would not load; nothing was loaded.
    """
    try:
        if work.kind is WorkKind.CONTINUOUS:
            from airflow_kinesis_snowflake.core.continuous import ContinuousRun

            run_continuous(ContinuousRun.from_work(work), credentials, attempt_id)
        else:
            report(run(BatchPlan.from_work(work), credentials, attempt_id))
    except UnknownKeyError as err:
        raise JobRefused(str(err)) from err
    return 0


def report(result: BatchResult) -> None:
    """Print what a batch loaded and how its schema evolved (:func:`report_lines`)."""
    for line in report_lines(result):
        print(line)


def report_lines(result: BatchResult) -> list[str]:
    """What a batch loaded and how its schema evolved, one line each."""
    lines = [
        f"batch {result.batch_id}: {result.rows_loaded} rows loaded, "
        f"{result.dead_letters_loaded} dead letters, {len(result.shards)} shards"
    ]
    schema = result.schema
    added = ", ".join(
        f"{json.dumps(c['column'])} {c['type']}"
        + (f" (the table has {c['type_in_table']})" if "type_in_table" in c else "")
        for c in schema.get("columns_added", [])
    )
    if added:
        lines.append(f"schema evolution: added {added}")
    if schema.get("not_null_dropped"):
        lines.append(f"schema evolution: dropped NOT NULL of {', '.join(schema['not_null_dropped'])}")
    if schema.get("keys_skipped_total"):
        skipped = "; ".join(f"{k['key']}: {k['reason']}" for k in schema["keys_skipped"])
        lines.append(f"keys without a column, not loaded ({schema['keys_skipped_total']}): {skipped}")
    if schema.get("records_held_back"):
        lines.append(f"records kept whole in the parse-failure table: {schema['records_held_back']}")
    return lines
