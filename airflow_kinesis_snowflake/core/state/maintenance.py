"""Maintenance state kept in the lease tables: reset marks, superseded tables, backups, restore.

A connector's connector file names its **configured** application name. A reset to a new
application name leaves the old table in place and records, in the metadata item of the old
table and of the configured one, ``superseded_by = <new name>``. Every ingestion resolves the
**active** application name from there (:func:`resolve_application`), so the switch needs no
change to the connector file. The pointer lives next to the checkpoints it points to: it survives
a rebuilt Airflow database, and every process that shares the application sees the same answer.

While a reset or restore works on a connector, the metadata items of the configured and the
active table carry a **reset mark** (owner, mode, expiry). Ingest runs that see a live mark end
skipped instead of racing the reset; a mark whose task died expires by itself.

Before anything destructive, every checkpoint of a table is written to a
:class:`CheckpointBackup`, a JSON document that :func:`restore_leases` puts back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.model import (
    Checkpoint,
    GenerationReason,
    GenerationRecord,
    InitialPosition,
    StartPosition,
)
from airflow_kinesis_snowflake.core.state.chain import Chain, ChainEnd, walk_chain
from airflow_kinesis_snowflake.core.state.leases import (
    KEY_ATTRIBUTE,
    METADATA_KEY,
    STATE_ACTIVE,
    IdentityError,
    Lease,
    LeaseTable,
    lease_to_item,
)

SUPERSEDED_BY = "superseded_by"
SUPERSEDED_AT = "superseded_at"
RESET_OWNER = "reset_owner"
RESET_MODE = "reset_mode"
RESET_STARTED_AT = "reset_started_at"
RESET_EXPIRES_AT = "reset_expires_at"

# Who a lease table belongs to, in its metadata item (written by the ingestion; tables created by
# earlier versions lack them, so every reader takes each as optional).
CONNECTOR_ID = "connector_id"
DESTINATION = "destination"  # "DATABASE.SCHEMA.TABLE"
STREAM_ARN = "stream_arn"
STREAM_CREATED_AT = "stream_created_at"
LAST_INGEST_AT = "last_ingest_at"  # epoch seconds, every ingest run

BACKUP_FORMAT = "airflow-kinesis-snowflake/checkpoints"
# 2: the connector, destination and stream ARN are recorded (1 had the connector only when a reset wrote it).
BACKUP_VERSION = 2
READABLE_BACKUP_VERSIONS = (1, 2)


class ResetMode(StrEnum):
    """The two resets of Snowflake's Openflow connector for Kinesis."""

    NEW_APPLICATION_NAME = "new_application_name"  # a new table; the old one stays, superseded
    DELETE_TABLE = "delete_table"  # the same table, deleted and created again (new generation)


class MaintenanceError(RuntimeError):
    """A reset, restore or clean-up step found the tables in a state it must not touch."""


def _error_code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _is_conditional_failure(err: ClientError) -> bool:
    return _error_code(err) == "ConditionalCheckFailedException"


def _metadata_key() -> dict[str, Any]:
    return {KEY_ATTRIBUTE: {"S": METADATA_KEY}}


# -- marks in the metadata item -------------------------------------------------------------------


@dataclass(frozen=True)
class ResetMark:
    """A reset or restore working on a connector; ingestions skip while it is live."""

    owner: str
    mode: str
    started_at: float
    expires_at: float

    def is_live(self, now: float) -> bool:
        return self.expires_at > now

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "mode": self.mode,
            "started_at": datetime.fromtimestamp(self.started_at, UTC).isoformat(),
            "expires_at": datetime.fromtimestamp(self.expires_at, UTC).isoformat(),
        }


@dataclass(frozen=True)
class TableMarks:
    """The maintenance attributes of a lease table's metadata item."""

    table_name: str
    application_name: str
    stream_name: str
    generation_id: str
    created_at: str
    superseded_by: str | None = None
    superseded_at: float | None = None
    reset: ResetMark | None = None
    connector_id: str | None = None
    destination: str | None = None
    stream_arn: str | None = None
    stream_created_at: str | None = None
    last_ingest_at: float | None = None

    def live_reset(self, now: float) -> ResetMark | None:
        return self.reset if self.reset is not None and self.reset.is_live(now) else None


def read_marks(client: Any, table_name: str) -> TableMarks | None:
    """The metadata item's marks; None when the table or its metadata item does not exist."""
    try:
        item = client.get_item(TableName=table_name, Key=_metadata_key(), ConsistentRead=True).get("Item")
    except ClientError as err:
        if _error_code(err) == "ResourceNotFoundException":
            return None
        raise
    if not item or "generation_id" not in item:
        return None
    reset = None
    if RESET_OWNER in item:
        reset = ResetMark(
            owner=item[RESET_OWNER]["S"],
            mode=item.get(RESET_MODE, {}).get("S", ""),
            started_at=float(item.get(RESET_STARTED_AT, {}).get("N", "0")),
            expires_at=float(item.get(RESET_EXPIRES_AT, {}).get("N", "0")),
        )
    superseded_at = item.get(SUPERSEDED_AT, {}).get("N")
    last_ingest_at = item.get(LAST_INGEST_AT, {}).get("N")
    return TableMarks(
        table_name=table_name,
        application_name=item["application_name"]["S"],
        stream_name=item["stream_name"]["S"],
        generation_id=item["generation_id"]["S"],
        created_at=item.get("created_at", {}).get("S", ""),
        superseded_by=item.get(SUPERSEDED_BY, {}).get("S"),
        superseded_at=float(superseded_at) if superseded_at is not None else None,
        reset=reset,
        connector_id=item.get(CONNECTOR_ID, {}).get("S"),
        destination=item.get(DESTINATION, {}).get("S"),
        stream_arn=item.get(STREAM_ARN, {}).get("S"),
        stream_created_at=item.get(STREAM_CREATED_AT, {}).get("S"),
        last_ingest_at=float(last_ingest_at) if last_ingest_at is not None else None,
    )


