"""The units a batch holds, for every source: taken, kept alive while the batch runs, released.

A unit is what one lease in the connector's lease table covers: a Kinesis shard, a DynamoDB
snapshot segment or stream shard. Every source's batch holds its units the same way:

1. **Take** (:func:`take_leases`): a conditional write on each eligible lease, longest-waiting
   first; a lease another worker wrote first is skipped, one an earlier try of the same task still
   holds is taken over at once (:class:`~..state.leases.LeaseOwner`). A crash after taking: the
   leases expire after ``lease_duration_seconds`` (a retry takes them over at once); nothing was read.
2. **Hold** (:meth:`HeldLeases.run`): while the data plane runs, a background thread renews every
   held lease and writes the worker's heartbeat every third of the duration, so a batch that
   outlives the duration keeps its units. A lease lost meanwhile (another worker took it after a
   stall) is left to its new owner, which starts from Snowflake's ledger: the ledger guard, not the
   lease, is what stops a second apply.
3. **Release** (:meth:`HeldLeases.release`, on leaving the ``with`` block, whatever happened):
   best effort, lease by lease, then the heartbeat item; a lease not released expires, a heartbeat
   item not deleted ends with its time to live.

A batch whose job run goes on without this process (a deferred task's:
:mod:`~.detached`) leaves the ``with`` block with :class:`~.detached.JobDetached`: its leases stay
held, as a :class:`LeaseHold` that the waiting process renews (:func:`renew_hold`) and the task,
once the run ended, holds again (:func:`resume_hold`) to checkpoint and release them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from airflow_kinesis_snowflake.core.engine.detached import DetachedRun, JobDetached
from airflow_kinesis_snowflake.core.planning import eligible_leases
from airflow_kinesis_snowflake.core.state.errors import LeaseLostError
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable, open_to
from airflow_kinesis_snowflake.core.state.renewal import LeaseKeeper

log = logging.getLogger(__name__)

R = TypeVar("R")


def take_leases(
    table: LeaseTable,
    leases: Mapping[str, Lease],
    owner: str,
    duration_seconds: float,
    max_units: int | None = None,
    skip: Collection[str] = frozenset(),
    wanted: Collection[str] | None = None,
) -> list[Lease]:
    """Step 1: take up to ``max_units`` eligible leases of ``leases`` for ``owner``.

    :param skip: units read earlier in the run, not taken again; they still count as parents, so a
        child waits for a parent the run read but did not finish.
    :param wanted: when given, only these units are taken (the others are still parents).
    :returns: the leases taken, each with the counter its take wrote.
    """
    held: list[Lease] = []
    now = time.time()
    for lease in eligible_leases(open_to(leases, owner, now), now):
        if max_units is not None and len(held) >= max_units:
            break
        if lease.shard_id in skip or (wanted is not None and lease.shard_id not in wanted):
            continue
        taken = table.take(lease, owner, duration_seconds)
        if taken is not None:
            if leases[lease.shard_id].is_held(now):
                log.info(
                    "%s: took over the lease of an earlier try, %s", lease.shard_id, leases[lease.shard_id].lease_owner
                )
            held.append(taken)
    return held


class HeldLeases:
    """The leases one batch holds (steps 2 and 3), by unit; always used as a ``with`` block.

    :param table: the lease table.
    :param owner: the worker that holds them (its heartbeat item is written under this name).
    :param duration_seconds: how long a lease lasts without renewal.
    :param leases: the leases taken (:func:`take_leases`).
    :param what: how the log names the batch (e.g. the DynamoDB table), or empty.
    """

    def __init__(
        self, table: LeaseTable, owner: str, duration_seconds: float, leases: Iterable[Lease], what: str = ""
    ) -> None:
        self.table = table
        self.owner = owner
        self.duration_seconds = duration_seconds
        self.held: dict[str, Lease] = {lease.shard_id: lease for lease in leases}
        self.lost: set[str] = set()
        self.keeper: LeaseKeeper | None = None  # the renewing thread's state while the batch runs
        self._prefix = f"{what}: " if what else ""

    def __enter__(self) -> HeldLeases:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if isinstance(error, JobDetached):
            self.detach(error)
            return
        self.release()

    def update(self, lease: Lease) -> None:
        """The freshest copy of a held lease (after a checkpoint): releasing needs its counter."""
        self.held[lease.shard_id] = lease

    def drop(self, unit: str) -> None:
        """A lease lost at a write of this worker's: its new owner holds it, it is not released here."""
        self.held.pop(unit, None)
        self.lost.add(unit)

    def run(self, work: Callable[[], R]) -> R:
        """Step 2: ``work()`` (the batch's data plane) with every held lease renewed meanwhile."""
        keeper = self.keeper = LeaseKeeper(self.table, self.owner, self.duration_seconds)
        try:
            with keeper.keep(list(self.held.values())):
                return work()
        finally:
            self.held = {lease.shard_id: lease for lease in keeper.leases if lease.shard_id not in keeper.lost}
            self.lost |= keeper.lost
            if keeper.lost:
                log.warning(
                    "%sLeases lost during the batch (what it committed is in the ledger; the next owner starts "
                    "there): %s",
                    self._prefix,
                    sorted(keeper.lost),
                )

    def detach(self, detached: JobDetached) -> None:
        """The batch's job run goes on without this process: keep the leases (``detached.hold`` says
        which, for whoever renews them), and record the run in the lease table under its batch id, where
        a later try of the task that plans the same batch finds it. Recording is best effort: without the
        record a later try starts a second run, whose commit the ledger guard refuses if the first committed.
        """
        detached.hold = LeaseHold(self.table.table_name, self.owner, tuple(sorted(self.held)), self.duration_seconds)
        try:
            self.table.record_run(detached.run.batch_id, detached.run.to_dict())
        except Exception:  # see above
            log.warning("%sCould not record job run %s", self._prefix, detached.run.job_run_id, exc_info=True)

    def release(self) -> None:
        """Step 3: release every lease still held, then delete the worker's heartbeat item; best effort."""
        release_leases(self.table, self.held.values())
        self.held = {}
        try:
            self.table.stop_heartbeat(self.owner)
        except Exception:  # a stale heartbeat item is harmless, and its time to live ends it
            log.warning("Could not delete the heartbeat item of %s", self.owner, exc_info=True)


