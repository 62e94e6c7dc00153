"""What goes wrong with a lease table, as the callers of ``core/state`` see it."""

from __future__ import annotations


class LeaseTableError(RuntimeError):
    """The lease table is missing, foreign or unusable."""


class IdentityError(LeaseTableError):
    """The lease table belongs to another destination, or to an earlier stream of the same name."""


class LeaseLostError(RuntimeError):
    """A conditional write failed: another worker took the lease, or the checkpoint moved."""


class MaintenanceError(RuntimeError):
    """A reset, restore or clean-up step found the tables in a state it must not touch."""