def set_reset_mark(client: Any, table_name: str, mark: ResetMark, *, now: float | None = None) -> None:
    """Put ``mark`` on a table, unless another live reset holds it.

    :raises MaintenanceError: when another reset's mark is live, or the table has no metadata item.
    """
    now = time.time() if now is None else now
    try:
        client.update_item(
            TableName=table_name,
            Key=_metadata_key(),
            UpdateExpression=f"SET {RESET_OWNER} = :owner, {RESET_MODE} = :mode, "
            f"{RESET_STARTED_AT} = :started, {RESET_EXPIRES_AT} = :expires",
            ConditionExpression=f"attribute_exists(#k) AND (attribute_not_exists({RESET_OWNER}) "
            f"OR {RESET_OWNER} = :owner OR {RESET_EXPIRES_AT} < :now)",
            ExpressionAttributeNames={"#k": KEY_ATTRIBUTE},
            ExpressionAttributeValues={
                ":owner": {"S": mark.owner},
                ":mode": {"S": mark.mode},
                ":started": {"N": str(mark.started_at)},
                ":expires": {"N": str(mark.expires_at)},
                ":now": {"N": str(now)},
            },
        )
    except ClientError as err:
        if _error_code(err) == "ResourceNotFoundException":
            raise MaintenanceError(
                f"lease table {table_name!r} does not exist (no metadata item); nothing to reset"
            ) from err
        if not _is_conditional_failure(err):
            raise
        marks = read_marks(client, table_name)
        if marks is None:
            raise MaintenanceError(f"lease table {table_name!r} has no metadata item; nothing to reset") from err
        other = marks.live_reset(now)
        held = f"{other.mode} by {other.owner}, until {other.to_dict()['expires_at']}" if other else "changed meanwhile"
        raise MaintenanceError(
            f"another reset or restore is working on {table_name!r} ({held}); wait until it ends or its mark expires"
        ) from err


def clear_reset_mark(client: Any, table_name: str, owner: str) -> bool:
    """Remove our mark; False when the table is gone or the mark is not ours (nothing to do)."""
    try:
        client.update_item(
            TableName=table_name,
            Key=_metadata_key(),
            UpdateExpression=f"REMOVE {RESET_OWNER}, {RESET_MODE}, {RESET_STARTED_AT}, {RESET_EXPIRES_AT}",
            ConditionExpression=f"{RESET_OWNER} = :owner",
            ExpressionAttributeValues={":owner": {"S": owner}},
        )
    except ClientError as err:
        if _is_conditional_failure(err) or _error_code(err) == "ResourceNotFoundException":
            return False
        raise
    return True


def mark_superseded(client: Any, table_name: str, by: str, *, now: float | None = None) -> None:
    """Record that ``by`` replaced this table; ingestions resolving through it read ``by``."""
    now = time.time() if now is None else now
    client.update_item(
        TableName=table_name,
        Key=_metadata_key(),
        UpdateExpression=f"SET {SUPERSEDED_BY} = :by, {SUPERSEDED_AT} = :at",
        ConditionExpression="attribute_exists(#k)",
        ExpressionAttributeNames={"#k": KEY_ATTRIBUTE},
        ExpressionAttributeValues={":by": {"S": by}, ":at": {"N": str(now)}},
    )


def clear_superseded(client: Any, table_name: str) -> None:
    """Make the table active again (a restore to it)."""
    client.update_item(
        TableName=table_name,
        Key=_metadata_key(),
        UpdateExpression=f"REMOVE {SUPERSEDED_BY}, {SUPERSEDED_AT}",
        ConditionExpression="attribute_exists(#k)",
        ExpressionAttributeNames={"#k": KEY_ATTRIBUTE},
    )


def set_generation(
    client: Any,
    table_name: str,
    generation_id: str,
    *,
    expected: str | None = None,
    owner: str | None = None,
    now: float | None = None,
) -> None:
    """Give a table a generation id; a restore brings back the one the ledger marks belong to.

    Conditional: the table must still hold ``expected`` (when given), and no live reset or restore
    mark but ``owner``'s may be on it, so a run that decided on an older view changes nothing.

    :raises MaintenanceError: when the table changed meanwhile or another reset's mark is live.
    """
    now = time.time() if now is None else now
    condition = (
        f"attribute_exists(#k) AND (attribute_not_exists({RESET_OWNER}) OR {RESET_EXPIRES_AT} < :now"
        + (f" OR {RESET_OWNER} = :owner)" if owner is not None else ")")
        + (" AND generation_id = :expected" if expected is not None else "")
    )
    values: dict[str, Any] = {":g": {"S": generation_id}, ":now": {"N": str(now)}}
    if owner is not None:
        values[":owner"] = {"S": owner}
    if expected is not None:
        values[":expected"] = {"S": expected}
    try:
        client.update_item(
            TableName=table_name,
            Key=_metadata_key(),
            UpdateExpression="SET generation_id = :g",
            ConditionExpression=condition,
            ExpressionAttributeNames={"#k": KEY_ATTRIBUTE},
            ExpressionAttributeValues=values,
        )
    except ClientError as err:
        if not _is_conditional_failure(err):
            raise
        raise MaintenanceError(
            f"lease table {table_name!r} changed while its generation was being set to {generation_id} "
            f"(expected {expected or 'any'}; a reset or restore may be working on it); nothing was changed"
        ) from err


