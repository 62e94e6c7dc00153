"""Whether a connector has records to load: the cheap check that lets a run with nothing new skip Spark.

For each shard lease that has not reached SHARD_END, one ``GetShardIterator`` just after the
checkpoint (or at the lease's start position when it has none) and one ``GetRecords`` with
``Limit=1``; the first shard that returns a record answers. The lease table is read as a batch
reads it: the configured application name is followed through ``superseded_by`` to the active
table (:func:`~.state.marks.resolve_application`).

Whenever the check cannot tell, it answers that records *may* be new, so the batch runs and
decides (or fails with the cause) itself: a lease table that does not exist yet (first run) or has
no lease, a broken ``superseded_by`` chain, any failed call (a checkpoint Kinesis no longer
accepts, a denied action). A shard that ended (closed and
read to its end) whose lease is not yet at SHARD_END counts as new too: only a batch marks it, and
only then are its children read.

:func:`decide` is the decision over what the reads returned; :func:`check_new_records` does the reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.aws import error_code
from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition
from airflow_kinesis_snowflake.core.sources.records import deaggregate
from airflow_kinesis_snowflake.core.sources.shards import list_shards
from airflow_kinesis_snowflake.core.state.dynamodb import TableMissing
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable, lease_keys
from airflow_kinesis_snowflake.core.state.marks import resolve_application


def _code(err: ClientError) -> str:
    return error_code(err) or type(err).__name__


class KinesisReads(Protocol):
    """The Kinesis calls the check makes (a boto3 Kinesis client has them)."""

    def list_shards(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_records(self, **kwargs: Any) -> dict[str, Any]: ...


class Reason(StrEnum):
    """Why the check answered as it did."""

    NEW_RECORD = "new_record"  # a shard holds a record beyond its checkpoint
    SHARD_ENDED = "shard_ended"  # a shard was read to its end; a batch must mark it and start its children
    UNLEASED_SHARD = "unleased_shard"  # an open shard has no lease yet (a reshard's child): a batch syncs it
    BEHIND = "behind"  # the page was empty but Kinesis reports the read behind the tip: records lie further on
    NO_LEASE_TABLE = "no_lease_table"  # first run: the ingest creates the table
    NO_LEASES = "no_leases"  # the table has no shard lease yet: no batch has planned
    UNCERTAIN = "uncertain"  # a read failed in a way only a batch can sort out
    NOTHING_NEW = "nothing_new"  # every unfinished shard is read up to its checkpoint
    ARRIVED_LATER = "arrived_later"  # the first new records arrived after ``arrived_before``


@dataclass(frozen=True)
class ShardLook:
    """What one shard's check saw.

    :param shard_id: the shard.
    :param records: the records ``GetRecords`` returned (raw API records).
    :param ended: no next iterator: the shard is closed and read to its end.
    :param error: the error code of a failed call, if one failed.
    :param behind: no record came back, yet Kinesis reports the read behind the shard's tip.
    """

    shard_id: str
    records: tuple[dict[str, Any], ...] = ()
    ended: bool = False
    error: str | None = None
    behind: bool = False


@dataclass(frozen=True)
class Freshness:
    """The answer: may a batch find records to load?

    :param new: True when a batch should run.
    :param reason: why.
    :param application_name: the active application name the leases were read from.
    :param shard_id: the shard that answered, when one did.
    :param shards_checked: how many shards were read.
    :param detail: the error code when a read failed (reason ``uncertain``).
    :param positions: every lease's checkpoint when the leases were read (shard id, position), so
        a watcher can tell whether a batch ran since it last answered.
    """

    new: bool
    reason: Reason
    application_name: str
    shard_id: str | None = None
    shards_checked: int = 0
    detail: str | None = None
    positions: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        where = f" (shard {self.shard_id})" if self.shard_id else ""
        detail = f" [{self.detail}]" if self.detail else ""
        return f"{self.application_name}: {self.reason.value}{where}{detail}, {self.shards_checked} shard(s) read"

    def to_dict(self) -> dict[str, Any]:
        return {
            "new": self.new,
            "reason": self.reason.value,
            "application_name": self.application_name,
            "shard_id": self.shard_id,
            "shards_checked": self.shards_checked,
            "detail": self.detail,
        }


def positions(leases: Mapping[str, Lease]) -> tuple[tuple[str, str], ...]:
    """Each lease's checkpoint as ``(shard id, "sequence/sub-sequence")`` (``""``: none; ``"end"``: ended)."""

    def where(lease: Lease) -> str:
        if lease.shard_ended:
            return "end"
        checkpoint = lease.checkpoint
        return f"{checkpoint.sequence_number}/{checkpoint.sub_sequence_number}" if checkpoint else ""

    return tuple(sorted((shard_id, where(lease)) for shard_id, lease in leases.items()))


def unfinished(leases: Mapping[str, Lease]) -> list[Lease]:
    """The leases to look at: not at SHARD_END, the longest-unmoved checkpoint first."""
    return sorted((lease for lease in leases.values() if not lease.shard_ended), key=lambda x: x.checkpointed_at)


