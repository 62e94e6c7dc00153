"""Migrate a legacy KCL lease table into this provider's lease table, once.

A Kinesis Client Library (KCL 1.x, 2.x or 3.x) application keeps its leases in a DynamoDB table
named after the application, keyed by ``leaseKey``. Moving such an application to this provider
under the same application name keeps its progress: the KCL checkpoints become this provider's
checkpoints, in a table of this provider's schema with the same name.

The table name cannot be reused while the KCL table exists, so the migration goes through a
temporary table ``<application name>_migration``, the way Snowflake's Openflow connector does:

1. copy every KCL item verbatim into the temporary table and verify the copy item by item
   against the original; only then write a marker item that records the verified count;
2. delete the original table (only when the marker is there and the copy still matches);
3. create the table in this provider's schema (tags and metadata item);
4. write the translated leases, each with a conditional put;
5. delete the temporary table (only once every translated lease is in the new table).

Each step can be interrupted. The state is read back from which tables exist and what they hold
(:func:`migration_state`), and :func:`migrate_legacy_table` continues from there. Checkpoints are
never in only one unverified place: the original goes only after a verified copy exists, and the
copy goes only after the new table holds every lease.

Stop every KCL worker before migrating. A worker that is still running renews its leases, which
changes the original table and makes the verification fail, so the original is kept.

How KCL items translate (see :func:`translate_lease`):

* ``leaseKey`` -> ``lease_key``, the shard id. A multi-stream key
  (``account:stream:creationEpoch:shardId``, or ``stream:shardId``) must name the migrated stream,
  and every lease must belong to it.
* ``checkpoint`` holding a sequence number -> ``checkpoint_sequence_number``, and
  ``checkpointSubSequenceNumber`` -> ``checkpoint_sub_sequence_number``.
* ``checkpoint`` = SHARD_END -> ``state`` SHARD_END with no checkpoint: the shard is not read again.
* ``checkpoint`` = TRIM_HORIZON -> no checkpoint, ``start_position`` TRIM_HORIZON.
* ``checkpoint`` = AT_TIMESTAMP -> no checkpoint, ``start_position`` AT_TIMESTAMP. KCL keeps the
  time in the application's configuration, not in the lease, so it must be passed in.
* ``checkpoint`` = LATEST -> no checkpoint, ``start_position`` AT_TIMESTAMP of the migration time
  (the moment the copy was verified), as :class:`~.leases.StartPosition` resolves LATEST.
* ``parentShardId`` (a string set) -> ``parent_shard_ids``.
* Not kept: ``leaseOwner`` and ``leaseCounter`` (migrated leases start free, counter 0),
  ``ownerSwitchesSinceCheckpoint``, ``pendingCheckpoint*`` (a prepared checkpoint was never
  committed), ``childShardIds``, ``startingHashKey``/``endingHashKey``, ``throughputKBps``,
  ``checkpointOwner``: lineage and hash ranges are read from the stream again.

Items that are not leases (a KCL ``entityType`` other than ``LEASE``) are copied into the
temporary table but not translated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition, parse_sequence_number
from airflow_kinesis_snowflake.core.state.dynamodb import DynamoTable, TableMissing
from airflow_kinesis_snowflake.core.state.leases import STATE_SHARD_END, Lease, LeaseTable
from airflow_kinesis_snowflake.core.state.metadata import APPLICATION_TAG, CREATED_BY, CREATED_BY_TAG, KEY_ATTRIBUTE

MIGRATION_SUFFIX = "_migration"
KCL_KEY_ATTRIBUTE = "leaseKey"
MIGRATION_OF_TAG = "migration-of"
# Lives only in the temporary table; no KCL lease key starts with '#'.
MARKER_KEY = "#airflow-kinesis-snowflake-migration"

SENTINEL_TRIM_HORIZON = "TRIM_HORIZON"
SENTINEL_LATEST = "LATEST"
SENTINEL_AT_TIMESTAMP = "AT_TIMESTAMP"
SENTINEL_SHARD_END = "SHARD_END"


class MigrationError(RuntimeError):
    """The legacy table cannot be migrated as it is, or a step found the tables in a state it must not touch."""


class MigrationState(StrEnum):
    """Where a migration stands, as read from the tables."""

    ABSENT = "ABSENT"  # no lease table and no temporary table: nothing to migrate
    CURRENT = "CURRENT"  # the lease table is this provider's and no migration is under way
    LEGACY = "LEGACY"  # a KCL lease table, nothing copied yet
    COPYING = "COPYING"  # the KCL table and a copy of it (verified or not)
    COPIED = "COPIED"  # only the copy: the original was deleted
    WRITING = "WRITING"  # this provider's table and the copy: leases being written

    @property
    def needs_migration(self) -> bool:
        return self not in (MigrationState.ABSENT, MigrationState.CURRENT)


@dataclass(frozen=True)
class KclLease:
    """One KCL lease item, as KCL's ``DynamoDBLeaseSerializer`` writes it."""

    lease_key: str
    shard_id: str
    checkpoint: str
    checkpoint_sub_sequence_number: int = 0
    stream_identifier: str | None = None
    lease_counter: int = 0
    lease_owner: str | None = None
    parent_shard_ids: tuple[str, ...] = ()
    child_shard_ids: tuple[str, ...] = ()
    pending_checkpoint: str | None = None