# -- which application is active ------------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """Where a connector's progress lives now.

    :param configured: the application name in the connector file.
    :param active: the application name ingestions use: ``configured``, or what superseded it.
    :param chain: the tables read to get there, ``configured`` first.
    :param reset: a live reset mark on one of them, if a reset or restore is running.
    """

    configured: str
    active: str
    chain: tuple[str, ...]
    reset: ResetMark | None = None
    reset_table: str | None = None

    @property
    def superseded(self) -> bool:
        return self.active != self.configured


def marks_chain(client: Any, configured: str) -> Chain[TableMarks]:
    """The ``superseded_by`` chain from ``configured``, read from the metadata items (see :func:`walk_chain`)."""
    return walk_chain(configured, lambda name: read_marks(client, name), lambda marks: marks.superseded_by)


def resolve_application(client: Any, configured: str, *, now: float | None = None) -> Resolution:
    """Follow ``superseded_by`` from the configured table to the active one.

    A configured table that does not exist (yet) is active: the ingest DAG creates it.

    :raises MaintenanceError: when the chain leads to a missing table, loops or is too long.
    """
    now = time.time() if now is None else now
    chain = marks_chain(client, configured)
    if chain.end is ChainEnd.MISSING and len(chain.names) > 1:
        raise MaintenanceError(
            f"lease table {chain.names[-2]!r} was superseded by {chain.last!r}, which does not exist or has no "
            "metadata item; restore a checkpoint backup with the connector's restore DAG"
        )
    if chain.end in (ChainEnd.LOOP, ChainEnd.HOP_LIMIT):
        raise MaintenanceError(chain.describe())
    reset, reset_table = None, None
    for marks in chain.found:
        if (live := marks.live_reset(now)) is not None:
            reset, reset_table = live, marks.table_name
            break
    return Resolution(configured=configured, active=chain.last, chain=chain.names, reset=reset, reset_table=reset_table)


# -- which generation: Snowflake's record over DynamoDB's cache ------------------------------------


# Where shards with no ledger mark start in a generation adopted from the ledger (and in a recorded
# one whose row has no start): nothing of them was loaded in that generation, so reading from the
# oldest record loads nothing twice, while the connector's initial position resolved now (LATEST, or
# a later timestamp) would skip every record before the adopting run.
ADOPTED_START = StartPosition(InitialPosition.TRIM_HORIZON)


@dataclass(frozen=True)
class GenerationChoice:
    """The application name and generation an ingest run reads with, and what it must repair first.

    :param application_name: the lease table to read with.
    :param generation_id: the generation keying the ledger's marks.
    :param start: where shards with no lease start; None: the connector's initial position (never
        for an adopted generation: its recorded start, or TRIM_HORIZON).
    :param adopted: DynamoDB does not hold this (a lease table was lost, recreated, or lost its
        ``superseded_by``): the table must be given this generation (created if missing) and the
        configured table pointed at it before anything is read.
    :param record: a row to append to the generations table first (None: already recorded).
    :param why: one sentence for the log.
    """

    application_name: str
    generation_id: str
    start: StartPosition | None
    adopted: bool
    record: GenerationRecord | None
    why: str


def choose_generation(
    *,
    configured: str,
    active: str | None,
    table_generation: str | None,
    recorded: GenerationRecord | None,
    ledger_generations: Sequence[str],
    recorded_table_generation: str | None = None,
    connector_id: str | None = None,
    destination: str | None = None,
    start: StartPosition | None = None,
    stream_arn: str | None = None,
    stream_created_at: str | None = None,
) -> GenerationChoice:
    """Decide which generation an ingest run uses; no I/O.

    Snowflake is the truth: the newest row of the generations table (written by the first start,
    by every reset and restore before it acts, and by an adoption) names the application and
    generation. The lease tables in DynamoDB are a cache of it; where they disagree they were
    lost or recreated, and are rebuilt from the record, so the ledger's marks apply again and
    nothing is loaded twice. Before anything was recorded (the first run, or the first since the
    generations table exists), the DynamoDB state is recorded, unless its generation has no
    ledger marks while another of the same application has: then its table was recreated, and the
    ledger's newest generation is adopted.

    :param configured: the connector file's application name.
    :param active: the application DynamoDB resolves to; None when its chain is broken.
    :param table_generation: the generation of ``active``'s table; None when it has none.
    :param recorded: the connector's newest row in the generations table.
    :param ledger_generations: generations the ledger holds marks for under ``active`` (or
        ``configured``), newest first; used only while nothing is recorded.
    :param recorded_table_generation: the generation the recorded application's lease table holds
        now; None when it has none. While it is still the one a reset or restore replaced
        (``recorded.replaces``), that reset or restore stopped before it changed the table: its
        shard leases are the replaced generation's, and switching the table's generation under
        them would let a checkpoint behind that generation's ledger load its last batch again.
        The change is then withdrawn: the run reads with what DynamoDB holds, and records that.
    :param start: where a first start begins (recorded with it), or where shards with no lease
        start when a stopped reset or restore is withdrawn.
    :param destination: the table this connector loads; rows recording another are not its own.
    :raises IdentityError: when the connector's row records another destination (two connectors
        share the application name), or when the recorded generation read a stream that was since deleted and
        created again.
    :raises MaintenanceError: when nothing is recorded and DynamoDB has no usable table either.
    """
    if recorded is not None and recorded.destination and destination and recorded.destination != destination:
        raise IdentityError(
            f"application name {recorded.application_name!r} is recorded in Snowflake for connector "
            f"{recorded.connector_id or '(unknown)'!r}, which loads {recorded.destination}; connector "
            f"{connector_id or '(unknown)'!r} loads {destination}. One application name serves one destination "
            "(the ledger's marks are kept per application name): the connector that recorded it keeps it and "
            f"needs no change; give connector {connector_id or '(this one)'!r} an application_name of its own. "
            "Nothing was read"
        )
    if recorded is not None:
        if (active, table_generation) == (recorded.application_name, recorded.generation_id):
            return GenerationChoice(
                recorded.application_name, recorded.generation_id, recorded.start, False, None, "as recorded"
            )
        if recorded.stream_created_at and stream_created_at and recorded.stream_created_at != stream_created_at:
            raise IdentityError(
                f"stream {stream_arn or '(unknown)'} was deleted and created again: generation "
                f"{recorded.generation_id} of application {recorded.application_name!r} read the stream created at "
                f"{recorded.stream_created_at}, the stream now was created at {stream_created_at}. Trigger the "
                "connector's reset DAG (mode delete_table) to start reading the new stream. Nothing was read"
            )
        if recorded.replaces is not None and recorded_table_generation == recorded.replaces:
            return _withdrawn(
                recorded,
                configured=configured,
                active=active,
                table_generation=table_generation,
                connector_id=connector_id,
                start=start,
                stream_arn=stream_arn,
                stream_created_at=stream_created_at,
                destination=destination,
            )
        have = f"{active} generation {table_generation}" if active and table_generation else "no usable lease table"
        return GenerationChoice(
            recorded.application_name,
            recorded.generation_id,
            # Never the initial position resolved now (LATEST): records before this run would be skipped.
            recorded.start or ADOPTED_START,
            True,
            None,
            f"Snowflake records {recorded.application_name} generation {recorded.generation_id} "
            f"({recorded.reason.value}) for {configured}, DynamoDB has {have}",
        )
    application = active or configured
    if table_generation is None:
        raise MaintenanceError(
            f"lease table {application!r} has no metadata item and Snowflake records no generation for "
            f"{configured!r}; run the create_lease_table task first"
        )
    if ledger_generations and table_generation not in ledger_generations:
        adopted = ledger_generations[0]
        return GenerationChoice(
            application,
            adopted,
            ADOPTED_START,
            True,
            GenerationRecord(
                configured,
                application,
                adopted,
                GenerationReason.ADOPTED,
                ADOPTED_START,
                connector_id=connector_id,
                stream_arn=stream_arn,
                stream_created_at=stream_created_at,
                destination=destination,
            ),
            f"lease table {application} has generation {table_generation}, which the ledger has no marks for, "
            f"while it holds marks of generation {adopted}",
        )
    return GenerationChoice(
        application,
        table_generation,
        start,
        False,
        GenerationRecord(
            configured,
            application,
            table_generation,
            GenerationReason.FIRST_START,
            start,
            connector_id=connector_id,
            stream_arn=stream_arn,
            stream_created_at=stream_created_at,
            destination=destination,
        ),
        "first recorded",
    )


@dataclass(frozen=True)
class Adoption:
    """What an ingest run does in DynamoDB to hold the generation Snowflake records (see :func:`plan_adoption`).

    :param create: the lease table is missing: create it with the generation.
    :param catch_up: the generation the table's shard leases belong to now, when it is another:
        every lease is first held and moved to that generation's ledger marks, so that no
        checkpoint behind what that generation committed survives the switch.
    :param set_generation: give the existing table the adopted generation (conditional on it
        still holding ``current_generation``).
    :param clear_superseded: the table itself points elsewhere: make it active again.
    :param point: tables to point at it (``superseded_by``), the configured one last.
    """

    create: bool
    catch_up: str | None
    set_generation: bool
    clear_superseded: bool
    point: tuple[str, ...]
    current_generation: str | None = None


def plan_adoption(
    choice: GenerationChoice,
    *,
    configured: str,
    table: TableMarks | None,
    has_leases: bool,
    chain: Sequence[str],
    existing: Iterable[str],
) -> Adoption:
    """Decide how an adopted generation is put into DynamoDB; no I/O.

    :param table: the marks of ``choice.application_name``'s table; None when it is missing.
    :param has_leases: that table holds shard leases.
    :param chain: the tables resolution read, configured first.
    :param existing: which of those (and ``configured``) have a metadata item.
    """
    name = choice.application_name
    switch = table is not None and table.generation_id != choice.generation_id
    present = set(existing)
    return Adoption(
        create=table is None,
        catch_up=table.generation_id if switch and has_leases and table is not None else None,
        set_generation=switch,
        clear_superseded=table is not None and table.superseded_by is not None,
        point=tuple(other for other in dict.fromkeys((*chain, configured)) if other != name and other in present),
        current_generation=table.generation_id if table is not None else None,
    )


def _withdrawn(
    recorded: GenerationRecord,
    *,
    configured: str,
    active: str | None,
    table_generation: str | None,
    connector_id: str | None,
    start: StartPosition | None,
    stream_arn: str | None,
    stream_created_at: str | None,
    destination: str | None,
) -> GenerationChoice:
    """A reset or restore recorded in Snowflake that stopped before it changed its lease table."""
    stopped = (
        f"{recorded.reason.value} to {recorded.application_name} generation {recorded.generation_id} was recorded, "
        f"but lease table {recorded.application_name} still holds generation {recorded.replaces}: it stopped before "
        "it changed DynamoDB"
    )
    if active is None or table_generation is None:
        raise MaintenanceError(
            f"{stopped}, and the connector has no usable lease table to go on with; trigger the reset or restore again"
        )
    return GenerationChoice(
        active,
        table_generation,
        start,
        False,
        GenerationRecord(
            configured,
            active,
            table_generation,
            GenerationReason.RESET_WITHDRAWN,
            start,
            connector_id=connector_id,
            stream_arn=stream_arn,
            stream_created_at=stream_created_at,
            destination=destination,
        ),
        f"{stopped}; withdrawn, {active} generation {table_generation} goes on (trigger it again to carry it out)",
    )


# -- holding every lease --------------------------------------------------------------------------


def hold_leases(
    table: LeaseTable,
    owner: str,
    *,
    hold_seconds: float,
    timeout_seconds: float,
    poll_seconds: float = 2.0,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Lease]:
    """Take every lease of ``table`` as ``owner``, waiting for live ones to be released or expire.

    Leases are taken with the same conditional write as an ingestion's, so no batch can hold a
    shard or move a checkpoint while the reset works; they expire after ``hold_seconds`` if the
    reset dies. Returns the held leases by shard id.

    :raises MaintenanceError: when some lease is still held by another worker after ``timeout_seconds``.
    """
    deadline = clock() + timeout_seconds
    held: dict[str, Lease] = {}
    while True:
        now = clock()
        leases = table.leases()
        waiting: list[Lease] = []
        for shard_id, lease in leases.items():
            if lease.lease_owner == owner and lease.is_held(now):
                held[shard_id] = lease
                continue
            if lease.is_held(now):
                waiting.append(lease)
                continue
            taken = table.take(lease, owner, hold_seconds, now=now)
            if taken is None:
                waiting.append(lease)  # changed between scan and take: look again
            else:
                held[shard_id] = taken
        for gone in set(held) - set(leases):
            del held[gone]
        if not waiting:
            # A batch that started before the reset mark may have created leases meanwhile.
            if set(table.leases()) <= set(held):
                return held
            continue
        if now >= deadline:
            owners = ", ".join(sorted(f"{lease.shard_id} by {lease.lease_owner}" for lease in waiting))
            raise MaintenanceError(
                f"leases of {table.table_name!r} still held after {timeout_seconds:.0f}s: {owners}. A batch is "
                "running; wait for it to finish (or for its leases to expire) and trigger again"
            )
        sleep(max(0.0, min(poll_seconds, deadline - now)))


def release_leases(table: LeaseTable, held: Iterable[Lease]) -> None:
    """Give back leases taken by :func:`hold_leases` (conditional: one that changed is left alone)."""
    for lease in held:
        table.release(lease)


# -- backups --------------------------------------------------------------------------------------


def lease_to_dict(lease: Lease) -> dict[str, Any]:
    """A lease's progress as plain JSON (who held it is not kept: a restored lease starts free)."""
    return {
        "shard_id": lease.shard_id,
        "checkpoint": lease.checkpoint.to_dict() if lease.checkpoint else None,
        "state": lease.state,
        "start_position": lease.start.to_dict(),
        "parent_shard_ids": list(lease.parent_shard_ids),
        "child_shard_ids": list(lease.child_shard_ids),
        "hash_key_range": list(lease.hash_key_range) if lease.hash_key_range else None,
        "checkpointed_at": lease.checkpointed_at,
    }


