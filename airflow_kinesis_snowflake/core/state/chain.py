"""The one walk of a ``superseded_by`` chain, and why it ended.

A reset to a new application name leaves ``superseded_by = <new name>`` in the metadata item of
the old table (and of the configured one). Ingestion, restore and clean-up all follow these
pointers; they do it with :func:`walk_chain`, which reports where and why the walk stopped, and
each decides what that means for it (ingestion refuses a broken chain, restore takes a missing
last hop as still this connector's, clean-up keeps a table whose successor it cannot see).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

# Resets repoint the configured table directly at the active one, so a chain is one hop long;
# the bound only guards against a hand-edited loop.
MAX_HOPS = 10

T = TypeVar("T")


class ChainEnd(StrEnum):
    """Why a walk along ``superseded_by`` stopped."""

    END = "end-of-chain"  # the last table supersedes nothing
    MISSING = "missing-table"  # a table on the way is not there (or not known)
    LOOP = "loop"  # a table points back to one already on the chain
    HOP_LIMIT = "hop-limit"  # more than MAX_HOPS pointers


@dataclass(frozen=True)
class Chain(Generic[T]):
    """The tables read from ``names[0]`` on, and why the walk stopped.

    :param names: every name reached, the start first; with :attr:`ChainEnd.MISSING` the last is
        the missing one; with :attr:`ChainEnd.LOOP` or :attr:`ChainEnd.HOP_LIMIT` the name the walk
        refused to follow is not included.
    :param found: what the lookup returned for each name that was there, in the same order.
    :param end: why it stopped.
    :param next_name: with a loop or the hop limit, the pointer that was not followed.
    """

    names: tuple[str, ...]
    found: tuple[T, ...]
    end: ChainEnd
    next_name: str | None = None

    @property
    def last(self) -> str:
        return self.names[-1]

    @property
    def complete(self) -> bool:
        return self.end is ChainEnd.END

    def describe(self) -> str:
        path = " -> ".join(self.names)
        if self.end is ChainEnd.MISSING:
            return f"{path}: {self.last!r} does not exist or has no metadata item"
        if self.end is ChainEnd.LOOP:
            return f"lease tables supersede each other in a loop: {path} -> {self.next_name}"
        if self.end is ChainEnd.HOP_LIMIT:
            return f"more than {MAX_HOPS} superseded tables in a row: {path} -> {self.next_name}"
        return path


def walk_chain(
    start: str,
    lookup: Callable[[str], T | None],
    successor: Callable[[T], str | None],
    *,
    max_hops: int = MAX_HOPS,
) -> Chain[T]:
    """Follow ``successor`` from ``start``, looking each table up with ``lookup`` (None: not there)."""
    names = [start]
    found: list[T] = []
    while True:
        item = lookup(names[-1])
        if item is None:
            return Chain(tuple(names), tuple(found), ChainEnd.MISSING)
        found.append(item)
        following = successor(item)
        if not following:
            return Chain(tuple(names), tuple(found), ChainEnd.END)
        if following in names:
            return Chain(tuple(names), tuple(found), ChainEnd.LOOP, following)
        if len(names) > max_hops:
            return Chain(tuple(names), tuple(found), ChainEnd.HOP_LIMIT, following)
        names.append(following)
