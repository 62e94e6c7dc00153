"""The DynamoDB lease/checkpoint table, named after the application name.

One item per shard holds its lease (owner, counter, expiry) and its checkpoint; one metadata item
describes the table. Every ownership change and every checkpoint is a conditional write on the
lease counter, so a worker that lost its lease cannot move a checkpoint.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.model import Checkpoint, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.sources.shards import Shard

SCHEMA_VERSION = 1
CREATED_BY = "airflow-provider-kinesis-snowflake"
CREATED_BY_TAG = "created-by"
APPLICATION_TAG = "application-name"
METADATA_KEY = "#metadata"
WORKER_PREFIX = "#worker#"
KEY_ATTRIBUTE = "lease_key"

STATE_ACTIVE = "ACTIVE"
STATE_SHARD_END = "SHARD_END"


class LeaseTableError(RuntimeError):
    """The lease table is missing, foreign or unusable."""


class IdentityError(LeaseTableError):
    """The lease table belongs to another destination, or to an earlier stream of the same name."""


class LeaseLostError(RuntimeError):
    """A conditional write failed: another worker took the lease, or the checkpoint moved."""


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


@dataclass(frozen=True)
class TableIdentity:
    """What a lease table's progress belongs to, recorded in its metadata item.

    :param connector_id: the connector that uses the application name.
    :param destination: ``DATABASE.SCHEMA.TABLE``, upper case.
    :param stream_arn: the stream's ARN (DescribeStreamSummary ``StreamARN``).
    :param stream_created_at: the stream's ``StreamCreationTimestamp``, ISO 8601 UTC.
    """

    connector_id: str | None = None
    destination: str | None = None
    stream_arn: str | None = None
    stream_created_at: str | None = None

    def attributes(self) -> dict[str, str]:
        """The metadata attributes this identity sets (None values are left out)."""
        values = {
            "connector_id": self.connector_id,
            "destination": self.destination,
            "stream_arn": self.stream_arn,
            "stream_created_at": self.stream_created_at,
        }
        return {name: value for name, value in values.items() if value is not None}


def stream_created_at(timestamp: datetime) -> str:
    """A ``StreamCreationTimestamp`` as the metadata item stores it: ISO 8601 in UTC."""
    return (timestamp if timestamp.tzinfo else timestamp.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


@dataclass(frozen=True)
class TableMetadata:
    application_name: str
    stream_name: str
    generation_id: str
    schema_version: int
    created_by: str
    created_at: str
    identity: TableIdentity = TableIdentity()
    last_ingest_at: float | None = None


def check_identity(table_name: str, recorded: TableIdentity, current: TableIdentity) -> None:
    """Refuse a connector whose destination or stream is not the one the table's progress belongs to.

    Attributes the table does not have yet are not compared (they are recorded on first use).

    :raises IdentityError: naming both sides and the fix.
    """
    if recorded.destination and current.destination and recorded.destination != current.destination:
        raise IdentityError(
            f"application name {table_name!r} is already used by connector {recorded.connector_id or '(unknown)'!r}, "
            f"which loads {recorded.destination}; connector {current.connector_id or '(unknown)'!r} loads "
            f"{current.destination}. One application name serves one destination (its checkpoints and the "
            "ledger would split records between the tables): connector "
            f"{recorded.connector_id or '(unknown)'!r} keeps it and needs no change; give connector "
            f"{current.connector_id or '(this one)'!r} an application_name of its own. Nothing was read"
        )
    if (
        recorded.stream_created_at
        and current.stream_created_at
        and recorded.stream_created_at != current.stream_created_at
    ):
        raise IdentityError(
            f"stream {current.stream_arn or '(unknown)'} was deleted and created again: lease table {table_name!r} "
            f"holds checkpoints of the stream created at {recorded.stream_created_at}, the stream now was created "
            f"at {current.stream_created_at}, and its sequence numbers mean nothing there. Trigger the connector's "
            "reset DAG (mode delete_table or new_application_name) to start reading the new stream. Nothing was read"
        )
    if recorded.stream_arn and current.stream_arn and recorded.stream_arn != current.stream_arn:
        raise IdentityError(
            f"lease table {table_name!r} holds checkpoints of stream {recorded.stream_arn}, not of "
            f"{current.stream_arn}; trigger the connector's reset DAG, or use another application_name. "
            "Nothing was read"
        )


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


def scan_items(client: Any, table_name: str) -> Iterator[dict[str, Any]]:
    """Every item of a DynamoDB table, strongly consistent, across pages."""
    kwargs: dict[str, Any] = {"TableName": table_name, "ConsistentRead": True}
    while True:
        page = client.scan(**kwargs)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


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


def _is_conditional_failure(err: ClientError) -> bool:
    return err.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


class LeaseTable:
    """Reads and writes one application's lease table through a boto3 DynamoDB client."""

    def __init__(self, client: Any, table_name: str) -> None:
        self.client = client
        self.table_name = table_name

    # -- the table itself ---------------------------------------------------------------------

    def describe(self) -> dict[str, Any] | None:
        """DescribeTable's ``Table``, or None when there is no such table."""
        try:
            table: dict[str, Any] = self.client.describe_table(TableName=self.table_name)["Table"]
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return None
            raise
        return table

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
        """Create the table (on-demand, tagged) and its metadata item; False when it already existed.

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
            try:
                self.client.create_table(
                    TableName=self.table_name,
                    AttributeDefinitions=[{"AttributeName": KEY_ATTRIBUTE, "AttributeType": "S"}],
                    KeySchema=[{"AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH"}],
                    BillingMode="PAY_PER_REQUEST",
                    Tags=[
                        {"Key": CREATED_BY_TAG, "Value": CREATED_BY},
                        {"Key": APPLICATION_TAG, "Value": application_name},
                    ],
                )
                created = True
            except ClientError as err:
                # Another worker created it between our check and our call: that is fine.
                if err.response.get("Error", {}).get("Code") != "ResourceInUseException":
                    raise
            self.client.get_waiter("table_exists").wait(
                TableName=self.table_name,
                WaiterConfig={"Delay": 1, "MaxAttempts": max(1, int(wait_seconds))},
            )
        metadata = self.metadata()
        if metadata is None:
            if not created and self._has_items():
                raise LeaseTableError(
                    f"DynamoDB table {self.table_name!r} exists but was not created by {CREATED_BY} "
                    "(no metadata item). Choose another application_name, or migrate a KCL table."
                )
            self._put_metadata(stream_name, application_name, identity or TableIdentity(), generation_id)
        elif metadata.stream_name != stream_name:
            raise LeaseTableError(
                f"lease table {self.table_name!r} tracks stream {metadata.stream_name!r}, not "
                f"{stream_name!r}; use another application_name for this stream"
            )
        return created

    def _has_items(self) -> bool:
        return bool(self.client.scan(TableName=self.table_name, Limit=1).get("Items"))

    def _put_metadata(
        self, stream_name: str, application_name: str, identity: TableIdentity, generation_id: str | None
    ) -> None:
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item={
                    KEY_ATTRIBUTE: _s(METADATA_KEY),
                    "item_type": _s("METADATA"),
                    "schema_version": _n(SCHEMA_VERSION),
                    "application_name": _s(application_name),
                    "stream_name": _s(stream_name),
                    "generation_id": _s(generation_id or uuid.uuid4().hex),
                    "created_by": _s(CREATED_BY),
                    "created_at": _s(datetime.now(UTC).isoformat()),
                    **{name: _s(value) for name, value in identity.attributes().items()},
                },
                ConditionExpression="attribute_not_exists(#k)",
                ExpressionAttributeNames={"#k": KEY_ATTRIBUTE},
            )
        except ClientError as err:
            if not _is_conditional_failure(err):
                raise

    def metadata(self) -> TableMetadata | None:
        item = self.client.get_item(
            TableName=self.table_name, Key={KEY_ATTRIBUTE: _s(METADATA_KEY)}, ConsistentRead=True
        ).get("Item")
        if not item:
            return None
        return TableMetadata(
            application_name=item["application_name"]["S"],
            stream_name=item["stream_name"]["S"],
            generation_id=item["generation_id"]["S"],
            schema_version=int(item["schema_version"]["N"]),
            created_by=item["created_by"]["S"],
            created_at=item["created_at"]["S"],
            identity=TableIdentity(
                connector_id=item.get("connector_id", {}).get("S"),
                destination=item.get("destination", {}).get("S"),
                stream_arn=item.get("stream_arn", {}).get("S"),
                stream_created_at=item.get("stream_created_at", {}).get("S"),
            ),
            last_ingest_at=float(item["last_ingest_at"]["N"]) if "last_ingest_at" in item else None,
        )

    def record_identity(self, identity: TableIdentity) -> None:
        """Record the identity attributes the metadata item lacks; recorded ones are kept."""
        attributes = identity.attributes()
        if not attributes:
            return
        names = {f"#a{i}": name for i, name in enumerate(attributes)}
        self.client.update_item(
            TableName=self.table_name,
            Key={KEY_ATTRIBUTE: _s(METADATA_KEY)},
            UpdateExpression="SET " + ", ".join(f"{alias} = if_not_exists({alias}, :v{alias[2:]})" for alias in names),
            ConditionExpression="attribute_exists(#k)",
            ExpressionAttributeNames={"#k": KEY_ATTRIBUTE, **names},
            ExpressionAttributeValues={f":v{alias[2:]}": _s(attributes[name]) for alias, name in names.items()},
        )

    def record_ingest(self, now: float | None = None) -> None:
        """Set ``last_ingest_at``: an ingest run used the table (clean-up reads it to tell live tables)."""
        self.client.update_item(
            TableName=self.table_name,
            Key={KEY_ATTRIBUTE: _s(METADATA_KEY)},
            UpdateExpression="SET last_ingest_at = :now",
            ConditionExpression="attribute_exists(#k)",
            ExpressionAttributeNames={"#k": KEY_ATTRIBUTE},
            ExpressionAttributeValues={":now": _n(time.time() if now is None else now)},
        )

    # -- shard leases ---------------------------------------------------------------------------

    def _scan(self, item_type: str) -> Iterator[dict[str, Any]]:
        """Every item of one type, strongly consistent, across pages."""
        return (i for i in scan_items(self.client, self.table_name) if i.get("item_type", {}).get("S") == item_type)

    def leases(self) -> dict[str, Lease]:
        """Every shard lease, by shard id (strongly consistent)."""
        leases = (_lease_from_item(item) for item in self._scan("SHARD"))
        return {lease.shard_id: lease for lease in leases}

    def sync_shards(self, shards: Iterable[Shard], start: StartPosition) -> dict[str, Lease]:
        """Create a lease for every shard that has none; existing leases are left as they are.

        A closed shard gets no lease once one of its descendants has one: its lease was removed
        after the children started (or it finished before this application existed), and
        reading it again would deliver its records twice.
        """
        shards = list(shards)
        leases = self.leases()
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
                leases = self.leases()
        for parent, children in new_children.items():
            if parent in leases:
                self._add_children(parent, children)
        return self.leases() if new_children else leases

    def _add_children(self, shard_id: str, children: list[str]) -> None:
        # Only on resharding; ADD on a string set is idempotent, so no condition is needed.
        self.client.update_item(
            TableName=self.table_name,
            Key={KEY_ATTRIBUTE: _s(shard_id)},
            UpdateExpression="ADD child_shard_ids :children",
            ConditionExpression="attribute_exists(#k)",
            ExpressionAttributeNames={"#k": KEY_ATTRIBUTE},
            ExpressionAttributeValues={":children": {"SS": sorted(children)}},
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
                self.client.delete_item(
                    TableName=self.table_name,
                    Key={KEY_ATTRIBUTE: _s(lease.shard_id)},
                    ConditionExpression="lease_counter = :seen AND #state = :end",
                    ExpressionAttributeNames={"#state": "state"},
                    ExpressionAttributeValues={":seen": _n(lease.lease_counter), ":end": _s(STATE_SHARD_END)},
                )
                removed.append(lease.shard_id)
            except ClientError as err:
                if not _is_conditional_failure(err):
                    raise
        return sorted(removed)

    def put_lease(self, lease: Lease) -> bool:
        """Write a whole lease for a shard that has none yet; False when the shard already has one."""
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=lease_to_item(lease),
                ConditionExpression="attribute_not_exists(#k)",
                ExpressionAttributeNames={"#k": KEY_ATTRIBUTE},
            )
        except ClientError as err:
            if _is_conditional_failure(err):
                return False
            raise
        return True

    def take(self, lease: Lease, owner: str, duration_seconds: float, now: float | None = None) -> Lease | None:
        """Take a lease that is free or expired; None when another worker got there first."""
        now = time.time() if now is None else now
        expires = now + duration_seconds
        try:
            self.client.update_item(
                TableName=self.table_name,
                Key={KEY_ATTRIBUTE: _s(lease.shard_id)},
                UpdateExpression="SET lease_owner = :owner, lease_expires_at = :exp, lease_counter = :next",
                ConditionExpression="lease_counter = :seen",
                ExpressionAttributeValues={
                    ":owner": _s(owner),
                    ":exp": _n(expires),
                    ":next": _n(lease.lease_counter + 1),
                    ":seen": _n(lease.lease_counter),
                },
            )
        except ClientError as err:
            if _is_conditional_failure(err):
                return None
            raise
        return replace(lease, lease_owner=owner, lease_expires_at=expires, lease_counter=lease.lease_counter + 1)

    def checkpoint(self, lease: Lease, checkpoint: Checkpoint | None, *, shard_end: bool = False) -> Lease:
        """Move the checkpoint of a lease we hold; :class:`LeaseLostError` if we no longer hold it."""
        now = time.time()
        values: dict[str, Any] = {":state": _s(STATE_SHARD_END if shard_end else lease.state), ":now": _n(now)}
        update = "SET lease_counter = :next, #state = :state, checkpointed_at = :now"
        if checkpoint is not None:
            update += ", checkpoint_sequence_number = :seq, checkpoint_sub_sequence_number = :sub"
            values[":seq"] = _s(checkpoint.sequence_number)
            values[":sub"] = _n(checkpoint.sub_sequence_number)
        try:
            self._update_held(lease, update, values, ExpressionAttributeNames={"#state": "state"})
        except ClientError as err:
            if _is_conditional_failure(err):
                raise LeaseLostError(
                    f"lease on shard {lease.shard_id} in {self.table_name} was taken by another worker; "
                    "its checkpoint was not moved"
                ) from err
            raise
        return replace(
            lease,
            lease_counter=lease.lease_counter + 1,
            checkpoint=checkpoint or lease.checkpoint,
            state=STATE_SHARD_END if shard_end else lease.state,
            checkpointed_at=now,
        )

    def _update_held(self, lease: Lease, update: str, values: dict[str, Any], **kwargs: Any) -> None:
        """UpdateItem on a lease we hold: conditional on owner and counter, and moving the counter."""
        self.client.update_item(
            TableName=self.table_name,
            Key={KEY_ATTRIBUTE: _s(lease.shard_id)},
            UpdateExpression=update,
            ConditionExpression="lease_owner = :owner AND lease_counter = :seen",
            ExpressionAttributeValues={
                ":owner": _s(lease.lease_owner or ""),
                ":seen": _n(lease.lease_counter),
                ":next": _n(lease.lease_counter + 1),
                **values,
            },
            **kwargs,
        )

    def release(self, lease: Lease) -> None:
        """Give a held lease back; a lease we already lost is left to its new owner."""
        try:
            self._update_held(
                lease,
                "REMOVE lease_owner SET lease_expires_at = :zero, lease_counter = :next",
                {":zero": _n(0)},
            )
        except ClientError as err:
            if not _is_conditional_failure(err):
                raise

    def renew(self, lease: Lease, duration_seconds: float, now: float | None = None) -> Lease:
        """Extend a held lease; :class:`LeaseLostError` if another worker took it meanwhile."""
        now = time.time() if now is None else now
        expires = now + duration_seconds
        try:
            self._update_held(lease, "SET lease_expires_at = :exp, lease_counter = :next", {":exp": _n(expires)})
        except ClientError as err:
            if _is_conditional_failure(err):
                raise LeaseLostError(f"lease on shard {lease.shard_id} in {self.table_name} was lost") from err
            raise
        return replace(lease, lease_expires_at=expires, lease_counter=lease.lease_counter + 1)

    def heartbeat(self, worker_id: str, failover_seconds: float, now: float | None = None) -> None:
        """Record that ``worker_id`` is alive; others read it to see who holds what and since when."""
        now = time.time() if now is None else now
        self.client.put_item(
            TableName=self.table_name,
            Item={
                KEY_ATTRIBUTE: _s(f"{WORKER_PREFIX}{worker_id}"),
                "item_type": _s("WORKER"),
                "worker_id": _s(worker_id),
                "last_heartbeat": _n(now),
                "expires_at": _n(now + failover_seconds),
            },
        )

    def workers(self) -> dict[str, float]:
        """Last heartbeat (epoch seconds) of every worker that ever wrote one."""
        return {item["worker_id"]["S"]: float(item["last_heartbeat"]["N"]) for item in self._scan("WORKER")}

    def stop_heartbeat(self, worker_id: str, now: float | None = None) -> None:
        """Mark a worker's heartbeat as ended (kept, not deleted: the table shows who ran when)."""
        now = time.time() if now is None else now
        self.client.update_item(
            TableName=self.table_name,
            Key={KEY_ATTRIBUTE: _s(f"{WORKER_PREFIX}{worker_id}")},
            UpdateExpression="SET stopped_at = :now, expires_at = :now",
            ExpressionAttributeValues={":now": _n(now)},
        )