def lease_from_dict(data: Mapping[str, Any]) -> Lease:
    hash_range = data.get("hash_key_range")
    return Lease(
        shard_id=str(data["shard_id"]),
        lease_counter=0,
        start=StartPosition.from_dict(data["start_position"]),
        parent_shard_ids=tuple(data.get("parent_shard_ids") or ()),
        checkpoint=Checkpoint.from_dict(data["checkpoint"]) if data.get("checkpoint") else None,
        state=str(data.get("state") or STATE_ACTIVE),
        checkpointed_at=float(data.get("checkpointed_at") or 0.0),
        child_shard_ids=tuple(sorted(data.get("child_shard_ids") or ())),
        hash_key_range=(str(hash_range[0]), str(hash_range[1])) if hash_range else None,
    )


@dataclass(frozen=True)
class CheckpointBackup:
    """Every lease and checkpoint of one lease table at one moment, with its generation id and owner.

    Resets, restores and clean-up write the same document (:func:`snapshot`), so a restore can check
    whose progress it holds before it writes anything (:func:`check_backup_owner`).

    :param reason: why it was taken (``reset-new_application_name``, ``before-restore``, ``cleanup``).
    :param connector_id: the connector whose table it is; None when nothing recorded it (a table or
        backup of an earlier version).
    :param destination: ``DATABASE.SCHEMA.TABLE`` the connector loads; None when not recorded.
    :param version: the document version it was read from (1: before the owner was recorded).
    """

    application_name: str
    stream_name: str
    generation_id: str
    created_at: datetime
    reason: str
    leases: tuple[Lease, ...] = ()
    connector_id: str | None = None
    superseded_by: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    destination: str | None = None
    stream_arn: str | None = None
    stream_created_at: str | None = None
    version: int = BACKUP_VERSION

    @property
    def file_name(self) -> str:
        """``<application>/<UTC time>-<reason>.json``: sorts by time per application."""
        return f"{self.application_name}/{self.created_at.astimezone(UTC):%Y%m%dT%H%M%S%fZ}-{self.reason}.json"

    def checkpoints(self) -> dict[str, dict[str, Any] | None]:
        return {lease.shard_id: lease.checkpoint.to_dict() if lease.checkpoint else None for lease in self.leases}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": BACKUP_FORMAT,
            "version": BACKUP_VERSION,
            "connector_id": self.connector_id,
            "application_name": self.application_name,
            "stream_name": self.stream_name,
            "stream_arn": self.stream_arn,
            "stream_created_at": self.stream_created_at,
            "destination": self.destination,
            "generation_id": self.generation_id,
            "superseded_by": self.superseded_by,
            "created_at": self.created_at.isoformat(),
            "reason": self.reason,
            "leases": [lease_to_dict(lease) for lease in sorted(self.leases, key=lambda lease: lease.shard_id)],
            **({"extra": dict(self.extra)} if self.extra else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckpointBackup:
        """Parse a backup document; :class:`MaintenanceError` naming what is wrong with it."""
        if not isinstance(data, Mapping) or data.get("format") != BACKUP_FORMAT:
            raise MaintenanceError(f"not a checkpoint backup: expected format {BACKUP_FORMAT!r}")
        version = data.get("version")
        if version not in READABLE_BACKUP_VERSIONS:
            raise MaintenanceError(
                f"checkpoint backup version {version!r} is not one of {', '.join(map(str, READABLE_BACKUP_VERSIONS))}"
            )
        try:
            created = datetime.fromisoformat(str(data["created_at"]))
            return cls(
                application_name=str(data["application_name"]),
                stream_name=str(data["stream_name"]),
                generation_id=str(data["generation_id"]),
                created_at=created if created.tzinfo else created.replace(tzinfo=UTC),
                reason=str(data["reason"]),
                leases=tuple(lease_from_dict(lease) for lease in data["leases"]),
                connector_id=optional_text(data.get("connector_id")),
                superseded_by=data.get("superseded_by"),
                extra=dict(data.get("extra") or {}),
                destination=optional_text(data.get("destination")),
                stream_arn=optional_text(data.get("stream_arn")),
                stream_created_at=optional_text(data.get("stream_created_at")),
                version=int(version),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise MaintenanceError(f"checkpoint backup is incomplete or malformed: {err!r}") from err

    @classmethod
    def from_json(cls, text: str) -> CheckpointBackup:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise MaintenanceError(f"checkpoint backup is not JSON: {err}") from err
        return cls.from_dict(data)


def optional_text(value: Any) -> str | None:
    """None for an empty or missing value (a template renders a missing Param as '' or 'None')."""
    if value is None:
        return None
    text = str(value).strip()
    return text if text and text != "None" else None


def snapshot(
    table: LeaseTable,
    *,
    reason: str,
    connector_id: str | None = None,
    destination: str | None = None,
    now: datetime | None = None,
) -> CheckpointBackup:
    """A backup of every lease in ``table`` (strongly consistent reads), with whose progress it is.

    The one way every backup is made (reset, restore, clean-up). The connector and destination are
    the caller's when it knows them (a reset or restore of its own connector), otherwise what the
    table's metadata item records; None when neither says.
    """
    marks = read_marks(table.client, table.table_name)
    if marks is None:
        raise MaintenanceError(f"lease table {table.table_name!r} does not exist or has no metadata item")
    return CheckpointBackup(
        application_name=marks.application_name,
        stream_name=marks.stream_name,
        generation_id=marks.generation_id,
        created_at=now or datetime.now(UTC),
        reason=reason,
        leases=tuple(sorted(table.leases().values(), key=lambda lease: lease.shard_id)),
        connector_id=connector_id or marks.connector_id,
        superseded_by=marks.superseded_by,
        destination=destination or marks.destination,
        stream_arn=marks.stream_arn,
        stream_created_at=marks.stream_created_at,
    )


# -- whose backup ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestoreTarget:
    """The connector a restore runs for, and what DynamoDB says of the backup's table.

    :param applications: application names that are provably this connector's: the connector
        file's, every table on its chain of ``superseded_by`` (a missing last hop included), and
        the backup's table when it points into that chain or names this connector.
    :param destination: ``DATABASE.SCHEMA.TABLE`` of the connector; None when not known (not checked).
    :param table_connector_id: the connector the backup's lease table names now, if it exists and says.
    :param stream_arn: the ARN of the connector's stream now; None when not known (not checked).
    :param table_exists: the backup's lease table exists now (a restore would write into it).
    :param stream_created_at: when the connector's stream was created (DescribeStreamSummary
        ``StreamCreationTimestamp``); None when not known (not checked).
    """

    connector_id: str
    stream_name: str
    applications: tuple[str, ...]
    destination: str | None = None
    table_connector_id: str | None = None
    stream_arn: str | None = None
    table_exists: bool = False
    stream_created_at: str | None = None


def restore_target(
    *,
    connector_id: str,
    stream_name: str,
    chain: Chain[TableMarks],
    backup_table: TableMarks | None,
    destination: str | None = None,
    stream_arn: str | None = None,
    stream_created_at: str | None = None,
) -> RestoreTarget:
    """Which lease tables are provably this connector's, from what DynamoDB says.

    :param chain: the connector's ``superseded_by`` chain from its configured table
        (:func:`marks_chain`); every name on it counts, a missing last hop included.
    :param backup_table: the metadata item of the backup's lease table now; None when it does not exist.
    """
    applications = list(chain.names)
    if backup_table is not None and backup_table.table_name not in applications:
        # An earlier name of this connector (superseded into its chain), or a table naming it.
        if backup_table.superseded_by in applications or backup_table.connector_id == connector_id:
            applications.append(backup_table.table_name)
    return RestoreTarget(
        connector_id=connector_id,
        stream_name=stream_name,
        applications=tuple(applications),
        destination=destination,
        table_connector_id=backup_table.connector_id if backup_table is not None else None,
        stream_arn=stream_arn,
        table_exists=backup_table is not None,
        stream_created_at=stream_created_at,
    )


def _instant(value: str | None) -> float | None:
    """Epoch seconds of a recorded time (ISO 8601 or epoch seconds); None when not recorded or unreadable."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def same_destination(left: str, right: str) -> bool:
    """Destinations are unquoted identifiers, resolved upper-case as Snowflake does."""
    return left.strip().upper() == right.strip().upper()


def check_backup_owner(backup: CheckpointBackup, target: RestoreTarget) -> None:
    """Refuse a backup that is not of this connector, naming the backup's and the connector's values.

    The backup's stream (and its ARN, when both sides know it: a stream deleted and created again
    under the same name is another stream), and its connector and destination where it records
    them, must be this connector's; so must the connector its lease table names now, if it exists
    and names one. A backup that records this connector must still be of a table on the
    connector's chain, one that names this connector, or one that no longer exists. A backup
    that does not record its connector (a version 1 backup, or one of a table whose metadata
    item predates it) is accepted only when its application name is provably this connector's (see
    :class:`RestoreTarget`): restoring it into another connector's table would take that table over
    and rewind it.

    :raises MaintenanceError: naming each mismatch, or what is missing and how to proceed.
    """
    mismatches = []
    if backup.stream_name != target.stream_name:
        mismatches.append(f"stream {backup.stream_name!r} in the backup, {target.stream_name!r} for the connector")
    elif backup.stream_arn is not None and target.stream_arn is not None and backup.stream_arn != target.stream_arn:
        # Same name, another stream: deleted and created again, its sequence numbers mean nothing now.
        mismatches.append(
            f"stream ARN {backup.stream_arn} in the backup, {target.stream_arn} for the connector (the stream was "
            "deleted and created again since)"
        )
    elif (
        (created := _instant(backup.stream_created_at)) is not None
        and (now_created := _instant(target.stream_created_at)) is not None
        and abs(created - now_created) > 1
    ):
        # A stream deleted and created again keeps its name and ARN; only its creation time tells.
        mismatches.append(
            f"stream created at {backup.stream_created_at} in the backup, {target.stream_created_at} for the "
            "connector (the stream was deleted and created again since)"
        )
    if backup.connector_id is not None and backup.connector_id != target.connector_id:
        mismatches.append(f"connector {backup.connector_id!r} in the backup, {target.connector_id!r} for the connector")
    if (
        backup.destination is not None
        and target.destination is not None
        and not same_destination(backup.destination, target.destination)
    ):
        mismatches.append(f"destination {backup.destination} in the backup, {target.destination} for the connector")
    if target.table_connector_id is not None and target.table_connector_id != target.connector_id:
        mismatches.append(
            f"lease table {backup.application_name!r} now belongs to connector {target.table_connector_id!r}, "
            f"not {target.connector_id!r}"
        )
    if mismatches:
        raise MaintenanceError(
            f"the backup of lease table {backup.application_name!r} is not one of connector {target.connector_id}: "
            f"{'; '.join(mismatches)}. Nothing was changed; restore it with the restore DAG of the connector it "
            "belongs to"
        )
    if backup.application_name in target.applications:
        return
    known = ", ".join(target.applications)
    if backup.connector_id is not None and target.table_exists:
        raise MaintenanceError(
            f"the backup of lease table {backup.application_name!r} records connector {backup.connector_id}, but that "
            f"table exists, is not on connector {target.connector_id}'s chain ({known}) and does not name it as its "
            "connector: restoring would take it over. Nothing was changed"
        )
    if backup.connector_id is None:
        fill = ", ".join(
            f'"{name}": "{value}"'
            for name, value, recorded in (
                ("connector_id", target.connector_id, backup.connector_id),
                ("destination", target.destination, backup.destination),
            )
            if recorded is None and value is not None
        )
        raise MaintenanceError(
            f"the backup of lease table {backup.application_name!r} does not record its connector "
            f"(version {backup.version}, or a table that did not record it), and {backup.application_name!r} is not "
            f"one of connector {target.connector_id}'s lease tables ({known}). Nothing was changed. If you know it "
            f"is this connector's, add {fill} to the backup file and trigger again"
        )


# -- restore --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestoreResult:
    written: tuple[str, ...]
    removed: tuple[str, ...]


def restore_leases(
    table: LeaseTable, backup: CheckpointBackup, owner: str, *, now: float | None = None
) -> RestoreResult:
    """Make the shard leases of ``table`` exactly those of ``backup``, free and at their checkpoints.

    Every lease already in the table must be held by ``owner`` (see :func:`hold_leases`); each
    write is conditional on that, so a worker that took a lease meanwhile stops the restore.
    Leases the backup does not have are removed. The generation id is not changed here.

    :raises MaintenanceError: when a lease is held by someone else.
    """
    now = time.time() if now is None else now
    present = table.leases()
    foreign = sorted(
        f"{lease.shard_id} by {lease.lease_owner}"
        for lease in present.values()
        if lease.lease_owner != owner and lease.is_held(now)
    )
    if foreign:
        raise MaintenanceError(
            f"cannot restore {table.table_name!r}: leases held by other workers: {', '.join(foreign)}"
        )
    backed_up = {lease.shard_id for lease in backup.leases}
    removed = []
    for shard_id in sorted(set(present) - backed_up):
        _write_if_free_or_ours(table, shard_id, owner, now)
        removed.append(shard_id)
    written = []
    for lease in sorted(backup.leases, key=lambda lease: lease.shard_id):
        existing = present.get(lease.shard_id)
        # A higher counter than any copy a stale worker holds: its conditional writes fail.
        counter = existing.lease_counter + 1 if existing else 0
        item = lease_to_item(replace(lease, lease_counter=counter, lease_owner=None, lease_expires_at=0.0))
        item["checkpointed_at"] = {"N": str(lease.checkpointed_at)}
        _write_if_free_or_ours(table, lease.shard_id, owner, now, item=item)
        written.append(lease.shard_id)
    return RestoreResult(written=tuple(written), removed=tuple(removed))


def _write_if_free_or_ours(
    table: LeaseTable, shard_id: str, owner: str, now: float, *, item: dict[str, Any] | None = None
) -> None:
    """Put ``item`` (or delete the lease when None) unless a live worker other than ``owner`` holds it."""
    kwargs: dict[str, Any] = {
        "TableName": table.table_name,
        "ConditionExpression": "attribute_not_exists(#k) OR lease_owner = :owner OR lease_expires_at < :now",
        "ExpressionAttributeNames": {"#k": KEY_ATTRIBUTE},
        "ExpressionAttributeValues": {":owner": {"S": owner}, ":now": {"N": str(now)}},
    }
    try:
        if item is None:
            table.client.delete_item(Key={KEY_ATTRIBUTE: {"S": shard_id}}, **kwargs)
        else:
            table.client.put_item(Item=item, **kwargs)
    except ClientError as err:
        if _is_conditional_failure(err):
            raise MaintenanceError(
                f"lease of {shard_id} in {table.table_name!r} was taken by another worker during the restore; "
                "the restore stopped (trigger it again once no batch runs)"
            ) from err
        raise


# -- tables of an account -------------------------------------------------------------------------


def list_table_names(client: Any) -> list[str]:
    """Every DynamoDB table name in the client's region and account."""
    names: list[str] = []
    kwargs: dict[str, Any] = {}
    while True:
        page = client.list_tables(**kwargs)
        names.extend(page.get("TableNames", []))
        if "LastEvaluatedTableName" not in page:
            return names
        kwargs["ExclusiveStartTableName"] = page["LastEvaluatedTableName"]


