"""The DynamoDB lease/checkpoint table, named after the application name.

One item per shard holds its lease (owner, counter, expiry) and its checkpoint; one metadata item
describes the table; a running try keeps a heartbeat item, deleted when it ends. Every ownership
change and every checkpoint is a conditional write on the lease counter, so a worker that lost its
lease cannot move a checkpoint.

A batch reads the shard leases by key (:meth:`LeaseTable.leases_of`: the listed shards and the
parents they name), so its cost does not grow with the items the table holds; the full scan
(:meth:`LeaseTable.leases`) is for maintenance: reset, restore, clean-up, backups, migration and
adopting a lost table.

An owner (:class:`LeaseOwner`) names the task that runs the batch, stable over its tries, and the
try: a retry takes over the leases an earlier try of its own task still holds at once
(:func:`takes_over`), while another worker's leases are taken only once they expired.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.dynamodb import ConditionFailed
from airflow_kinesis_snowflake.core.state.errors import LeaseLostError, LeaseTableError
from airflow_kinesis_snowflake.core.state.metadata import (
    APPLICATION_TAG,
    CREATED_BY,
    CREATED_BY_TAG,
    KEY_ATTRIBUTE,
    TableClaim,
    TableIdentity,
    TableMetadata,
    claim_table,
    lease_table_items,
    put_metadata,
    read_metadata,
    record_identity,
    record_ingest,
)

WORKER_PREFIX = "#worker#"
# The item that names a batch's job run while it goes on without the task that started it.
RUN_PREFIX = "#run#"
# A run's item outlives the run by far, should no try of its task come back to remove it.
RUN_ITEM_RETENTION_SECONDS = 7 * 86_400
# DynamoDB deletes an item once the epoch seconds in this attribute passed (the table's time to live).
TTL_ATTRIBUTE = "delete_after"
# A worker item outlives the heartbeat's expiry by this long, should its try die before deleting it.
WORKER_ITEM_RETENTION_SECONDS = 86_400

STATE_ACTIVE = "ACTIVE"
STATE_SHARD_END = "SHARD_END"


@dataclass(frozen=True)
class Lease:
    """A shard's lease and checkpoint, as stored."""

    shard_id: str
    lease_counter: int
    start: StartPosition
    parent_shard_ids: tuple[str, ...] = ()
    lease_owner: str | None = None
    lease_expires_at: float = 0.0
    checkpoint: Checkpoint | None = None
    state: str = STATE_ACTIVE
    # When the checkpoint last moved (epoch seconds): batches serve the longest-waiting shards first.
    checkpointed_at: float = 0.0
    child_shard_ids: tuple[str, ...] = ()
    hash_key_range: tuple[str, str] | None = None

    @property
    def shard_ended(self) -> bool:
        return self.state == STATE_SHARD_END

    def is_held(self, now: float) -> bool:
        return self.lease_owner is not None and self.lease_expires_at > now


_TRY_PREFIX = "try-"


@dataclass(frozen=True)
class LeaseOwner:
    """Who holds a lease: a task, stable over its tries, and one try of it.

    Written as ``<task key>/try-<attempt>/<nonce>``; the task key may itself hold ``/`` (a run id
    may), so the text is read from the right.

    :param task_key: the same for every try of one task (see :func:`task_key`).
    :param attempt: the try, from 1; a later try has a higher one.
    :param nonce: random, so two processes never write the same owner.
    """

    task_key: str
    attempt: int
    nonce: str

    def __str__(self) -> str:
        return f"{self.task_key}/{_TRY_PREFIX}{self.attempt}/{self.nonce}"

    @classmethod
    def of_try(cls, task_instance: Any, dag_id: str, task_id: str) -> LeaseOwner:
        """The owner of one try of an Airflow task instance (read by attribute), with a new nonce.

        What the task instance lacks falls back: ``dag_id``, ``task_id``, run ``adhoc``, map index
        -1, try 1.
        """
        run_id, map_index, try_number = (getattr(task_instance, k, None) for k in ("run_id", "map_index", "try_number"))
        key = task_key(
            getattr(task_instance, "dag_id", None) or dag_id,
            getattr(task_instance, "task_id", None) or task_id,
            run_id or "adhoc",
            map_index,
        )
        return cls(key, int(try_number or 1), uuid.uuid4().hex[:8])

    @classmethod
    def parse(cls, text: str | None) -> LeaseOwner | None:
        """The owner ``text`` names; None for an owner written otherwise (a maintenance task, an
        older version of the provider, a KCL worker)."""
        parts = (text or "").rsplit("/", 2)
        if len(parts) != 3 or not parts[0] or not parts[2] or not parts[1].startswith(_TRY_PREFIX):
            return None
        attempt = parts[1].removeprefix(_TRY_PREFIX)
        if not attempt.isdigit():
            return None
        return cls(parts[0], int(attempt), parts[2])


