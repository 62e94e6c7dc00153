"""Keep a worker's leases alive while its batch runs.

A batch can run longer than the lease duration (a slow Spark job). A background thread renews
every held lease and the worker's heartbeat at a third of the duration, so only a worker that
really stopped loses its shards to another after the failover time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from airflow_kinesis_snowflake.core.state.errors import LeaseLostError
from airflow_kinesis_snowflake.core.state.leases import Lease, LeaseTable


@dataclass
class LeaseKeeper:
    """Renews ``leases`` every ``duration_seconds / 3`` until stopped; remembers lost ones."""

    table: LeaseTable
    worker_id: str
    duration_seconds: float
    _leases: dict[str, Lease] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    renewals: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def leases(self) -> list[Lease]:
        with self._lock:
            return [self._leases[k] for k in sorted(self._leases)]

    def renew_once(self) -> None:
        self.table.heartbeat(self.worker_id, self.duration_seconds)
        with self._lock:
            for shard_id in sorted(self._leases):
                if shard_id in self.lost:
                    continue
                try:
                    self._leases[shard_id] = self.table.renew(self._leases[shard_id], self.duration_seconds)
                    self.renewals += 1
                except LeaseLostError:
                    self.lost.add(shard_id)

    def _run(self) -> None:
        while not self._stop.wait(self.duration_seconds / 3):
            try:
                self.renew_once()
            except Exception:  # noqa: BLE001 - a failed renewal is retried on the next tick
                continue

    @contextmanager
    def keep(self, leases: Sequence[Lease]) -> Iterator[LeaseKeeper]:
        """Renew ``leases`` in the background for the duration of the block."""
        with self._lock:
            self._leases = {lease.shard_id: lease for lease in leases}
        self.renew_once()
        thread = threading.Thread(target=self._run, name=f"lease-keeper-{self.worker_id}", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()
