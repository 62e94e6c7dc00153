"""Checkpoint backups of a lease table: taking them, whose they are, and putting them back.

Before anything destructive, every checkpoint of a table is written to a
:class:`CheckpointBackup`, a JSON document that :func:`restore_leases` puts back;
:func:`check_backup_owner` refuses a backup that is not of the connector restoring it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from airflow_kinesis_snowflake.core.model import Checkpoint, StartPosition
from airflow_kinesis_snowflake.core.state.chain import Chain
from airflow_kinesis_snowflake.core.state.dynamodb import ConditionFailed
from airflow_kinesis_snowflake.core.state.errors import MaintenanceError
from airflow_kinesis_snowflake.core.state.leases import STATE_ACTIVE, Lease, LeaseTable, lease_to_item
from airflow_kinesis_snowflake.core.state.metadata import TableMarks, read_marks

BACKUP_FORMAT = "airflow-kinesis-snowflake/checkpoints"
# 2: the connector, destination and stream ARN are recorded (1 had the connector only when a reset wrote it).
BACKUP_VERSION = 2
READABLE_BACKUP_VERSIONS = (1, 2)


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
    condition = "attribute_not_exists(#k) OR lease_owner = :owner OR lease_expires_at < :now"
    values = {":owner": {"S": owner}, ":now": {"N": str(now)}}
    try:
        if item is None:
            table.items.delete(shard_id, condition=condition, values=values)
        else:
            table.items.put(item, condition=condition, values=values)
    except ConditionFailed as err:
        raise MaintenanceError(
            f"lease of {shard_id} in {table.table_name!r} was taken by another worker during the restore; "
            "the restore stopped (trigger it again once no batch runs)"
        ) from err
