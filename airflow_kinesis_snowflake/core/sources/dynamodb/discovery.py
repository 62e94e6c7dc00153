"""Which DynamoDB tables a connector syncs, and why the others it was pointed at are not synced.

A connector names its tables in one of two ways (:class:`TableSelection`):

* an explicit list of table names;
* tags, found through the Resource Groups Tagging API (``GetResources`` with
  ``ResourceTypeFilters=["dynamodb:table"]``, every page): a table is a candidate when it carries
  the ingestion tag key **with any value** (an empty value too; remove the tag to stop syncing a
  table) and, when an environment tag key is configured, that tag with exactly the environment
  value. The tagging API is eventually consistent: a table tagged a moment ago may show at the
  next run only.

Every candidate is described (``DescribeTable``), and :func:`decide_discovery` decides over those
facts, with no I/O: a table is synced when it is ``ACTIVE`` (or ``UPDATING``, which AWS documents
as available for reads and which a table passes through whenever an index or its stream setting
changes) and its stream is enabled with ``NEW_IMAGE`` or ``NEW_AND_OLD_IMAGES`` (the stream must
carry the item's new image: the destination holds the item, not the change). Every other
candidate is reported as a :class:`SkippedTable` with the reason and the fix, such as the exact
``aws dynamodb update-table`` command that enables the stream.

**Destination names.** Each table lands in its own Snowflake table, named by a template in which
``{table}`` stands for the DynamoDB table's name (default ``{table}``; a prefix is a template such
as ``DDB_{table}``). The result is upper-cased, as Snowflake resolves unquoted identifiers, and
the two characters a DynamoDB table name may hold but an unquoted Snowflake identifier may not,
``.`` and ``-``, become ``_``. So ``orders-v2.eu`` lands in ``ORDERS_V2_EU``. Two candidates
that land in the same destination (``orders-v2`` and ``orders.v2``, or ``Orders`` and ``orders``)
are an error naming both, as is a name that is no unquoted identifier (a table name starting with
a digit needs a template with a prefix).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.aws import error_code

DEFAULT_DESTINATION_TEMPLATE = "{table}"
TABLE_PLACEHOLDER = "{table}"
# DynamoDB table names: 3-255 characters of [a-zA-Z0-9_.-].
TABLE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{3,255}$")
# An unquoted Snowflake identifier (as core.admin.provisioning.IDENTIFIER), which a destination is.
SNOWFLAKE_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,254}$")
# The characters a DynamoDB table name may hold and an unquoted Snowflake identifier may not.
DESTINATION_CHARACTER_MAP = str.maketrans({".": "_", "-": "_"})
TEMPLATE_RULE = (
    "must hold {table} once, with letters, digits, '_' and '$' around it (e.g. '{table}' or 'DDB_{table}'); "
    "'.' and '-' of a table name become '_', and the result is upper-cased"
)

# What a stream must carry: the item's new image.
SYNCED_VIEW_TYPES = ("NEW_IMAGE", "NEW_AND_OLD_IMAGES")
RECOMMENDED_VIEW_TYPE = "NEW_AND_OLD_IMAGES"
# Table statuses whose table serves reads (AWS: UPDATING "remains available for data operations").
READABLE_STATUSES = ("ACTIVE", "UPDATING")
PAY_PER_REQUEST = "PAY_PER_REQUEST"
TABLE_RESOURCE_TYPE = "dynamodb:table"

_ACCESS_DENIED = ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation")


class DiscoveryError(ValueError):
    """The connector's tables cannot be decided: a template or a name collision, or the tags cannot be read."""


class SkipReason(StrEnum):
    """Why a table the connector was pointed at is not synced."""

    NOT_FOUND = "not-found"
    ACCESS_DENIED = "access-denied"
    NOT_ACTIVE = "not-active"
    NO_STREAM = "no-stream"
    STREAM_VIEW_TYPE = "stream-view-type"


