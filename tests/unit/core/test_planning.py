"""Which leases a batch may take, the shard ranges it covers, and the plan as stable JSON."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta

import pytest

from airflow_kinesis_snowflake.core.engine.wire import MAX_PLAN_ARGUMENT, PlanTooLargeError, decode, encode
from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.model import Checkpoint, ConsumerType, Destination, InitialPosition, StartPosition
from airflow_kinesis_snowflake.core.planning import BatchPlan, ShardRange, eligible_leases, plan_ranges
from airflow_kinesis_snowflake.core.state.leases import STATE_ACTIVE, STATE_SHARD_END, Lease

NOW = 1_800_000_000.0
TRIM = StartPosition(InitialPosition.TRIM_HORIZON)
AWS_SEQ = "49590338271490256608559692538361571095921575989136588898"
CUTOFF = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
CHECKPOINT = Checkpoint(AWS_SEQ, 2)


def _lease(
    shard_id: str,
    *,
    parents: tuple[str, ...] = (),
    owner: str | None = None,
    expires: float = 0.0,
    ended: bool = False,
    checkpoint: Checkpoint | None = None,
    start: StartPosition = TRIM,
) -> Lease:
    return Lease(
        shard_id=shard_id,
        lease_counter=3,
        start=start,
        parent_shard_ids=parents,
        lease_owner=owner,
        lease_expires_at=expires,
        checkpoint=checkpoint,
        state=STATE_SHARD_END if ended else STATE_ACTIVE,
    )


def _ids(leases: list[Lease]) -> list[str]:
    return [lease.shard_id for lease in leases]


# -- eligible_leases ------------------------------------------------------------------------------


def test_free_leases_are_eligible_in_shard_id_order() -> None:
    leases = {s: _lease(s) for s in ("shard-2", "shard-0", "shard-1")}

    assert _ids(eligible_leases(leases, NOW)) == ["shard-0", "shard-1", "shard-2"]


def test_finished_shards_are_skipped() -> None:
    leases = {"done": _lease("done", ended=True), "open": _lease("open")}

    assert _ids(eligible_leases(leases, NOW)) == ["open"]


def test_held_unexpired_lease_is_skipped() -> None:
    leases = {
        "held": _lease("held", owner="worker-a", expires=NOW + 60),
        "free": _lease("free"),
    }

    assert _ids(eligible_leases(leases, NOW)) == ["free"]


@pytest.mark.parametrize("expires", [NOW - 1, NOW])
def test_expired_lease_is_eligible(expires: float) -> None:
    leases = {"stale": _lease("stale", owner="worker-a", expires=expires)}

    assert _ids(eligible_leases(leases, NOW)) == ["stale"]


def test_lease_with_expiry_but_no_owner_is_eligible() -> None:
    leases = {"released": _lease("released", owner=None, expires=NOW + 60)}

    assert _ids(eligible_leases(leases, NOW)) == ["released"]


def test_split_children_wait_for_parent_shard_end() -> None:
    parent = _lease("p", checkpoint=Checkpoint("5"))
    left = _lease("c1", parents=("p",))
    right = _lease("c2", parents=("p",))

    assert _ids(eligible_leases({"p": parent, "c1": left, "c2": right}, NOW)) == ["p"]

    finished = {"p": replace(parent, state=STATE_SHARD_END), "c1": left, "c2": right}
    assert _ids(eligible_leases(finished, NOW)) == ["c1", "c2"]


def test_merge_child_waits_for_all_parents() -> None:
    a = _lease("a", ended=True)
    b = _lease("b")
    child = _lease("m", parents=("a", "b"))

    assert _ids(eligible_leases({"a": a, "b": b, "m": child}, NOW)) == ["b"]

    both_done = {"a": a, "b": replace(b, state=STATE_SHARD_END), "m": child}
    assert _ids(eligible_leases(both_done, NOW)) == ["m"]


def test_child_waits_while_parent_is_held_by_another_worker() -> None:
    parent = _lease("p", owner="worker-a", expires=NOW + 60)
    child = _lease("c", parents=("p",))

    assert eligible_leases({"p": parent, "c": child}, NOW) == []


def test_parent_without_lease_counts_as_finished() -> None:
    child = _lease("c", parents=("gone",))
    merge_child = _lease("m", parents=("gone", "done"))
    done = _lease("done", ended=True)

    assert _ids(eligible_leases({"c": child, "m": merge_child, "done": done}, NOW)) == ["c", "m"]


def test_parent_without_lease_does_not_release_other_unfinished_parent() -> None:
    child = _lease("m", parents=("gone", "open"))
    open_parent = _lease("open")

    assert _ids(eligible_leases({"m": child, "open": open_parent}, NOW)) == ["open"]


# -- plan_ranges ----------------------------------------------------------------------------------


def test_plan_ranges_one_range_per_lease_from_its_checkpoint() -> None:
    at = StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 31, tzinfo=UTC))
    leases = [
        _lease("shard-2", checkpoint=Checkpoint(AWS_SEQ, 4)),
        _lease("shard-0"),
        _lease("shard-1", start=at),
    ]

    ranges = plan_ranges(leases, max_records_per_shard=500, ending_sequence_numbers={"shard-2": AWS_SEQ + "0"})

    assert [r.shard_id for r in ranges] == ["shard-0", "shard-1", "shard-2"]
    assert ranges[0].start is None
    assert ranges[0].start_position == TRIM
    assert ranges[1].start_position == at
    assert ranges[2].start == Checkpoint(AWS_SEQ, 4)
    assert all(r.max_records == 500 for r in ranges)
    assert [r.ending_sequence_number for r in ranges] == [None, None, AWS_SEQ + "0"]


def test_plan_ranges_without_ending_sequence_numbers() -> None:
    ranges = plan_ranges([_lease("a")], max_records_per_shard=1)

    assert ranges == (ShardRange("a", None, TRIM, 1, None),)


def test_plan_ranges_carry_the_byte_cap() -> None:
    ranges = plan_ranges([_lease("a"), _lease("b")], max_records_per_shard=1, max_bytes_per_shard=2**20)

    assert [r.max_bytes for r in ranges] == [2**20, 2**20]


def test_plan_ranges_empty() -> None:
    assert plan_ranges([], max_records_per_shard=10) == ()


# -- ShardRange and BatchPlan JSON ----------------------------------------------------------------


def _plan(
    *,
    cutoff: datetime = CUTOFF,
    checkpoint: Checkpoint | None = CHECKPOINT,
    max_records: int = 1000,
) -> BatchPlan:
    ranges = (
        ShardRange("shardId-000000000000", checkpoint, TRIM, max_records, None),
        ShardRange(
            "shardId-000000000001",
            None,
            StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 30, 8, 15, tzinfo=UTC)),
            max_records,
            "987654321",
        ),
    )
    return BatchPlan(
        application_name="orders-to-snowflake",
        generation_id="0123456789abcdef",
        stream_name="orders",
        region="us-east-1",
        destination=Destination("ANALYTICS", "RAW", "ORDERS"),
        cutoff=cutoff,
        max_records_per_call=10000,
        ranges=ranges,
    )


def test_shard_range_dict_round_trip() -> None:
    original = ShardRange("s", Checkpoint("17", 3), TRIM, 10, "99")

    data = original.to_dict()

    assert data == {
        "shard_id": "s",
        "start": {"sequence_number": "17", "sub_sequence_number": 3},
        "start_position": {"position": "TRIM_HORIZON", "timestamp": None},
        "max_records": 10,
        "ending_sequence_number": "99",
    }
    assert ShardRange.from_dict(json.loads(json.dumps(data))) == original


def test_a_byte_cap_travels_with_the_range_and_no_cap_leaves_the_dict_as_it_was() -> None:
    capped = ShardRange("s", None, TRIM, 10, None, max_bytes=64 * 2**20)

    assert capped.to_dict()["max_bytes"] == 64 * 2**20
    assert ShardRange.from_dict(json.loads(json.dumps(capped.to_dict()))) == capped
    # A range without a byte cap has the dict (and so the batch id) of a plan written before caps.
    assert "max_bytes" not in ShardRange("s", None, TRIM, 10).to_dict()
    assert ShardRange.from_dict(ShardRange("s", None, TRIM, 10).to_dict()).max_bytes is None


def test_batch_plan_json_round_trip() -> None:
    plan = _plan()

    text = plan.to_json()
    restored = BatchPlan.from_json(text)

    assert restored == plan
    assert restored.batch_id == plan.batch_id
    assert restored.cutoff.utcoffset() == timedelta(0)
    assert restored.ranges[0].start == Checkpoint(AWS_SEQ, 2)
    assert restored.ranges[0].start is not None
    assert restored.ranges[0].start.sequence_number == AWS_SEQ
    assert restored.ranges[1].start_position.timestamp == datetime(2026, 1, 30, 8, 15, tzinfo=UTC)
    assert json.loads(text)["batch_id"] == plan.batch_id


def test_batch_plan_json_is_plain_and_deterministic() -> None:
    data = json.loads(_plan().to_json())

    assert data["destination"] == {"database": "ANALYTICS", "schema": "RAW", "table": "ORDERS"}
    assert data["cutoff"] == "2026-01-31T12:00:00+00:00"
    assert [r["shard_id"] for r in data["ranges"]] == ["shardId-000000000000", "shardId-000000000001"]
    assert _plan().to_json() == _plan().to_json()


def test_batch_id_is_stable_for_equal_plans() -> None:
    first, second = _plan(), _plan()

    assert first is not second
    assert first.batch_id == second.batch_id
    assert len(first.batch_id) == 20
    int(first.batch_id, 16)  # hexadecimal


def test_batch_id_does_not_depend_on_how_an_equal_checkpoint_is_written() -> None:
    assert _plan(checkpoint=Checkpoint("42", 0)).batch_id == _plan(checkpoint=Checkpoint("42")).batch_id


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(lambda: _plan(checkpoint=Checkpoint(AWS_SEQ, 3)), id="sub-sequence"),
        pytest.param(lambda: _plan(checkpoint=Checkpoint(str(int(AWS_SEQ) + 1), 2)), id="sequence"),
        pytest.param(lambda: _plan(checkpoint=None), id="no-checkpoint"),
        pytest.param(lambda: _plan(cutoff=datetime(2026, 1, 31, 12, 0, 1, tzinfo=UTC)), id="cutoff"),
        pytest.param(lambda: _plan(max_records=999), id="cap"),
        pytest.param(
            lambda: replace(_plan(), ranges=tuple(replace(r, max_bytes=2**20) for r in _plan().ranges)), id="byte-cap"
        ),
        pytest.param(lambda: replace(_plan(), generation_id="fedcba9876543210"), id="generation"),
        pytest.param(lambda: replace(_plan(), application_name="orders-v2"), id="application"),
        pytest.param(lambda: replace(_plan(), ranges=_plan().ranges[:1]), id="fewer-ranges"),
    ],
)
def test_batch_id_changes_with_what_the_batch_reads(changed: Callable[[], BatchPlan]) -> None:
    assert changed().batch_id != _plan().batch_id


CONSUMER_ARN = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/orders-to-snowflake:1769860800"


def test_a_fan_out_plan_carries_its_consumer_but_reads_the_same_batch() -> None:
    plan = replace(_plan(), consumer_type=ConsumerType.ENHANCED_FAN_OUT, consumer_arn=CONSUMER_ARN)

    restored = BatchPlan.from_json(plan.to_json())

    assert restored == plan
    assert (restored.consumer_type, restored.consumer_arn) == (ConsumerType.ENHANCED_FAN_OUT, CONSUMER_ARN)
    assert plan.batch_id == _plan().batch_id


def test_a_plan_written_before_consumer_types_reads_with_get_records() -> None:
    data = json.loads(_plan().to_json())
    del data["consumer_type"], data["consumer_arn"]

    restored = BatchPlan.from_json(json.dumps(data))

    assert (restored.consumer_type, restored.consumer_arn) == (ConsumerType.SHARED_THROUGHPUT, None)
    assert restored == _plan()


@pytest.mark.parametrize(
    ("consumer_type", "consumer_arn", "message"),
    [
        (ConsumerType.ENHANCED_FAN_OUT, None, "needs the consumer_arn"),
        ("POLLING", None, "is not one of SHARED_THROUGHPUT, ENHANCED_FAN_OUT"),
    ],
)
def test_a_plan_refuses_an_unknown_consumer_type_or_a_fan_out_without_consumer(
    consumer_type: str, consumer_arn: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        replace(_plan(), consumer_type=consumer_type, consumer_arn=consumer_arn)


# -- StartPosition.resolve ------------------------------------------------------------------------


def test_latest_becomes_at_timestamp_of_now() -> None:
    now = datetime(2026, 2, 1, 9, 30, tzinfo=UTC)

    start = StartPosition.resolve(InitialPosition.LATEST, None, now)

    assert start == StartPosition(InitialPosition.AT_TIMESTAMP, now)


def test_at_timestamp_keeps_its_timestamp() -> None:
    ts = datetime(2026, 1, 1, tzinfo=UTC)

    start = StartPosition.resolve(InitialPosition.AT_TIMESTAMP, ts, datetime(2026, 2, 1, tzinfo=UTC))

    assert start == StartPosition(InitialPosition.AT_TIMESTAMP, ts)


def test_at_timestamp_needs_a_timestamp() -> None:
    with pytest.raises(ValueError, match="AT_TIMESTAMP needs a timestamp"):
        StartPosition.resolve(InitialPosition.AT_TIMESTAMP, None, datetime(2026, 2, 1, tzinfo=UTC))


def test_trim_horizon_has_no_timestamp() -> None:
    start = StartPosition.resolve(InitialPosition.TRIM_HORIZON, None, datetime(2026, 2, 1, tzinfo=UTC))

    assert start == StartPosition(InitialPosition.TRIM_HORIZON, None)


@pytest.mark.parametrize(
    "start",
    [TRIM, StartPosition(InitialPosition.AT_TIMESTAMP, datetime(2026, 1, 31, 23, 59, 59, 123456, tzinfo=UTC))],
)
def test_start_position_dict_round_trip(start: StartPosition) -> None:
    assert StartPosition.from_dict(json.loads(json.dumps(start.to_dict()))) == start


def _wide_plan(shards: int) -> BatchPlan:
    """A plan of ``shards`` ranges, each after a checkpoint of 56 digits that compress badly, as real ones do."""
    digits = random.Random(shards)
    return replace(
        _plan(),
        ranges=tuple(
            ShardRange(
                f"shardId-{i:012d}",
                Checkpoint("49" + "".join(digits.choice("0123456789") for _ in range(54))),
                TRIM,
                100_000,
            )
            for i in range(shards)
        ),
        table_columns=tuple(TableColumn(f"COLUMN_{i}", "VARCHAR") for i in range(30)),
    )


def test_an_encoded_plan_decodes_to_the_same_plan_and_batch_id() -> None:
    plan = replace(_plan(), pipe_definition="COPY INTO T FROM (SELECT $1 FROM @S)", schema_evolution=True)

    text = encode(plan)

    decoded = BatchPlan.from_work(decode(text))
    assert decoded == plan and decoded.batch_id == plan.batch_id
    # One argument of a command line: no whitespace, nothing a shell or YARN's launch script quotes.
    assert re.fullmatch(r"[A-Za-z0-9_=-]+", text)
    assert len(text) < len(plan.to_json(indent=None))


def test_decoding_what_is_not_an_encoded_plan_says_so() -> None:
    with pytest.raises(ValueError, match=r"not a job's encoded work \(12 characters\)"):
        decode("plan.json!!!")


def test_a_500_shard_plan_fits_in_one_argument_and_a_5000_shard_one_is_refused_saying_what_fits() -> None:
    # 500 ranges encode to about 24,500 characters, 5,000 to about 232,000: over the 98,304 allowed.
    assert len(encode(_wide_plan(500))) < MAX_PLAN_ARGUMENT

    with pytest.raises(PlanTooLargeError) as raised:
        encode(_wide_plan(5000))

    message = str(raised.value)
    assert "(5000 shard ranges) encodes to" in message and f"more than the {MAX_PLAN_ARGUMENT} one" in message
    advice = re.search(r"max_shards_per_batch in the connector file to at most (\d+)", message)
    assert advice is not None
    fits = int(advice.group(1))
    assert 500 < fits < 5000
    assert len(encode(_wide_plan(fits))) <= MAX_PLAN_ARGUMENT  # the advice holds


def test_a_plan_holds_no_credential() -> None:
    # What a plan carries: names, positions and settings. A field added to BatchPlan must be checked
    # against this list: the plan is a spark-submit argument, which shows in logs and the Spark UI.
    assert {f.name for f in fields(BatchPlan)} == {
        "application_name", "generation_id", "stream_name", "region", "destination", "cutoff",
        "max_records_per_call", "ranges", "destination_type", "schema_evolution", "on_unknown_key",
        "pipe_definition", "consumer_type", "consumer_arn", "table_columns",
    }  # fmt: skip
    assert {f.name for f in fields(ShardRange)} == {
        "shard_id", "start", "start_position", "max_records", "ending_sequence_number", "max_bytes",
    }  # fmt: skip
