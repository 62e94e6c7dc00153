"""A batch whose job run goes on without the process that started it: a deferred task's batch.

A deferrable task submits its batch's job run, then hands the wait to Airflow's triggerer and ends
its try's process. The protocol (:func:`~..batch.run_batch`, :func:`~..dynamodb_sync.sync_table`)
stops at its step 8, the run, with what it needs to go on once the run ended:

1. The submit step starts the run and raises :class:`JobDetached` with the :class:`DetachedRun`: the
   platform's run id, the submission's attempt id and the plan's outcome key (application name,
   generation, batch id). Nothing in it is a secret: ids and names.
2. The batch's leases are not released (:class:`~.leases.HeldLeases` leaves them to the run, as a
   :class:`~.leases.LeaseHold`: table, owner, units, duration), and the run is recorded in the lease
   table under its batch id, where a later try of the task finds it (below).
3. The protocol adds where the run is (its ``progress``: the cut-off, the batches before this one),
   and the task defers with all of it; whoever waits renews the leases meanwhile
   (:func:`~.leases.renew_hold`).
4. Once the run ended, the task finishes the batch as the blocking path does after its wait: the
   outcome read from Snowflake under the outcome key, the checkpoints committed on the leases it
   still holds, the leases released, the record removed; then the protocol goes on (another round
   after a reshard, the DynamoDB source's next batch), and may detach again.

A try that dies while its run goes on (the task is failed or cleared while deferred, the trigger
timed out) loads nothing twice: the run's commit is guarded by the ledger marks its plan started
from. The next try takes the leases over at once, as a retry does, and plans from Snowflake: when
the run committed, step 6 catches the checkpoints up to the ledger and the plan is the next batch;
when it did not, the plan is the same batch (same marks, same cut-off, same batch id), the record
under that id names the run, and the try waits for that run instead of starting another
(:func:`recorded_run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from airflow_kinesis_snowflake.core.load.snowflake_sink import OutcomeKey


@dataclass(frozen=True)
class DetachedRun:
    """One batch's job run on a managed Spark platform, started and not waited for here.

    :param platform: the ``spark.platform`` it runs on.
    :param job_run_id: the platform's id of the run.
    :param attempt_id: the submission's ``--attempt`` id, under which the job records its outcome.
    :param application_name: the application name the plan reads with (its outcome key's).
    :param generation_id: the plan's generation (its outcome key's).
    :param batch_id: the plan's batch id.
    :param name: the job's name, in the log and errors.
    """

    platform: str
    job_run_id: str
    attempt_id: str
    application_name: str
    generation_id: str
    batch_id: str
    name: str = ""

    @property
    def key(self) -> OutcomeKey:
        """Where the job records the batch's outcome."""
        return OutcomeKey(self.application_name, self.generation_id, self.batch_id, self.attempt_id)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DetachedRun:
        return cls(**{name: str(data[name]) for name in cls.__dataclass_fields__ if name in data})


class JobDetached(BaseException):
    """Raised by a batch's submit step once its job run started, to leave the wait to another process.

    A ``BaseException``, as Airflow's ``TaskDeferred``: no ``except Exception`` on its way out of the
    protocol takes it for a failure. On the way out :class:`~.leases.HeldLeases` sets :attr:`hold`
    (and keeps the leases), and the protocol sets :attr:`progress`.

    :param run: the run that goes on.
    """

    def __init__(self, run: DetachedRun) -> None:
        super().__init__(f"job run {run.job_run_id} of batch {run.batch_id} goes on without this process")
        self.run = run
        self.hold: Any = None  # the batch's leases, a :class:`~.leases.LeaseHold`
        self.progress: dict[str, Any] = {}


@dataclass(frozen=True)
class JobRunState:
    """A job run's state, as its platform tells it (a managed platform's submitter reads it).

    :param state: the platform's word for it (``RUNNING``, ``SUCCESS``, ``FAILED`` ...).
    :param ended: the run is over: it will not change any more.
    :param succeeded: it ended, and succeeded.
    :param details: what the platform says of it (state details, error message), or empty.
    """

    state: str
    ended: bool
    succeeded: bool = False
    details: str = ""


def recorded_run(record: Mapping[str, Any] | None, platform: str) -> DetachedRun | None:
    """The run a lease table's record names (:meth:`~..state.leases.LeaseTable.recorded_run`), when it
    ran on ``platform``; None otherwise (no record, or one of another platform, whose id means nothing here).
    """
    if not record or record.get("platform") != platform:
        return None
    return DetachedRun.from_dict(record)


def wait_timeout(platform_seconds: float | None, execution_timeout: timedelta | None) -> float | None:
    """How long a deferred task waits for its run, in seconds: the platform's wait and the task's
    ``execution_timeout``, the lesser of those set; None when neither is."""
    task_seconds = None if execution_timeout is None else execution_timeout.total_seconds()
    return min((limit for limit in (platform_seconds, task_seconds) if limit is not None), default=None)


def detached_batch(detached: JobDetached) -> dict[str, Any]:
    """What a deferred task carries of its batch through the trigger and back: the run and the
    protocol's progress (ids, names and figures: nothing secret)."""
    return {"run": detached.run.to_dict(), "progress": detached.progress}
