"""Which tables a DynamoDB connector syncs, where they land, and why the others are skipped (pure decisions)."""

import pytest

from airflow_kinesis_snowflake.core.sources.dynamodb.discovery import (
    DiscoveryError,
    KeyAttribute,
    SkipReason,
    TableFacts,
    TableSelection,
    check_destination_template,
    decide_destinations,
    decide_discovery,
    decide_table,
    destination_table_name,
    table_name_of_arn,
)

ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/{}"
KEYS = (KeyAttribute("pk", "HASH", "S"), KeyAttribute("sk", "RANGE", "N"))


def syncable(name: str, **changes: object) -> TableFacts:
    facts = {
        "name": name,
        "arn": ARN.format(name),
        "status": "ACTIVE",
        "stream_enabled": True,
        "stream_view_type": "NEW_AND_OLD_IMAGES",
        "stream_arn": ARN.format(name) + "/stream/2026-01-01T00:00:00.000",
        "keys": KEYS,
        "read_capacity_units": 100,
    }
    facts.update(changes)
    return TableFacts(**facts)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("table", "template", "expected"),
    [
        ("orders", "{table}", "ORDERS"),
        ("orders-v2.eu", "{table}", "ORDERS_V2_EU"),
        ("orders", "DDB_{table}", "DDB_ORDERS"),
        ("2024-orders", "ddb_{table}_raw", "DDB_2024_ORDERS_RAW"),
        ("orders", "{table}$CDC", "ORDERS$CDC"),
    ],
)
def test_a_destination_is_the_template_filled_with_dots_and_dashes_as_underscores_upper_cased(
    table, template, expected
):
    assert destination_table_name(table, template) == expected


@pytest.mark.parametrize("template", ["ORDERS", "{table}_{table}", "DDB-{table}", "{name}", "1_{table}", "A.{table}"])
def test_a_template_without_one_table_placeholder_or_with_other_characters_is_refused(template):
    with pytest.raises(ValueError, match=r"must hold \{table\} once"):
        check_destination_template(template)


def test_a_table_whose_name_starts_with_a_digit_needs_a_prefix():
    with pytest.raises(DiscoveryError, match=r"'2024-orders' would land in '2024_ORDERS'.*DDB_\{table\}"):
        destination_table_name("2024-orders")


def test_two_tables_landing_in_the_same_destination_are_an_error_naming_both():
    with pytest.raises(DiscoveryError, match=r"'orders-v2' and 'orders\.v2' would both land in .* ORDERS_V2"):
        decide_destinations(["orders-v2", "orders.v2", "other"])
    with pytest.raises(DiscoveryError, match="'Orders' and 'orders'"):
        decide_destinations(["orders", "Orders"], "DDB_{table}")
    assert decide_destinations(["orders-v2", "orders_v3"]) == {"orders-v2": "ORDERS_V2", "orders_v3": "ORDERS_V3"}


def test_a_table_with_a_stream_of_new_images_is_synced_with_its_keys_capacity_and_destination():
    on_demand = syncable("events", stream_view_type="NEW_IMAGE", read_capacity_units=None, status="UPDATING")
    discovery = decide_discovery([syncable("orders"), on_demand], "DDB_{table}")
    assert discovery.skipped == ()
    orders, events = discovery.target("orders"), discovery.target("events")
    assert (orders.destination_table, orders.arn, orders.stream_arn) == (
        "DDB_ORDERS",
        ARN.format("orders"),
        ARN.format("orders") + "/stream/2026-01-01T00:00:00.000",
    )
    assert (orders.partition_key.name, orders.sort_key, orders.on_demand) == ("pk", KEYS[1], False)
    assert (events.destination_table, events.on_demand, events.read_capacity_units) == ("DDB_EVENTS", True, None)
    assert [t.table for t in discovery.targets] == ["events", "orders"]


