"""Continuous mode: one Spark application runs micro-batches back to back, then ends.

With ``batch.mode: continuous`` the ingest task submits the Spark job once, with a
:class:`ContinuousRun` instead of a plan. The driver then runs the protocol of
:mod:`~airflow_kinesis_snowflake.core.batch` itself, in a loop (:func:`run_continuously`):

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

import base64
import binascii
import json
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from airflow_kinesis_snowflake.core.batch import BatchOutcome, BatchSettings, ResetInProgress, Stream, run_batch
from airflow_kinesis_snowflake.core.load.evolution import UnknownKeys
from airflow_kinesis_snowflake.core.model import BatchResult, Destination
from airflow_kinesis_snowflake.core.planning import BatchPlan
from airflow_kinesis_snowflake.core.sources.shards import Shard, list_shards
from airflow_kinesis_snowflake.core.state.metadata import stream_created_at

log = logging.getLogger(__name__)

# A short sleep when a micro-batch found nothing new: records put meanwhile wait at most this long.
IDLE_SECONDS = 1.0


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

    def to_json(self) -> str:
        settings = {k: v.value if isinstance(v, Enum) else v for k, v in asdict(self.settings).items()}
        return json.dumps({**asdict(self), "settings": settings}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ContinuousRun:
        data = json.loads(text)
        settings = dict(data.pop("settings"))
        settings["destination"] = Destination(**settings["destination"])
        settings["on_unknown_key"] = UnknownKeys(settings["on_unknown_key"])
        return cls(settings=BatchSettings(**settings), **data)


def check_pace(max_runtime_seconds: float, idle_seconds: float) -> None:
    """A continuous application's runtime and idle pause are more than 0 (without a pause, a quiet
    application would ask its sources and Snowflake without rest).

    :raises ValueError: naming the value.
    """
    if max_runtime_seconds <= 0:
        raise ValueError(f"max_runtime_seconds must be more than 0, not {max_runtime_seconds}")
    if idle_seconds <= 0:
        raise ValueError(f"idle_seconds must be more than 0, not {idle_seconds}")


def encode_argument(text: str) -> str:
    """JSON as one command-line argument: zlib-compressed, URL-safe base64 (a continuous run's)."""
    return base64.urlsafe_b64encode(zlib.compress(text.encode(), 9)).decode("ascii")


def decode_argument(text: str, what: str) -> str:
    """The JSON :func:`encode_argument` encoded.

    :param what: what ``text`` should be, for the error.
    :raises ValueError: ``text`` is not an encoded ``what``.
    """
    try:
        data = zlib.decompress(base64.urlsafe_b64decode(text.encode("ascii")))
    except (binascii.Error, zlib.error, UnicodeEncodeError) as err:
        raise ValueError(f"not an encoded {what} ({len(text)} characters): {err}") from None
    return data.decode("utf-8")


def encode_run(run: ContinuousRun) -> str:
    """The run as one command-line argument (:func:`encode_argument`)."""
    return encode_argument(run.to_json())


def decode_run(text: str) -> ContinuousRun:
    """The run :func:`encode_run` encoded.

    :raises ValueError: ``text`` is not an encoded run.
    """
    return ContinuousRun.from_json(decode_argument(text, "continuous run"))


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


def pause_after(read_anything: bool, elapsed: float, max_runtime_seconds: float, idle_seconds: float) -> float | None:
    """After a micro-batch, ``elapsed`` seconds into a continuous run: None to end, else seconds to wait first.

    A micro-batch that read something is followed at once; an idle one after ``idle_seconds``; none
    starts after ``max_runtime_seconds``, and no pause reaches past it.
    """
    left = max_runtime_seconds - elapsed
    if left <= 0:
        return None
    return 0.0 if read_anything else min(idle_seconds, left)


def next_pause(outcome: BatchOutcome, elapsed: float, run: ContinuousRun) -> float | None:
    """:func:`pause_after` a Kinesis micro-batch with this ``outcome``."""
    return pause_after(not idle(outcome), elapsed, run.max_runtime_seconds, run.idle_seconds)


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
    started = clock()
    outcomes: list[BatchOutcome] = []
    while True:
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
            log.info("Continuous run ends after %d micro-batches: %s", len(outcomes), err)
            return outcomes
        outcomes.append(outcome)
        pause = next_pause(outcome, clock() - started, run)
        if pause is None:
            log.info("Continuous run ends after %d micro-batches (max runtime reached)", len(outcomes))
            return outcomes
        if pause:
            sleep(pause)