def release_leases(table: LeaseTable, leases: Iterable[Lease]) -> None:
    """Release each lease, best effort: one not released expires after its duration."""
    for lease in leases:
        try:
            table.release(lease)
        except Exception:  # releasing is best effort: the lease expires anyway
            log.warning("Could not release the lease on %s", lease.shard_id, exc_info=True)


@dataclass(frozen=True)
class LeaseHold:
    """The leases of a batch whose job run goes on without the process that took them: plain names,
    carried by a deferred task and its trigger.

    :param table_name: the lease table.
    :param owner: the owner that holds them.
    :param units: the units (lease keys) held.
    :param duration_seconds: how long a lease lasts without renewal.
    """

    table_name: str
    owner: str
    units: tuple[str, ...]
    duration_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "table_name": self.table_name,
            "owner": self.owner,
            "units": list(self.units),
            "duration_seconds": self.duration_seconds,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LeaseHold:
        return cls(
            str(data["table_name"]),
            str(data["owner"]),
            tuple(str(unit) for unit in data["units"]),
            float(data["duration_seconds"]),
        )


def _still_held(table: LeaseTable, hold: LeaseHold) -> tuple[list[Lease], set[str]]:
    """The leases of ``hold`` its owner still holds (as read now, expired or not: nobody took them), and
    the units another worker took meanwhile."""
    found = table.leases_of(hold.units)
    mine = [found[unit] for unit in hold.units if unit in found and found[unit].lease_owner == hold.owner]
    return mine, set(hold.units) - {lease.shard_id for lease in mine}


def resume_hold(table: LeaseTable, hold: LeaseHold, what: str = "") -> HeldLeases:
    """The leases of ``hold`` again, once its job run ended: those its owner still holds, as a
    :class:`HeldLeases` (a ``with`` block releases them); a unit another worker took meanwhile is lost,
    and its new owner starts from the ledger.

    :param what: how the log names the batch, or empty.
    """
    mine, lost = _still_held(table, hold)
    held = HeldLeases(table, hold.owner, hold.duration_seconds, mine, what)
    held.lost |= lost
    if lost:
        log.warning(
            "%sLeases lost while the job ran (what it committed is in the ledger; the next owner starts there): %s",
            f"{what}: " if what else "",
            sorted(lost),
        )
    return held


def renew_hold(table: LeaseTable, hold: LeaseHold) -> set[str]:
    """One renewal of ``hold`` while its job run goes on: the owner's heartbeat, then every lease it still
    holds (what :class:`HeldLeases` does every third of the duration while a batch runs here).

    :returns: the units lost, taken by another worker.
    """
    table.heartbeat(hold.owner, hold.duration_seconds)
    mine, lost = _still_held(table, hold)
    for lease in mine:
        try:
            table.renew(lease, hold.duration_seconds)
        except LeaseLostError:
            lost.add(lease.shard_id)
    return lost


def forget_run(table: LeaseTable, run: DetachedRun) -> None:
    """Remove the record of a detached job run whose batch was finished; best effort (it has a time to live)."""
    try:
        table.forget_run(run.batch_id)
    except Exception:  # a stale record names a run that ended: a later try starts its own
        log.warning("Could not remove the record of job run %s", run.job_run_id, exc_info=True)


@dataclass(frozen=True)
class ResumedBatch:
    """What a deferred task resumes with, from its trigger's event (:func:`~.detached.detached_batch`
    and the leases the trigger renewed).

    :param run: the job run, now ended (or whose wait ran out).
    :param hold: the batch's leases; its owner is the task's.
    :param progress: the protocol's progress, as :class:`~.detached.JobDetached` carried it.
    :param event: the trigger's event (``status``, ``message``).
    """

    run: DetachedRun
    hold: LeaseHold
    progress: dict[str, Any]
    event: Mapping[str, Any]

    @classmethod
    def of_event(cls, event: Mapping[str, Any]) -> ResumedBatch:
        batch = event["batch"]
        return cls(
            DetachedRun.from_dict(batch["run"]), LeaseHold.from_dict(event["leases"]), dict(batch["progress"]), event
        )
