"""The work a Spark job is given (core/engine/wire.py): one envelope, tagged with its source, for every source."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.continuous import ContinuousRun
from airflow_kinesis_snowflake.core.dynamodb_continuous import TableContinuousRun
from airflow_kinesis_snowflake.core.dynamodb_job import TableBatchPlan
from airflow_kinesis_snowflake.core.engine.wire import (
    MAX_PLAN_ARGUMENT,
    PlanTooLargeError,
    Submittable,
    Work,
    WorkKind,
    decode,
    encode,
)
from airflow_kinesis_snowflake.core.planning import BatchPlan
from airflow_kinesis_snowflake.registry import SOURCE_TYPES
from tests.unit.core.test_continuous import RUN as KINESIS_RUN
from tests.unit.core.test_dynamodb_continuous import RUN as TABLE_RUN
from tests.unit.core.test_dynamodb_job import plan as table_plan
from tests.unit.core.test_planning import _plan as kinesis_plan

#: One batch plan and one continuous run of every registered source, and the class that opens each.
SAMPLES: list[tuple[Submittable, Any]] = [
    (kinesis_plan(), BatchPlan),
    (KINESIS_RUN, ContinuousRun),
    (table_plan(), TableBatchPlan),
    (TABLE_RUN, TableContinuousRun),
]


def test_every_registered_source_sends_both_kinds_of_work_here() -> None:
    sent = {(item.work().source, item.work().kind) for item, _ in SAMPLES}
    assert sent == {(source, kind) for source in SOURCE_TYPES for kind in WorkKind}


@pytest.mark.parametrize(("item", "kind"), SAMPLES, ids=lambda v: type(v).__name__)
def test_work_travels_as_one_shell_safe_argument_and_opens_to_the_same_plan_or_run(item: Any, kind: Any) -> None:
    text = encode(item)

    work = decode(text)
    assert work == item.work()
    assert kind.from_work(work) == item
    assert work.region == item.region  # what the driver builds its clients with, before opening the body
    # One argument of a command line: nothing a shell or YARN's launch script quotes; no name in clear.
    assert re.fullmatch(r"[A-Za-z0-9_=-]+", text) and "orders" not in text


@pytest.mark.parametrize(("item", "kind"), SAMPLES, ids=lambda v: type(v).__name__)
def test_work_of_another_source_or_kind_is_refused_naming_both(item: Any, kind: Any) -> None:
    for other in SAMPLES:
        work = other[0].work()
        if other[1] is kind:
            continue
        with pytest.raises(ValueError, match=r"expected \w+ work of source '\w+', got \w+ work of '\w+'"):
            kind.from_work(work)


def test_what_is_not_encoded_work_is_refused_saying_so() -> None:
    with pytest.raises(ValueError, match=r"not a job's encoded work \(12 characters\)"):
        decode("plan.json!!!")
    with pytest.raises(ValueError, match="not a job's work envelope"):
        Work.from_json(json.dumps({"kind": "batch", "region": "eu-west-1", "body": {}}))  # no source


@pytest.mark.parametrize(
    ("item", "setting"), [(SAMPLES[0][0], "max_shards_per_batch"), (SAMPLES[2][0], "snapshot_total_segments")]
)
def test_work_too_large_for_one_argument_is_refused_naming_what_to_lower(item: Submittable, setting: str) -> None:
    with pytest.raises(PlanTooLargeError) as raised:
        encode(item, limit=100)

    message = str(raised.value)
    assert setting in message and "more than the 100 one spark-submit argument may carry" in message
    assert message.endswith("nothing was submitted")
    assert len(encode(item)) <= MAX_PLAN_ARGUMENT
