"""DynamoDB Streams' pure parts: stream records as item changes, TTL removals, the safe-age rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.sources.dynamodb.model import EventName, Version
from airflow_kinesis_snowflake.core.sources.dynamodb.streams import (
    DEFAULT_MAX_CHECKPOINT_AGE,
    StreamGap,
    StreamViewTypeError,
    gap_reason,
    is_ttl_removal,
    to_item_change,
)

CREATED = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
KEYS = {"pk": {"S": "order-1"}, "sk": {"N": "7"}}
IMAGE = {**KEYS, "amount": {"N": "12.50"}}


def record(event: str, *, image: dict[str, Any] | None = None, view: str = "NEW_AND_OLD_IMAGES", **extra: Any) -> Any:
    data: dict[str, Any] = {
        "Keys": KEYS,
        "SequenceNumber": "1100000000017454423009",
        "ApproximateCreationDateTime": CREATED,
        "StreamViewType": view,
    }
    if image is not None:
        data["NewImage"] = image
    return {"eventID": "e-1", "eventName": event, "dynamodb": data, **extra}


TTL_IDENTITY = {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}


@pytest.mark.parametrize("event", ["INSERT", "MODIFY"])
def test_an_insert_or_modify_becomes_a_change_carrying_the_new_image(event: str) -> None:
    change = to_item_change(record(event, image=IMAGE), table="orders", shard_id="shardId-1", snapshot=2)

    assert change.event_name is EventName(event)
    assert change.keys == KEYS and change.image == IMAGE
    assert change.version == Version(2, 1, 1100000000017454423009)
    assert (change.table, change.shard_id, change.event_id) == ("orders", "shardId-1", "e-1")
    assert change.approximate_creation_time == CREATED
    assert not change.ttl_expiry


def test_a_user_removal_has_no_image_and_is_not_a_ttl_expiry() -> None:
    change = to_item_change(record("REMOVE", userIdentity=None), table="orders", shard_id="shardId-1", snapshot=0)

    assert change.is_removal and change.image is None and not change.ttl_expiry


@pytest.mark.parametrize(
    "identity",
    [TTL_IDENTITY, {"type": "Service", "principalId": "dynamodb.amazonaws.com"}],
    ids=["api-fields", "lambda-event-fields"],
)
def test_a_removal_by_the_dynamodb_service_is_a_ttl_expiry(identity: dict[str, str]) -> None:
    change = to_item_change(record("REMOVE", userIdentity=identity), table="orders", shard_id="s", snapshot=0)

    assert change.ttl_expiry


@pytest.mark.parametrize(
    "identity",
    [
        {"Type": "Service", "PrincipalId": "lambda.amazonaws.com"},
        {"Type": "User", "PrincipalId": TTL_IDENTITY["PrincipalId"]},
    ],
)
def test_another_identity_is_not_a_ttl_expiry(identity: dict[str, str]) -> None:
    assert not is_ttl_removal(record("REMOVE", userIdentity=identity))


def test_a_creation_time_given_in_epoch_seconds_is_utc() -> None:
    raw = record("INSERT", image=IMAGE)
    raw["dynamodb"]["ApproximateCreationDateTime"] = CREATED.timestamp()

    assert to_item_change(raw, table="t", shard_id="s", snapshot=0).approximate_creation_time == CREATED


@pytest.mark.parametrize("view", ["KEYS_ONLY", "OLD_IMAGE"])
def test_a_record_without_a_new_image_names_the_view_type_and_the_fix(view: str) -> None:
    with pytest.raises(StreamViewTypeError) as raised:
        to_item_change(record("MODIFY", view=view), table="orders", shard_id="s", snapshot=0)

    message = str(raised.value)
    assert "orders" in message and view in message
    assert "NEW_IMAGE or NEW_AND_OLD_IMAGES" in message


def test_a_checkpoint_within_the_safe_age_is_no_gap() -> None:
    now = CREATED + DEFAULT_MAX_CHECKPOINT_AGE

    assert gap_reason(CREATED, now) is None


def test_a_checkpoint_older_than_the_safe_age_is_a_gap_telling_the_ages() -> None:
    reason = gap_reason(CREATED, CREATED + timedelta(hours=21))

    assert reason is not None
    assert "21.0 hours" in reason and "20.0 hours" in reason


def test_the_safe_age_is_configurable() -> None:
    assert gap_reason(CREATED, CREATED + timedelta(hours=3), timedelta(hours=2)) is not None
    assert gap_reason(CREATED, CREATED + timedelta(hours=3), timedelta(hours=4)) is None


def test_a_stream_gap_names_table_shard_and_checkpoint() -> None:
    gap = StreamGap("orders", "shardId-9", "1100000000017454423042", "trimmed")

    assert (gap.table, gap.shard_id, gap.checkpoint) == ("orders", "shardId-9", "1100000000017454423042")
    assert "orders" in str(gap) and "shardId-9" in str(gap) and "1100000000017454423042" in str(gap)
    assert "from its start" in str(StreamGap("orders", "shardId-9", None, "trimmed"))
