"""The one way to DynamoDB: every call on a lease table (or a migration's table) goes through here.

:class:`DynamoTable` is one table keyed by a single string attribute: its items (get, batch
gets, put, update, delete, scan, batch writes) and the table itself (describe, create, time to
live, wait, delete).
DynamoDB's errors that callers decide on come out as :class:`ConditionFailed`,
:class:`TableMissing` and :class:`TableInUse`; they are :class:`~botocore.exceptions.ClientError`
subclasses with the same response and message, so code that handles any client error still does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.aws import error_code
from airflow_kinesis_snowflake.core.retry import Backoff, call_with_retries

CONDITIONAL_CHECK_FAILED = "ConditionalCheckFailedException"
RESOURCE_NOT_FOUND = "ResourceNotFoundException"
RESOURCE_IN_USE = "ResourceInUseException"

# In a condition or update expression, ``#k`` names the table's key attribute.
KEY_ALIAS = "#k"
_USES_KEY_ALIAS = re.compile(r"#k\b")

_BATCH_WRITE_LIMIT = 25
_BATCH_WRITE_ATTEMPTS = 10
_BATCH_GET_LIMIT = 100
_BATCH_GET_ATTEMPTS = 10
# What a batch call left unprocessed is asked for again after about 0.05 s, doubling up to 2 s (jittered).
_BATCH_GET_BACKOFF = Backoff(_BATCH_GET_ATTEMPTS, 0.05, 2.0)
_BATCH_WRITE_BACKOFF = Backoff(_BATCH_WRITE_ATTEMPTS, 0.05, 2.0)


class ConditionFailed(ClientError):
    """A conditional write found the item otherwise than its condition required."""


class TableMissing(ClientError):
    """The table does not exist (``ResourceNotFoundException``)."""


class TableInUse(ClientError):
    """The table is being created or deleted, or already exists (``ResourceInUseException``)."""


class ReadIncomplete(RuntimeError):
    """DynamoDB left some keys of a batch read unprocessed however often they were asked for again."""


class _Unprocessed(Exception):
    """A batch call left some keys or writes unprocessed (an answer, not an error of DynamoDB's)."""


def _unprocessed(err: BaseException) -> bool:
    return isinstance(err, _Unprocessed)


def is_conditional_failure(err: ClientError) -> bool:
    """True when a conditional write failed because of its condition."""
    return error_code(err) == CONDITIONAL_CHECK_FAILED


_KINDS: dict[str, type[ClientError]] = {
    CONDITIONAL_CHECK_FAILED: ConditionFailed,
    RESOURCE_NOT_FOUND: TableMissing,
    RESOURCE_IN_USE: TableInUse,
}


@contextmanager
def _errors() -> Iterator[None]:
    """Raise the DynamoDB errors callers decide on as their own :class:`ClientError` subclasses."""
    try:
        yield
    except ClientError as err:
        kind = _KINDS.get(error_code(err))
        if kind is None or isinstance(err, kind):
            raise
        raise kind(err.response, err.operation_name) from err


class DynamoTable:
    """One DynamoDB table keyed by the string attribute ``key_attribute``, through a boto3 client.

    Items are addressed by their key value; ``#k`` in a condition names the key attribute.

    :param client: a boto3 DynamoDB client.
    :param table_name: the table.
    :param key_attribute: its hash key (a string; the table has no range key).
    """

    def __init__(self, client: Any, table_name: str, key_attribute: str) -> None:
        self.client = client
        self.table_name = table_name
        self.key_attribute = key_attribute

    def key(self, value: str) -> dict[str, Any]:
        """The DynamoDB key of the item ``value``."""
        return {self.key_attribute: {"S": value}}

    # -- items ----------------------------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any] | None:
        """The item ``key`` (strongly consistent); None when there is none.

        :raises TableMissing: when the table does not exist.
        """
        with _errors():
            item: dict[str, Any] | None = self.client.get_item(
                TableName=self.table_name, Key=self.key(key), ConsistentRead=True
            ).get("Item")
        return item or None

    def batch_get(self, keys: Iterable[str], *, sleep: Callable[[float], None] = time.sleep) -> list[dict[str, Any]]:
        """The items of ``keys`` that exist, strongly consistent: BatchGetItem, 100 keys a request.

        Keys DynamoDB leaves unprocessed (throttling, the 16 MB response limit) are asked for
        again with exponential backoff.

        :raises ReadIncomplete: when some keys are still unprocessed after 10 attempts.
        :raises TableMissing: when the table does not exist.
        """
        unique_keys = list(dict.fromkeys(keys))
        items: list[dict[str, Any]] = []
        for start in range(0, len(unique_keys), _BATCH_GET_LIMIT):
            pending: dict[str, Any] = {
                self.table_name: {
                    "Keys": [self.key(k) for k in unique_keys[start : start + _BATCH_GET_LIMIT]],
                    "ConsistentRead": True,
                }
            }

            def get() -> None:
                nonlocal pending
                with _errors():
                    response = self.client.batch_get_item(RequestItems=pending)
                items.extend(response.get("Responses", {}).get(self.table_name, []))
                pending = response.get("UnprocessedKeys") or {}
                if pending:
                    raise _Unprocessed(f"{len(pending[self.table_name]['Keys'])} keys left unprocessed")

            try:
                call_with_retries(
                    get,
                    policy=_BATCH_GET_BACKOFF,
                    retry_on=_unprocessed,
                    what=f"BatchGetItem on {self.table_name}",
                    sleep=sleep,
                )
            except _Unprocessed:
                left = len(pending[self.table_name]["Keys"])
                raise ReadIncomplete(
                    f"DynamoDB left {left} keys of {self.table_name!r} unprocessed after {_BATCH_GET_ATTEMPTS} "
                    "attempts (throttled); the next run reads them again"
                ) from None
        return items

    def put(
        self,
        item: Mapping[str, Any],
        *,
        condition: str | None = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """PutItem, conditional on ``condition`` when given.

        :raises ConditionFailed: when the condition does not hold.
        """
        with _errors():
            self.client.put_item(Item=dict(item), **self._conditions(None, condition, names, values))

    def update(
        self,
        key: str,
        expression: str,
        *,
        condition: str | None = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
        returning: str = "NONE",
    ) -> dict[str, Any]:
        """UpdateItem of the item ``key`` with ``expression``, conditional on ``condition`` when given.

        :param returning: UpdateItem's ``ReturnValues`` (``ALL_NEW``: the whole item as written).
        :returns: the attributes ``returning`` asks for (none by default).
        :raises ConditionFailed: when the condition does not hold.
        """
        with _errors():
            response = self.client.update_item(
                Key=self.key(key),
                UpdateExpression=expression,
                **({"ReturnValues": returning} if returning != "NONE" else {}),
                **self._conditions(expression, condition, names, values),
            )
        attributes: dict[str, Any] = response.get("Attributes", {})
        return attributes

    def delete(
        self,
        key: str,
        *,
        condition: str | None = None,
        names: Mapping[str, str] | None = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """DeleteItem of the item ``key``, conditional on ``condition`` when given.

        :raises ConditionFailed: when the condition does not hold.
        """
        with _errors():
            self.client.delete_item(Key=self.key(key), **self._conditions(None, condition, names, values))

    def _conditions(
        self,
        expression: str | None,
        condition: str | None,
        names: Mapping[str, str] | None,
        values: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """The table name, condition and expression attributes of a write (empty ones left out)."""
        kwargs: dict[str, Any] = {"TableName": self.table_name}
        if condition is not None:
            kwargs["ConditionExpression"] = condition
        attribute_names = dict(names or {})
        if any(text and _USES_KEY_ALIAS.search(text) for text in (expression, condition)):
            attribute_names[KEY_ALIAS] = self.key_attribute
        if attribute_names:
            kwargs["ExpressionAttributeNames"] = attribute_names
        if values:
            kwargs["ExpressionAttributeValues"] = dict(values)
        return kwargs

    def scan(self) -> Iterator[dict[str, Any]]:
        """Every item, strongly consistent, across pages."""
        return scan_items(self.client, self.table_name)

    def has_items(self) -> bool:
        """True when the table holds at least one item."""
        with _errors():
            return bool(self.client.scan(TableName=self.table_name, Limit=1).get("Items"))

    def batch_write(self, requests: list[dict[str, Any]], *, sleep: Callable[[float], None] = time.sleep) -> int:
        """BatchWriteItem ``requests`` (put or delete requests) in batches of 25, retrying unprocessed ones.

        Writes DynamoDB leaves unprocessed (throttling) are sent again with exponential backoff.

        :returns: how many writes of the last batch attempted DynamoDB still left unprocessed
            after 10 attempts (0: all written); the batches after it are not attempted.
        """
        for start in range(0, len(requests), _BATCH_WRITE_LIMIT):
            pending: dict[str, Any] = {self.table_name: requests[start : start + _BATCH_WRITE_LIMIT]}

            def write() -> None:
                nonlocal pending
                with _errors():
                    pending = self.client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
                if pending:
                    raise _Unprocessed(f"{len(pending[self.table_name])} writes left unprocessed")

            try:
                call_with_retries(
                    write,
                    policy=_BATCH_WRITE_BACKOFF,
                    retry_on=_unprocessed,
                    what=f"BatchWriteItem on {self.table_name}",
                    sleep=sleep,
                )
            except _Unprocessed:
                return len(pending[self.table_name])
        return 0

    # -- the table itself -----------------------------------------------------------------------

    def describe(self) -> dict[str, Any] | None:
        """DescribeTable's ``Table``, or None when there is no such table."""
        try:
            with _errors():
                table: dict[str, Any] = self.client.describe_table(TableName=self.table_name)["Table"]
        except TableMissing:
            return None
        return table

    def create(self, tags: Mapping[str, str]) -> bool:
        """Create the table on demand (billed per request) with ``tags``; False when it exists already.

        Does not wait for it: see :meth:`wait_until_exists`.
        """
        try:
            with _errors():
                self.client.create_table(
                    TableName=self.table_name,
                    AttributeDefinitions=[{"AttributeName": self.key_attribute, "AttributeType": "S"}],
                    KeySchema=[{"AttributeName": self.key_attribute, "KeyType": "HASH"}],
                    BillingMode="PAY_PER_REQUEST",
                    Tags=[{"Key": name, "Value": value} for name, value in tags.items()],
                )
        except TableInUse:
            return False
        return True

    def enable_time_to_live(self, attribute: str) -> bool:
        """Have DynamoDB delete items once the epoch seconds in ``attribute`` passed; False when it already does.

        DescribeTimeToLive, then UpdateTimeToLive only when time to live is off. A table whose time
        to live is on for another attribute is left as it is (DynamoDB allows one), and so is a
        concurrent enabling (DynamoDB refuses the second one with a ``ValidationException``).
        """
        with _errors():
            current = self.client.describe_time_to_live(TableName=self.table_name)["TimeToLiveDescription"]
        if current.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
            return False
        try:
            with _errors():
                self.client.update_time_to_live(
                    TableName=self.table_name,
                    TimeToLiveSpecification={"Enabled": True, "AttributeName": attribute},
                )
        except ClientError as err:
            if error_code(err) == "ValidationException" and "already enabled" in str(err).lower():
                return False
            raise
        return True

    def wait_until_exists(self, wait_seconds: float) -> None:
        """Wait until the table exists and is ACTIVE (polling every second, up to ``wait_seconds``)."""
        _wait(self.client, "table_exists", self.table_name, wait_seconds)

    def wait_until_gone(self, wait_seconds: float) -> None:
        """Wait until the table no longer exists (polling every second, up to ``wait_seconds``)."""
        _wait(self.client, "table_not_exists", self.table_name, wait_seconds)

    def drop(self, *, wait_seconds: float = 300) -> None:
        """Delete the table and wait until it is gone (a table already gone is fine)."""
        delete_table(self.client, self.table_name, wait_seconds=wait_seconds)


def _wait(client: Any, waiter: str, table_name: str, wait_seconds: float) -> None:
    client.get_waiter(waiter).wait(
        TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": max(1, int(wait_seconds))}
    )


# -- tables of an account -------------------------------------------------------------------------


def scan_items(client: Any, table_name: str) -> Iterator[dict[str, Any]]:
    """Every item of a DynamoDB table, strongly consistent, across pages."""
    kwargs: dict[str, Any] = {"TableName": table_name, "ConsistentRead": True}
    while True:
        with _errors():
            page = client.scan(**kwargs)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def list_table_names(client: Any) -> list[str]:
    """Every DynamoDB table name in the client's region and account."""
    names: list[str] = []
    kwargs: dict[str, Any] = {}
    while True:
        page = client.list_tables(**kwargs)
        names.extend(page.get("TableNames", []))
        if "LastEvaluatedTableName" not in page:
            return names
        kwargs["ExclusiveStartTableName"] = page["LastEvaluatedTableName"]


def table_tags(client: Any, table_arn: str) -> dict[str, str]:
    """The tags of the table ``table_arn``, across pages."""
    tags: dict[str, str] = {}
    kwargs: dict[str, Any] = {"ResourceArn": table_arn}
    while True:
        page = client.list_tags_of_resource(**kwargs)
        tags.update({t["Key"]: t["Value"] for t in page.get("Tags", [])})
        if not page.get("NextToken"):
            return tags
        kwargs["NextToken"] = page["NextToken"]


def delete_table(client: Any, table_name: str, *, wait_seconds: float = 300) -> None:
    """Delete a table and wait until it is gone (a table already gone is fine)."""
    try:
        with _errors():
            client.delete_table(TableName=table_name)
    except TableMissing:
        pass
    _wait(client, "table_not_exists", table_name, wait_seconds)
