"""An item the unpacked layout cannot load is set aside whole, naming its table, key, attribute and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kinesis_snowflake.core.load.dynamodb_failures import (
    failure_values,
    set_aside,
    unloadable_attribute,
)
from airflow_kinesis_snowflake.core.load.dynamodb_rows import KeyAttribute, Layout
from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, ItemChange, Version

KEYS = (KeyAttribute("pk", "S"),)


def change(**attributes: Any) -> ItemChange:
    image = {"pk": {"S": "user#1"}, **{name: {"S": str(value)} for name, value in attributes.items()}}
    return ItemChange("customers", {"pk": {"S": "user#1"}}, image, EventName.MODIFY, Version.of_stream(0, "17"))


@pytest.mark.parametrize(
    ("attributes", "attribute", "why"),
    [
        ({"x" * 300: 1}, "x" * 300, "its name is 300 characters, longer than a column name can be (255)"),
        ({"line\nbreak": 1}, "line\nbreak", "its name holds a control character"),
        ({"KINESISMETADATA": 1}, "KINESISMETADATA", "KINESISMETADATA is a column of this source's own"),
        ({"DYNAMODBMETADATA": 1}, "DYNAMODBMETADATA", "DYNAMODBMETADATA is a column of this source's own"),
        ({"ITEM": 1}, "ITEM", "ITEM is a column of this source's own"),
        ({"dynamodb_deleted": 1}, "dynamodb_deleted", "DYNAMODB_DELETED is a column of this source's own"),
        ({"PK": 1}, "PK", "it maps to the key column PK of key attribute 'pk'"),
        ({"Name": 1, "name": 2}, "name", "it and attribute 'Name' differ only by case"),
        ({"SS": 1, "ß": 2}, "ß", "it and attribute 'SS' differ only by case"),
    ],
    ids=["300-chars", "newline", "kinesis-metadata", "dynamodb-metadata", "item", "deleted", "key", "case", "sharp-s"],
)
def test_an_attribute_no_column_can_take_is_named_with_why(
    attributes: dict[str, Any], attribute: str, why: str
) -> None:
    found = unloadable_attribute(change(**attributes), KEYS)
    assert found is not None
    assert found[0] == attribute and found[1].startswith(why)


def test_an_ordinary_item_and_a_removal_have_nothing_unloadable() -> None:
    assert unloadable_attribute(change(name="Ada", Age=3, city="x"), KEYS) is None
    removal = ItemChange("customers", {"pk": {"S": "user#1"}}, None, EventName.REMOVE, Version.of_stream(0, "18"))
    assert unloadable_attribute(removal, KEYS) is None


def test_a_set_aside_change_is_staged_as_a_removal_of_its_version_and_kept_whole() -> None:
    good, bad = change(name="Ada"), change(Name="Ada", name="Bob")

    staged, failures = set_aside([good, bad], KEYS, Layout.UNPACKED)

    assert staged[0] == good
    assert staged[1].event_name is EventName.REMOVE and staged[1].image is None
    assert staged[1].version == bad.version and staged[1].keys == bad.keys
    assert [f.change for f in failures] == [bad]
    reason = failures[0].reason
    assert reason.startswith("""item {"pk":"user#1"} of DynamoDB table 'customers': attribute 'name' cannot be""")
    assert reason.endswith(
        "use layout: packed, whose ITEM column holds any attribute name, or rename the attribute in the writer"
    )
    values = failure_values(failures[0], "batch-1")
    assert values[:3] == ("user#1", '{"pk":"user#1"}', bad.version.to_text())  # key column, key text, version
    assert '"Name":"Ada"' in values[4] and values[5] == "name" and values[7] == "batch-1"


def test_the_packed_layout_sets_nothing_aside() -> None:
    bad = change(Name="Ada", name="Bob")
    assert set_aside([bad], KEYS, Layout.PACKED) == ([bad], [])


NUMBER_KEYS = (KeyAttribute("pk", "S"), KeyAttribute("ts", "N", numeric=True))


def timed(ts: str, event: EventName = EventName.MODIFY) -> ItemChange:
    keys = {"pk": {"S": "user#1"}, "ts": {"N": ts}}
    image = None if event is EventName.REMOVE else {**keys, "name": {"S": "Ada"}}
    return ItemChange("events", keys, image, event, Version.of_stream(0, "17"))


@pytest.mark.parametrize("layout", [Layout.PACKED, Layout.UNPACKED])
def test_a_change_of_a_key_its_number_column_cannot_hold_is_kept_and_nothing_of_it_is_staged(layout: Layout) -> None:
    whole, fraction, huge = timed("1700000118"), timed("1.5"), timed("1E+40")
    removal = timed("2.5", EventName.REMOVE)

    staged, failures = set_aside([whole, fraction, huge, removal], NUMBER_KEYS, layout)

    assert staged == [whole]
    assert [f.change for f in failures] == [fraction, huge, removal]
    assert failures[0].attribute == "ts" and failures[0].key_values == ("user#1", None)
    assert "key attribute 'ts' is 1.5, which its NUMBER(38,0) key column cannot hold" in failures[0].reason
    assert "number_keys: text keeps every number key exactly" in failures[0].reason
    assert failure_values(failures[2], "b")[5] is None  # a removal keeps no item