@dataclass(frozen=True)
class TableSelection:
    """Which tables a connector is pointed at: an explicit list, or tags.

    :param tables: the tables' names; None to discover them by tags.
    :param ingestion_tag_key: the tag a table carries (any value) to be a candidate.
    :param environment_tag_key: with ``environment_tag_value``, a tag whose value must match too.
    :param environment_tag_value: the value ``environment_tag_key`` must have.
    """

    tables: tuple[str, ...] | None = None
    ingestion_tag_key: str | None = None
    environment_tag_key: str | None = None
    environment_tag_value: str | None = None

    def __post_init__(self) -> None:
        if (self.tables is None) == (self.ingestion_tag_key is None):
            raise ValueError("select tables either by name (tables) or by tags (ingestion_tag_key), not both")
        if (self.environment_tag_key is None) != (self.environment_tag_value is None):
            raise ValueError("environment_tag_key and environment_tag_value go together")
        if self.tables is not None and self.environment_tag_key is not None:
            raise ValueError("the environment tag only filters tables discovered by tags")

    @property
    def by_tags(self) -> bool:
        return self.tables is None

    def tag_filters(self) -> list[dict[str, Any]]:
        """``GetResources``' TagFilters: the ingestion key with any value, the environment key with its value."""
        if self.ingestion_tag_key is None:
            return []
        filters: list[dict[str, Any]] = [{"Key": self.ingestion_tag_key}]
        if self.environment_tag_key is not None:
            filters.append({"Key": self.environment_tag_key, "Values": [self.environment_tag_value]})
        return filters


@dataclass(frozen=True)
class KeyAttribute:
    """One attribute of a table's primary key.

    :param name: the attribute's name.
    :param key_type: ``HASH`` (partition key) or ``RANGE`` (sort key).
    :param attribute_type: ``S``, ``N`` or ``B``.
    """

    name: str
    key_type: str
    attribute_type: str


@dataclass(frozen=True)
class TableFacts:
    """What ``DescribeTable`` said of one candidate, or why it said nothing.

    :param name: the table's name.
    :param found: False when the table does not exist (``ResourceNotFoundException``).
    :param denied: the error message when describing it was not allowed; None otherwise.
    :param arn: the table's ARN.
    :param status: ``TableStatus``.
    :param stream_enabled: the stream specification's ``StreamEnabled``.
    :param stream_view_type: ``StreamViewType``, None without a stream.
    :param stream_arn: ``LatestStreamArn``, None without a stream.
    :param keys: the primary key, partition key first, with the attributes' types.
    :param read_capacity_units: the provisioned read capacity; None for an on-demand table.
    """

    name: str
    found: bool = True
    denied: str | None = None
    arn: str | None = None
    status: str | None = None
    stream_enabled: bool = False
    stream_view_type: str | None = None
    stream_arn: str | None = None
    keys: tuple[KeyAttribute, ...] = ()
    read_capacity_units: int | None = None

    @classmethod
    def from_description(cls, table: dict[str, Any]) -> TableFacts:
        """The facts of a ``DescribeTable`` response's ``Table``."""
        types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
        schema = sorted(table.get("KeySchema", []), key=lambda k: k["KeyType"] != "HASH")
        keys = tuple(KeyAttribute(k["AttributeName"], k["KeyType"], types.get(k["AttributeName"], "")) for k in schema)
        stream = table.get("StreamSpecification") or {}
        enabled = bool(stream.get("StreamEnabled"))
        on_demand = (table.get("BillingModeSummary") or {}).get("BillingMode") == PAY_PER_REQUEST
        capacity = (table.get("ProvisionedThroughput") or {}).get("ReadCapacityUnits")
        return cls(
            name=table["TableName"],
            arn=table.get("TableArn"),
            status=table.get("TableStatus"),
            stream_enabled=enabled,
            stream_view_type=stream.get("StreamViewType") if enabled else None,
            stream_arn=table.get("LatestStreamArn") if enabled else None,
            keys=keys,
            read_capacity_units=None if on_demand or capacity is None else int(capacity),
        )