def task_key(dag_id: str, task_id: str, run_id: str, map_index: int | None = -1) -> str:
    """The key every try of one Airflow task instance shares."""
    return f"{dag_id}/{task_id}/{run_id}/{-1 if map_index is None else int(map_index)}"


def takes_over(owner: str, holder: str | None) -> bool:
    """True when ``owner`` may take a lease ``holder`` holds without waiting for it to expire.

    Only a later try of the same task takes over: its earlier try is over (Airflow starts a retry
    once a try failed or its worker was lost), so the leases it holds would only delay the retry.
    Anyone else, and a try of the same task that is not later, waits for the lease to expire. The
    take is still the conditional write on the lease counter, so a fenced try cannot checkpoint.
    """
    mine, theirs = LeaseOwner.parse(owner), LeaseOwner.parse(holder)
    if mine is None or theirs is None:
        return False
    return mine.task_key == theirs.task_key and mine.attempt > theirs.attempt


def open_to(leases: Mapping[str, Lease], owner: str, now: float) -> dict[str, Lease]:
    """``leases`` as ``owner`` may take them: one held by an earlier try of its task shows as free.

    The counter is kept, so taking the lease is conditional on nothing having changed since it
    was read.
    """
    return {
        shard_id: replace(lease, lease_owner=None, lease_expires_at=0.0)
        if lease.is_held(now) and takes_over(owner, lease.lease_owner)
        else lease
        for shard_id, lease in leases.items()
    }


def lease_keys(shards: Iterable[Shard]) -> list[str]:
    """The shard ids whose leases a batch reads: every listed shard and the parents it names.

    A parent no longer listed (past the stream's retention) keeps counting through its lease
    while it has one; without one it counts as finished.
    """
    keys: dict[str, None] = {}
    for shard in shards:
        keys[shard.shard_id] = None
        keys.update(dict.fromkeys(shard.parent_shard_ids))
    return list(keys)


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: int | float) -> dict[str, str]:
    return {"N": str(value)}


def _lease_from_item(item: dict[str, Any]) -> Lease:
    checkpoint = None
    if "checkpoint_sequence_number" in item:
        checkpoint = Checkpoint(
            item["checkpoint_sequence_number"]["S"], int(item["checkpoint_sub_sequence_number"]["N"])
        )
    ts = item.get("start_timestamp", {}).get("S")
    return Lease(
        shard_id=item[KEY_ATTRIBUTE]["S"],
        lease_counter=int(item["lease_counter"]["N"]),
        start=StartPosition(InitialPosition(item["start_position"]["S"]), datetime.fromisoformat(ts) if ts else None),
        parent_shard_ids=tuple(p["S"] for p in item.get("parent_shard_ids", {}).get("L", [])),
        lease_owner=item.get("lease_owner", {}).get("S"),
        lease_expires_at=float(item.get("lease_expires_at", {}).get("N", "0")),
        checkpoint=checkpoint,
        state=item.get("state", {}).get("S", STATE_ACTIVE),
        checkpointed_at=float(item.get("checkpointed_at", {}).get("N", "0")),
        child_shard_ids=tuple(sorted(item.get("child_shard_ids", {}).get("SS", []))),
        hash_key_range=(
            (item["starting_hash_key"]["S"], item["ending_hash_key"]["S"]) if "starting_hash_key" in item else None
        ),
    )


def earliest_start(leases: Iterable[Lease]) -> StartPosition | None:
    """The earliest start of any lease: where the application first started reading (None: no lease)."""
    starts = [lease.start for lease in leases]
    if not starts:
        return None
    earliest = datetime.min.replace(tzinfo=UTC)
    return min(starts, key=lambda s: (s.position is not InitialPosition.TRIM_HORIZON, s.timestamp or earliest))


