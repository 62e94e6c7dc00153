"""The few Spark calls a data plane makes, run in this process instead: a connector with no Spark connection.

A data plane is written once, against the part of Spark's API it uses (``sc.parallelize(units)``,
``map``, ``collect``, ``persist``/``unpersist``); on Spark it gets a SparkContext, without one a
:class:`LocalContext`, and the same steps run one unit after the other here. ``map`` runs at once,
so each unit is read once, as a persisted RDD is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

_T = TypeVar("_T")
_U = TypeVar("_U")


class LocalDataset(Generic[_T]):
    """A list with the RDD calls a data plane makes (:meth:`map` runs the function at once)."""

    def __init__(self, items: Iterable[_T]) -> None:
        self.items = list(items)

    def map(self, function: Callable[[_T], _U]) -> LocalDataset[_U]:
        return LocalDataset(function(item) for item in self.items)

    def collect(self) -> list[_T]:
        return list(self.items)

    def unpersist(self) -> None:
        """Nothing to free: the items are a list."""


class LocalContext:
    """``SparkContext.parallelize`` in this process."""

    def parallelize(self, items: Iterable[_T], slices: int = 1) -> LocalDataset[_T]:
        return LocalDataset(items)


def kept(dataset: Any) -> Any:
    """``dataset`` kept for reuse (an RDD persisted in memory, then on disk), so its units are read once."""
    if isinstance(dataset, LocalDataset):
        return dataset  # already a list
    from pyspark import StorageLevel

    return dataset.persist(StorageLevel.MEMORY_AND_DISK)


class SharedConnection:
    """A data plane's Snowflake connections, in this process: the one given, every time (not closed).

    :param connection: an open Snowflake connection, which its opener closes.
    """

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    @contextmanager
    def snowflake_connection(self) -> Iterator[Any]:
        yield self.connection