@dataclass(frozen=True)
class SyncTarget:
    """A table the connector syncs.

    :param table: the DynamoDB table's name.
    :param arn: its ARN.
    :param stream_arn: its stream's ARN (``LatestStreamArn``).
    :param keys: its primary key, partition key first, with the attributes' types.
    :param read_capacity_units: its provisioned read capacity; None when it is on demand.
    :param destination_table: the Snowflake table it lands in (an upper-case unquoted identifier).
    """

    table: str
    arn: str
    stream_arn: str
    keys: tuple[KeyAttribute, ...]
    read_capacity_units: int | None
    destination_table: str

    @property
    def on_demand(self) -> bool:
        return self.read_capacity_units is None

    @property
    def partition_key(self) -> KeyAttribute:
        return self.keys[0]

    @property
    def sort_key(self) -> KeyAttribute | None:
        return self.keys[1] if len(self.keys) > 1 else None


@dataclass(frozen=True)
class SkippedTable:
    """A table the connector was pointed at but does not sync.

    :param table: the table's name.
    :param reason: why, as a code.
    :param detail: why, in words.
    :param fix: what makes it syncable.
    """

    table: str
    reason: SkipReason
    detail: str
    fix: str

    def describe(self) -> str:
        return f"{self.table}: {self.detail}; {self.fix}"


@dataclass(frozen=True)
class Discovery:
    """The tables a connector syncs, and those it skips with the reason, both in table-name order."""

    targets: tuple[SyncTarget, ...]
    skipped: tuple[SkippedTable, ...]

    def target(self, table: str) -> SyncTarget:
        """The target of ``table``; :class:`KeyError` when it is not synced."""
        for target in self.targets:
            if target.table == table:
                return target
        raise KeyError(table)


# -- Destination names -------------------------------------------------------------------------


def check_destination_template(template: str) -> str:
    """Return ``template`` if it makes a destination of every table name; :class:`ValueError` with the rule if not."""
    if template.count(TABLE_PLACEHOLDER) != 1:
        raise ValueError(TEMPLATE_RULE)
    before, after = template.split(TABLE_PLACEHOLDER)
    if not re.fullmatch(r"[A-Za-z0-9_$]*", before + after) or (before[:1].isdigit() or before[:1] == "$"):
        raise ValueError(TEMPLATE_RULE)
    return template


def destination_table_name(table: str, template: str = DEFAULT_DESTINATION_TEMPLATE) -> str:
    """The Snowflake table ``table`` lands in: the template filled, ``.`` and ``-`` as ``_``, upper-cased.

    :raises DiscoveryError: when the result is no unquoted Snowflake identifier (a name starting
        with a digit, or longer than 255 characters), naming the table and the fix.
    """
    check_destination_template(template)
    name = template.replace(TABLE_PLACEHOLDER, table.translate(DESTINATION_CHARACTER_MAP)).upper()
    if not SNOWFLAKE_IDENTIFIER.match(name):
        raise DiscoveryError(
            f"table {table!r} would land in {name!r} (destination_table_template {template!r}), which is not a "
            "Snowflake identifier (letters, digits, '_' and '$', not starting with a digit, at most 255); "
            "set destination_table_template to one with a prefix, e.g. 'DDB_{table}'"
        )
    return name


def decide_destinations(tables: Iterable[str], template: str = DEFAULT_DESTINATION_TEMPLATE) -> dict[str, str]:
    """Each table's destination name; two tables with the same destination are an error naming both.

    :raises DiscoveryError: on a collision or a name that is no identifier.
    """
    destinations: dict[str, str] = {}
    owners: dict[str, str] = {}
    for table in sorted(set(tables)):
        name = destination_table_name(table, template)
        if name in owners:
            raise DiscoveryError(
                f"tables {owners[name]!r} and {table!r} would both land in Snowflake table {name} "
                f"(destination_table_template {template!r}; '.' and '-' become '_', names are upper-cased): "
                "sync only one of them, or rename one"
            )
        owners[name] = table
        destinations[table] = name
    return destinations