def iterator_request(stream_name: str, lease: Lease) -> dict[str, Any]:
    """``GetShardIterator`` arguments for the first record a batch would read from ``lease``.

    At the checkpoint's record, as the batch's reader resumes: a checkpoint may be any user record of
    a KPL aggregate (the first too, sub-sequence 0), whose later user records share its sequence
    number; what the checkpoint covers is left out when the page is read (:func:`decide`).
    """
    args: dict[str, Any] = {"StreamName": stream_name, "ShardId": lease.shard_id}
    if lease.checkpoint is not None:
        args["ShardIteratorType"] = "AT_SEQUENCE_NUMBER"
        args["StartingSequenceNumber"] = lease.checkpoint.sequence_number
    elif lease.start.position is InitialPosition.AT_TIMESTAMP and lease.start.timestamp is not None:
        args["ShardIteratorType"] = "AT_TIMESTAMP"
        args["Timestamp"] = lease.start.timestamp
    else:
        args["ShardIteratorType"] = "TRIM_HORIZON"
    return args


def _beyond(records: Iterable[dict[str, Any]], lease: Lease, shard_id: str) -> datetime | None:
    """Arrival of the first user record beyond the lease's checkpoint among ``records``; None: none is."""
    checkpoint: Checkpoint | None = lease.checkpoint
    for record in deaggregate(shard_id, records):
        if checkpoint is None or (int(record.sequence_number), record.sub_sequence_number) > checkpoint.key:
            return record.approximate_arrival
    return None


def decide(
    leases: Mapping[str, Lease], looks: Iterable[ShardLook], *, application_name: str, arrived_before: datetime | None
) -> Freshness:
    """Decide from the shards looked at, in order; the first that answers ends the decision.

    :param leases: the leases looked at, by shard id.
    :param looks: what each shard's check saw.
    :param application_name: the active application name (reported).
    :param arrived_before: count only records that arrived at or before this time (a batch
        started then reads no later record); None: any record.
    """
    checked, later = 0, None
    for look in looks:
        checked += 1
        if look.error is not None:
            return Freshness(True, Reason.UNCERTAIN, application_name, look.shard_id, checked, look.error)
        arrival = _beyond(look.records, leases[look.shard_id], look.shard_id)
        if arrival is not None:
            if arrived_before is None or arrival <= arrived_before:
                return Freshness(True, Reason.NEW_RECORD, application_name, look.shard_id, checked)
            later = later or look.shard_id
        elif look.ended:
            return Freshness(True, Reason.SHARD_ENDED, application_name, look.shard_id, checked)
        elif look.behind:
            return Freshness(True, Reason.BEHIND, application_name, look.shard_id, checked)
    if later is not None:
        return Freshness(False, Reason.ARRIVED_LATER, application_name, later, checked)
    return Freshness(False, Reason.NOTHING_NEW, application_name, None, checked)


def look_at_shard(kinesis: KinesisReads, stream_name: str, lease: Lease) -> ShardLook:
    """One ``GetShardIterator`` and one ``GetRecords`` (``Limit=1``; 2 at a checkpoint, whose record comes first)."""
    request = iterator_request(stream_name, lease)
    try:
        iterator = kinesis.get_shard_iterator(**request)["ShardIterator"]
        limit = 2 if request["ShardIteratorType"] == "AT_SEQUENCE_NUMBER" else 1
        page = kinesis.get_records(ShardIterator=iterator, Limit=limit)
    except ClientError as err:
        return ShardLook(lease.shard_id, error=_code(err))
    records = tuple(page.get("Records", ()))
    # An empty page does not prove an empty shard: GetRecords may need several calls to reach records
    # far from the iterator, and says so with MillisBehindLatest.
    behind = not records and int(page.get("MillisBehindLatest") or 0) > 0
    return ShardLook(
        lease.shard_id, records, ended=not records and page.get("NextShardIterator") is None, behind=behind
    )


def check_new_records(
    dynamodb: Any,
    kinesis: KinesisReads,
    *,
    stream_name: str,
    application_name: str,
    arrived_before: datetime | None = None,
) -> Freshness:
    """Whether any shard of the connector has records beyond its checkpoint.

    :param dynamodb: a boto3 DynamoDB client (the lease table is only read).
    :param kinesis: the stream's client.
    :param stream_name: the Kinesis data stream.
    :param application_name: the configured application name (connector file).
    :param arrived_before: see :func:`decide`.
    """
    if arrived_before is not None and arrived_before.tzinfo is None:
        arrived_before = arrived_before.replace(tzinfo=UTC)
    try:
        resolution = resolve_application(dynamodb, application_name)
        active = resolution.active
        if resolution.metadata is None:
            return Freshness(True, Reason.NO_LEASE_TABLE, active)
        shards = list_shards(kinesis, stream_name)
        # By key, for the listed shards: the cost does not grow with the table's history.
        leases = LeaseTable(dynamodb, application_name := active).leases_of(lease_keys(shards))
    except TableMissing:
        return Freshness(True, Reason.NO_LEASE_TABLE, application_name)
    except MaintenanceError as err:
        return Freshness(True, Reason.UNCERTAIN, application_name, detail=str(err))
    except ClientError as err:  # denied, throttled: the batch reads the same table and reports it
        return Freshness(True, Reason.UNCERTAIN, application_name, detail=_code(err))
    if not leases:
        return Freshness(True, Reason.NO_LEASES, active)
    unleased = [shard.shard_id for shard in shards if not shard.is_closed and shard.shard_id not in leases]
    if unleased:  # a reshard's child no batch has synced yet: its records are not looked at otherwise
        return Freshness(True, Reason.UNLEASED_SHARD, active, unleased[0], 0, positions=positions(leases))
    looks = (look_at_shard(kinesis, stream_name, lease) for lease in unfinished(leases))
    answer = decide(leases, looks, application_name=active, arrived_before=arrived_before)
    return replace(answer, positions=positions(leases))
