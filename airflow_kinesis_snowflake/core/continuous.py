"""Continuous mode of a Kinesis connector: one Spark application runs micro-batches back to back.

With ``batch.mode: continuous`` the ingest task submits the Spark job once, with a
:class:`ContinuousRun` instead of a plan. The driver then runs the protocol of
:mod:`~airflow_kinesis_snowflake.core.batch` itself, in the engine's loop
(:func:`~.engine.continuous.run_back_to_back`, through :func:`run_continuously` here):

1. **A micro-batch**: :func:`~.batch.run_batch` with the cut-off *now*: resolve, lease, plan, read,
   commit rows and ledger in one Snowflake transaction, checkpoint, release; its outcome is recorded
   in the batch outcomes table under its batch id and the submission's attempt id, as in scheduled
   mode. The Spark job runs in the driver's live ``SparkContext`` instead of a spark-submit of its
   own; the leases are renewed while it runs.
2. **Idle**: when a micro-batch read nothing, the driver sleeps ``idle_seconds`` (never past the
   end) before the next one.
3. **End**: once ``max_runtime_seconds`` have passed, no micro-batch starts; the one running
   finishes, the application ends, and the ingest task reads every outcome of its attempt. The next
   DAG run submits again.

A reset or restore starting (:class:`~.batch.ResetInProgress`) ends the loop; a refusal
(:class:`~.batch.BatchRefused`) fails it. Each micro-batch is the same protocol with the same
crash windows, so killing the driver, spark-submit or the Airflow task at any point loses and
duplicates nothing: the leases expire, and the next micro-batch (of any application) fast-forwards
from the ledger and reads on.

The driver needs the lease table (DynamoDB) besides Kinesis and Snowflake: in cluster deploy mode
its own AWS identity must be allowed the lease-table actions too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from airflow_kinesis_snowflake.core.batch import BatchOutcome, BatchSettings, ResetInProgress, Stream, run_batch
from airflow_kinesis_snowflake.core.engine.continuous import IDLE_SECONDS, Pace, check_pace, run_back_to_back
from airflow_kinesis_snowflake.core.engine.wire import Work, WorkKind
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.model import BatchResult, Destination
from airflow_kinesis_snowflake.core.planning import BatchPlan
from airflow_kinesis_snowflake.core.sources.shards import Shard, list_shards
from airflow_kinesis_snowflake.core.state.metadata import stream_created_at
from airflow_kinesis_snowflake.registry import KINESIS_SOURCE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ContinuousRun:
    """What the driver of a continuous application needs besides credentials (it holds none).

    :param settings: the connector's batch settings, as a scheduled run gets them.
    :param region: the stream's region.
    :param owner: the lease owner of the application, the same for each micro-batch: the lease
        table keeps one worker item per application, not one per micro-batch.
    :param max_runtime_seconds: no micro-batch starts after this long.
    :param idle_seconds: the sleep after a micro-batch that read nothing.
    """

    settings: BatchSettings
    region: str
    owner: str
    max_runtime_seconds: float
    idle_seconds: float = IDLE_SECONDS

    def __post_init__(self) -> None:
        check_pace(self.max_runtime_seconds, self.idle_seconds)

    @property
    def pace(self) -> Pace:
        return Pace(self.owner, self.max_runtime_seconds, self.idle_seconds)

    def to_dict(self) -> dict[str, Any]:
        settings = {k: v.value if isinstance(v, Enum) else v for k, v in asdict(self.settings).items()}
        return {**asdict(self), "settings": settings}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContinuousRun:
        data = dict(data)
        settings = dict(data.pop("settings"))
        settings["destination"] = Destination(**settings["destination"])
        settings["on_unknown_key"] = UnknownKeys(settings["on_unknown_key"])
        return cls(settings=BatchSettings(**settings), **data)

    def work(self) -> Work:
        """This run as a Spark job's work (:mod:`~.engine.wire`)."""
        return Work(KINESIS_SOURCE, WorkKind.CONTINUOUS, self.region, self.to_dict())

    def too_large(self, length: int, limit: int) -> str:
        return (
            f"the continuous run of {self.settings.application_name} encodes to {length} characters, more than "
            f"the {limit} one spark-submit argument may carry"
        )

    @classmethod
    def from_work(cls, work: Work) -> ContinuousRun:
        """The run of a Kinesis connector's continuous work.

        :raises ValueError: ``work`` is not a Kinesis continuous run.
        """
        return cls.from_dict(work.body_for(KINESIS_SOURCE, WorkKind.CONTINUOUS))


class KinesisStream:
    """The Kinesis calls of the protocol (:class:`~.batch.Stream`) over a boto3 client, for the driver.

    :param client: a boto3 Kinesis client.
    :param region_name: its region.
    """

    def __init__(self, client: Any, region_name: str) -> None:
        self.client = client
        self.region_name = region_name

    def list_shards(self, stream_name: str) -> list[Shard]:
        return list_shards(self.client, stream_name)

    def stream_identity(self, stream_name: str) -> tuple[str, str]:
        summary = self.client.describe_stream_summary(StreamName=stream_name)["StreamDescriptionSummary"]
        return str(summary["StreamARN"]), stream_created_at(summary["StreamCreationTimestamp"])

    def describe_consumer(self, stream_name: str, consumer_name: str) -> dict[str, Any] | None:
        arn = self.stream_identity(stream_name)[0]
        try:
            description: dict[str, Any] = self.client.describe_stream_consumer(
                StreamARN=arn, ConsumerName=consumer_name
            )["ConsumerDescription"]
        except self.client.exceptions.ResourceNotFoundException:
            return None
        return description


def idle(outcome: BatchOutcome) -> bool:
    """Whether a micro-batch found nothing new: it ran no job, or its shards read no record."""
    return not any(shard.records_read for batch in outcome.batches if batch.result for shard in batch.result.shards)


def run_continuously(
    run: ContinuousRun,
    *,
    dynamodb: Any,
    stream: Stream,
    connect_snowflake: Callable[[], Any],
    submit: Callable[[BatchPlan], BatchResult],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[BatchOutcome]:
    """Run micro-batches back to back until ``run.max_runtime_seconds`` (steps 1 to 3 of this module).

    :param dynamodb: a DynamoDB client (the lease tables).
    :param stream: the Kinesis calls.
    :param connect_snowflake: opens a Snowflake connection.
    :param submit: loads a plan in the live Spark application; returns its result.
    :returns: every micro-batch's outcome, oldest first.
    :raises BatchRefused: a micro-batch cannot run; the earlier ones are committed.
    """
    finished: list[BatchOutcome] = []

    def micro_batch() -> BatchOutcome | None:
        try:
            outcome = run_batch(
                run.settings,
                dynamodb=dynamodb,
                stream=stream,
                connect_snowflake=connect_snowflake,
                submit=submit,
                owner=run.owner,
                run_started_at=datetime.now(UTC),
            )
        except ResetInProgress as err:
            log.info("Continuous run ends after %d micro-batches: %s", len(finished), err)
            return None
        finished.append(outcome)
        return outcome

    return run_back_to_back(
        micro_batch,
        lambda outcome: not idle(outcome),
        run.pace,
        what=run.settings.application_name,
        clock=clock,
        sleep=sleep,
    )