# -- Which tables are synced -------------------------------------------------------------------


def _region_option(region: str | None) -> str:
    return f" --region {region}" if region else ""


def enable_stream_command(table: str, region: str | None = None) -> str:
    """The AWS CLI command that enables ``table``'s stream with the item's new and old images."""
    return (
        f"aws dynamodb update-table --table-name {table} --stream-specification "
        f"StreamEnabled=true,StreamViewType={RECOMMENDED_VIEW_TYPE}{_region_option(region)}"
    )


def disable_stream_command(table: str, region: str | None = None) -> str:
    """The AWS CLI command that disables ``table``'s stream (before enabling it with another view type)."""
    return (
        f"aws dynamodb update-table --table-name {table} --stream-specification StreamEnabled=false"
        f"{_region_option(region)}"
    )


_STATUS_FIX = {
    "CREATING": "wait until it is ACTIVE; the next run takes it",
    "DELETING": "the table is being deleted; remove it from the connector's tables or its ingestion tag",
    "ARCHIVING": "the table is being archived (its encryption key is not accessible); restore access to its KMS key",
    "ARCHIVED": "the table is archived (its encryption key was not accessible); restore it from a backup",
    "INACCESSIBLE_ENCRYPTION_CREDENTIALS": "restore the table's access to its KMS key",
}


def decide_table(facts: TableFacts, region: str | None = None) -> SkippedTable | None:
    """Why the connector cannot sync the described table, with the fix; None when it can.

    :param facts: the table, as described (or not found, or not allowed).
    :param region: the table's region, written into the fix's commands.
    """
    name = facts.name
    if not facts.found:
        return SkippedTable(
            name,
            SkipReason.NOT_FOUND,
            "the table does not exist",
            "check the name and the connector's region, or remove the table from source.tables",
        )
    if facts.denied is not None:
        return SkippedTable(
            name,
            SkipReason.ACCESS_DENIED,
            f"dynamodb:DescribeTable was denied ({facts.denied})",
            "grant the connector's role the policy `python -m airflow_kinesis_snowflake policy` prints",
        )
    if facts.status not in READABLE_STATUSES:
        return SkippedTable(
            name,
            SkipReason.NOT_ACTIVE,
            f"the table is {facts.status}, not ACTIVE",
            _STATUS_FIX.get(str(facts.status), "wait until it is ACTIVE; the next run takes it"),
        )
    if not facts.stream_enabled:
        return SkippedTable(
            name,
            SkipReason.NO_STREAM,
            "the table has no stream enabled",
            f"enable it with the new images: {enable_stream_command(name, region)}",
        )
    if facts.stream_view_type not in SYNCED_VIEW_TYPES:
        return SkippedTable(
            name,
            SkipReason.STREAM_VIEW_TYPE,
            f"its stream carries {facts.stream_view_type}, not the item's new image ({' or '.join(SYNCED_VIEW_TYPES)})",
            "a stream's view type cannot be changed: disable the stream, then enable it again "
            f"(a new stream, with a new ARN): {disable_stream_command(name, region)} && "
            f"{enable_stream_command(name, region)}",
        )
    return None


