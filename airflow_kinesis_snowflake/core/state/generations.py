"""Which generation an ingest run reads with, and how an adopted one is put into DynamoDB; no I/O.

Snowflake's generations table is the truth, the lease tables in DynamoDB a cache of it:
:func:`choose_generation` decides from both what a run uses and what it must record, and
:func:`plan_adoption` what it must repair in DynamoDB before anything is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from airflow_kinesis_snowflake.core.model import GenerationReason, GenerationRecord, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.state.errors import IdentityError, MaintenanceError
from airflow_kinesis_snowflake.core.state.metadata import TableMarks, second_destination

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
            second_destination(
                recorded.application_name,
                recorded_connector=recorded.connector_id,
                recorded_destination=recorded.destination,
                connector=connector_id,
                destination=destination,
                held="is recorded in Snowflake for",
                why="the ledger's marks are kept per application name",
            )
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
