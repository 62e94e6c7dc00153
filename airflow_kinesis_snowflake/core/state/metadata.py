"""The metadata item of a lease table: what the table is, whose progress it holds, and its marks.

A lease table holds one item per shard (see :mod:`.leases`) and one metadata item, keyed
:data:`METADATA_KEY`. The metadata item records who made the table, for which stream and
application, the **generation** that keys the ledger's marks, the table's **identity** (connector,
destination, stream ARN and creation time; for a DynamoDB source, one :class:`TableClaim` per
DynamoDB table it syncs), when an ingest run last used it, and the marks of
maintenance: ``superseded_by`` after a reset to a new application name, and a live **reset mark**
while a reset or restore works on the connector (see :mod:`.marks`).

:class:`TableMetadata` is that item, read by :func:`read_marks` (or :meth:`.LeaseTable.metadata`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_kinesis_snowflake.core.state.dynamodb import ConditionFailed, DynamoTable, TableMissing
from airflow_kinesis_snowflake.core.state.errors import IdentityError

SCHEMA_VERSION = 1
CREATED_BY = "airflow-provider-kinesis-snowflake"
CREATED_BY_TAG = "created-by"
APPLICATION_TAG = "application-name"
KEY_ATTRIBUTE = "lease_key"
METADATA_KEY = "#metadata"

# The maintenance marks (see :mod:`.marks`).
SUPERSEDED_BY = "superseded_by"
SUPERSEDED_AT = "superseded_at"
RESET_OWNER = "reset_owner"
RESET_MODE = "reset_mode"
RESET_STARTED_AT = "reset_started_at"
RESET_EXPIRES_AT = "reset_expires_at"

# Who a lease table belongs to (written by the ingestion; tables created by earlier versions lack
# them, so every reader takes each as optional).
CONNECTOR_ID = "connector_id"
DESTINATION = "destination"  # "DATABASE.SCHEMA.TABLE"
STREAM_ARN = "stream_arn"
STREAM_CREATED_AT = "stream_created_at"
LAST_INGEST_AT = "last_ingest_at"  # epoch seconds, every ingest run
# A DynamoDB source's claim on one of its tables: "table:<DynamoDB table>" -> {connector_id, destination}.
TABLE_CLAIM_PREFIX = "table:"


def lease_table_items(client: Any, table_name: str) -> DynamoTable:
    """The items of the lease table ``table_name`` (keyed :data:`KEY_ATTRIBUTE`)."""
    return DynamoTable(client, table_name, KEY_ATTRIBUTE)


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
            CONNECTOR_ID: self.connector_id,
            DESTINATION: self.destination,
            STREAM_ARN: self.stream_arn,
            STREAM_CREATED_AT: self.stream_created_at,
        }
        return {name: value for name, value in values.items() if value is not None}


def stream_created_at(timestamp: datetime) -> str:
    """A ``StreamCreationTimestamp`` as the metadata item stores it: ISO 8601 in UTC."""
    return (timestamp if timestamp.tzinfo else timestamp.replace(tzinfo=UTC)).astimezone(UTC).isoformat()


# What a connector given a new application_name starts from, and what becomes of its old lease table.
KINESIS_FRESH_START = "it reads the stream from its initial_position"
KINESIS_OLD_TABLE = "the clean-up DAG removes the old lease table once unused"
DYNAMODB_FRESH_START = "it takes a snapshot of its own"
DYNAMODB_OLD_TABLE = "delete the old lease table by hand once no connector uses it"


def _connector(connector_id: str | None) -> str:
    """``connector 'orders'``, or ``this connector`` when the caller gave no id."""
    return f"connector {connector_id!r}" if connector_id else "this connector"


def _owner(connector_id: str | None) -> str:
    """The connector that recorded a destination, or what is known of it (earlier versions recorded none)."""
    return f"connector {connector_id!r}" if connector_id else "a connector whose id was not recorded"


def _same_connector(recorded: str | None, current: str | None) -> bool:
    return recorded is not None and recorded == current


def _same_connector_fix(this: str, recorded_destination: str, destination: str, fresh: str, old_table: str) -> str:
    """How a connector that changed its destination goes on: a new application name, or the old destination."""
    return (
        f"to load {destination}, give {this} a new application_name in its connector file ({fresh}; {old_table}); "
        f"to go on loading {recorded_destination} where it stopped, set the destination back"
    )


def _other_connector_fix(recorded: str | None, this: str, recorded_destination: str, fresh: str) -> str:
    """The fix when the destination was recorded by another connector, or by one whose id is unknown."""
    if recorded:
        return (
            f"connector {recorded!r} keeps it and needs no change; give {this} an application_name of its own ({fresh})"
        )
    return (
        f"give {this} an application_name of its own ({fresh}); or, if {recorded_destination} was this "
        "connector's own destination before, set it back to go on loading it where it stopped"
    )


def second_destination(
    application_name: str,
    *,
    recorded_connector: str | None,
    recorded_destination: str,
    connector: str | None,
    destination: str,
    held: str,
    why: str,
    fresh: str = KINESIS_FRESH_START,
    old_table: str = KINESIS_OLD_TABLE,
) -> str:
    """The refusal of a second destination for one application name, naming both sides and the fix.

    When the connector that recorded the destination is this one, it says so (its destination
    changed) and gives the fixes of that case; otherwise it names the other connector, or says that
    its id was not recorded.

    :param held: how the record is held, after the application name (``is already used by``).
    :param why: why one application name serves one destination, for this record.
    :param fresh: what a connector given a new application name starts from.
    :param old_table: what becomes of the old lease table then.
    """
    this = _connector(connector)
    if _same_connector(recorded_connector, connector):
        return (
            f"{this} loaded {recorded_destination} under application name {application_name!r}, and its "
            f"connector file now names {destination}. One application name serves one destination ({why}): "
            f"{_same_connector_fix(this, recorded_destination, destination, fresh, old_table)}. Nothing was read"
        )
    return (
        f"application name {application_name!r} {held} {_owner(recorded_connector)}, which loads "
        f"{recorded_destination}; {this} loads {destination}. One application name serves one destination "
        f"({why}): {_other_connector_fix(recorded_connector, this, recorded_destination, fresh)}. Nothing was read"
    )


def check_identity(table_name: str, recorded: TableIdentity, current: TableIdentity) -> None:
    """Refuse a connector whose destination or stream is not the one the table's progress belongs to.

    Attributes the table does not have yet are not compared (they are recorded on first use).

    :raises IdentityError: naming both sides and the fix.
    """
    if recorded.destination and current.destination and recorded.destination != current.destination:
        raise IdentityError(
            second_destination(
                table_name,
                recorded_connector=recorded.connector_id,
                recorded_destination=recorded.destination,
                connector=current.connector_id,
                destination=current.destination,
                held="is already used by",
                why="its checkpoints and the ledger would split records between the tables",
            )
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


@dataclass(frozen=True)
class TableClaim:
    """Whose progress a DynamoDB source's lease table holds for one DynamoDB table.

    :param table: the DynamoDB table.
    :param destination: ``DATABASE.SCHEMA.TABLE`` it is synced into, upper case.
    :param connector_id: the connector that syncs it.
    """

    table: str
    destination: str
    connector_id: str | None = None

    @property
    def attribute(self) -> str:
        """The metadata item's attribute that holds the claim."""
        return TABLE_CLAIM_PREFIX + self.table

    def to_attribute(self) -> dict[str, Any]:
        fields = {"destination": {"S": self.destination}}
        if self.connector_id is not None:
            fields["connector_id"] = {"S": self.connector_id}
        return {"M": fields}

    @classmethod
    def from_attribute(cls, table: str, value: dict[str, Any]) -> TableClaim:
        fields = value.get("M", {})
        connector = fields.get("connector_id", {}).get("S")
        return cls(table, fields.get("destination", {}).get("S", ""), connector)