def decide_discovery(
    facts: Sequence[TableFacts], template: str = DEFAULT_DESTINATION_TEMPLATE, region: str | None = None
) -> Discovery:
    """Which of the described candidates are synced, and where they land; the others with reason and fix.

    Destination names are decided over every candidate that exists, synced or not, so that a
    collision shows before the second table becomes syncable, not on the day it does.

    :param facts: one per candidate table.
    :param template: the destination name template (see the module docstring).
    :param region: the tables' region, written into the fixes' commands.
    :raises DiscoveryError: when two candidates land in the same destination, or one in no identifier.
    """
    destinations = decide_destinations((f.name for f in facts if f.found), template)
    targets: list[SyncTarget] = []
    skipped: list[SkippedTable] = []
    for table in sorted(facts, key=lambda f: f.name):
        reason = decide_table(table, region)
        if reason is not None:
            skipped.append(reason)
            continue
        assert table.arn is not None and table.stream_arn is not None
        targets.append(
            SyncTarget(
                table=table.name,
                arn=table.arn,
                stream_arn=table.stream_arn,
                keys=table.keys,
                read_capacity_units=table.read_capacity_units,
                destination_table=destinations[table.name],
            )
        )
    return Discovery(tuple(targets), tuple(skipped))


# -- I/O ---------------------------------------------------------------------------------------


def table_name_of_arn(arn: str) -> str:
    """``orders`` of ``arn:aws:dynamodb:eu-west-1:123456789012:table/orders``."""
    resource = arn.split(":", 5)[-1]
    if not resource.startswith("table/"):
        raise ValueError(f"not a DynamoDB table ARN: {arn!r}")
    return resource.removeprefix("table/").split("/", 1)[0]


def find_tagged_tables(tagging: Any, selection: TableSelection, *, resources_per_page: int = 100) -> list[str]:
    """The names of the tables carrying the selection's tags, from every page of ``GetResources``.

    :param tagging: a ``resourcegroupstaggingapi`` client in the tables' region.
    :param resources_per_page: ``ResourcesPerPage`` of each call (AWS allows at most 100).
    :raises DiscoveryError: when the tags cannot be read (``tag:GetResources`` denied), with the fix.
    """
    names: set[str] = set()
    try:
        for page in tagging.get_paginator("get_resources").paginate(
            ResourceTypeFilters=[TABLE_RESOURCE_TYPE],
            TagFilters=selection.tag_filters(),
            ResourcesPerPage=resources_per_page,
        ):
            names.update(table_name_of_arn(r["ResourceARN"]) for r in page.get("ResourceTagMappingList", []))
    except ClientError as err:
        if error_code(err) in _ACCESS_DENIED:
            raise DiscoveryError(
                f"cannot discover DynamoDB tables by tags: tag:GetResources was denied ({err}); grant it to the "
                "connector's role (the policy `python -m airflow_kinesis_snowflake policy` prints), or list the "
                "tables in source.tables"
            ) from err
        raise
    return sorted(names)


def describe_table(dynamodb: Any, name: str) -> TableFacts:
    """``DescribeTable`` of one table as :class:`TableFacts`; a missing or forbidden table is a fact too."""
    try:
        table = dynamodb.describe_table(TableName=name)["Table"]
    except ClientError as err:
        code = error_code(err)
        if code == "ResourceNotFoundException":
            return TableFacts(name, found=False)
        if code in _ACCESS_DENIED:
            return TableFacts(name, denied=str(err.response.get("Error", {}).get("Message") or code))
        raise
    return TableFacts.from_description(table)


def discover(
    dynamodb: Any,
    tagging: Any | None,
    selection: TableSelection,
    template: str = DEFAULT_DESTINATION_TEMPLATE,
    region: str | None = None,
) -> Discovery:
    """Find the candidates (the list, or the tags), describe each, and decide (:func:`decide_discovery`).

    :param dynamodb: a DynamoDB client in the tables' region.
    :param tagging: a ``resourcegroupstaggingapi`` client there; only used when selecting by tags.
    :param selection: the list, or the tags.
    :param template: the destination name template.
    :param region: the tables' region, written into the fixes' commands.
    """
    if selection.tables is not None:
        names = sorted(set(selection.tables))
    else:
        if tagging is None:
            raise ValueError("discovering tables by tags needs a resourcegroupstaggingapi client")
        names = find_tagged_tables(tagging, selection)
    return decide_discovery([describe_table(dynamodb, name) for name in names], template, region)
