"""One application name loads a destination: a renamed application is refused, not run beside the old one.

Progress is kept per application name (its lease table, its ledger marks, its generations). A
connector file whose ``application_name`` was changed by hand, without the reset DAG, starts with
no progress of its own and loads the destination a second time:

- a Kinesis connector reads the stream again from its initial position into rows the old name
  loaded already (``TRIM_HORIZON``: duplicates), or skips what the old name had not read yet
  (``LATEST``);
- a DynamoDB connector's new snapshot is ordered before the rows the old name's stream wrote, so
  the MERGE keeps the old values and the completed snapshot removes nothing the old name wrote.

Snowflake's generations tables record which application loaded each destination and when. The
newest of them owns the destination; any other is refused before it reads or records anything,
naming the owner and the fixes. :func:`owner_conflict` is the pure rule; each source reads its
generations table into :class:`Loader` values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Loader:
    """An application that recorded a generation for a destination.

    :param names: the names that application is known by (Kinesis: the connector file's name and
        the active one a reset moved to; DynamoDB: the application name).
    :param last_recorded: when it last recorded a generation for the destination.
    :param connector_id: the connector that recorded it, when known.
    """

    names: frozenset[str]
    last_recorded: datetime
    connector_id: str | None = None


def recorded_at(value: Any) -> datetime:
    """A generations table's ``RECORDED_AT`` as an aware datetime (the connector returns one; text is read too)."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def owner_conflict(
    application_name: str, loaders: Sequence[Loader], *, destination_exists: bool = True
) -> Loader | None:
    """The application that owns the destination instead of ``application_name``; None when it may load it.

    ``application_name`` may load it when no other application recorded a generation for it, when its
    own newest record is newer than every other's (it took over, through a reset or after the table
    was dropped), or when the destination does not exist (a table dropped by hand: its next copy
    starts from a snapshot of its own).
    """
    mine = [lo.last_recorded for lo in loaders if application_name in lo.names]
    others = [lo for lo in loaders if application_name not in lo.names]
    if not others or not destination_exists:
        return None
    newest = max(others, key=lambda lo: lo.last_recorded)
    if mine and max(mine) > newest.last_recorded:
        return None
    return newest


def owner_refusal(
    application_name: str, destination: str, owner: Loader, *, what_a_second_load_does: str, fixes: str
) -> str:
    """The refusal's text: whose destination it is, what loading it again would do, the fixes."""
    names = " / ".join(repr(n) for n in sorted(owner.names))
    by = f" (connector {owner.connector_id!r})" if owner.connector_id else ""
    return (
        f"destination {destination} is loaded by application {names}{by}, which recorded its last generation "
        f"at {owner.last_recorded.isoformat()}; application {application_name!r} has no progress of its own "
        f"there, and loading it under a second name {what_a_second_load_does}. Nothing was read or recorded. {fixes}"
    )
