"""The one DynamoDB wrapper against moto: items, conditions, errors and the table itself."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.aws import error_code
from airflow_kinesis_snowflake.core.state.dynamodb import (
    ConditionFailed,
    DynamoTable,
    TableMissing,
    delete_table,
    is_conditional_failure,
    list_table_names,
    table_tags,
)
from tests.conftest import unique
from tests.emulators import Emulators

pytestmark = pytest.mark.integration


def make_table(emulators: Emulators) -> DynamoTable:
    table = DynamoTable(emulators.boto3_client("dynamodb"), unique("wrapped"), "pk")
    assert table.create({"created-by": "tests"}) is True
    table.wait_until_exists(30)
    return table


def test_a_failed_condition_is_a_client_error_callers_can_tell_apart(emulators: Emulators) -> None:
    table = make_table(emulators)
    table.put({"pk": {"S": "a"}, "n": {"N": "1"}}, condition="attribute_not_exists(#k)")
    with pytest.raises(ConditionFailed) as failed:
        table.put({"pk": {"S": "a"}, "n": {"N": "2"}}, condition="attribute_not_exists(#k)")
    assert isinstance(failed.value, ClientError)
    assert is_conditional_failure(failed.value) and error_code(failed.value) == "ConditionalCheckFailedException"
    assert isinstance(failed.value.__cause__, ClientError)  # DynamoDB's own error is kept
    assert table.get("a") == {"pk": {"S": "a"}, "n": {"N": "1"}}  # nothing was written


def test_updates_and_deletes_are_conditional_on_what_they_name(emulators: Emulators) -> None:
    table = make_table(emulators)
    table.put({"pk": {"S": "a"}, "n": {"N": "1"}})
    table.update(
        "a", "SET #n = :two", condition="#n = :one", names={"#n": "n"}, values={":one": {"N": "1"}, ":two": {"N": "2"}}
    )
    with pytest.raises(ConditionFailed):
        table.update(
            "a",
            "SET #n = :two",
            condition="#n = :one",
            names={"#n": "n"},
            values={":one": {"N": "1"}, ":two": {"N": "3"}},
        )
    with pytest.raises(ConditionFailed):
        table.update("missing", "SET n = :one", condition="attribute_exists(#k)", values={":one": {"N": "1"}})
    assert table.get("missing") is None
    with pytest.raises(ConditionFailed):
        table.delete("a", condition="n = :one", values={":one": {"N": "1"}})
    table.delete("a", condition="n = :two", values={":two": {"N": "2"}})
    assert table.get("a") is None


def test_scans_and_batch_writes_cover_every_item(emulators: Emulators) -> None:
    table = make_table(emulators)
    assert table.has_items() is False
    assert table.batch_write([{"PutRequest": {"Item": {"pk": {"S": f"k{i:02}"}}}} for i in range(60)]) == 0
    assert table.has_items() is True
    assert sorted(item["pk"]["S"] for item in table.scan()) == [f"k{i:02}" for i in range(60)]
    assert table.batch_write([{"DeleteRequest": {"Key": table.key(f"k{i:02}")}} for i in range(30)]) == 0
    assert len(list(table.scan())) == 30


def test_a_missing_table_is_none_where_absence_is_an_answer(emulators: Emulators) -> None:
    client = emulators.boto3_client("dynamodb")
    missing = DynamoTable(client, unique("missing"), "pk")
    assert missing.describe() is None
    with pytest.raises(TableMissing):
        missing.get("a")
    missing.drop(wait_seconds=5)  # already gone: fine
    table = make_table(emulators)
    assert table.create({}) is False  # exists already
    description = table.describe()
    assert description is not None and description["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert table_tags(client, description["TableArn"]) == {"created-by": "tests"}
    assert table.table_name in list_table_names(client)
    delete_table(client, table.table_name, wait_seconds=30)
    assert table.describe() is None
    assert table.table_name not in list_table_names(client)
