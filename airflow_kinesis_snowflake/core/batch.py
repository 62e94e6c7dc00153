"""The micro-batch protocol: one ingest run, from the lease table to Snowflake and back, exactly once.

:func:`run_batch` drives it; the caller supplies the clients and the step that runs the load
(``submit``: the operator's runs spark-submit). Snowflake's ledger is the truth, DynamoDB's lease
table a cache of it, so whatever step the process dies after, nothing is lost or loaded twice:

1. **Resolve** the application: follow ``superseded_by`` from the configured name; skip
   (:class:`ResetInProgress`) while a reset or restore mark is live. Reads only.
2. **Identity**: refuse a lease table whose progress belongs to another destination or stream.
   Reads only.
3. **Generation**: Snowflake's generations table decides the application name and generation
   (:func:`~.state.generations.choose_generation`); a first start records itself there. Dying after the
   record: the next run finds it and agrees with DynamoDB, or adopts it.
4. **Adopt** (only when DynamoDB lost what Snowflake records): create the lease table again, move
   its shard leases to the old generation's ledger marks, set the generation, point the other
   tables at it. Each write is conditional or idempotent, and the next run plans the same adoption
   from what is left, so dying halfway is repaired by the next run.
5. **Lease**: sync shards into the table (their leases read by key, never a scan) and take up to
   ``max_shards_per_batch`` eligible leases with conditional writes. Dying while holding them: a
   retry of the same task takes them over at once, anyone else once they expired; nothing was read.
6. **Fast-forward**: a checkpoint behind the ledger's mark (an earlier run died between its
   Snowflake commit and its checkpoint) is moved to the mark, loading nothing.
7. **Plan** the shard ranges, from the checkpoints, up to the cut-off and the caps. A retry of the
   same run plans the same ranges, and so the same batch id.
8. **Run** ``submit(plan)``, renewing the leases meanwhile. It loads rows and moves the ledger in
   one Snowflake transaction, guarded by the ledger's marks: a stale or duplicate writer is
   rejected. Dying before its commit: nothing is loaded; after it: step 6 of the next run catches up.
9. **Commit** the checkpoints to what was loaded (conditional on still holding the lease). A lease
   lost during the batch is not checkpointed: its new owner fast-forwards from the ledger.
10. **Release** the leases and delete the worker's heartbeat item, also when a step failed; a
    release that fails leaves a lease that expires, a delete that fails an item DynamoDB's time to
    live removes.
11. **Again, after a reshard**: when a shard reached SHARD_END in the batch, its children may have
    become eligible, so the run goes back to step 1 with the same cut-off and runs another
    micro-batch (:func:`another_round`), skipping the shards it already read: its own plan, batch id
    and ledger transaction. It stops when a batch read no shard to its end or took no lease, and
    after ``max_rounds`` batches (logged; the next run reads on). One run so loads every record put
    before its cut-off, through any number of generations of shards. Dying between two batches:
    the earlier ones are committed and checkpointed; a retry plans from the checkpoints with the
    same cut-off.

Logs go to this module's logger; Airflow's task log shows them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol

from airflow_kinesis_snowflake.core.engine.detached import DetachedRun, JobDetached
from airflow_kinesis_snowflake.core.engine.leases import (
    HeldLeases,
    LeaseHold,
    ResumedBatch,
    forget_run,
    release_leases,
    resume_hold,
    take_leases,
)
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.load.ownership import owner_conflict, owner_refusal
from airflow_kinesis_snowflake.core.load.pipe import validate_pipe_definition
from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink
from airflow_kinesis_snowflake.core.model import (
    BatchResult,
    Checkpoint,
    ConsumerType,
    Destination,
    DestinationType,
    GenerationReason,
    InitialPosition,
    StartPosition,
)
from airflow_kinesis_snowflake.core.planning import DEFAULT_MAX_BYTES_PER_SHARD, BatchPlan, plan_ranges
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.errors import IdentityError, LeaseLostError, MaintenanceError
from airflow_kinesis_snowflake.core.state.generations import (
    Adoption,
    GenerationChoice,
    choose_generation,
    plan_adoption,
)
from airflow_kinesis_snowflake.core.state.holding import hold_leases
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable, earliest_start, lease_keys
from airflow_kinesis_snowflake.core.state.marks import (
    Resolution,
    clear_superseded,
    mark_superseded,
    resolve_application,
    set_generation,
)
from airflow_kinesis_snowflake.core.state.metadata import (
    TableIdentity,
    TableMarks,
    check_identity,
    check_kinesis_use,
    read_marks,
)

log = logging.getLogger(__name__)

# Step 11's bound: micro-batches in one run (each generation of shards after a reshard takes one).
MAX_ROUNDS = 8


class BatchRefused(RuntimeError):
    """The batch cannot run as configured, or DynamoDB and Snowflake disagree in a way only a person
    can settle; the message says why and what to do. Nothing was read."""


class ResetInProgress(RuntimeError):
    """A reset or restore works on the connector: this run reads nothing and should be skipped."""

    def __init__(self, table: str | None) -> None:
        super().__init__(f"reset of {table} in progress")
        self.table = table


class Stream(Protocol):
    """The Kinesis calls the protocol makes (:class:`~airflow_kinesis_snowflake.hooks.kinesis.KinesisStreamHook`)."""

    @property
    def region_name(self) -> str | None: ...

    def list_shards(self, stream_name: str) -> list[Shard]: ...

    def stream_identity(self, stream_name: str) -> tuple[str, str]: ...

    def describe_consumer(self, stream_name: str, consumer_name: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class BatchSettings:
    """What the connector configures for its batches (see the ingest operator's parameters).

    :param application_name: the connector file's application name, where resolution starts.
    :param connector_id: recorded in the lease table and named in refusals.
    :param pipe_definition: PIPE destinations only; checked by :func:`pipe_definition_for`.
    """

    stream_name: str
    application_name: str
    destination: Destination
    connector_id: str
    initial_position: str = InitialPosition.TRIM_HORIZON.value
    initial_timestamp: str | None = None
    consumer_type: str = ConsumerType.SHARED_THROUGHPUT
    max_records_per_call: int = 10000
    max_records_per_shard: int = 100_000
    max_bytes_per_shard: int | None = DEFAULT_MAX_BYTES_PER_SHARD
    max_shards_per_batch: int | None = None
    lease_duration_seconds: float = 300
    destination_type: str = DestinationType.TABLE
    pipe_definition: str | None = None
    schema_evolution: bool | None = None
    on_unknown_key: UnknownKeys = UnknownKeys.IGNORE

    @classmethod
    def of_task(cls, task: Any, connector_id: str) -> BatchSettings:
        """An ingest task's settings: its attributes of the same names (as rendered), and its
        ``database``, ``schema`` and ``table`` as the destination, upper-cased."""
        destination = Destination(task.database.upper(), task.schema.upper(), task.table.upper())
        own = {f.name: getattr(task, f.name) for f in fields(cls) if f.name not in ("destination", "connector_id")}
        return cls(destination=destination, connector_id=connector_id, **own)

    def start_position(self, now: datetime) -> StartPosition:
        """Where shards with no checkpoint start, the connector's initial position resolved at ``now``."""
        text = self.initial_timestamp
        timestamp = datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
        return StartPosition.resolve(InitialPosition(self.initial_position), timestamp, now)


@dataclass(frozen=True)
class ShardOutcome:
    """One shard of a finished batch.

    :param records: records read from it.
    :param dead_letters: of those, records staged for the parse-failure table.
    :param checkpoint: where its checkpoint is now (None: it has none).
    :param shard_end: it was read to its end.
    """

    records: int
    dead_letters: int
    checkpoint: Checkpoint | None
    shard_end: bool


@dataclass(frozen=True)
class BatchOutcome:
    """What one run did.

    :param application_name: the application name it read with (after resolution and adoption).
    :param result: the load's result; None when no shard was eligible (nothing was run).
    :param shards: per shard the batch held to its end, what it read and where its checkpoint is.
    :param earlier: the micro-batches the same run loaded before this one (step 11), oldest first.
    """

    application_name: str
    result: BatchResult | None = None
    shards: Mapping[str, ShardOutcome] = field(default_factory=dict)
    earlier: tuple[BatchOutcome, ...] = ()

    @property
    def batches(self) -> tuple[BatchOutcome, ...]:
        """Every micro-batch of the run that ran the job, oldest first, each without ``earlier``."""
        own = replace(self, earlier=()) if self.earlier else self
        return tuple(b for b in (*self.earlier, own) if b.result is not None)

    def summary(self) -> dict[str, Any]:
        """The run as plain JSON: the ingest task's return value.

        With several micro-batches (step 11), ``batch_id`` is the last one's, ``batch_ids`` lists
        them all, the figures are their sums and ``shards`` holds each shard as its last batch left it.
        """
        batches = self.batches
        if not batches:
            return {"rows_loaded": 0, "dead_letters": 0, "shards": {}}
        if len(batches) == 1:
            return batches[0].own_summary()
        shards: dict[str, Any] = {}
        for batch in batches:
            shards.update(batch.own_summary()["shards"])
        return {
            "batch_id": batches[-1].own_summary()["batch_id"],
            "batch_ids": [b.own_summary()["batch_id"] for b in batches],
            "rows_loaded": sum(b.result.rows_loaded for b in batches if b.result is not None),
            "dead_letters": sum(b.result.dead_letters_loaded for b in batches if b.result is not None),
            "shards": shards,
        }

    def own_summary(self) -> dict[str, Any]:
        """This micro-batch alone, as plain JSON (without ``earlier``)."""
        assert self.result is not None
        return {
            "batch_id": self.result.batch_id,
            "rows_loaded": self.result.rows_loaded,
            "dead_letters": self.result.dead_letters_loaded,
            "shards": {
                shard_id: {
                    "records": shard.records,
                    "dead_letters": shard.dead_letters,
                    "checkpoint": shard.checkpoint.to_dict() if shard.checkpoint else None,
                    "shard_end": shard.shard_end,
                }
                for shard_id, shard in self.shards.items()
            },
        }


def outcome_of_results(application_name: str, results: Sequence[tuple[str, BatchResult]]) -> BatchOutcome:
    """A run's outcome from the results its batches recorded (continuous mode: the driver ran them).

    :param application_name: the outcome's name when there is no result.
    :param results: each batch's application name and result, oldest first.
    """
    batches = [
        BatchOutcome(
            name,
            result,
            {
                s.shard_id: ShardOutcome(s.records_read, s.dead_letters_staged, s.end or s.start, s.shard_end)
                for s in result.shards
            },
        )
        for name, result in results
    ]
    if not batches:
        return BatchOutcome(application_name)
    return replace(batches[-1], earlier=tuple(batches[:-1]))


def pipe_definition_for(destination_type: str, pipe_definition: str | None, destination: Destination) -> str | None:
    """The validated pipe statement of a PIPE destination; None for the others.

    :raises BatchRefused: a PIPE without a statement, a statement for another type, or a bad statement.
    """
    is_pipe = destination_type.upper() == DestinationType.PIPE
    if is_pipe != (pipe_definition is not None):
        raise BatchRefused(
            "pipe_definition is required with destination_type PIPE"
            if is_pipe
            else f"pipe_definition is only used with destination_type PIPE (not {destination_type})"
        )
    if pipe_definition is None:
        return None
    try:
        return validate_pipe_definition(pipe_definition, destination)
    except ValueError as err:
        raise BatchRefused(f"pipe_definition {err}") from None


def cutoff_time(run_started_at: datetime | None, now: datetime) -> datetime:
    """The batch's cut-off: when its run started (shared by every try, so a retry plans the same batch)."""
    if isinstance(run_started_at, datetime):
        return min(run_started_at if run_started_at.tzinfo else run_started_at.replace(tzinfo=UTC), now)
    return now


def another_round(outcome: BatchOutcome) -> bool:
    """Step 11: whether the run plans again after the micro-batch ``outcome``.

    Only a shard read to its end (SHARD_END) makes children eligible that this run has not read;
    a batch that ran no job, or read no shard to its end, leaves nothing new before the cut-off.
    """
    return outcome.result is not None and any(shard.shard_end for shard in outcome.shards.values())


def run_batch(
    settings: BatchSettings,
    *,
    dynamodb: Any,
    stream: Stream,
    connect_snowflake: Callable[[], Any],
    submit: Callable[[BatchPlan], BatchResult],
    owner: str,
    run_started_at: datetime | None = None,
    max_rounds: int = MAX_ROUNDS,
    earlier: Sequence[BatchOutcome] = (),
) -> BatchOutcome:
    """Run one ingest run: a micro-batch (steps 1 to 10 of this module), and another one with the
    same cut-off while a reshard made children eligible (step 11).

    A ``submit`` that leaves the job run to another process raises
    :class:`~.engine.detached.JobDetached`: the batch's leases stay held, and the exception carries
    where the run is (:class:`RunProgress`, as ``progress``); once the job run ended,
    :func:`finish_round` finishes that batch, and ``run_batch`` with the batches so far in ``earlier``
    goes on with the run.

    :param dynamodb: a DynamoDB client (the lease tables).
    :param stream: the Kinesis calls (:class:`Stream`).
    :param connect_snowflake: opens a Snowflake connection (closed by each batch after planning).
    :param submit: loads a plan: rows and ledger in one Snowflake transaction; returns its result.
    :param owner: the lease owner this run writes, unique per try; a :class:`~.state.leases.LeaseOwner`
        lets a retry take over what its earlier try still holds.
    :param run_started_at: when the run started: the cut-off of all its batches (see :func:`cutoff_time`).
    :param max_rounds: at most this many micro-batches in the run.
    :param earlier: the micro-batches the run loaded before (a run that goes on after a detached batch).
    :returns: the last micro-batch that ran the job, the run's earlier ones in its ``earlier``.
    :raises ResetInProgress: a reset or restore works on the connector before the first batch; nothing was read.
    :raises BatchRefused: the first batch cannot run; nothing was read.
    :raises JobDetached: ``submit`` left a batch's job run to another process.
    """
    cutoff = cutoff_time(run_started_at, datetime.now(UTC))
    done: list[BatchOutcome] = list(earlier)
    read: set[str] = {shard.shard_id for outcome in done if outcome.result for shard in outcome.result.shards}
    while not done or another_round(done[-1]):
        number = len(done) + 1
        if number > max_rounds:
            log.warning(
                "Stopped after %d batches with children of finished shards left to read (max_rounds); "
                "the next run reads on from their checkpoints",
                max_rounds,
            )
            break
        if done:
            log.info("A shard reached SHARD_END: planning again for its children, cut-off %s", cutoff.isoformat())
        try:
            outcome = _run_round(
                settings,
                dynamodb=dynamodb,
                stream=stream,
                connect_snowflake=connect_snowflake,
                submit=submit,
                owner=owner,
                cutoff=cutoff,
                skip=frozenset(read),
            )
        except ResetInProgress:
            if not done:
                raise
            log.info("A reset started after batch %d of the run: the run stops there", number - 1)
            break
        except JobDetached as detached:
            detached.progress = RunProgress(cutoff, tuple(done)).to_dict()
            raise
        done.append(outcome)
        if outcome.result is not None:
            read.update(shard.shard_id for shard in outcome.result.shards)
    ran = [outcome for outcome in done if outcome.result is not None]
    if not ran:
        return done[0]
    return replace(ran[-1], earlier=tuple(ran[:-1]))


@dataclass(frozen=True)
class RunProgress:
    """Where an ingest run is when a batch's job run went on without it (:class:`~.engine.detached.JobDetached`).

    :param cutoff: the run's cut-off, for its batches to come.
    :param earlier: the micro-batches it loaded before that one.
    """

    cutoff: datetime
    earlier: tuple[BatchOutcome, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values; each earlier batch as its application name and result."""
        batches = [[b.application_name, b.result.to_dict()] for b in self.earlier if b.result is not None]
        return {"cutoff": self.cutoff.isoformat(), "earlier": batches}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunProgress:
        earlier = tuple(
            outcome_of_results(name, [(name, BatchResult.from_dict(result))]) for name, result in data["earlier"]
        )
        return cls(datetime.fromisoformat(data["cutoff"]), earlier)


def finish_round(dynamodb: Any, hold: LeaseHold, run: DetachedRun, result: Callable[[], BatchResult]) -> BatchOutcome:
    """Steps 9 and 10 of a batch whose job run went on without the run (:mod:`~.engine.detached`), once
    the job run ended: the leases held again (those still held), ``result()`` (the job's outcome, read as
    the blocking path reads it; it raises when the run failed), the checkpoints committed, the leases
    released, the run's record removed; also when ``result()`` raised.

    :param hold: the batch's leases, as the detached run left them.
    :param run: the job run.
    :returns: the batch, as :func:`run_batch` would have; the run goes on with it among ``earlier``.
    """
    table = LeaseTable(dynamodb, hold.table_name)
    try:
        with resume_hold(table, hold) as held:
            loaded = result()
            outcome = BatchOutcome(hold.table_name, loaded, commit_checkpoints(table, held, loaded))
    finally:
        forget_run(table, run)
    return outcome


def resume_run(
    dynamodb: Any,
    resumed: ResumedBatch | None,
    finish: Callable[[ResumedBatch], BatchResult],
    owner: str,
    cutoff: datetime | None,
) -> tuple[str, datetime | None, tuple[BatchOutcome, ...]]:
    """Where :func:`run_batch` starts: ``owner`` and ``cutoff`` with no batch before; for a run whose
    batch's job run went on without it (a deferred task's, ``resumed``), once the run ended, that batch
    finished (:func:`finish_round`) and the run's owner, cut-off and batches, that one last.

    :param finish: the job's outcome of a resumed batch, read as the blocking path reads it; raises when
        the run failed.
    :returns: ``owner``, ``run_started_at`` and ``earlier`` of :func:`run_batch`.
    """
    if resumed is None:
        return owner, cutoff, ()
    ran = RunProgress.from_dict(resumed.progress)
    finished = finish_round(dynamodb, resumed.hold, resumed.run, partial(finish, resumed))
    return resumed.hold.owner, ran.cutoff, (*ran.earlier, finished)


def _run_round(
    settings: BatchSettings,
    *,
    dynamodb: Any,
    stream: Stream,
    connect_snowflake: Callable[[], Any],
    submit: Callable[[BatchPlan], BatchResult],
    owner: str,
    cutoff: datetime,
    skip: frozenset[str],
) -> BatchOutcome:
    """One micro-batch, steps 1 to 10; the shards in ``skip`` (read earlier in the run) are not taken."""
    destination = settings.destination
    pipe_definition = pipe_definition_for(settings.destination_type, settings.pipe_definition, destination)
    configured = settings.application_name
    # 1. Resolve, once: the names found here are passed down, never stored back on the caller.
    resolution = _resolve(dynamodb, configured)
    stream_arn, stream_created = stream.stream_identity(settings.stream_name)
    shards = stream.list_shards(settings.stream_name)
    identity = TableIdentity(
        connector_id=settings.connector_id,
        destination=destination.qualified_name,
        stream_arn=stream_arn,
        stream_created_at=stream_created,
    )
    active = resolution.active if isinstance(resolution, Resolution) else None
    found = read_marks(dynamodb, active) if active else None
    # 2. Refused before anything is recorded or read: another connector's table is not ours to adopt.
    if active is not None:
        _check_identity(active, found if found is not None else LeaseTable(dynamodb, active).metadata(), identity)
    consumer_arn = _consumer_arn(settings, stream, active or configured)
    now = datetime.now(UTC)
    start = settings.start_position(now)

    # 3. The generation Snowflake records, and the ledger's marks for it.
    with closing(connect_snowflake()) as conn:
        sink = SnowflakeSink(conn, destination)
        sink.ensure_support_objects()
        columns = sink.describe_columns()  # fail early, before taking leases, if the table is missing
        if found is not None and active is not None:
            # The table's own first start: a first recorded run, or a stopped reset withdrawn.
            start = earliest_start(LeaseTable(dynamodb, active).leases_of(lease_keys(shards)).values()) or start
        choice, adoption, caught_up = _decide_generation(
            sink, dynamodb, resolution, configured, active, found, identity, start
        )
        if choice.record is not None and choice.record.reason is GenerationReason.FIRST_START:
            _check_owner(sink, configured, destination.qualified_name, stream_arn, settings.stream_name)
        if choice.record is not None:
            sink.record_generation(choice.record)
        ledger = sink.read_ledger(choice.application_name, choice.generation_id)
    if choice.record is not None and choice.record.reason is GenerationReason.RESET_WITHDRAWN:
        log.warning("%s", choice.why)
    # 4. Adopt what Snowflake records when DynamoDB lost it.
    if adoption is not None:
        _adopt(dynamodb, adoption, choice, identity, ledger, caught_up, settings, owner)
    application = choice.application_name
    table = LeaseTable(dynamodb, application)
    if adoption is not None or application != active:  # else checked in step 2, on the same item
        _check_identity(application, table.metadata(), identity)
    table.record_identity(identity)
    table.record_ingest()
    if application != (active or configured):
        consumer_arn = _consumer_arn(settings, stream, application)

    # 5. Sync shards and take leases.
    leases = table.sync_shards(shards, choice.start or start)
    removed = table.remove_finished_parents(leases)
    if removed:
        # Their children started: nothing of them is read again, and the table stays small.
        log.info("Removed the leases of finished parent shards %s", ", ".join(removed))
        leases = {k: v for k, v in leases.items() if k not in removed}
    taken = take_leases(table, leases, owner, settings.lease_duration_seconds, settings.max_shards_per_batch, skip)
    if not taken:
        if skip:
            log.info("No child shard left to read in this run: finished, held by another worker, or waiting")
        else:
            log.info("No shard to read: every shard is finished, held by another worker, or waits for its parents")
        return BatchOutcome(application)
    # 8 and 10: the leases are renewed while the job runs, and released whatever happened.
    with HeldLeases(table, owner, settings.lease_duration_seconds, taken) as held:
        # 6. Fast-forward from the ledger.
        for lease in taken:
            held.update(fast_forward(table, lease, ledger.get(lease.shard_id)))
        # 7. Plan.
        plan = BatchPlan(
            application_name=application,
            generation_id=choice.generation_id,
            stream_name=settings.stream_name,
            region=stream.region_name or "us-east-1",
            destination=destination,
            cutoff=cutoff,
            max_records_per_call=settings.max_records_per_call,
            ranges=plan_ranges(
                held.held.values(),
                max_records_per_shard=settings.max_records_per_shard,
                max_bytes_per_shard=settings.max_bytes_per_shard,
                ending_sequence_numbers={s.shard_id: s.ending_sequence_number for s in shards},
            ),
            destination_type=settings.destination_type,
            schema_evolution=settings.schema_evolution,
            on_unknown_key=settings.on_unknown_key,
            pipe_definition=pipe_definition,
            consumer_type=settings.consumer_type,
            consumer_arn=consumer_arn,
            table_columns=tuple(columns),
        )
        log.info(
            "Batch %s: %d shard ranges (%s), cut-off %s, read %s",
            plan.batch_id,
            len(plan.ranges),
            ", ".join(r.shard_id for r in plan.ranges),
            cutoff.isoformat(),
            f"through fan-out consumer {consumer_arn}" if consumer_arn else "with GetRecords",
        )
        # 8. Run, renewing the leases meanwhile so that a long batch keeps its shards.
        result = held.run(lambda: submit(plan))
        # 9. Commit the checkpoints.
        outcome = BatchOutcome(application, result, commit_checkpoints(table, held, result))
    return outcome


# -- the steps ------------------------------------------------------------------------------------


def _resolve(dynamodb: Any, configured: str) -> Resolution | MaintenanceError:
    """Step 1: skip while a reset works on the connector; read with the name a reset switched to.

    A broken chain (a table it points to is gone) is returned: Snowflake's record may repair it.
    """
    try:
        resolution = resolve_application(dynamodb, configured)
    except MaintenanceError as err:
        return err
    if resolution.reset is not None:
        mark = resolution.reset.to_dict()
        log.info(
            "Skipped: a %s reset of %s is in progress (%s, until %s); the next run reads once it ends",
            mark["mode"],
            resolution.reset_table,
            mark["owner"],
            mark["expires_at"],
        )
        raise ResetInProgress(resolution.reset_table)
    if resolution.superseded:
        log.info(
            "Application %s was superseded by %s (a reset); reading with %s",
            configured,
            resolution.active,
            resolution.active,
        )
    return resolution


def _check_identity(table_name: str, marks: TableMarks | None, identity: TableIdentity) -> None:
    """Step 2: refuse a table whose progress belongs to another destination, an earlier stream, or a
    DynamoDB source's tables."""
    if marks is None:
        return
    try:
        check_kinesis_use(table_name, marks, identity.connector_id)
        check_identity(table_name, marks.identity, identity)
    except IdentityError as err:
        raise BatchRefused(str(err)) from err


def _check_owner(
    sink: SnowflakeSink, configured: str, destination: str, stream_arn: str | None, stream_name: str
) -> None:
    """Step 3, before a first start is recorded: no other application name reads this stream into the
    destination (a connector file whose ``application_name`` was changed by hand: :mod:`~.load.ownership`)."""
    owner = owner_conflict(configured, sink.destination_loaders(stream_arn)) if stream_arn else None
    if owner is None:
        return
    previous = sorted(owner.names)[0]
    raise BatchRefused(
        owner_refusal(
            configured,
            destination,
            owner,
            what_a_second_load_does=(
                f"would read stream {stream_name!r} again from its initial position: records already loaded "
                "would be loaded twice (TRIM_HORIZON), or records not yet loaded skipped (LATEST)"
            ),
            fixes=(
                f"Set application_name back to {previous!r}; to read the stream under a new name, run the "
                f"connector's reset DAG with new_application_name {configured!r}, which moves the progress to it "
                "(its estimate tells what it loads again or skips); or point destination.table at a new table."
            ),
        )
    )


def _consumer_arn(settings: BatchSettings, stream: Stream, application_name: str) -> str | None:
    """The ARN of the fan-out consumer the batch reads through; None for shared throughput.

    The consumer is named after the application name in use, so after a reset to a new name it is
    the new name's consumer, which the reset registered.
    """
    if settings.consumer_type != ConsumerType.ENHANCED_FAN_OUT:
        return None
    consumer = stream.describe_consumer(settings.stream_name, application_name)
    status = consumer["ConsumerStatus"] if consumer is not None else "not registered"
    if consumer is None or status != "ACTIVE":
        raise BatchRefused(
            f"enhanced fan-out consumer {application_name!r} of stream {settings.stream_name!r} is {status}, "
            "not ACTIVE; run the connector's provisioning DAG (its register_fan_out_consumer task) first"
        )
    arn: str = consumer["ConsumerARN"]
    return arn


def _decide_generation(
    sink: SnowflakeSink,
    dynamodb: Any,
    resolution: Resolution | MaintenanceError,
    configured: str,
    active: str | None,
    found: TableMarks | None,
    identity: TableIdentity,
    start: StartPosition,
) -> tuple[GenerationChoice, Adoption | None, dict[str, Checkpoint]]:
    """Step 3: the generation to read with, how to adopt it, and the marks an adoption catches up to."""
    recorded = sink.latest_generation(configured)
    recorded_table = (
        found
        if recorded is None or recorded.application_name == active
        else read_marks(dynamodb, recorded.application_name)
    )
    try:
        choice = choose_generation(
            configured=configured,
            active=active,
            table_generation=found.generation_id if found else None,
            recorded=recorded,
            ledger_generations=sink.ledger_generations(active or configured) if recorded is None else (),
            recorded_table_generation=recorded_table.generation_id if recorded_table else None,
            connector_id=identity.connector_id,
            destination=identity.destination,
            start=start,
            stream_arn=identity.stream_arn,
            stream_created_at=identity.stream_created_at,
        )
    except (MaintenanceError, IdentityError) as err:
        cause = f" ({resolution})" if isinstance(resolution, MaintenanceError) else ""
        raise BatchRefused(f"{err}{cause}") from err
    if not choice.adopted:
        return choice, None, {}
    target = read_marks(dynamodb, choice.application_name)
    chain = resolution.chain if isinstance(resolution, Resolution) else (configured,)
    adoption = plan_adoption(
        choice,
        configured=configured,
        table=target,
        has_leases=target is not None and bool(LeaseTable(dynamodb, choice.application_name).leases()),
        chain=chain,
        existing=[n for n in dict.fromkeys((*chain, configured)) if read_marks(dynamodb, n) is not None],
    )
    caught_up = sink.read_ledger(choice.application_name, adoption.catch_up) if adoption.catch_up is not None else {}
    return choice, adoption, caught_up


def _adopt(
    dynamodb: Any,
    adoption: Adoption,
    choice: GenerationChoice,
    identity: TableIdentity,
    ledger: dict[str, Checkpoint],
    caught_up: dict[str, Checkpoint],
    settings: BatchSettings,
    owner: str,
) -> None:
    """Step 4: make DynamoDB hold the generation Snowflake records: the lease table, its generation, the pointers."""
    name = choice.application_name
    table = LeaseTable(dynamodb, name)
    if adoption.create and table.create(
        stream_name=settings.stream_name, application_name=name, identity=identity, generation_id=choice.generation_id
    ):
        log.warning("Lease table %s did not exist: created it again", name)
    if adoption.catch_up is not None:
        _catch_up(table, adoption.catch_up, caught_up, f"adopt/{owner}", settings.lease_duration_seconds)
    if adoption.set_generation:
        try:
            set_generation(dynamodb, name, choice.generation_id, expected=adoption.current_generation)
        except MaintenanceError as err:
            raise BatchRefused(f"{err}; the next run decides again") from err
    if adoption.clear_superseded:
        clear_superseded(dynamodb, name)
    for other in adoption.point:
        mark_superseded(dynamodb, other, by=name)
    log.warning(
        "Lease table lost or recreated: %s. Adopted generation %s of application %s from Snowflake; shards %s "
        "resume from the ledger's marks (nothing is loaded twice), shards without a mark start at %s. Only the "
        "reset DAG starts a connector over.",
        choice.why,
        choice.generation_id,
        name,
        ", ".join(f"{shard} at {mark.sequence_number}" for shard, mark in sorted(ledger.items())) or "(none)",
        (choice.start or settings.start_position(datetime.now(UTC))).to_dict(),
    )


def _catch_up(
    table: LeaseTable, generation: str, marks: dict[str, Checkpoint], owner: str, lease_seconds: float
) -> None:
    """Hold every shard lease of ``table`` and move it to ``generation``'s ledger marks, loading nothing."""
    held = hold_leases(table, owner, hold_seconds=lease_seconds, timeout_seconds=lease_seconds * 2)
    try:
        for shard_id, lease in list(held.items()):
            held[shard_id] = fast_forward(table, lease, marks.get(shard_id))
    finally:
        release_leases(table, held.values())
    log.warning(
        "The shard leases of %s belonged to generation %s: moved to its ledger marks before the switch",
        table.table_name,
        generation,
    )


def fast_forward(table: LeaseTable, lease: Lease, mark: Checkpoint | None) -> Lease:
    """Step 6: a batch whose Snowflake commit landed but whose checkpoint did not: catch up, load nothing."""
    if mark is not None and (lease.checkpoint is None or mark > lease.checkpoint):
        log.warning(
            "Shard %s: ledger is ahead of the checkpoint (%s > %s); moving the checkpoint without reloading",
            lease.shard_id,
            mark.to_dict(),
            lease.checkpoint.to_dict() if lease.checkpoint else None,
        )
        return table.checkpoint(lease, mark)
    return lease


def commit_checkpoints(table: LeaseTable, held: HeldLeases, result: BatchResult) -> dict[str, ShardOutcome]:
    """Step 9: move each held shard's checkpoint to what the job committed (``held`` keeps the new copies).

    A shard whose lease was lost (during the batch, or at this write) is left to its new owner,
    which fast-forwards from the ledger.
    """
    shards: dict[str, ShardOutcome] = {}
    for shard in result.shards:
        lease = held.held.get(shard.shard_id)
        if lease is None:  # lost during the batch: its new owner fast-forwards from the ledger
            continue
        if shard.end is not None or shard.shard_end:
            try:
                lease = table.checkpoint(lease, shard.end, shard_end=shard.shard_end)
                held.update(lease)
            except LeaseLostError as err:
                # Rows are safe in Snowflake; the ledger fast-forwards whoever holds it now.
                log.warning("%s", err)
                held.drop(lease.shard_id)
        outcome = ShardOutcome(
            records=shard.records_read,
            dead_letters=shard.dead_letters_staged,
            checkpoint=shard.end or lease.checkpoint,
            shard_end=shard.shard_end,
        )
        shards[shard.shard_id] = outcome
        log.info(
            "Shard %s: %d records, checkpoint %s%s",
            shard.shard_id,
            shard.records_read,
            outcome.checkpoint.to_dict() if outcome.checkpoint else None,
            " (SHARD_END)" if shard.shard_end else "",
        )
    log.info(
        "Batch %s: %d rows loaded, %d dead letters", result.batch_id, result.rows_loaded, result.dead_letters_loaded
    )
    return shards