def check_claim(table_name: str, recorded: TableClaim, current: TableClaim) -> None:
    """Refuse a DynamoDB connector whose destination for a table is not the one the lease table's
    progress of that table belongs to.

    :raises IdentityError: naming both sides and the fix.
    """
    if recorded.destination == current.destination:
        return
    this = _connector(current.connector_id)
    why = (
        "One application name keeps one copy of each table (the two would share its leases and snapshot cursors, "
        "and neither copy would be whole)"
    )
    if _same_connector(recorded.connector_id, current.connector_id):
        fix = _same_connector_fix(
            this, recorded.destination, current.destination, DYNAMODB_FRESH_START, DYNAMODB_OLD_TABLE
        )
        raise IdentityError(
            f"{this} synced DynamoDB table {current.table!r} into {recorded.destination} under application name "
            f"{table_name!r}, and now names {current.destination} for it. {why}: {fix}. Nothing was read"
        )
    fix = _other_connector_fix(recorded.connector_id, this, recorded.destination, DYNAMODB_FRESH_START)
    raise IdentityError(
        f"application name {table_name!r} already syncs DynamoDB table {current.table!r} into "
        f"{recorded.destination} for {_owner(recorded.connector_id)}; {this} syncs it into "
        f"{current.destination}. {why}: {fix}. Nothing was read"
    )


