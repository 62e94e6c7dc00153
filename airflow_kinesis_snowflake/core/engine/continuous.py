"""Continuous mode, for every source: one Spark application runs batches back to back, then ends.

With ``batch.mode: continuous`` the task submits the Spark job once, with a continuous run
(:class:`Pace` and the source's settings) instead of one batch's plan. The driver then runs the
source's whole protocol itself, in the loop of :func:`run_back_to_back`:

1. **A batch**: the source's run of the protocol with the cut-off *now* (for Kinesis a micro-batch,
   :func:`~..batch.run_batch`; for DynamoDB a sync run, :func:`~..dynamodb_sync.sync_table`), each
   batch's Spark work in the driver's live ``SparkContext`` instead of a spark-submit of its own.
   The steps, the ordering and the crash windows are a scheduled run's; each batch records its
   outcome under the submission's attempt id.
2. **Idle**: after a batch that found nothing new, the driver sleeps ``idle_seconds`` (never past
   the end) before the next one.
3. **End**: once ``max_runtime_seconds`` have passed, no batch starts; the one running finishes,
   the application ends, and the task reads every outcome of its attempt. The next DAG run submits
   again. A batch may also end the run early (a reset starting: the source's run returns None).

Each batch is the same protocol with the same crash windows, so killing the driver, spark-submit or
the Airflow task at any point loses and duplicates nothing: the leases expire, and the next batch
(of any application) reads on from the ledger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)

# A short sleep when a batch found nothing new: records put meanwhile wait at most this long.
IDLE_SECONDS = 1.0

_Outcome = TypeVar("_Outcome")


def check_mode(mode: str, max_runtime_minutes: float | None, modes: Sequence[str]) -> None:
    """Refuse, when the DAG is built, a mode a task cannot run: ``scheduled``, or ``continuous`` with a
    runtime above zero.

    :param modes: the modes there are (``batch.mode``).
    :raises ValueError: naming the mode.
    """
    if (mode == "continuous") != bool(max_runtime_minutes) or mode not in modes:
        raise ValueError(f"mode {mode!r}: scheduled, or continuous with max_runtime_minutes > 0")


def check_pace(max_runtime_seconds: float, idle_seconds: float) -> None:
    """A continuous application's runtime and idle pause are more than 0 (without a pause, a quiet
    source would be polled in a busy loop).

    :raises ValueError: either is not.
    """
    if max_runtime_seconds <= 0:
        raise ValueError(f"max_runtime_seconds must be more than 0, not {max_runtime_seconds}")
    if idle_seconds <= 0:
        raise ValueError(f"idle_seconds must be more than 0, not {idle_seconds}")


@dataclass(frozen=True)
class Pace:
    """How long a continuous application runs, and how it waits when its source is quiet.

    :param owner: the lease owner of the application, the same for each batch: the lease table
        keeps one worker item per application, not one per batch.
    :param max_runtime_seconds: no batch starts after this long.
    :param idle_seconds: the sleep after a batch that found nothing new.
    """

    owner: str
    max_runtime_seconds: float
    idle_seconds: float = IDLE_SECONDS

    def __post_init__(self) -> None:
        check_pace(self.max_runtime_seconds, self.idle_seconds)


def pause_after(did_something: bool, elapsed: float, pace: Pace) -> float | None:
    """After a batch, ``elapsed`` seconds into a continuous run: None to end, else seconds to wait first.

    A batch that found something new is followed at once; an idle one after ``pace.idle_seconds``;
    none starts after ``pace.max_runtime_seconds``, and no pause reaches past it.
    """
    left = pace.max_runtime_seconds - elapsed
    if left <= 0:
        return None
    return 0.0 if did_something else min(pace.idle_seconds, left)


def run_back_to_back(
    run_once: Callable[[], _Outcome | None],
    did_something: Callable[[_Outcome], bool],
    pace: Pace,
    *,
    what: str,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[_Outcome]:
    """Run ``run_once`` again and again until ``pace.max_runtime_seconds`` (steps 1 to 3 of this module).

    :param run_once: one batch of the source's protocol; None when the run must end now (a reset
        started).
    :param did_something: whether a batch found something new (else the loop idles before the next).
    :param what: what runs, for the log ("orders-app", "table Orders").
    :returns: every batch's outcome, oldest first.
    """
    started = clock()
    outcomes: list[_Outcome] = []
    while True:
        outcome = run_once()
        if outcome is None:
            return outcomes
        outcomes.append(outcome)
        pause = pause_after(did_something(outcome), clock() - started, pace)
        if pause is None:
            log.info("%s: continuous run ends after %d batches (max runtime reached)", what, len(outcomes))
            return outcomes
        if pause:
            sleep(pause)