@pytest.mark.parametrize(
    ("facts", "reason", "detail", "fix"),
    [
        (TableFacts("gone", found=False), SkipReason.NOT_FOUND, "does not exist", "source.tables"),
        (TableFacts("secret", denied="not authorized"), SkipReason.ACCESS_DENIED, "not authorized", "policy"),
        (syncable("new", status="CREATING"), SkipReason.NOT_ACTIVE, "CREATING, not ACTIVE", "next run"),
        (syncable("old", status="ARCHIVED"), SkipReason.NOT_ACTIVE, "ARCHIVED", "backup"),
        (
            syncable("plain", stream_enabled=False, stream_view_type=None, stream_arn=None),
            SkipReason.NO_STREAM,
            "no stream",
            "aws dynamodb update-table --table-name plain --stream-specification "
            "StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES --region eu-west-1",
        ),
        (
            syncable("keys", stream_view_type="KEYS_ONLY"),
            SkipReason.STREAM_VIEW_TYPE,
            "carries KEYS_ONLY",
            "aws dynamodb update-table --table-name keys --stream-specification StreamEnabled=false --region "
            "eu-west-1 && aws dynamodb update-table --table-name keys --stream-specification "
            "StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES",
        ),
        (syncable("old_image", stream_view_type="OLD_IMAGE"), SkipReason.STREAM_VIEW_TYPE, "OLD_IMAGE", "disable"),
    ],
)
def test_a_table_that_cannot_be_synced_is_reported_with_its_reason_and_fix(facts, reason, detail, fix):
    skipped = decide_table(facts, "eu-west-1")
    assert skipped is not None
    assert (skipped.table, skipped.reason) == (facts.name, reason)
    assert detail in skipped.detail
    assert fix in skipped.fix
    assert decide_discovery([facts, syncable("orders")], region="eu-west-1").skipped == (skipped,)


def test_a_collision_is_found_among_every_existing_candidate_also_one_not_synced_yet():
    no_stream = syncable("orders.v2", stream_enabled=False, stream_view_type=None, stream_arn=None)
    with pytest.raises(DiscoveryError, match=r"'orders-v2' and 'orders\.v2'"):
        decide_discovery([syncable("orders-v2"), no_stream])
    assert decide_discovery([syncable("orders-v2"), TableFacts("orders.v2", found=False)]).targets[0].table == (
        "orders-v2"
    )


def test_facts_are_read_from_a_describe_table_response():
    described = {
        "TableName": "orders",
        "TableArn": ARN.format("orders"),
        "TableStatus": "ACTIVE",
        "KeySchema": [{"AttributeName": "sk", "KeyType": "RANGE"}, {"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "B"},
            {"AttributeName": "sk", "AttributeType": "N"},
            {"AttributeName": "gsi", "AttributeType": "S"},
        ],
        "ProvisionedThroughput": {"ReadCapacityUnits": 0, "WriteCapacityUnits": 0},
        "BillingModeSummary": {"BillingMode": "PAY_PER_REQUEST"},
        "StreamSpecification": {"StreamEnabled": False},
        "LatestStreamArn": ARN.format("orders") + "/stream/old",
    }
    facts = TableFacts.from_description(described)
    assert facts.keys == (KeyAttribute("pk", "HASH", "B"), KeyAttribute("sk", "RANGE", "N"))
    assert (facts.read_capacity_units, facts.stream_enabled, facts.stream_arn) == (None, False, None)
    provisioned = {**described, "BillingModeSummary": {"BillingMode": "PROVISIONED"}}
    provisioned["ProvisionedThroughput"] = {"ReadCapacityUnits": 25, "WriteCapacityUnits": 5}
    assert TableFacts.from_description(provisioned).read_capacity_units == 25
    del provisioned["BillingModeSummary"]  # tables from before on-demand billing have none
    assert TableFacts.from_description(provisioned).read_capacity_units == 25


def test_tags_select_the_ingestion_key_with_any_value_and_the_environment_key_with_its_value():
    selection = TableSelection(ingestion_tag_key="ingest", environment_tag_key="env", environment_tag_value="prod")
    assert selection.by_tags
    assert selection.tag_filters() == [{"Key": "ingest"}, {"Key": "env", "Values": ["prod"]}]
    assert TableSelection(ingestion_tag_key="ingest").tag_filters() == [{"Key": "ingest"}]
    assert TableSelection(tables=("a",)).tag_filters() == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "either by name"),
        ({"tables": ("a",), "ingestion_tag_key": "i"}, "either by name"),
        ({"ingestion_tag_key": "i", "environment_tag_key": "env"}, "go together"),
        ({"tables": ("a",), "environment_tag_key": "e", "environment_tag_value": "p"}, "only filters"),
    ],
)
def test_a_selection_is_a_list_or_tags(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TableSelection(**kwargs)


def test_a_table_arn_names_its_table():
    assert table_name_of_arn(ARN.format("orders.v2")) == "orders.v2"
    with pytest.raises(ValueError, match="not a DynamoDB table ARN"):
        table_name_of_arn("arn:aws:kinesis:eu-west-1:123456789012:stream/orders")
