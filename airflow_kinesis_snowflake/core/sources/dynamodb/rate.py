"""The snapshot's read-rate limit, so that a snapshot never throttles the table's production traffic.

Two parts:

* :func:`segment_read_rate`, pure: the read capacity units per second one segment may use, from the
  described table (:class:`TableCapacity`) and the settings (:class:`ReadRateSettings`): a fraction
  of a provisioned table's read capacity, or an absolute rate (the only choice for an on-demand
  table, which has no capacity to take a fraction of), divided among the segments read at once.
* :class:`ReadRateLimiter`, a token bucket in read capacity units. A Scan's cost is known only from
  its answer (``ConsumedCapacity``), so a page is paid for after the fact and the limiter waits
  before the next page until the debt is paid back at the rate. It takes a clock and a sleep, so a
  test checks the waits it asks for against the units consumed, without waiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PROVISIONED = "PROVISIONED"
PAY_PER_REQUEST = "PAY_PER_REQUEST"

#: The share of a provisioned table's read capacity a snapshot takes when no setting says otherwise.
DEFAULT_READ_FRACTION = 0.5

#: The connector file's settings (``source.*``) that decide the rate; errors name them.
FRACTION_SETTING = "snapshot_read_fraction"
UNITS_SETTING = "snapshot_read_units_per_second"


class ReadRateError(ValueError):
    """The settings give no usable read rate for this table; the message names the setting to fix."""


@dataclass(frozen=True)
class TableCapacity:
    """What DescribeTable says about a table's read capacity.

    :param table: the table's name.
    :param billing_mode: ``PROVISIONED`` or ``PAY_PER_REQUEST`` (on demand).
    :param read_capacity_units: the provisioned read capacity (0 for an on-demand table).
    """

    table: str
    billing_mode: str
    read_capacity_units: int

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> TableCapacity:
        """From DescribeTable's ``Table``; a table created before billing modes has no summary and is provisioned."""
        mode = description.get("BillingModeSummary", {}).get("BillingMode", PROVISIONED)
        units = description.get("ProvisionedThroughput", {}).get("ReadCapacityUnits", 0)
        return cls(str(description["TableName"]), str(mode), int(units))

    @property
    def on_demand(self) -> bool:
        return self.billing_mode == PAY_PER_REQUEST


@dataclass(frozen=True)
class ReadRateSettings:
    """How fast a snapshot may read: at most one of the two is set.

    :param read_fraction: the share of a provisioned table's read capacity, in (0, 1]
        (``snapshot_read_fraction``; :data:`DEFAULT_READ_FRACTION` when neither is set).
    :param read_units_per_second: an absolute rate in read capacity units per second, for the whole
        table (``snapshot_read_units_per_second``); required for an on-demand table.
    """

    read_fraction: float | None = None
    read_units_per_second: float | None = None


def table_read_rate(capacity: TableCapacity, settings: ReadRateSettings) -> float:
    """The read capacity units per second the whole snapshot of this table may use.

    :raises ReadRateError: both settings set, a value out of range, or an on-demand table (or a
        provisioned one without read capacity) without ``snapshot_read_units_per_second``.
    """
    fraction, units = settings.read_fraction, settings.read_units_per_second
    if fraction is not None and units is not None:
        raise ReadRateError(
            f"table {capacity.table}: {FRACTION_SETTING} ({fraction}) and {UNITS_SETTING} ({units}) are both set; "
            "set only one of them"
        )
    if units is not None:
        if not units > 0:
            raise ReadRateError(f"table {capacity.table}: {UNITS_SETTING} must be above 0, got {units}")
        return float(units)
    if capacity.on_demand:
        raise ReadRateError(
            f"table {capacity.table} is on demand (PAY_PER_REQUEST): it has no provisioned read capacity to take "
            f"{FRACTION_SETTING} of; set {UNITS_SETTING} to the read capacity units per second the snapshot may use"
        )
    if capacity.read_capacity_units <= 0:
        raise ReadRateError(
            f"table {capacity.table} reports {capacity.read_capacity_units} provisioned read capacity units; "
            f"set {UNITS_SETTING} to the read capacity units per second the snapshot may use"
        )
    fraction = DEFAULT_READ_FRACTION if fraction is None else fraction
    if not 0 < fraction <= 1:
        raise ReadRateError(
            f"table {capacity.table}: {FRACTION_SETTING} must be above 0 and at most 1, got {fraction}; "
            "for example 0.5 reads with half the table's provisioned read capacity"
        )
    return fraction * capacity.read_capacity_units


def segment_read_rate(capacity: TableCapacity, settings: ReadRateSettings, segments_at_once: int) -> float:
    """The read capacity units per second each of ``segments_at_once`` segments read together may use.

    :param capacity: the described table.
    :param settings: the connector's rate settings.
    :param segments_at_once: how many segments of this table are read at the same time (each has its
        own limiter, as each runs in its own Spark task).
    :raises ReadRateError: as :func:`table_read_rate`.
    """
    if segments_at_once < 1:
        raise ValueError(f"segments read at once must be at least 1, got {segments_at_once}")
    return table_read_rate(capacity, settings) / segments_at_once


class ReadRateLimiter:
    """A token bucket in read capacity units: :meth:`wait` before a page, :meth:`pay` its consumed units after.

    The bucket starts full and holds at most ``burst`` units (one second's worth by default); a page
    may cost more than the bucket holds (a 1 MB page costs up to 128 units), which leaves a debt that
    :meth:`wait` sleeps off at ``units_per_second``. Over any stretch, the units paid exceed
    ``burst + units_per_second * elapsed`` by at most the last page's cost. Safe to share between
    threads.

    :param units_per_second: the rate, in read capacity units per second.
    :param burst: the bucket's size in units (default: ``units_per_second``).
    :param clock: monotonic seconds.
    :param sleep: waits the given seconds.
    """

    def __init__(
        self,
        units_per_second: float,
        *,
        burst: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not units_per_second > 0:
            raise ValueError(f"a read rate must be above 0 units per second, got {units_per_second}")
        self.units_per_second = float(units_per_second)
        self.burst = self.units_per_second if burst is None else float(burst)
        if self.burst < 0:
            raise ValueError(f"a burst must be at least 0 units, got {self.burst}")
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._tokens = self.burst
        self._last = clock()
        #: Units paid and seconds waited so far.
        self.consumed_units = 0.0
        self.waited_seconds = 0.0

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.units_per_second)
        self._last = now

    def wait(self) -> float:
        """Sleep until the units paid so far are covered by the rate; returns the seconds slept."""
        slept = 0.0
        while True:
            with self._lock:
                self._refill()
                if self._tokens >= 0:
                    self.waited_seconds += slept
                    return slept
                delay = -self._tokens / self.units_per_second
            self._sleep(delay)
            slept += delay

    def pay(self, units: float) -> None:
        """Take the units a page consumed (its ``ConsumedCapacity``)."""
        if units < 0:
            raise ValueError(f"consumed capacity cannot be negative, got {units}")
        with self._lock:
            self._refill()
            self._tokens -= units
            self.consumed_units += units
