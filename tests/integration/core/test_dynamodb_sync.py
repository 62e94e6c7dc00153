"""A DynamoDB table's Snowflake copy converges to the table, whatever dies when (moto server, fakesnow server).

The central proof of the DynamoDB source, at the level of :func:`~.core.dynamodb_sync.sync_table`:
a workload of puts, updates (an attribute changing type among them), user deletes and time-to-live
expiries runs while the snapshot and the stream batches proceed; the stream's shard closes and a
child takes over; runs die (the process exits at once, as on SIGKILL: no ``finally``, no release)
at every step of a batch. At the end the Snowflake table holds exactly the items a full Scan of the
DynamoDB table returns, item by item, value by value.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.config import Config

from airflow_kinesis_snowflake.core import dynamodb_sync
from airflow_kinesis_snowflake.core.dynamodb_sync import TableSync, sync_table
from airflow_kinesis_snowflake.core.load.dynamodb_rows import Layout, key_attributes
from airflow_kinesis_snowflake.core.load.dynamodb_sink import Deletes, DynamoDBSink, DynamoDBTarget, KeyColumn
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.sources.dynamodb.progress import SyncSettings
from airflow_kinesis_snowflake.core.sources.dynamodb.types import item_to_json
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from tests.conftest import query, unique
from tests.emulators import Emulators
from tests.emulators.dynamodb_streams import expire_item, roll_shard
from tests.emulators.servers import AWS_KEY, REGION

pytestmark = pytest.mark.integration

KILLED = 9
# Where a run dies: the function of the sync whose call (before or after it returns) ends the process.
STEPS: list[tuple[str, str, str]] = [
    ("after the generation is recorded", "DynamoDBSink.record_generation", "after"),
    ("after the leases are taken", "LeaseTable.take", "after"),
    ("in the middle of the Scan", "scan_segment", "after"),
    ("in the middle of the stream's read", "read_stream_shard", "after"),
    ("before the transaction", "DynamoDBSink.apply_batch", "before"),
    ("after the commit, before the lease table", "DynamoDBSink.apply_batch", "after"),
    ("after the lease table, before the release", "LeaseTable.release", "before"),
]


def client(emulators: Emulators, service: str) -> Any:
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=emulators.aws_endpoint,
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
        config=Config(retries={"total_max_attempts": 2}),
    )


@dataclass
class Workload:
    """Puts, updates, deletes and expiries of a table with a partition and a sort key."""

    emulators: Emulators
    table: str
    dynamodb: Any
    rng: random.Random

    def item(self, n: int, kind: int) -> dict[str, Any]:
        key = {"pk": {"S": f"user#{n % 7}"}, "sk": {"N": f"{n}.{kind}"}}
        attributes: dict[str, Any] = {
            "amount": {"N": f"{self.rng.randint(-(10**20), 10**20)}.{self.rng.randint(0, 10**17):017d}"},
            "doc": {"M": {"tags": {"SS": sorted({f"t{self.rng.randint(0, 5)}", "x"})}, "n": {"N": "1E+125"}}},
            "flag": {"BOOL": bool(kind % 2)},
            "blob": {"B": bytes([n % 256, kind])},
        }
        if kind % 3 == 0:  # the same attribute, another type
            attributes["amount"] = {"S": f"text {n}"}
        return {**key, **attributes}

    def keys(self) -> list[dict[str, Any]]:
        items = self.scan()
        return [{"pk": i["pk"], "sk": i["sk"]} for i in items]

    def put(self, count: int, start: int) -> None:
        for n in range(start, start + count):
            self.dynamodb.put_item(TableName=self.table, Item=self.item(n, 0))

    def churn(self, steps: int) -> None:
        """Updates (some changing a type), user deletes and time-to-live expiries of existing items."""
        for _ in range(steps):
            keys = self.keys()
            if not keys:
                return
            key = self.rng.choice(keys)
            roll = self.rng.random()
            n = int(Decimal(key["sk"]["N"]))
            if roll < 0.5:
                item = self.item(n, self.rng.randint(1, 6))
                item["sk"] = key["sk"]
                self.dynamodb.put_item(TableName=self.table, Item=item)
            elif roll < 0.75:
                self.dynamodb.delete_item(TableName=self.table, Key=key)
            else:
                expire_item(self.emulators.aws_endpoint, self.table, key)

    def scan(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
        while True:
            page = self.dynamodb.scan(**kwargs)
            items += page["Items"]
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


@pytest.fixture
def source(emulators: Emulators) -> Iterator[tuple[Workload, TableSync]]:
    dynamodb = client(emulators, "dynamodb")
    name = unique("orders")
    description = dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]
    keys = key_attributes(description)
    destination = Destination("ANALYTICS", "RAW", name.replace("-", "_").upper())
    target = DynamoDBTarget(
        destination,
        name,
        tuple(KeyColumn(k.column, k.sql_type) for k in keys),
        Layout.PACKED,
        Deletes.HARD,
    )
    conn = emulators.snowflake_connect()
    try:
        conn.cursor().execute("CREATE DATABASE IF NOT EXISTS ANALYTICS")
        conn.cursor().execute("CREATE SCHEMA IF NOT EXISTS ANALYTICS.RAW")
    finally:
        conn.close()
    sync = TableSync(
        application_name=unique("ddb-app"),
        table=name,
        stream_arn=description["LatestStreamArn"],
        target=target,
        keys=keys,
        settings=SyncSettings(total_segments=3, max_segments_per_batch=2),
        max_items_per_segment=7,
        max_records_per_shard=25,
        lease_duration_seconds=2.0,
    )
    yield Workload(emulators, name, dynamodb, random.Random(15)), sync


def run(emulators: Emulators, sync: TableSync, attempt: int) -> dynamodb_sync.TableOutcome:
    return sync_table(
        sync,
        lease_dynamodb=client(emulators, "dynamodb"),
        source_dynamodb=client(emulators, "dynamodb"),
        streams=client(emulators, "dynamodbstreams"),
        connect_snowflake=emulators.snowflake_connect,
        owner=f"ddb/sync/run/-1/try-{attempt}/{os.getpid()}",
    )


def _die_at(target: str, when: str) -> None:
    """Make ``target`` (a name in dynamodb_sync, or Class.method) end the process before or after it runs."""
    owner_name, _, method = target.partition(".")
    owner: Any = dynamodb_sync
    if method:
        owner, name = getattr(dynamodb_sync, owner_name), method
    else:
        name = owner_name
    original: Callable[..., Any] = getattr(owner, name)

    def dying(*args: Any, **kwargs: Any) -> Any:
        if when == "before":
            os._exit(KILLED)
        original(*args, **kwargs)
        os._exit(KILLED)

    setattr(owner, name, dying)


def _killed_run(emulators: Emulators, sync: TableSync, target: str, when: str) -> None:
    _die_at(target, when)
    run(emulators, sync, attempt=1)
    os._exit(0)


def run_dying(emulators: Emulators, sync: TableSync, target: str, when: str) -> int:
    """Run the sync in a child process that dies at ``target``; its exit code (KILLED if it died)."""
    process = multiprocessing.get_context("fork").Process(target=_killed_run, args=(emulators, sync, target, when))
    process.start()
    process.join(120)
    assert process.exitcode is not None, "the run did not end"
    return process.exitcode


def destination_items(emulators: Emulators, sync: TableSync) -> dict[str, Any]:
    table = sync.target.destination.qualified_name
    rows = query(emulators, f"SELECT ITEM FROM {table}")
    return {_key_text(json.loads(r[0], parse_float=Decimal)): json.loads(r[0], parse_float=Decimal) for r in rows}


def source_items(workload: Workload) -> dict[str, Any]:
    items = [json.loads(item_to_json(i), parse_float=Decimal) for i in workload.scan()]
    return {_key_text(i): i for i in items}


def _key_text(item: dict[str, Any]) -> str:
    return f"{item['pk']}|{item['sk']}"


def test_the_table_converges_through_snapshot_stream_reshard_and_a_death_at_every_step(
    emulators: Emulators, source: tuple[Workload, TableSync]
) -> None:
    workload, sync = source
    workload.put(40, start=0)
    deaths: list[str] = []
    attempt = 0
    for index, (step, target, when) in enumerate(STEPS):
        code = run_dying(emulators, sync, target, when)
        if code == KILLED:
            deaths.append(step)
        else:
            assert code == 0, f"the run meant to die {step} failed with exit code {code}"
        workload.churn(6)
        workload.put(3, start=100 + 10 * index)
        if index == 3:
            roll_shard(emulators.aws_endpoint, workload.table)
        attempt += 1
        run(emulators, sync, attempt + 1)
    # Every step's death happened (a run that had nothing to do at that step would not prove it).
    assert deaths == [step for step, _, _ in STEPS]
    workload.churn(10)
    completed = False
    for _ in range(20):
        attempt += 1
        outcome = run(emulators, sync, attempt + 1)
        conn = emulators.snowflake_connect()
        try:
            generation = DynamoDBSink(conn, sync.target).current_generation(sync.application_name)
        finally:
            conn.close()
        completed = generation is not None and generation.completed
        if completed and outcome.changes == 0:
            break
    assert completed, "the snapshot did not complete"
    expected, actual = source_items(workload), destination_items(emulators, sync)
    assert set(actual) == set(expected)
    assert actual == expected
    leases = LeaseTable(client(emulators, "dynamodb"), sync.application_name).leases()
    assert leases, "the sync kept no leases"