def check_kinesis_use(table_name: str, recorded: TableMetadata, connector_id: str | None) -> None:
    """Refuse a Kinesis connector a lease table that holds a DynamoDB source's tables.

    :raises IdentityError: naming the DynamoDB connector, its tables and the fix.
    """
    if not recorded.table_claims:
        return
    tables = ", ".join(sorted(claim.table for claim in recorded.table_claims))
    owners = sorted({claim.connector_id or "(unknown)" for claim in recorded.table_claims})
    raise IdentityError(
        f"application name {table_name!r} is already used by DynamoDB connector {', '.join(owners)} for "
        f"tables {tables}; its lease table cannot also hold the progress of Kinesis connector "
        f"{connector_id or '(this one)'!r}. Give connector {connector_id or '(this one)'!r} "
        "an application_name of its own. Nothing was read"
    )


def check_dynamodb_use(table_name: str, recorded: TableMetadata, current: TableClaim) -> None:
    """Refuse a DynamoDB connector a lease table that serves a Kinesis stream.

    A DynamoDB source's lease table names its application as its stream and records no stream ARN.

    :raises IdentityError: naming the Kinesis connector, its stream and the fix.
    """
    if not recorded.stream_arn and recorded.stream_name == table_name:
        return
    raise IdentityError(
        f"application name {table_name!r} is already used by Kinesis connector "
        f"{recorded.connector_id or '(unknown)'!r} for stream {recorded.stream_name!r}; its lease table cannot "
        f"also hold the progress of DynamoDB table {current.table!r}. Give connector "
        f"{current.connector_id or '(this one)'!r} an application_name of its own. Nothing was read"
    )


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
class TableMetadata:
    """A lease table's metadata item (also known as its marks: :data:`TableMarks`).

    :param table_name: the table it was read from.
    :param application_name: the application name the table was created for.
    :param generation_id: the generation keying the ledger's marks.
    :param created_at: when the table was made (ISO 8601; empty when not recorded).
    :param superseded_by: the application name a reset switched to; None while this one is active.
    :param reset: the reset mark, live or expired; None when there is none.
    :param last_ingest_at: when an ingest run last used the table (epoch seconds).
    :param schema_version: the metadata item's layout version.
    :param created_by: who made the table (:data:`CREATED_BY` for this provider's tables).
    :param table_claims: a DynamoDB source's tables and where each is synced (none for Kinesis).
    """

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
    schema_version: int = SCHEMA_VERSION
    created_by: str = CREATED_BY
    table_claims: tuple[TableClaim, ...] = ()

    @property
    def identity(self) -> TableIdentity:
        """Whose progress the table holds, as far as it records it."""
        return TableIdentity(self.connector_id, self.destination, self.stream_arn, self.stream_created_at)

    def live_reset(self, now: float) -> ResetMark | None:
        return self.reset if self.reset is not None and self.reset.is_live(now) else None

    @classmethod
    def from_item(cls, table_name: str, item: dict[str, Any] | None) -> TableMetadata | None:
        """The metadata of a stored item; None when there is no item, or it records no generation."""
        if not item or "generation_id" not in item:
            return None

        def text(name: str) -> str | None:
            value: str | None = item.get(name, {}).get("S")
            return value

        def number(name: str) -> float | None:
            value = item.get(name, {}).get("N")
            return float(value) if value is not None else None

        reset = None
        if RESET_OWNER in item:
            reset = ResetMark(
                owner=item[RESET_OWNER]["S"],
                mode=text(RESET_MODE) or "",
                started_at=number(RESET_STARTED_AT) or 0.0,
                expires_at=number(RESET_EXPIRES_AT) or 0.0,
            )
        return cls(
            table_name=table_name,
            application_name=item["application_name"]["S"],
            stream_name=item["stream_name"]["S"],
            generation_id=item["generation_id"]["S"],
            created_at=text("created_at") or "",
            superseded_by=text(SUPERSEDED_BY),
            superseded_at=number(SUPERSEDED_AT),
            reset=reset,
            connector_id=text(CONNECTOR_ID),
            destination=text(DESTINATION),
            stream_arn=text(STREAM_ARN),
            stream_created_at=text(STREAM_CREATED_AT),
            last_ingest_at=number(LAST_INGEST_AT),
            schema_version=int(number("schema_version") or 0),
            created_by=text("created_by") or "",
            table_claims=tuple(
                TableClaim.from_attribute(name[len(TABLE_CLAIM_PREFIX) :], value)
                for name, value in sorted(item.items())
                if name.startswith(TABLE_CLAIM_PREFIX)
            ),
        )


