"""Shard leases without AWS: where an application first started, when a table was last active, who
owns a lease and when a retry takes it over, which leases a batch reads, and its worker item."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.model import InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import eligible_leases
from airflow_kinesis_snowflake.core.sources.shards import Shard
from airflow_kinesis_snowflake.core.state.dynamodb import DynamoTable, ReadIncomplete
from airflow_kinesis_snowflake.core.state.leases import (
    TTL_ATTRIBUTE,
    WORKER_ITEM_RETENTION_SECONDS,
    Lease,
    LeaseOwner,
    earliest_start,
    last_activity,
    lease_keys,
    open_to,
    takes_over,
    task_key,
    worker_item,
)
from airflow_kinesis_snowflake.core.state.metadata import TableMarks

# The retry helper's logger: its lines, one per attempt (other loggers may write to the same capture).
RETRY_LOGGER = "airflow_kinesis_snowflake.core.retry"


def test_earliest_start_prefers_trim_horizon_then_the_earliest_time() -> None:
    early = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 1, tzinfo=UTC))
    late = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 2, 1, tzinfo=UTC))
    trim = StartPosition(InitialPosition.TRIM_HORIZON)
    assert earliest_start([Lease("a", 0, late), Lease("b", 0, early)]) == early
    assert earliest_start([Lease("a", 0, late), Lease("b", 0, trim)]) == trim
    assert earliest_start([]) is None


TRIM = StartPosition(InitialPosition.TRIM_HORIZON)


def marks(**kwargs: object) -> TableMarks:
    base: dict[str, object] = {
        "table_name": "t",
        "application_name": "t",
        "stream_name": "s",
        "generation_id": "g",
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    return TableMarks(**(base | kwargs))  # type: ignore[arg-type]


def test_last_activity_is_the_latest_moment() -> None:
    created = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert last_activity(marks(), [], []) == created
    leases = [Lease("a", 0, TRIM, checkpointed_at=created + 10), Lease("b", 0, TRIM, checkpointed_at=created + 5)]
    assert last_activity(marks(), leases, [created + 20.0, created + 1.0]) == created + 20
    assert last_activity(marks(superseded_at=created + 99), leases, []) == created + 99
    # A hand-edited creation time does not hide the other moments.
    assert last_activity(marks(created_at="garbage"), leases, []) == created + 10


# -- who owns a lease, and when a retry takes it over ----------------------------------------------

RUN = task_key("kinesis_snowflake_orders_ingest", "ingest", "manual__2026-01-01T00:00:00+00:00/rerun", 3)


def test_an_owner_names_the_task_and_its_try_and_reads_back() -> None:
    owner = LeaseOwner(RUN, 2, "0a1b2c3d")
    assert str(owner) == f"{RUN}/try-2/0a1b2c3d"
    assert RUN == "kinesis_snowflake_orders_ingest/ingest/manual__2026-01-01T00:00:00+00:00/rerun/3"
    assert LeaseOwner.parse(str(owner)) == owner  # a run id holding "/" reads back whole
    # Owners written otherwise name no task: maintenance, an older provider, a KCL worker.
    for text in (None, "", "reset/dag/manual/1", "dag/run/1/0a1b2c3d", "worker-a", "x/try-one/ab", "/try-1/ab"):
        assert LeaseOwner.parse(text) is None, text


def test_only_a_later_try_of_the_same_task_takes_over() -> None:
    first, second, third = (str(LeaseOwner(RUN, n, f"n{n}")) for n in (1, 2, 3))
    other_run = str(LeaseOwner(task_key("kinesis_snowflake_orders_ingest", "ingest", "manual__other"), 1, "n9"))
    mapped = str(LeaseOwner(task_key("kinesis_snowflake_orders_ingest", "ingest", "manual__2026", 4), 1, "n8"))
    assert takes_over(second, first) and takes_over(third, first) and takes_over(third, second)
    assert not takes_over(first, second)  # an earlier try never takes back
    assert not takes_over(second, str(LeaseOwner(RUN, 2, "twin")))  # the same try: wait
    assert not takes_over(second, other_run) and not takes_over(second, mapped)
    assert not takes_over(second, "dag/run/1/0a1b2c3d")  # an older owner format waits for expiry
    assert not takes_over("dag/run/2/0a1b2c3d", first)
    assert not takes_over(second, None)


def test_a_lease_held_by_an_earlier_try_shows_free_to_the_retry_only() -> None:
    first, retry = str(LeaseOwner(RUN, 1, "a")), str(LeaseOwner(RUN, 2, "b"))
    leases = {
        "s1": Lease("s1", 7, TRIM, lease_owner=first, lease_expires_at=500.0),
        "s2": Lease("s2", 3, TRIM, lease_owner="someone-else", lease_expires_at=500.0),
        "s3": Lease("s3", 4, TRIM, lease_owner=first, lease_expires_at=50.0),  # expired anyway
        "s4": Lease("s4", 1, TRIM),
    }
    seen = open_to(leases, retry, now=100.0)
    assert seen["s1"] == Lease("s1", 7, TRIM)  # free, with the counter it was read at
    assert seen["s2"] == leases["s2"] and seen["s3"] == leases["s3"] and seen["s4"] == leases["s4"]
    assert [lease.shard_id for lease in eligible_leases(seen, 100.0)] == ["s1", "s3", "s4"]
    assert open_to(leases, "someone-else", now=100.0) == leases


def test_a_batch_reads_the_listed_shards_and_the_parents_they_name() -> None:
    shards = [
        Shard("shardId-3", parent_shard_ids=("shardId-1", "shardId-2")),
        Shard("shardId-1", parent_shard_ids=("shardId-0",)),
        Shard("shardId-4", parent_shard_ids=("shardId-3",)),
    ]
    assert lease_keys(shards) == ["shardId-3", "shardId-1", "shardId-2", "shardId-0", "shardId-4"]


def test_a_worker_item_expires_a_day_after_its_heartbeat() -> None:
    item = worker_item("w", 300, now=1_000.5)
    assert item["lease_key"] == {"S": "#worker#w"} and item["item_type"] == {"S": "WORKER"}
    assert item["expires_at"] == {"N": "1300.5"}
    assert item[TTL_ATTRIBUTE] == {"N": str(1_300 + WORKER_ITEM_RETENTION_SECONDS)}


class ThrottledClient:
    """A DynamoDB client that leaves some keys of each BatchGetItem unprocessed the first times."""

    def __init__(self, items: dict[str, dict[str, Any]], throttle: int) -> None:
        self.items, self.throttle = items, throttle
        self.requests: list[list[str]] = []

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        ((table, request),) = RequestItems.items()
        assert request["ConsistentRead"] is True
        keys = [k["lease_key"]["S"] for k in request["Keys"]]
        assert len(keys) <= 100
        self.requests.append(keys)
        served, left = (keys[:1], keys[1:]) if self.throttle > 0 else (keys, [])
        self.throttle -= 1
        response: dict[str, Any] = {"Responses": {table: [self.items[k] for k in served if k in self.items]}}
        if left:
            response["UnprocessedKeys"] = {table: {**request, "Keys": [{"lease_key": {"S": k}} for k in left]}}
        return response


def test_batch_gets_ask_again_for_unprocessed_keys_and_give_up_loudly(caplog: pytest.LogCaptureFixture) -> None:
    items = {f"k{i}": {"lease_key": {"S": f"k{i}"}} for i in range(250)}
    client = ThrottledClient(items, throttle=2)
    pauses: list[float] = []
    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.retry"):
        got = DynamoTable(client, "t", "lease_key").batch_get([*items, "missing", "k0"], sleep=pauses.append)
    assert sorted(i["lease_key"]["S"] for i in got) == sorted(items)
    assert [len(r) for r in client.requests] == [100, 99, 98, 100, 51]  # 100 a request, the rest asked again
    # Exponential backoff from 0.05 s with jitter: each pause in [b/2, b] of b = 0.05, 0.1.
    assert len(pauses) == 2 and 0.025 <= pauses[0] <= 0.05 <= pauses[1] <= 0.1
    assert [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER] == [
        f"BatchGetItem on t failed (attempt 1 of 10): 99 keys left unprocessed; retrying in {pauses[0]:.2f} s",
        f"BatchGetItem on t failed (attempt 2 of 10): 98 keys left unprocessed; retrying in {pauses[1]:.2f} s",
    ]
    pauses.clear()
    throttled = ThrottledClient(items, throttle=99)
    with pytest.raises(ReadIncomplete, match="unprocessed after 10 attempts"):
        DynamoTable(throttled, "t", "lease_key").batch_get(items, sleep=pauses.append)
    assert len(throttled.requests) == 10 and len(pauses) == 9 and max(pauses) <= 2.0


class UnprocessedWrites:
    """A DynamoDB client that leaves the last write of each BatchWriteItem unprocessed the first times."""

    def __init__(self, throttle: int) -> None:
        self.throttle = throttle
        self.requests: list[int] = []

    def batch_write_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        ((table, requests),) = RequestItems.items()
        self.requests.append(len(requests))
        self.throttle -= 1
        if self.throttle >= 0 and len(requests) > 1:
            return {"UnprocessedItems": {table: requests[1:]}}
        return {"UnprocessedItems": {}}


def test_batch_writes_send_unprocessed_writes_again_after_jittered_pauses(caplog: pytest.LogCaptureFixture) -> None:
    writes = [{"PutRequest": {"Item": {"lease_key": {"S": f"k{i}"}}}} for i in range(30)]
    client = UnprocessedWrites(throttle=2)
    pauses: list[float] = []
    with caplog.at_level(logging.WARNING, logger="airflow_kinesis_snowflake.core.retry"):
        assert DynamoTable(client, "t", "lease_key").batch_write(writes, sleep=pauses.append) == 0
    assert client.requests == [25, 24, 23, 5]
    assert len(pauses) == 2 and 0.025 <= pauses[0] <= 0.05 <= pauses[1] <= 0.1
    assert [r.getMessage() for r in caplog.records if r.name == RETRY_LOGGER] == [
        f"BatchWriteItem on t failed (attempt 1 of 10): 24 writes left unprocessed; retrying in {pauses[0]:.2f} s",
        f"BatchWriteItem on t failed (attempt 2 of 10): 23 writes left unprocessed; retrying in {pauses[1]:.2f} s",
    ]
    pauses.clear()
    stuck = UnprocessedWrites(throttle=99)
    assert DynamoTable(stuck, "t", "lease_key").batch_write(writes, sleep=pauses.append) == 15
    assert stuck.requests == [25, 24, 23, 22, 21, 20, 19, 18, 17, 16] and len(pauses) == 9


def test_a_try_of_a_task_instance_is_owned_by_its_task_key_and_try_number() -> None:
    ti = SimpleNamespace(dag_id="d", task_id="ingest", run_id="scheduled__1", map_index=2, try_number=3)
    owner = LeaseOwner.of_try(ti, "fallback", "task")
    assert (owner.task_key, owner.attempt) == ("d/ingest/scheduled__1/2", 3)
    assert LeaseOwner.of_try(ti, "fallback", "task").nonce != owner.nonce  # two processes never share an owner
    # What the task instance lacks falls back; no task instance at all is a first, unmapped, ad hoc try.
    bare = LeaseOwner.of_try(SimpleNamespace(dag_id="d", run_id="manual__1", try_number=2), "x", "ingest")
    assert (bare.task_key, bare.attempt) == ("d/ingest/manual__1/-1", 2)
    alone = LeaseOwner.of_try(None, "d", "ingest")
    assert (alone.task_key, alone.attempt) == ("d/ingest/adhoc/-1", 1)