@dataclass(frozen=True)
class Translation:
    """The leases of one KCL table in this provider's form, and the keys of items that are not leases."""

    leases: tuple[Lease, ...]
    skipped_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class MigrationMarker:
    """Written into the temporary table once the copy is verified; read back by later steps."""

    application_name: str
    stream_name: str
    source_items: int
    migrated_at: datetime


@dataclass(frozen=True)
class MigrationResult:
    """What a migration did (or, in a dry run, would do)."""

    application_name: str
    stream_name: str
    state_before: MigrationState
    dry_run: bool
    migrated_at: datetime | None = None
    leases: tuple[Lease, ...] = ()
    skipped_keys: tuple[str, ...] = ()
    copied_items: int = 0

    @property
    def migrated(self) -> bool:
        return self.state_before.needs_migration and not self.dry_run

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable summary (the operator's XCom)."""
        return {
            "application_name": self.application_name,
            "stream_name": self.stream_name,
            "state_before": self.state_before.value,
            "dry_run": self.dry_run,
            "migrated": self.migrated,
            "migrated_at": self.migrated_at.isoformat() if self.migrated_at else None,
            "shard_count": len(self.leases),
            "checkpoints": {
                lease.shard_id: lease.checkpoint.to_dict() if lease.checkpoint else None for lease in self.leases
            },
            "shard_end": [lease.shard_id for lease in self.leases if lease.shard_ended],
            "start_positions": {
                lease.shard_id: lease.start.to_dict()
                for lease in self.leases
                if lease.checkpoint is None and not lease.shard_ended
            },
            "parent_shard_ids": {lease.shard_id: list(lease.parent_shard_ids) for lease in self.leases},
            "skipped_items": list(self.skipped_keys),
            "copied_items": self.copied_items,
        }


# -- pure translation ---------------------------------------------------------------------------


def migration_table_name(application_name: str) -> str:
    return f"{application_name}{MIGRATION_SUFFIX}"


def is_kcl_key_schema(description: Mapping[str, Any]) -> bool:
    """True when a DescribeTable ``Table`` is keyed like a KCL lease table (hash key ``leaseKey`` only)."""
    keys = [(k["AttributeName"], k["KeyType"]) for k in description.get("KeySchema", [])]
    return keys == [(KCL_KEY_ATTRIBUTE, "HASH")]


def _is_provider_key_schema(description: Mapping[str, Any]) -> bool:
    keys = [(k["AttributeName"], k["KeyType"]) for k in description.get("KeySchema", [])]
    return keys == [(KEY_ATTRIBUTE, "HASH")]


def split_lease_key(lease_key: str) -> tuple[str | None, str]:
    """``(stream identifier, shard id)`` of a KCL lease key; the identifier is None for single-stream keys.

    Multi-stream KCL applications key leases ``<stream identifier>:<shard id>``, where the identifier
    is ``account:stream:creationEpoch`` (or a bare stream name in older versions).
    """
    if ":" not in lease_key:
        return None, lease_key
    prefix, _, shard_id = lease_key.rpartition(":")
    if not shard_id or len(prefix.split(":")) not in (1, 3) or not all(prefix.split(":")):
        raise MigrationError(
            f"KCL lease key {lease_key!r} is neither a shard id nor '<account>:<stream>:<creationEpoch>:<shardId>'"
        )
    return prefix, shard_id


def stream_name_of(stream_identifier: str) -> str:
    """The stream name inside a KCL stream identifier (``account:stream:creationEpoch`` or ``stream``)."""
    parts = stream_identifier.split(":")
    return parts[1] if len(parts) == 3 else parts[0]


def _string(item: Mapping[str, Any], name: str) -> str | None:
    value = item.get(name)
    return value.get("S") if isinstance(value, Mapping) else None


def _number(item: Mapping[str, Any], name: str, lease_key: str) -> int:
    value = item.get(name)
    if value is None:
        return 0
    try:
        return int(value["N"])
    except (KeyError, TypeError, ValueError) as err:
        raise MigrationError(f"KCL lease {lease_key!r}: {name} is not a number: {value!r}") from err


def _string_set(item: Mapping[str, Any], name: str) -> tuple[str, ...]:
    # KCL writes a string set; sets have no order, so sort for a deterministic result.
    value = item.get(name)
    if not isinstance(value, Mapping):
        return ()
    if "SS" in value:
        return tuple(sorted(value["SS"]))
    if "L" in value:
        return tuple(sorted(v["S"] for v in value["L"]))
    if "S" in value:
        return (value["S"],)
    return ()


def _shard_only(shard_or_key: str) -> str:
    return shard_or_key.rpartition(":")[2]


def parse_kcl_item(item: Mapping[str, Any]) -> KclLease | None:
    """A KCL lease from its DynamoDB item; None for a KCL item that is not a lease.

    :raises MigrationError: for an item that is neither.
    """
    lease_key = _string(item, KCL_KEY_ATTRIBUTE)
    if lease_key is None:
        raise MigrationError(f"item without a string {KCL_KEY_ATTRIBUTE}: {sorted(item)}")
    entity_type = _string(item, "entityType")
    if entity_type is not None and entity_type != "LEASE":
        return None
    checkpoint = _string(item, "checkpoint")
    if not checkpoint:
        raise MigrationError(
            f"item {lease_key!r} has no checkpoint: it is not a KCL lease, so this is not a KCL lease table"
        )
    stream_identifier, shard_id = split_lease_key(lease_key)
    # Multi-stream leases also carry the identifier and shard id as attributes; prefer those.
    stream_identifier = _string(item, "streamName") or stream_identifier
    shard_id = _string(item, "shardId") or shard_id
    return KclLease(
        lease_key=lease_key,
        shard_id=shard_id,
        checkpoint=checkpoint,
        checkpoint_sub_sequence_number=_number(item, "checkpointSubSequenceNumber", lease_key),
        stream_identifier=stream_identifier,
        lease_counter=_number(item, "leaseCounter", lease_key),
        lease_owner=_string(item, "leaseOwner"),
        parent_shard_ids=tuple(_shard_only(p) for p in _string_set(item, "parentShardId")),
        # Early KCL 2.x releases named it "childShardId".
        child_shard_ids=tuple(
            _shard_only(c) for c in _string_set(item, "childShardIds") or _string_set(item, "childShardId")
        ),
        pending_checkpoint=_string(item, "pendingCheckpoint"),
    )


def translate_lease(kcl: KclLease, *, migrated_at: datetime, at_timestamp: datetime | None = None) -> Lease:
    """This provider's lease for one KCL lease: free, counter 0, same checkpoint and parents.

    :param migrated_at: the migration time; a LATEST sentinel becomes AT_TIMESTAMP of it, since
        KCL stores no time for LATEST and this provider resolves LATEST to a timestamp anyway.
    :param at_timestamp: the KCL application's AT_TIMESTAMP initial position; KCL keeps it in its
        configuration, not in the lease table, so AT_TIMESTAMP sentinels need it.
    """
    base = Lease(
        shard_id=kcl.shard_id,
        lease_counter=0,
        start=StartPosition(InitialPosition.TRIM_HORIZON),
        parent_shard_ids=kcl.parent_shard_ids,
    )
    value = kcl.checkpoint
    if value == SENTINEL_SHARD_END:
        return replace(base, state=STATE_SHARD_END)
    if value == SENTINEL_TRIM_HORIZON:
        return base
    if value == SENTINEL_LATEST:
        return replace(base, start=StartPosition(InitialPosition.AT_TIMESTAMP, _aware(migrated_at)))
    if value == SENTINEL_AT_TIMESTAMP:
        if at_timestamp is None:
            raise MigrationError(
                f"KCL lease {kcl.lease_key!r} is at AT_TIMESTAMP, and KCL keeps that timestamp in the "
                "application's configuration, not in the lease table: pass the application's initial timestamp"
            )
        return replace(base, start=StartPosition(InitialPosition.AT_TIMESTAMP, _aware(at_timestamp)))
    try:
        parse_sequence_number(value)
    except ValueError as err:
        raise MigrationError(
            f"KCL lease {kcl.lease_key!r}: checkpoint {value!r} is neither a sequence number nor one of "
            f"{SENTINEL_TRIM_HORIZON}, {SENTINEL_LATEST}, {SENTINEL_AT_TIMESTAMP}, {SENTINEL_SHARD_END}"
        ) from err
    if kcl.checkpoint_sub_sequence_number < 0:
        raise MigrationError(
            f"KCL lease {kcl.lease_key!r}: negative checkpointSubSequenceNumber {kcl.checkpoint_sub_sequence_number}"
        )
    return replace(base, checkpoint=Checkpoint(value, kcl.checkpoint_sub_sequence_number))


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def translate_items(
    items: Iterable[Mapping[str, Any]],
    *,
    stream_name: str,
    migrated_at: datetime,
    at_timestamp: datetime | None = None,
) -> Translation:
    """Translate every item of a KCL lease table for ``stream_name``.

    A multi-stream table is accepted only when all its leases belong to one incarnation of
    ``stream_name``: this provider keeps one stream per table, and the leases of any other stream
    would be lost with the temporary table. A single-stream KCL table does not record its stream,
    so its leases are taken to be ``stream_name``'s.

    :raises MigrationError: on the first item that cannot be migrated.
    """
    kcl_leases: list[KclLease] = []
    skipped: list[str] = []
    for item in items:
        parsed = parse_kcl_item(item)
        if parsed is None:
            skipped.append(str(_string(item, KCL_KEY_ATTRIBUTE)))
        else:
            kcl_leases.append(parsed)
    identifiers = sorted({k.stream_identifier for k in kcl_leases if k.stream_identifier is not None})
    if identifiers:
        if any(k.stream_identifier is None for k in kcl_leases):
            identifiers.append("(single-stream keys)")
        if len(identifiers) > 1:
            raise MigrationError(
                f"the KCL table holds leases of several streams: {', '.join(identifiers)}; this provider keeps one "
                "stream per application name, so migrating it would lose the others' checkpoints"
            )
        if stream_name_of(identifiers[0]) != stream_name:
            raise MigrationError(f"the KCL table holds leases of stream {identifiers[0]!r}, not of {stream_name!r}")
    by_shard: dict[str, KclLease] = {}
    for kcl in kcl_leases:
        if kcl.shard_id in by_shard:
            raise MigrationError(
                f"shard {kcl.shard_id} has two KCL leases ({by_shard[kcl.shard_id].lease_key!r}, {kcl.lease_key!r})"
            )
        by_shard[kcl.shard_id] = kcl
    leases = tuple(
        translate_lease(by_shard[shard_id], migrated_at=migrated_at, at_timestamp=at_timestamp)
        for shard_id in sorted(by_shard)
    )
    return Translation(leases=leases, skipped_keys=tuple(sorted(skipped)))


def lease_agrees(existing: Lease, migrated: Lease) -> bool:
    """True when a lease already in the new table holds at least the migrated progress.

    A shard that is done, or whose checkpoint is at or past the migrated one, loses nothing; any
    other difference means something wrote the table during the migration.
    """
    if existing.shard_ended:
        return True
    if migrated.shard_ended:
        return False
    if migrated.checkpoint is None:
        return existing.checkpoint is not None or existing.start == migrated.start
    return existing.checkpoint is not None and existing.checkpoint >= migrated.checkpoint


def _canonical(value: Any) -> Any:
    """An attribute value with its sets sorted: DynamoDB returns set members in no fixed order."""
    if isinstance(value, Mapping):
        return {
            k: sorted(v) if k in ("SS", "NS", "BS") and isinstance(v, list) else _canonical(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def diff_items(source: Iterable[Mapping[str, Any]], copy: Iterable[Mapping[str, Any]]) -> list[str]:
    """Lease keys whose item is missing from ``copy``, extra in it, or different; empty when equal."""
    left = {_string(i, KCL_KEY_ATTRIBUTE): _canonical(i) for i in source}
    right = {_string(i, KCL_KEY_ATTRIBUTE): _canonical(i) for i in copy}
    return sorted(str(k) for k in left.keys() | right.keys() if left.get(k) != right.get(k))


# -- the tables ---------------------------------------------------------------------------------


def _kcl_table(client: Any, table_name: str) -> DynamoTable:
    """A table keyed like KCL's (the legacy table and the temporary copy)."""
    return DynamoTable(client, table_name, KCL_KEY_ATTRIBUTE)


def _settled(client: Any, table_name: str, wait_seconds: float) -> dict[str, Any] | None:
    """DescribeTable once the table is neither being created nor deleted; None when it is gone."""
    table = _kcl_table(client, table_name)
    description = table.describe()
    if description is None:
        return None
    if description.get("TableStatus") == "DELETING":
        table.wait_until_gone(wait_seconds)
        return None
    if description.get("TableStatus") == "CREATING":
        table.wait_until_exists(wait_seconds)
        return table.describe()
    return description


def migration_state(client: Any, application_name: str, *, wait_seconds: float = 300) -> MigrationState:
    """Where the migration of ``application_name`` stands, from the tables that exist.

    :raises MigrationError: when a table is keyed like neither a KCL nor this provider's table.
    """
    main = _settled(client, application_name, wait_seconds)
    temp_name = migration_table_name(application_name)
    temp = _settled(client, temp_name, wait_seconds)
    if temp is not None and not is_kcl_key_schema(temp):
        raise MigrationError(f"DynamoDB table {temp_name!r} exists but is not keyed by {KCL_KEY_ATTRIBUTE}")
    if main is None:
        return MigrationState.COPIED if temp is not None else MigrationState.ABSENT
    if is_kcl_key_schema(main):
        return MigrationState.COPYING if temp is not None else MigrationState.LEGACY
    if _is_provider_key_schema(main):
        return MigrationState.WRITING if temp is not None else MigrationState.CURRENT
    names = ", ".join(k["AttributeName"] for k in main.get("KeySchema", []))
    raise MigrationError(
        f"DynamoDB table {application_name!r} is keyed by ({names}): neither a KCL lease table nor {CREATED_BY}'s"
    )


def needs_migration(client: Any, application_name: str) -> bool:
    """True when ``application_name`` is a KCL lease table, or a migration of it is unfinished."""
    return migration_state(client, application_name).needs_migration


class LegacyMigration:
    """The steps of migrating one application's KCL lease table; :meth:`run` does what is left.

    Each step checks the tables before it acts and refuses rather than risk a checkpoint, so the
    steps can also be run one at a time.

    :param client: a boto3 DynamoDB client.
    :param application_name: the KCL application name, which is both tables' name.
    :param stream_name: the Kinesis stream the KCL application read.
    :param at_timestamp: the KCL application's AT_TIMESTAMP initial position, if it used one.
    :param wait_seconds: how long to wait for a table to be created or deleted.
    :param clock: returns the current time (the migration time of LATEST sentinels).
    """

    def __init__(
        self,
        client: Any,
        application_name: str,
        stream_name: str,
        *,
        at_timestamp: datetime | None = None,
        wait_seconds: float = 300,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = client
        self.application_name = application_name
        self.stream_name = stream_name
        self.temp_name = migration_table_name(application_name)
        self.original = _kcl_table(client, application_name)
        self.temp = _kcl_table(client, self.temp_name)
        self.at_timestamp = _aware(at_timestamp) if at_timestamp else None
        self.wait_seconds = wait_seconds
        self._clock = clock or (lambda: datetime.now(UTC))

    def state(self) -> MigrationState:
        return migration_state(self.client, self.application_name, wait_seconds=self.wait_seconds)

    # -- the marker -----------------------------------------------------------------------------

    def marker(self) -> MigrationMarker | None:
        """The verified-copy marker of the temporary table, or None."""
        try:
            item = self.temp.get(MARKER_KEY)
        except TableMissing:
            return None
        if not item:
            return None
        return MigrationMarker(
            application_name=item["application_name"]["S"],
            stream_name=item["stream_name"]["S"],
            source_items=int(item["source_items"]["N"]),
            migrated_at=datetime.fromisoformat(item["migrated_at"]["S"]),
        )

    def _verified_marker(self) -> MigrationMarker:
        marker = self.marker()
        if marker is None:
            raise MigrationError(
                f"{self.temp_name!r} has no verified-copy marker, so it may be an incomplete copy; it was left "
                f"as it is. If {self.application_name!r} (the KCL table) still exists, run the migration again"
            )
        if marker.stream_name != self.stream_name:
            raise MigrationError(
                f"the migration under way in {self.temp_name!r} is for stream {marker.stream_name!r}, "
                f"not {self.stream_name!r}"
            )
        return marker

    def _copied_items(self) -> list[dict[str, Any]]:
        return [i for i in self.temp.scan() if _string(i, KCL_KEY_ATTRIBUTE) != MARKER_KEY]

    # -- step 1: copy -----------------------------------------------------------------------------

    def copy(self) -> int:
        """Copy the KCL table into the temporary table, verify, then mark the copy; returns the item count.

        Refuses, before writing anything, a KCL table whose items cannot be translated. A copy
        from an earlier, interrupted run is brought back in line with the original.
        """
        state = self.state()
        if state not in (MigrationState.LEGACY, MigrationState.COPYING):
            raise MigrationError(f"nothing to copy: {self.application_name!r} is not a KCL lease table ({state})")
        source = list(self.original.scan())
        if any(_string(i, KCL_KEY_ATTRIBUTE) == MARKER_KEY for i in source):
            raise MigrationError(f"the KCL table holds an item keyed {MARKER_KEY!r}, which the migration reserves")
        translate_items(source, stream_name=self.stream_name, migrated_at=self._clock(), at_timestamp=self.at_timestamp)
        if state is MigrationState.LEGACY:
            self._create_temp()
        else:
            # Distrust an earlier copy until it is verified again.
            self.temp.delete(MARKER_KEY)
        source_keys = {_string(i, KCL_KEY_ATTRIBUTE) for i in source}
        stale = [i for i in self._copied_items() if _string(i, KCL_KEY_ATTRIBUTE) not in source_keys]
        self._batch_write([{"PutRequest": {"Item": i}} for i in source])
        self._batch_write([{"DeleteRequest": {"Key": {KCL_KEY_ATTRIBUTE: i[KCL_KEY_ATTRIBUTE]}}} for i in stale])
        self._verify_copy(source)
        migrated_at = self._clock()
        self.temp.put(
            {
                KCL_KEY_ATTRIBUTE: {"S": MARKER_KEY},
                "created_by": {"S": CREATED_BY},
                "application_name": {"S": self.application_name},
                "stream_name": {"S": self.stream_name},
                "source_items": {"N": str(len(source))},
                "migrated_at": {"S": migrated_at.isoformat()},
            }
        )
        return len(source)

    def _create_temp(self) -> None:
        # False: an earlier, interrupted run created it already.
        self.temp.create(
            {
                CREATED_BY_TAG: CREATED_BY,
                APPLICATION_TAG: self.application_name,
                MIGRATION_OF_TAG: self.application_name,
            }
        )
        self.temp.wait_until_exists(self.wait_seconds)

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        unprocessed = self.temp.batch_write(requests)
        if unprocessed:
            raise MigrationError(
                f"DynamoDB left {unprocessed} writes to {self.temp_name!r} unprocessed after "
                "10 attempts; run the migration again"
            )

    def _verify_copy(self, source: list[dict[str, Any]]) -> None:
        """Fail unless the original still holds ``source`` and the copy holds exactly the same."""
        copied = self._copied_items()
        if differ := diff_items(source, copied):
            raise MigrationError(
                f"the copy in {self.temp_name!r} does not match {self.application_name!r}: {len(copied)} of "
                f"{len(source)} items, differing at {', '.join(differ[:10])}; the original was left untouched"
            )
        now = list(self.original.scan())
        if changed := diff_items(source, now):
            raise MigrationError(
                f"{self.application_name!r} changed while it was copied (leases {', '.join(changed[:10])}): a KCL "
                "worker is probably still running. Stop every KCL worker, then run the migration again; the "
                "original was left untouched"
            )

    # -- step 2: delete the original ------------------------------------------------------------

    def delete_original(self) -> None:
        """Delete the KCL table, once the marked copy still matches it item for item."""
        state = self.state()
        if state is MigrationState.COPIED:
            return
        if state is not MigrationState.COPYING:
            raise MigrationError(f"cannot delete {self.application_name!r}: the migration is at {state}, not COPYING")
        marker = self._verified_marker()
        source = list(self.original.scan())
        if len(source) != marker.source_items:
            raise MigrationError(
                f"{self.application_name!r} holds {len(source)} items but {marker.source_items} were copied: "
                "a KCL worker may be running; the original was left untouched, run the migration again"
            )
        self._verify_copy(source)
        self.original.drop(wait_seconds=self.wait_seconds)

    # -- step 3: create this provider's table ----------------------------------------------------

    def create_table(self) -> None:
        """Create this provider's lease table (tags, metadata item) under the application name."""
        state = self.state()
        if state not in (MigrationState.COPIED, MigrationState.WRITING):
            raise MigrationError(f"cannot create the new table: the migration is at {state}")
        self._verified_marker()
        LeaseTable(self.client, self.application_name).create(
            stream_name=self.stream_name, application_name=self.application_name, wait_seconds=self.wait_seconds
        )

    # -- step 4: write the leases ----------------------------------------------------------------

    def translation(self) -> tuple[Translation, MigrationMarker]:
        """The translated leases of the verified copy, with the marker that fixes the migration time."""
        marker = self._verified_marker()
        translation = translate_items(
            self._copied_items(),
            stream_name=self.stream_name,
            migrated_at=marker.migrated_at,
            at_timestamp=self.at_timestamp,
        )
        return translation, marker

    def write_leases(self) -> Translation:
        """Write every translated lease that the new table does not hold yet (conditional puts).

        :raises MigrationError: when the new table holds a lease behind the migrated checkpoint,
            as when an ingestion ran during the migration; the copy is kept.
        """
        state = self.state()
        if state is not MigrationState.WRITING:
            raise MigrationError(f"cannot write leases: the migration is at {state}, not WRITING")
        translation, _ = self.translation()
        table = LeaseTable(self.client, self.application_name)
        for lease in translation.leases:
            # False when an earlier, interrupted run wrote it already; checked below either way.
            table.put_lease(lease)
        self._check_written(table, translation)
        return translation

    def _check_written(self, table: LeaseTable, translation: Translation) -> None:
        present = table.leases()
        missing = [lease.shard_id for lease in translation.leases if lease.shard_id not in present]
        conflicting = [
            lease.shard_id
            for lease in translation.leases
            if lease.shard_id in present and not lease_agrees(present[lease.shard_id], lease)
        ]
        if missing or conflicting:
            raise MigrationError(
                f"{self.application_name!r} lacks the migrated leases of {missing or 'no shard'} and holds other "
                f"progress for {conflicting or 'no shard'}: was an ingestion run during the migration? The copy "
                f"{self.temp_name!r} was kept; delete {self.application_name!r} and run the migration again"
            )

    # -- step 5: drop the copy -----------------------------------------------------------------

    def drop_copy(self) -> None:
        """Delete the temporary table, once the new table holds every migrated lease."""
        state = self.state()
        if state is MigrationState.CURRENT:
            return
        if state is not MigrationState.WRITING:
            raise MigrationError(f"cannot drop {self.temp_name!r}: the migration is at {state}, not WRITING")
        table = LeaseTable(self.client, self.application_name)
        if table.metadata() is None:
            raise MigrationError(f"{self.application_name!r} has no metadata item yet; {self.temp_name!r} was kept")
        translation, _ = self.translation()
        self._check_written(table, translation)
        self.temp.drop(wait_seconds=self.wait_seconds)

    # -- all of it ---------------------------------------------------------------------------------

    def preview(self) -> MigrationResult:
        """What :meth:`run` would write, without writing anything."""
        state = self.state()
        if not state.needs_migration:
            return MigrationResult(self.application_name, self.stream_name, state, dry_run=True)
        if state in (MigrationState.LEGACY, MigrationState.COPYING):
            source = list(self.original.scan())
            migrated_at = self._clock()
            translation = translate_items(
                source, stream_name=self.stream_name, migrated_at=migrated_at, at_timestamp=self.at_timestamp
            )
            copied = 0
        else:
            translation, marker = self.translation()
            migrated_at, copied = marker.migrated_at, marker.source_items
        return MigrationResult(
            self.application_name,
            self.stream_name,
            state,
            dry_run=True,
            migrated_at=migrated_at,
            leases=translation.leases,
            skipped_keys=translation.skipped_keys,
            copied_items=copied,
        )

    def run(self) -> MigrationResult:
        """Finish the migration from wherever it stands; a no-op when there is nothing to migrate."""
        state = self.state()
        if not state.needs_migration:
            return MigrationResult(self.application_name, self.stream_name, state, dry_run=False)
        if state in (MigrationState.LEGACY, MigrationState.COPYING):
            self.copy()
            self.delete_original()
        self.create_table()
        translation = self.write_leases()
        _, marker = self.translation()
        self.drop_copy()
        return MigrationResult(
            self.application_name,
            self.stream_name,
            state,
            dry_run=False,
            migrated_at=marker.migrated_at,
            leases=translation.leases,
            skipped_keys=translation.skipped_keys,
            copied_items=marker.source_items,
        )


def migrate_legacy_table(
    client: Any,
    application_name: str,
    stream_name: str,
    *,
    at_timestamp: datetime | None = None,
    dry_run: bool = False,
    wait_seconds: float = 300,
) -> MigrationResult:
    """Migrate the KCL lease table ``application_name`` into this provider's schema, or finish doing so.

    Safe to run again after an interruption at any point, and a no-op once done (or when there is
    no table). See :class:`LegacyMigration` for the steps.

    :param client: a boto3 DynamoDB client.
    :param application_name: the KCL application name, which is the lease table's name.
    :param stream_name: the Kinesis stream the KCL application read.
    :param at_timestamp: the KCL application's AT_TIMESTAMP initial position, needed only when a
        lease is still at the AT_TIMESTAMP sentinel.
    :param dry_run: only read the tables and report what would be migrated.
    :param wait_seconds: how long to wait for each table to be created or deleted.
    """
    migration = LegacyMigration(
        client, application_name, stream_name, at_timestamp=at_timestamp, wait_seconds=wait_seconds
    )
    return migration.preview() if dry_run else migration.run()