def lease_to_item(lease: Lease) -> dict[str, Any]:
    """The DynamoDB item of a shard lease, as :meth:`LeaseTable.leases` reads it back."""
    item: dict[str, Any] = {
        KEY_ATTRIBUTE: _s(lease.shard_id),
        "item_type": _s("SHARD"),
        "lease_counter": _n(lease.lease_counter),
        "start_position": _s(lease.start.position.value),
        "parent_shard_ids": {"L": [_s(p) for p in lease.parent_shard_ids]},
        "state": _s(lease.state),
    }
    if lease.start.timestamp is not None:
        item["start_timestamp"] = _s(lease.start.timestamp.isoformat())
    if lease.checkpoint is not None:
        item["checkpoint_sequence_number"] = _s(lease.checkpoint.sequence_number)
        item["checkpoint_sub_sequence_number"] = _n(lease.checkpoint.sub_sequence_number)
    if lease.lease_owner is not None:
        item["lease_owner"] = _s(lease.lease_owner)
        item["lease_expires_at"] = _n(lease.lease_expires_at)
    if lease.child_shard_ids:
        item["child_shard_ids"] = {"SS": list(lease.child_shard_ids)}
    if lease.hash_key_range is not None:
        item["starting_hash_key"], item["ending_hash_key"] = _s(lease.hash_key_range[0]), _s(lease.hash_key_range[1])
    return item


def _ancestors_of(shards: list[Shard], shard_ids: set[str]) -> set[str]:
    """Every ancestor, through the listed lineage, of the shards in ``shard_ids``."""
    parents = {s.shard_id: s.parent_shard_ids for s in shards}
    ancestors: set[str] = set()
    todo = [p for shard_id in shard_ids for p in parents.get(shard_id, ())]
    while todo:
        shard_id = todo.pop()
        if shard_id not in ancestors:
            ancestors.add(shard_id)
            todo.extend(parents.get(shard_id, ()))
    return ancestors


