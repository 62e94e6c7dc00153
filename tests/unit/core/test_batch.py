"""The micro-batch protocol (core/batch.py), step by step and crash window by crash window.

The lease table is the real one on the session's moto server, the ledger the real one on its
fakesnow server. The Spark job is replaced by the same core/job.py functions run in this process
(read each range, stage it, commit rows and ledger in one transaction), wrapped to look at the
lease table while it runs, to die after its commit, or to fail before it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from airflow_kinesis_snowflake.core.batch import (
    BatchOutcome,
    BatchRefused,
    BatchSettings,
    ResetInProgress,
    RunProgress,
    ShardOutcome,
    another_round,
    finish_round,
    run_batch,
)
from airflow_kinesis_snowflake.core.engine.credentials import JobCredentials
from airflow_kinesis_snowflake.core.engine.detached import DetachedRun, JobDetached
from airflow_kinesis_snowflake.core.engine.leases import LeaseHold
from airflow_kinesis_snowflake.core.job import commit, process_range
from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink
from airflow_kinesis_snowflake.core.model import (
    BatchResult,
    Checkpoint,
    Destination,
    InitialPosition,
    ShardResult,
    StartPosition,
)
from airflow_kinesis_snowflake.core.planning import BatchPlan
from airflow_kinesis_snowflake.core.sources.shards import Shard, list_shards
from airflow_kinesis_snowflake.core.state.leases import TTL_ATTRIBUTE, LeaseTable
from airflow_kinesis_snowflake.core.state.marks import set_reset_mark
from airflow_kinesis_snowflake.core.state.metadata import ResetMark, TableClaim, stream_created_at
from tests.conftest import create_stream, create_table, put_json, query, unique
from tests.emulators import Emulators
from tests.emulators.servers import AWS_KEY, REGION

# Needs the emulators, like the integration tests, though it specifies one core module.
pytestmark = pytest.mark.integration

RECORDS = 30
TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
LOG = "airflow_kinesis_snowflake.core.batch"
Submit = Callable[[BatchPlan], BatchResult]


class BotoStream:
    """The Kinesis calls of the protocol over a plain boto3 client (the operator passes its hook)."""

    region_name = REGION

    def __init__(self, client: Any) -> None:
        self.client = client

    def list_shards(self, stream_name: str) -> list[Shard]:
        return list_shards(self.client, stream_name)

    def stream_identity(self, stream_name: str) -> tuple[str, str]:
        summary = self.client.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]
        return str(summary["StreamARN"]), stream_created_at(summary["StreamCreationTimestamp"])

    def describe_consumer(self, stream_name: str, consumer_name: str) -> dict[str, Any] | None:
        return None


class Connector:
    """A stream with records, its lease table, its destination table, and the job without Spark."""

    def __init__(self, emulators: Emulators) -> None:
        self.emulators = emulators
        self.stream, self.app = unique("batch"), unique("batch-app")
        self.table = "BATCH_" + self.app.split("-")[-1].upper()
        self.kinesis = create_stream(emulators, self.stream, shards=2)
        put_json(self.kinesis, self.stream, [{"id": i} for i in range(RECORDS)])
        self.dynamodb = emulators.boto3_client("dynamodb")
        assert LeaseTable(self.dynamodb, self.app).create(stream_name=self.stream, application_name=self.app)
        create_table(emulators, "ANALYTICS", "RAW", self.table, "ID NUMBER(38,0)")
        self.settings = BatchSettings(
            stream_name=self.stream,
            application_name=self.app,
            destination=Destination("ANALYTICS", "RAW", self.table),
            connector_id="batch-tests",
        )
        self.credentials = JobCredentials(
            aws={
                "AWS_ACCESS_KEY_ID": AWS_KEY,
                "AWS_SECRET_ACCESS_KEY": AWS_KEY,
                "AWS_ENDPOINT_URL_KINESIS": emulators.aws_endpoint,
            },
            snowflake=emulators.snowflake_params(),
        )
        self.plans: list[BatchPlan] = []

    @property
    def lease_table(self) -> LeaseTable:
        return LeaseTable(self.dynamodb, self.app)

    def job(self, plan: BatchPlan) -> BatchResult:
        """core/job.py's run without Spark: read and stage each range, then commit once."""
        self.plans.append(plan)
        stage_dir = f"{plan.application_name}/{plan.batch_id}/{uuid.uuid4().hex[:12]}"
        shards = [process_range(r, plan, plan.table_columns, stage_dir, self.credentials) for r in plan.ranges]
        return commit(plan, stage_dir, shards, self.credentials, plan.table_columns)

    def run(
        self, submit: Submit | None = None, *, settings: BatchSettings | None = None, **kwargs: Any
    ) -> BatchOutcome:
        return run_batch(
            settings or self.settings,
            dynamodb=self.dynamodb,
            stream=BotoStream(self.kinesis),
            connect_snowflake=self.emulators.snowflake_connect,
            submit=submit or self.job,
            owner=f"tests/{uuid.uuid4().hex[:8]}",
            **kwargs,
        )

    def checkpoints(self) -> dict[str, Checkpoint | None]:
        return {shard_id: lease.checkpoint for shard_id, lease in self.lease_table.leases().items()}

    def owners(self) -> dict[str, str | None]:
        return {shard_id: lease.lease_owner for shard_id, lease in self.lease_table.leases().items()}

    def ledger(self) -> dict[str, Checkpoint]:
        generation = self.lease_table.metadata()
        assert generation is not None
        conn = self.emulators.snowflake_connect()
        try:
            return SnowflakeSink(conn, self.settings.destination).read_ledger(self.app, generation.generation_id)
        finally:
            conn.close()

    def ids(self) -> list[int]:
        return [int(r[0]) for r in query(self.emulators, f"SELECT ID FROM ANALYTICS.RAW.{self.table} ORDER BY ID")]

    def records(self) -> dict[str, list[dict[str, Any]]]:
        """Every shard's records, read back from Kinesis."""
        records = {}
        for shard in self.kinesis.list_shards(StreamName=self.stream)["Shards"]:
            iterator = self.kinesis.get_shard_iterator(
                StreamName=self.stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            records[shard["ShardId"]] = self.kinesis.get_records(ShardIterator=iterator, Limit=10000)["Records"]
        return records

    def tips(self) -> dict[str, Checkpoint]:
        """The last record of every shard, read back from Kinesis."""
        tips = {}
        for shard in self.kinesis.list_shards(StreamName=self.stream)["Shards"]:
            iterator = self.kinesis.get_shard_iterator(
                StreamName=self.stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            records = self.kinesis.get_records(ShardIterator=iterator, Limit=10000)["Records"]
            if records:
                tips[shard["ShardId"]] = Checkpoint(max((r["SequenceNumber"] for r in records), key=int))
        return tips

    def workers(self) -> list[dict[str, Any]]:
        items = self.dynamodb.scan(TableName=self.app, ConsistentRead=True)["Items"]
        return [i for i in items if i.get("item_type", {}).get("S") == "WORKER"]

    def heartbeat_stopped(self) -> bool:
        """The batch's worker item is deleted once it ended: the table does not grow with history."""
        return self.workers() == []


def recording(plans: list[BatchPlan]) -> Submit:
    """A submit step that only notes the plans it was given."""

    def submit(plan: BatchPlan) -> BatchResult:
        plans.append(plan)
        raise AssertionError("nothing should have been submitted")

    return submit


class Died(Exception):
    """The process running the batch died here."""


@pytest.fixture
def connector(emulators: Emulators) -> Connector:
    return Connector(emulators)


def test_checkpoints_move_only_after_the_commit(connector: Connector) -> None:
    seen: dict[str, Any] = {}

    def submit(plan: BatchPlan) -> BatchResult:
        # Leases are held while the job runs; nothing is checkpointed before it nor by its commit.
        seen["owners"] = set(connector.owners().values())
        seen["workers"] = [i["worker_id"]["S"] for i in connector.workers()]
        seen["before"] = connector.checkpoints()
        result = connector.job(plan)
        seen["committed"] = connector.checkpoints()
        seen["ledger"] = connector.ledger()
        return result

    outcome = connector.run(submit)

    tips = connector.tips()
    assert len(seen["owners"]) == 1 and None not in seen["owners"]
    assert seen["workers"] == list(seen["owners"])  # the running batch's heartbeat item
    assert seen["before"] == seen["committed"] == dict.fromkeys(tips)
    assert seen["ledger"] == tips  # the commit moved the ledger ...
    assert connector.checkpoints() == tips  # ... and only then the checkpoints followed it
    assert connector.ids() == list(range(RECORDS))
    summary = outcome.summary()
    assert summary["rows_loaded"] == RECORDS and summary["dead_letters"] == 0
    assert {s: v["checkpoint"] for s, v in summary["shards"].items()} == {s: c.to_dict() for s, c in tips.items()}
    assert set(connector.owners().values()) == {None} and connector.heartbeat_stopped()


def test_a_crash_after_the_commit_is_fast_forwarded_from_the_ledger_without_reloading(
    connector: Connector, caplog: pytest.LogCaptureFixture
) -> None:
    def dies_after_commit(plan: BatchPlan) -> BatchResult:
        connector.job(plan)
        raise Died("after the Snowflake commit, before the checkpoints")

    with pytest.raises(Died):
        connector.run(dies_after_commit)
    tips = connector.tips()
    assert connector.ids() == list(range(RECORDS)) and connector.ledger() == tips
    assert connector.checkpoints() == dict.fromkeys(tips)  # DynamoDB is behind the ledger

    put_json(connector.kinesis, connector.stream, [{"id": i} for i in range(RECORDS, RECORDS + 5)])
    with caplog.at_level(logging.WARNING, logger=LOG):
        outcome = connector.run()

    # The next batch started at the ledger's marks: the rows of the first are not loaded again.
    assert {r.shard_id: r.start for r in connector.plans[-1].ranges} == tips
    assert "ledger is ahead of the checkpoint" in caplog.text
    assert connector.ids() == list(range(RECORDS + 5))
    assert outcome.summary()["rows_loaded"] == 5
    assert connector.checkpoints() == connector.tips() == connector.ledger()


def test_leases_are_released_and_nothing_checkpointed_when_the_batch_fails(connector: Connector) -> None:
    def fails_before_commit(plan: BatchPlan) -> BatchResult:
        raise RuntimeError("spark-submit failed")

    with pytest.raises(RuntimeError, match="spark-submit failed"):
        connector.run(fails_before_commit)

    assert set(connector.owners().values()) == {None}  # another run may take every shard at once
    assert connector.heartbeat_stopped()
    assert set(connector.checkpoints().values()) == {None}
    assert connector.ids() == [] and connector.ledger() == {}


def test_a_lease_lost_during_the_batch_is_not_checkpointed(
    connector: Connector, caplog: pytest.LogCaptureFixture
) -> None:
    thief = "another-worker"

    def loses_a_lease(plan: BatchPlan) -> BatchResult:
        stolen, kept = (r.shard_id for r in plan.ranges)
        # Another worker takes the shard (as after a missed renewal); the keeper's next renewal sees it.
        connector.dynamodb.update_item(
            TableName=connector.app,
            Key={"lease_key": {"S": stolen}},
            UpdateExpression="SET lease_owner = :o, lease_counter = lease_counter + :one, lease_expires_at = :e",
            ExpressionAttributeValues={":o": {"S": thief}, ":one": {"N": "1"}, ":e": {"N": str(time.time() + 600)}},
        )
        # Until the keeper (every third of the 3 s lease) renewed the kept lease twice more: its
        # second round of renewals began after the theft, and met it, however slow the machine.
        renewed = connector.lease_table.leases()[kept].lease_counter
        deadline = time.monotonic() + 120
        while connector.lease_table.leases()[kept].lease_counter < renewed + 2:
            assert time.monotonic() < deadline, "the lease keeper stopped renewing"
            time.sleep(0.1)
        return connector.job(plan)

    with caplog.at_level(logging.WARNING, logger=LOG):
        outcome = connector.run(loses_a_lease, settings=replace(connector.settings, lease_duration_seconds=3))

    stolen, kept = (r.shard_id for r in connector.plans[0].ranges)
    tips = connector.tips()
    assert "Leases lost during the batch" in caplog.text and stolen in caplog.text
    assert connector.ledger() == tips  # the rows are in Snowflake ...
    checkpoints = connector.checkpoints()
    assert checkpoints[stolen] is None  # ... but the lost shard's checkpoint is its new owner's to move
    assert checkpoints[kept] == tips[kept]
    assert connector.owners() == {stolen: thief, kept: None}  # and its lease is not released under it
    assert set(outcome.shards) == {kept}


def test_a_live_reset_mark_skips_the_batch_before_anything_is_read(connector: Connector) -> None:
    now = time.time()
    set_reset_mark(connector.dynamodb, connector.app, ResetMark("reset/elsewhere", "delete_table", now, now + 600))
    submitted: list[BatchPlan] = []

    with pytest.raises(ResetInProgress, match=f"reset of {connector.app} in progress"):
        connector.run(recording(submitted))

    assert submitted == []
    assert connector.lease_table.leases() == {}  # not even synced
    assert connector.ids() == []


def test_a_lease_table_holding_a_dynamodb_connectors_tables_is_refused_before_anything_is_read(
    connector: Connector,
) -> None:
    # A DynamoDB connector was given the same application name and synced a table through it.
    connector.lease_table.claim_table(TableClaim("orders", "ANALYTICS.RAW.ORDERS", "orders_ddb"))
    submitted: list[BatchPlan] = []

    with pytest.raises(BatchRefused) as refused:
        connector.run(recording(submitted))

    message = str(refused.value)
    assert f"application name {connector.app!r} is already used by DynamoDB connector orders_ddb" in message
    assert "tables orders" in message and "Give connector 'batch-tests' an application_name of its own" in message
    assert submitted == []
    assert connector.lease_table.leases() == {}
    metadata = connector.lease_table.metadata()
    assert metadata is not None and metadata.destination is None  # the Kinesis connector recorded nothing
    assert connector.ids() == []


def test_an_application_renamed_without_the_reset_dag_is_refused_before_it_reads_the_stream_again(
    connector: Connector,
) -> None:
    # Without the refusal the new name read the stream from TRIM_HORIZON into the same table: every
    # record twice, and the run reported success.
    connector.run()
    assert connector.ids() == list(range(RECORDS))
    renamed = unique("batch-app-renamed")
    # Its lease table, as the ingest DAG's create_lease_table task makes it.
    assert LeaseTable(connector.dynamodb, renamed).create(stream_name=connector.stream, application_name=renamed)
    submitted: list[BatchPlan] = []

    with pytest.raises(BatchRefused) as refused:
        connector.run(recording(submitted), settings=replace(connector.settings, application_name=renamed))

    message = str(refused.value)
    table = connector.settings.destination.qualified_name
    assert f"destination {table} is loaded by application {connector.app!r} (connector 'batch-tests')" in message
    assert f"would read stream {connector.stream!r} again from its initial position" in message
    assert f"Set application_name back to {connector.app!r}" in message
    assert f"reset DAG with new_application_name {renamed!r}" in message
    assert submitted == [] and LeaseTable(connector.dynamodb, renamed).leases() == {}
    assert connector.ids() == list(range(RECORDS))
    # The connector under its own name reads on.
    put_json(connector.kinesis, connector.stream, [{"id": i} for i in range(RECORDS, RECORDS + 5)])
    connector.run()
    assert connector.ids() == list(range(RECORDS + 5))


def test_nothing_is_taken_or_run_when_no_shard_is_eligible(connector: Connector) -> None:
    table = connector.lease_table
    leases = table.sync_shards(BotoStream(connector.kinesis).list_shards(connector.stream), TRIM)
    for lease in leases.values():
        assert table.take(lease, "another-worker", 600) is not None
    before = table.leases()
    submitted: list[BatchPlan] = []

    outcome = connector.run(recording(submitted))

    assert outcome.result is None and submitted == []
    assert outcome.summary() == {"rows_loaded": 0, "dead_letters": 0, "shards": {}}
    assert table.leases() == before  # nothing taken, renewed or released
    assert connector.ids() == []


def test_a_worker_item_that_cannot_be_deleted_is_logged_and_left_to_its_time_to_live(
    connector: Connector, caplog: pytest.LogCaptureFixture
) -> None:
    def denied(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no DeleteItem"}}, "DeleteItem")

    connector.dynamodb.meta.events.register("before-call.dynamodb.DeleteItem", denied)
    with caplog.at_level(logging.WARNING, logger=LOG):
        outcome = connector.run()

    assert outcome.summary()["rows_loaded"] == RECORDS and connector.ids() == list(range(RECORDS))
    assert "Could not delete the heartbeat item" in caplog.text and "no DeleteItem" in caplog.text
    (item,) = connector.workers()
    assert float(item[TTL_ATTRIBUTE]["N"]) > float(item["expires_at"]["N"])


def test_a_batch_reads_the_leases_by_key_and_never_scans_the_table(connector: Connector) -> None:
    # History a batch must not pay for: worker items of earlier tries that died.
    for n in range(30):
        connector.lease_table.heartbeat(f"old/try-{n}", 60)
    calls: list[str] = []
    connector.dynamodb.meta.events.register("before-call.dynamodb", lambda model, **_: calls.append(model.name))

    assert connector.run().summary()["rows_loaded"] == RECORDS

    assert "Scan" not in calls and calls.count("BatchGetItem") >= 1
    assert calls.count("DeleteItem") == 1  # its own worker item; the others wait for their time to live
    assert len(connector.workers()) == 30


def batch_result(*shard_ends: bool) -> BatchResult:
    """A committed batch's result, one shard per flag (True: read to SHARD_END)."""
    shards = tuple(
        ShardResult(
            shard_id=f"shardId-{i:012d}",
            start=None,
            end=Checkpoint(str(i + 1)),
            records_read=1,
            rows_staged=1,
            dead_letters_staged=0,
            bytes_read=1,
            shard_end=end,
        )
        for i, end in enumerate(shard_ends)
    )
    return BatchResult("b", "s", True, len(shards), 0, shards, finished_at=datetime.now(UTC), schema={})


def outcome_of(result: BatchResult | None) -> BatchOutcome:
    shards = {s.shard_id: ShardOutcome(s.records_read, 0, s.end, s.shard_end) for s in result.shards} if result else {}
    return BatchOutcome("app", result, shards)


def test_another_batch_is_planned_only_after_a_shard_reached_its_end() -> None:
    assert another_round(outcome_of(batch_result(False, True)))  # its children may be eligible now
    assert not another_round(outcome_of(batch_result(False, False)))  # nothing new became eligible
    assert not another_round(outcome_of(None))  # no lease taken, nothing run
    # A shard whose checkpoint write lost its lease is not in the outcome: its new owner reads on.
    assert not another_round(BatchOutcome("app", batch_result(True), {}))


def reshard_before_the_run(connector: Connector) -> None:
    """Split shard 0 (children 2, 3), then merge 3 with 1 (child 4), with records in every generation."""
    kinesis, stream = connector.kinesis, connector.stream
    kinesis.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000", NewStartingHashKey=str(2**126))
    put_json(kinesis, stream, [{"id": i} for i in range(RECORDS, RECORDS + 20)])
    kinesis.merge_shards(
        StreamName=stream, ShardToMerge="shardId-000000000003", AdjacentShardToMerge="shardId-000000000001"
    )
    put_json(kinesis, stream, [{"id": i} for i in range(RECORDS + 20, RECORDS + 40)])


def test_one_run_reads_every_generation_of_shards_up_to_its_cut_off(connector: Connector) -> None:
    reshard_before_the_run(connector)

    outcome = connector.run()

    # Parents before children, one batch per generation, all with the run's cut-off and their own id.
    assert [sorted(r.shard_id[-1] for r in plan.ranges) for plan in connector.plans] == [["0", "1"], ["2", "3"], ["4"]]
    assert len({plan.cutoff for plan in connector.plans}) == 1
    assert len({plan.batch_id for plan in connector.plans}) == 3
    assert connector.ids() == list(range(RECORDS + 40))  # every record put before the run, once
    summary = outcome.summary()
    assert summary["batch_ids"] == [plan.batch_id for plan in connector.plans]
    assert summary["rows_loaded"] == RECORDS + 40
    assert [b.result.batch_id for b in outcome.batches if b.result] == summary["batch_ids"]
    tips = connector.tips()
    checkpoints = connector.checkpoints()
    assert checkpoints == {s: tips.get(s) for s in checkpoints}  # every shard read to its tip
    assert {"shardId-000000000002", "shardId-000000000004"} <= set(checkpoints)


def test_a_child_waits_in_the_run_for_a_parent_the_run_read_but_did_not_finish(connector: Connector) -> None:
    """Shards 0 and 1 merge into 2; the run reads 0 to its end but stops 1 at the record cap: 2 waits."""
    kinesis, stream = connector.kinesis, connector.stream
    in_shard_1 = [
        {"Data": json.dumps({"id": i}).encode(), "PartitionKey": "p", "ExplicitHashKey": str(2**127 + 1)}
        for i in range(RECORDS, RECORDS + 60)
    ]
    kinesis.put_records(StreamName=stream, Records=in_shard_1)
    per_shard = {shard_id: len(records) for shard_id, records in connector.records().items()}
    kinesis.merge_shards(
        StreamName=stream, ShardToMerge="shardId-000000000000", AdjacentShardToMerge="shardId-000000000001"
    )
    put_json(kinesis, stream, [{"id": i} for i in range(RECORDS + 60, RECORDS + 70)])
    cap = per_shard["shardId-000000000000"] + 1
    assert cap < per_shard["shardId-000000000001"]

    connector.run(settings=replace(connector.settings, max_records_per_shard=cap))

    # One batch: shard 0 reached its end, which makes the run plan again, but shard 1 has records
    # left, so its child is not read yet (before, the second round read shard 2 out of order).
    assert [sorted(r.shard_id[-1] for r in plan.ranges) for plan in connector.plans] == [["0", "1"]]
    connector.run()
    assert [sorted(r.shard_id[-1] for r in plan.ranges) for plan in connector.plans[1:]] == [["1"], ["2"]]
    assert connector.ids() == list(range(RECORDS + 70))


def test_a_run_stops_after_max_rounds_and_the_next_run_reads_on(
    connector: Connector, caplog: pytest.LogCaptureFixture
) -> None:
    reshard_before_the_run(connector)

    with caplog.at_level(logging.WARNING, logger=LOG):
        first = connector.run(max_rounds=2)

    assert "Stopped after 2 batches" in caplog.text
    assert [sorted(r.shard_id[-1] for r in plan.ranges) for plan in connector.plans] == [["0", "1"], ["2", "3"]]
    assert len(first.batches) == 2
    loaded = connector.ids()
    assert len(loaded) == len(set(loaded)) < RECORDS + 40  # shard 4's records wait, none loaded twice
    connector.run()
    assert sorted(r.shard_id for r in connector.plans[-1].ranges) == ["shardId-000000000002", "shardId-000000000004"]
    assert connector.ids() == list(range(RECORDS + 40))


def test_a_run_whose_every_batch_s_job_run_goes_on_elsewhere_loads_what_a_waiting_run_loads(
    connector: Connector,
) -> None:
    """A deferred task's run: each batch's submit leaves the job run (JobDetached); once the run ended, the
    batch is finished from what the task carried as plain JSON, and the run goes on, as the blocking run."""
    reshard_before_the_run(connector)
    started: list[BatchPlan] = []

    def detach(plan: BatchPlan) -> BatchResult:
        started.append(plan)
        key = ("emr_serverless", f"run-{len(started)}", f"attempt-{len(started)}")
        raise JobDetached(DetachedRun(*key, plan.application_name, plan.generation_id, plan.batch_id))

    earlier: tuple[BatchOutcome, ...] = ()
    started_at = None
    for _ in range(5):
        try:
            outcome = connector.run(detach, earlier=earlier, run_started_at=started_at)
            break
        except JobDetached as detached:
            # What the task defers with, as Airflow keeps it: plain JSON; the batch's leases still held.
            carried = json.loads(
                json.dumps({"run": detached.run.to_dict(), "hold": detached.hold.to_dict(), **detached.progress})
            )
        run, hold = DetachedRun.from_dict(carried["run"]), LeaseHold.from_dict(carried["hold"])
        assert {connector.owners()[unit] for unit in hold.units} == {hold.owner}
        assert connector.lease_table.recorded_run(run.batch_id) == run.to_dict()
        progress = RunProgress.from_dict(carried)
        # The job run, wherever it ran (here: the job's steps in this process), then the task's finish.
        result = connector.job(started[-1])
        finished = finish_round(connector.dynamodb, hold, run, lambda: result)  # noqa: B023 - called at once
        assert connector.lease_table.recorded_run(run.batch_id) is None
        earlier, started_at = (*progress.earlier, finished), progress.cutoff
    else:
        raise AssertionError("the run did not end")

    # Parents before children, one batch per generation, as the run that waits for each job.
    assert [sorted(r.shard_id[-1] for r in plan.ranges) for plan in started] == [["0", "1"], ["2", "3"], ["4"]]
    assert len({plan.cutoff for plan in started}) == 1
    assert connector.ids() == list(range(RECORDS + 40))  # every record put before the run, once
    assert outcome.summary()["batch_ids"] == [plan.batch_id for plan in started]
    tips, checkpoints = connector.tips(), connector.checkpoints()
    assert checkpoints == {s: tips.get(s) for s in checkpoints}
    assert set(connector.owners().values()) == {None} and connector.heartbeat_stopped()


def test_a_detached_batch_whose_job_run_failed_releases_its_leases_and_loads_nothing(connector: Connector) -> None:
    def detach(plan: BatchPlan) -> BatchResult:
        raise JobDetached(DetachedRun("glue", "jr_1", "attempt-1", plan.application_name, plan.generation_id, "b1"))

    with pytest.raises(JobDetached) as raised:
        connector.run(detach)
    before = connector.checkpoints()

    def failed() -> BatchResult:
        raise RuntimeError("The Spark job failed on AWS Glue: job run jr_1 ended FAILED")

    with pytest.raises(RuntimeError, match="ended FAILED"):
        finish_round(connector.dynamodb, raised.value.hold, raised.value.run, failed)

    assert set(connector.owners().values()) == {None} and connector.heartbeat_stopped()
    assert connector.checkpoints() == before and connector.ids() == []
    assert connector.lease_table.recorded_run("b1") is None
    connector.run()  # the next try plans the batch again and loads it
    assert connector.ids() == list(range(RECORDS))
