"""Discovery against the moto server: tables found by name or by tags, described, synced or reported."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import (
    KeyAttribute,
    SkipReason,
    TableSelection,
    discover,
    find_tagged_tables,
)
from tests.conftest import unique
from tests.emulators import Emulators
from tests.emulators.servers import REGION

pytestmark = pytest.mark.integration


def create(
    dynamodb: Any,
    name: str,
    *,
    view_type: str | None = "NEW_AND_OLD_IMAGES",
    tags: dict[str, str] | None = None,
    sort_key: bool = False,
    read_capacity: int | None = None,
) -> None:
    keys = [{"AttributeName": "pk", "KeyType": "HASH"}]
    attributes = [{"AttributeName": "pk", "AttributeType": "S"}]
    if sort_key:
        keys.append({"AttributeName": "sk", "KeyType": "RANGE"})
        attributes.append({"AttributeName": "sk", "AttributeType": "N"})
    args: dict[str, Any] = {"TableName": name, "KeySchema": keys, "AttributeDefinitions": attributes}
    if read_capacity is None:
        args["BillingMode"] = "PAY_PER_REQUEST"
    else:
        args["ProvisionedThroughput"] = {"ReadCapacityUnits": read_capacity, "WriteCapacityUnits": 1}
    if view_type is not None:
        args["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": view_type}
    if tags:
        args["Tags"] = [{"Key": key, "Value": value} for key, value in tags.items()]
    dynamodb.create_table(**args)


def test_tables_found_by_tags_are_synced_when_their_stream_has_new_images_and_reported_otherwise(
    emulators: Emulators,
) -> None:
    dynamodb, tagging = emulators.boto3_client("dynamodb"), emulators.boto3_client("resourcegroupstaggingapi")
    ingest, env = unique("ingest"), unique("env")
    prefix = unique("ddb")
    tagged = {ingest: "", env: "prod"}
    create(dynamodb, f"{prefix}-orders", tags=tagged, sort_key=True, read_capacity=40)
    create(dynamodb, f"{prefix}.events", view_type="NEW_IMAGE", tags={ingest: "yes", env: "prod"})
    create(dynamodb, f"{prefix}-plain", view_type=None, tags=tagged)
    create(dynamodb, f"{prefix}-keys", view_type="KEYS_ONLY", tags=tagged)
    create(dynamodb, f"{prefix}-staging", tags={ingest: "", env: "staging"})  # another environment
    create(dynamodb, f"{prefix}-untagged", tags={env: "prod"})  # no ingestion tag

    selection = TableSelection(ingestion_tag_key=ingest, environment_tag_key=env, environment_tag_value="prod")
    discovery = discover(dynamodb, tagging, selection, "DDB_{table}", REGION)

    assert [t.table for t in discovery.targets] == [f"{prefix}-orders", f"{prefix}.events"]
    orders = discovery.target(f"{prefix}-orders")
    described = dynamodb.describe_table(TableName=f"{prefix}-orders")["Table"]
    assert (orders.arn, orders.stream_arn) == (described["TableArn"], described["LatestStreamArn"])
    assert orders.keys == (KeyAttribute("pk", "HASH", "S"), KeyAttribute("sk", "RANGE", "N"))
    assert (orders.read_capacity_units, orders.destination_table) == (
        40,
        "DDB_" + f"{prefix}_ORDERS".upper().replace("-", "_"),
    )
    events = discovery.target(f"{prefix}.events")
    assert (events.on_demand, events.destination_table) == (True, "DDB_" + f"{prefix}_EVENTS".upper().replace("-", "_"))
    assert {(s.table, s.reason) for s in discovery.skipped} == {
        (f"{prefix}-plain", SkipReason.NO_STREAM),
        (f"{prefix}-keys", SkipReason.STREAM_VIEW_TYPE),
    }
    plain = next(s for s in discovery.skipped if s.reason is SkipReason.NO_STREAM)
    assert f"--table-name {prefix}-plain --stream-specification StreamEnabled=true" in plain.fix

    # The fix works: the table is synced at the next discovery.
    dynamodb.update_table(
        TableName=f"{prefix}-plain",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )
    again = discover(dynamodb, tagging, selection, "DDB_{table}", REGION)
    assert f"{prefix}-plain" in [t.table for t in again.targets]
    assert [s.table for s in again.skipped] == [f"{prefix}-keys"]


def test_tags_are_read_from_every_page(emulators: Emulators) -> None:
    dynamodb, tagging = emulators.boto3_client("dynamodb"), emulators.boto3_client("resourcegroupstaggingapi")
    ingest, prefix = unique("ingest"), unique("paged")
    names = [f"{prefix}-{i}" for i in range(5)]
    for name in names:
        create(dynamodb, name, tags={ingest: "on"})
    found = find_tagged_tables(tagging, TableSelection(ingestion_tag_key=ingest), resources_per_page=2)
    assert found == sorted(names)


def test_listed_tables_are_described_and_a_missing_one_is_reported(emulators: Emulators) -> None:
    dynamodb = emulators.boto3_client("dynamodb")
    prefix = unique("listed")
    create(dynamodb, f"{prefix}_orders")
    create(dynamodb, f"{prefix}_old", view_type="OLD_IMAGE")
    selection = TableSelection(tables=(f"{prefix}_orders", f"{prefix}_old", f"{prefix}_gone"))
    discovery = discover(dynamodb, None, selection)
    assert [(t.table, t.destination_table) for t in discovery.targets] == [
        (f"{prefix}_orders", f"{prefix}_ORDERS".upper().replace("-", "_"))
    ]
    assert [(s.table, s.reason) for s in discovery.skipped] == [
        (f"{prefix}_gone", SkipReason.NOT_FOUND),
        (f"{prefix}_old", SkipReason.STREAM_VIEW_TYPE),
    ]