class LeaseTable:
    """Reads and writes one application's lease table through a boto3 DynamoDB client."""

    def __init__(self, client: Any, table_name: str) -> None:
        self.client = client
        self.table_name = table_name
        self.items = lease_table_items(client, table_name)

    # -- the table itself ---------------------------------------------------------------------

    def describe(self) -> dict[str, Any] | None:
        """DescribeTable's ``Table``, or None when there is no such table."""
        return self.items.describe()

    def exists(self) -> bool:
        return self.describe() is not None

    def _check_key_schema(self, description: dict[str, Any]) -> None:
        keys = [(k["AttributeName"], k["KeyType"]) for k in description.get("KeySchema", [])]
        if keys != [(KEY_ATTRIBUTE, "HASH")]:
            names = ", ".join(name for name, _ in keys)
            hint = " It looks like a KCL lease table: migrate it first." if "leaseKey" in names else ""
            raise LeaseTableError(
                f"DynamoDB table {self.table_name!r} was not created by {CREATED_BY}: its key is ({names}), "
                f"not ({KEY_ATTRIBUTE}). Choose another application_name.{hint}"
            )

    def create(
        self,
        *,
        stream_name: str,
        application_name: str,
        wait_seconds: float = 120,
        identity: TableIdentity | None = None,
        generation_id: str | None = None,
    ) -> bool:
        """Create the table (on-demand, tagged) and its metadata item, and turn its time to live on for
        worker items (:data:`TTL_ATTRIBUTE`); False when it already existed.

        An existing table is accepted only when its metadata item says this provider made it.

        :param identity: connector, destination and stream recorded in a new metadata item.
        :param generation_id: the new table's generation (a reset chooses it and records it in
            Snowflake first); a random one by default.
        """
        created = False
        description = self.describe()
        if description is not None:
            self._check_key_schema(description)
        else:
            # False: another worker created it between our check and our call, which is fine.
            created = self.items.create({CREATED_BY_TAG: CREATED_BY, APPLICATION_TAG: application_name})
            self.items.wait_until_exists(wait_seconds)
        metadata = self.metadata()
        if metadata is None:
            if not created and self.items.has_items():
                raise LeaseTableError(
                    f"DynamoDB table {self.table_name!r} exists but was not created by {CREATED_BY} "
                    "(no metadata item). Choose another application_name, or migrate a KCL table."
                )
            put_metadata(
                self.items,
                stream_name=stream_name,
                application_name=application_name,
                identity=identity or TableIdentity(),
                generation_id=generation_id,
            )
        elif metadata.stream_name != stream_name:
            raise LeaseTableError(
                f"lease table {self.table_name!r} tracks stream {metadata.stream_name!r}, not "
                f"{stream_name!r}; use another application_name for this stream"
            )
        # Once the table is known to be ours: worker items of tries that died before deleting theirs
        # go by themselves, also on a table an earlier version created.
        self.items.enable_time_to_live(TTL_ATTRIBUTE)
        return created

    def metadata(self) -> TableMetadata | None:
        """The table's metadata item (strongly consistent); None when it has none.

        :raises ~.dynamodb.TableMissing: when the table does not exist.
        """
        return read_metadata(self.items)

    def record_identity(self, identity: TableIdentity) -> None:
        """Record the identity attributes the metadata item lacks; recorded ones are kept."""
        record_identity(self.items, identity)

    def record_ingest(self, now: float | None = None) -> None:
        """Set ``last_ingest_at``: an ingest run used the table (clean-up reads it to tell live tables)."""
        record_ingest(self.items, now)

    def claim_table(self, claim: TableClaim) -> TableClaim:
        """Record a DynamoDB source's claim on a table unless one is recorded; the claim recorded after."""
        return claim_table(self.items, claim)

    # -- shard leases ---------------------------------------------------------------------------

    def _scan(self, item_type: str) -> Iterator[dict[str, Any]]:
        """Every item of one type, strongly consistent, across pages."""
        return (i for i in self.items.scan() if i.get("item_type", {}).get("S") == item_type)

    def leases(self) -> dict[str, Lease]:
        """Every shard lease, by shard id (strongly consistent): a full scan, for maintenance only.

        Its cost grows with every item the table holds; a batch reads :meth:`leases_of`.
        """
        leases = (_lease_from_item(item) for item in self._scan("SHARD"))
        return {lease.shard_id: lease for lease in leases}

    def leases_of(self, shard_ids: Iterable[str]) -> dict[str, Lease]:
        """The shard leases of ``shard_ids`` and of the parents their leases name, by shard id.

        Strongly consistent BatchGetItem by key: the cost follows the shards asked for, not what
        else the table holds. Parents are followed through the lease items (a parent's lease names
        its own parents), so a lineage past the stream's retention counts as it did when listed.
        """
        leases: dict[str, Lease] = {}
        asked: set[str] = set()
        todo = list(dict.fromkeys(shard_ids))
        while todo:
            asked.update(todo)
            items = self.items.batch_get(todo)
            found = [_lease_from_item(i) for i in items if i.get("item_type", {}).get("S") == "SHARD"]
            leases.update((lease.shard_id, lease) for lease in found)
            todo = list(dict.fromkeys(p for lease in found for p in lease.parent_shard_ids if p not in asked))
        return leases

    def sync_shards(self, shards: Iterable[Shard], start: StartPosition) -> dict[str, Lease]:
        """Create a lease for every shard that has none; existing leases are left as they are.

        A closed shard gets no lease once one of its descendants has one: its lease was removed
        after the children started (or it finished before this application existed), and
        reading it again would deliver its records twice.
        """
        shards = list(shards)
        keys = lease_keys(shards)
        leases = self.leases_of(keys)
        done = _ancestors_of(shards, set(leases))
        new_children: dict[str, list[str]] = {}
        for shard in shards:
            if shard.shard_id in leases or (shard.is_closed and shard.shard_id in done):
                continue
            lease = Lease(
                shard_id=shard.shard_id,
                lease_counter=0,
                start=start,
                parent_shard_ids=shard.parent_shard_ids,
                hash_key_range=shard.hash_key_range,
            )
            if self.put_lease(lease):
                leases[shard.shard_id] = lease
                for parent in shard.parent_shard_ids:
                    new_children.setdefault(parent, []).append(shard.shard_id)
            else:
                # Created concurrently by another worker: read theirs.
                leases = self.leases_of(keys)
        for parent, children in new_children.items():
            if parent in leases:
                self._add_children(parent, children)
        return self.leases_of(keys) if new_children else leases

    def _add_children(self, shard_id: str, children: list[str]) -> None:
        # Only on resharding; ADD on a string set is idempotent, so no condition is needed.
        self.items.update(
            shard_id,
            "ADD child_shard_ids :children",
            condition="attribute_exists(#k)",
            values={":children": {"SS": sorted(children)}},
        )

    def remove_finished_parents(self, leases: dict[str, Lease]) -> list[str]:
        """Delete SHARD_END leases whose children all started; returns the shard ids removed.

        A child has started once it has a checkpoint (or finished itself). Each delete is
        conditional on the lease being unchanged since it was read.
        """
        removed = []
        for lease in leases.values():
            if not lease.shard_ended:
                continue
            children = [c for c in leases.values() if lease.shard_id in c.parent_shard_ids]
            if not children or not all(c.checkpoint is not None or c.shard_ended for c in children):
                continue
            try:
                self.items.delete(
                    lease.shard_id,
                    condition="lease_counter = :seen AND #state = :end",
                    names={"#state": "state"},
                    values={":seen": _n(lease.lease_counter), ":end": _s(STATE_SHARD_END)},
                )
                removed.append(lease.shard_id)
            except ConditionFailed:
                pass
        return sorted(removed)

    def remove_unchanged(self, lease: Lease) -> bool:
        """Delete a lease as read in ``lease``; False when it changed since (taken, released, checkpointed)
        or is gone: conditional on its counter, which every change of the lease moves."""
        try:
            self.items.delete(
                lease.shard_id, condition="lease_counter = :seen", values={":seen": _n(lease.lease_counter)}
            )
        except ConditionFailed:
            return False
        return True

    def put_lease(self, lease: Lease) -> bool:
        """Write a whole lease for a shard that has none yet; False when the shard already has one."""
        try:
            self.items.put(lease_to_item(lease), condition="attribute_not_exists(#k)")
        except ConditionFailed:
            return False
        return True

    def take(self, lease: Lease, owner: str, duration_seconds: float, now: float | None = None) -> Lease | None:
        """Take a lease as read in ``lease``: free, expired, or held by an earlier try of ``owner``'s task
        (:func:`takes_over`); None when it changed since (another worker got there first).

        Whether it may be taken is the caller's decision (:func:`open_to`, ``eligible_leases``); the
        write is conditional on the counter read, which every change of the lease moves.
        """
        now = time.time() if now is None else now
        expires = now + duration_seconds
        try:
            self.items.update(
                lease.shard_id,
                "SET lease_owner = :owner, lease_expires_at = :exp, lease_counter = :next",
                condition="lease_counter = :seen",
                values={
                    ":owner": _s(owner),
                    ":exp": _n(expires),
                    ":next": _n(lease.lease_counter + 1),
                    ":seen": _n(lease.lease_counter),
                },
            )
        except ConditionFailed:
            return None
        return replace(lease, lease_owner=owner, lease_expires_at=expires, lease_counter=lease.lease_counter + 1)

    def checkpoint(
        self, lease: Lease, checkpoint: Checkpoint | None, *, shard_end: bool = False, now: float | None = None
    ) -> Lease:
        """Move the checkpoint of a lease we hold; :class:`LeaseLostError` if we no longer hold it.

        :param now: the ``checkpointed_at`` to record (the caller's clock); the time now when None.
        """
        now = time.time() if now is None else now
        values: dict[str, Any] = {":state": _s(STATE_SHARD_END if shard_end else lease.state), ":now": _n(now)}
        update = "SET lease_counter = :next, #state = :state, checkpointed_at = :now"
        if checkpoint is not None:
            update += ", checkpoint_sequence_number = :seq, checkpoint_sub_sequence_number = :sub"
            values[":seq"] = _s(checkpoint.sequence_number)
            values[":sub"] = _n(checkpoint.sub_sequence_number)
        try:
            self._update_held(lease, update, values, names={"#state": "state"})
        except ConditionFailed as err:
            raise LeaseLostError(
                f"lease on shard {lease.shard_id} in {self.table_name} was taken by another worker; "
                "its checkpoint was not moved"
            ) from err
        return replace(
            lease,
            lease_counter=lease.lease_counter + 1,
            checkpoint=checkpoint or lease.checkpoint,
            state=STATE_SHARD_END if shard_end else lease.state,
            checkpointed_at=now,
        )

    def _update_held(
        self, lease: Lease, update: str, values: dict[str, Any], *, names: dict[str, str] | None = None
    ) -> None:
        """UpdateItem on a lease we hold: conditional on owner and counter, and moving the counter."""
        self.items.update(
            lease.shard_id,
            update,
            condition="lease_owner = :owner AND lease_counter = :seen",
            names=names,
            values={
                ":owner": _s(lease.lease_owner or ""),
                ":seen": _n(lease.lease_counter),
                ":next": _n(lease.lease_counter + 1),
                **values,
            },
        )

    def release(self, lease: Lease) -> None:
        """Give a held lease back; a lease we already lost is left to its new owner."""
        try:
            self._update_held(
                lease,
                "REMOVE lease_owner SET lease_expires_at = :zero, lease_counter = :next",
                {":zero": _n(0)},
            )
        except ConditionFailed:
            pass

    def renew(self, lease: Lease, duration_seconds: float, now: float | None = None) -> Lease:
        """Extend a held lease; :class:`LeaseLostError` if another worker took it meanwhile."""
        now = time.time() if now is None else now
        expires = now + duration_seconds
        try:
            self._update_held(lease, "SET lease_expires_at = :exp, lease_counter = :next", {":exp": _n(expires)})
        except ConditionFailed as err:
            raise LeaseLostError(f"lease on shard {lease.shard_id} in {self.table_name} was lost") from err
        return replace(lease, lease_expires_at=expires, lease_counter=lease.lease_counter + 1)

    def heartbeat(self, worker_id: str, failover_seconds: float, now: float | None = None) -> None:
        """Record that ``worker_id`` is alive; others read it to see who holds what and since when.

        The item carries the table's time to live (:data:`TTL_ATTRIBUTE`): should the try die
        before :meth:`stop_heartbeat`, DynamoDB deletes it a day after its heartbeat expired.
        """
        now = time.time() if now is None else now
        self.items.put(worker_item(worker_id, failover_seconds, now))

    def workers(self) -> dict[str, float]:
        """Last heartbeat (epoch seconds) of every worker item the table holds (a full scan: clean-up only)."""
        return {item["worker_id"]["S"]: float(item["last_heartbeat"]["N"]) for item in self._scan("WORKER")}

    def stop_heartbeat(self, worker_id: str) -> None:
        """Delete a worker's heartbeat item once its try ends, so the table does not grow with history."""
        self.items.delete(f"{WORKER_PREFIX}{worker_id}")

    # -- job runs that go on without their task ---------------------------------------------------

    def record_run(self, batch_id: str, run: Mapping[str, str], now: float | None = None) -> None:
        """Record the job run of batch ``batch_id`` that goes on while its task is deferred
        (:mod:`~airflow_kinesis_snowflake.core.engine.detached`): a later try that plans the same batch
        waits for that run instead of starting another. The item carries the table's time to live.

        :param run: the run, as plain strings (platform, run id, attempt id, outcome key).
        """
        now = time.time() if now is None else now
        self.items.put(
            {
                KEY_ATTRIBUTE: _s(f"{RUN_PREFIX}{batch_id}"),
                "item_type": _s("RUN"),
                "run": {"M": {name: _s(str(value)) for name, value in run.items()}},
                "recorded_at": _n(now),
                TTL_ATTRIBUTE: _n(int(now + RUN_ITEM_RETENTION_SECONDS)),
            }
        )

    def recorded_run(self, batch_id: str) -> dict[str, str] | None:
        """The job run recorded for batch ``batch_id`` (:meth:`record_run`); None when there is none."""
        item = self.items.get(f"{RUN_PREFIX}{batch_id}")
        if item is None or "run" not in item:
            return None
        return {name: value["S"] for name, value in item["run"]["M"].items()}

    def forget_run(self, batch_id: str) -> None:
        """Remove the record of batch ``batch_id``'s job run: the run ended and its task finished the batch."""
        self.items.delete(f"{RUN_PREFIX}{batch_id}")


def worker_item(worker_id: str, failover_seconds: float, now: float) -> dict[str, Any]:
    """The heartbeat item of ``worker_id`` written at ``now``, with its time to live."""
    expires = now + failover_seconds
    return {
        KEY_ATTRIBUTE: _s(f"{WORKER_PREFIX}{worker_id}"),
        "item_type": _s("WORKER"),
        "worker_id": _s(worker_id),
        "last_heartbeat": _n(now),
        "expires_at": _n(expires),
        TTL_ATTRIBUTE: _n(int(expires + WORKER_ITEM_RETENTION_SECONDS)),
    }


def last_activity(marks: TableMetadata, leases: Iterable[Lease], heartbeats: Iterable[float]) -> float:
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