TableMarks = TableMetadata
"""The name reset, restore and clean-up know the metadata item by."""


def read_marks(client: Any, table_name: str) -> TableMetadata | None:
    """The metadata item of ``table_name``; None when the table or its metadata item does not exist."""
    try:
        return read_metadata(lease_table_items(client, table_name))
    except TableMissing:
        return None


def read_metadata(items: DynamoTable) -> TableMetadata | None:
    """The metadata item of a lease table (strongly consistent); None when it has none.

    :raises TableMissing: when the table does not exist.
    """
    return TableMetadata.from_item(items.table_name, items.get(METADATA_KEY))


def put_metadata(
    items: DynamoTable,
    *,
    stream_name: str,
    application_name: str,
    identity: TableIdentity,
    generation_id: str | None,
) -> None:
    """Write a new table's metadata item; one written meanwhile (by another worker) is kept."""
    try:
        items.put(
            {
                KEY_ATTRIBUTE: {"S": METADATA_KEY},
                "item_type": {"S": "METADATA"},
                "schema_version": {"N": str(SCHEMA_VERSION)},
                "application_name": {"S": application_name},
                "stream_name": {"S": stream_name},
                "generation_id": {"S": generation_id or uuid.uuid4().hex},
                "created_by": {"S": CREATED_BY},
                "created_at": {"S": datetime.now(UTC).isoformat()},
                **{name: {"S": value} for name, value in identity.attributes().items()},
            },
            condition="attribute_not_exists(#k)",
        )
    except ConditionFailed:
        pass


def record_identity(items: DynamoTable, identity: TableIdentity) -> None:
    """Record the identity attributes the metadata item lacks; recorded ones are kept."""
    attributes = identity.attributes()
    if not attributes:
        return
    names = {f"#a{i}": name for i, name in enumerate(attributes)}
    items.update(
        METADATA_KEY,
        "SET " + ", ".join(f"{alias} = if_not_exists({alias}, :v{alias[2:]})" for alias in names),
        condition="attribute_exists(#k)",
        names=names,
        values={f":v{alias[2:]}": {"S": attributes[name]} for alias, name in names.items()},
    )


def record_ingest(items: DynamoTable, now: float | None = None) -> None:
    """Set ``last_ingest_at``: an ingest run used the table (clean-up reads it to tell live tables)."""
    items.update(
        METADATA_KEY,
        f"SET {LAST_INGEST_AT} = :now",
        condition="attribute_exists(#k)",
        values={":now": {"N": str(time.time() if now is None else now)}},
    )


def claim_table(items: DynamoTable, claim: TableClaim) -> TableClaim:
    """Record ``claim`` unless the metadata item holds a claim on its table; the claim held after.

    One conditional UpdateItem (``if_not_exists``): of two connectors claiming a table at once, one wins.
    """
    attributes = items.update(
        METADATA_KEY,
        "SET #c = if_not_exists(#c, :c)",
        condition="attribute_exists(#k)",
        names={"#c": claim.attribute},
        values={":c": claim.to_attribute()},
        returning="ALL_NEW",
    )
    return TableClaim.from_attribute(claim.table, attributes[claim.attribute])