def table_tags(client: Any, table_arn: str) -> dict[str, str]:
    tags: dict[str, str] = {}
    kwargs: dict[str, Any] = {"ResourceArn": table_arn}
    while True:
        page = client.list_tags_of_resource(**kwargs)
        tags.update({t["Key"]: t["Value"] for t in page.get("Tags", [])})
        if not page.get("NextToken"):
            return tags
        kwargs["NextToken"] = page["NextToken"]


def delete_table(client: Any, table_name: str, *, wait_seconds: float = 300) -> None:
    """Delete a table and wait until it is gone (a table already gone is fine)."""
    try:
        client.delete_table(TableName=table_name)
    except ClientError as err:
        if _error_code(err) != "ResourceNotFoundException":
            raise
    client.get_waiter("table_not_exists").wait(
        TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": max(1, int(wait_seconds))}
    )


def last_activity(marks: TableMarks, leases: Iterable[Lease], heartbeats: Iterable[float]) -> float:
    """The latest of: creation, supersession, any checkpoint move, any worker heartbeat (epoch seconds)."""
    moments = [max((lease.checkpointed_at for lease in leases), default=0.0), max(heartbeats, default=0.0)]
    if marks.superseded_at is not None:
        moments.append(marks.superseded_at)
    if marks.created_at:
        try:
            created = datetime.fromisoformat(marks.created_at)
        except ValueError:
            pass  # a hand-edited value: the other moments still count
        else:
            moments.append((created if created.tzinfo else created.replace(tzinfo=UTC)).timestamp())
    return max(moments)
