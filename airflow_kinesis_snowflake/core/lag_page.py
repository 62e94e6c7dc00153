"""What the lag page reads, and how fresh it is: pure decisions the Airflow plugin carries out.

**Where the connectors are.** The page runs in Airflow's API server, which parses no DAG. Airflow 3
finds DAG files through DAG bundles (``[dag_processor] dag_bundle_config_list``): a local bundle is
a folder (by default ``[core] dags_folder``) that may be on the API server's disk; any other bundle
(a Git repository, say) is checked out by the DAG processor and the workers only. :func:`connector_folders`
names the folders to read: ``[kinesis_snowflake] connectors_folder`` when set, else each local
bundle's folder; :func:`missing_connectors` is the page's message when none holds a connector file.

**How fresh.** Reading a connector calls AWS and Snowflake; a :class:`ReadCache` keeps each read for
``[kinesis_snowflake] lag_page_cache_seconds`` (:data:`DEFAULT_CACHE_SECONDS` by default), and
:func:`freshness` tells the page's reader how old what they see is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

#: The provider's section of Airflow's configuration.
CONFIG_SECTION = "kinesis_snowflake"
#: The setting naming a folder of connector files for the lag page (the API server's disk).
CONNECTORS_FOLDER_OPTION = "connectors_folder"
#: The setting of how long the lag page keeps what it read, in seconds (0: not at all).
CACHE_SECONDS_OPTION = "lag_page_cache_seconds"
DEFAULT_CACHE_SECONDS = 30.0
#: Airflow's bundle of a local folder (``[dag_processor] dag_bundle_config_list``'s default).
LOCAL_BUNDLE_CLASS = "airflow.dag_processing.bundles.local.LocalDagBundle"


def env_var(option: str) -> str:
    """The environment variable that sets ``option`` of the provider's section."""
    return f"AIRFLOW__{CONFIG_SECTION.upper()}__{option.upper()}"


@dataclass(frozen=True)
class ConnectorFolders:
    """Where the lag page looks for connector files.

    :param folders: the folders to read (a folder's ``connectors/`` directory, else the folder itself).
    :param remote_bundles: the DAG bundles that are not a local folder, as ``name (classpath)``.
    :param from_setting: ``folders`` is ``[kinesis_snowflake] connectors_folder``.
    """

    folders: tuple[str, ...]
    remote_bundles: tuple[str, ...] = ()
    from_setting: bool = False


def connector_folders(
    setting: str | None, dags_folder: str, bundles: Sequence[Mapping[str, Any]] | None
) -> ConnectorFolders:
    """The folders to read connector files from.

    :param setting: ``[kinesis_snowflake] connectors_folder``; empty or None when not set.
    :param dags_folder: ``[core] dags_folder`` (a local bundle's folder when its ``path`` is not given).
    :param bundles: ``[dag_processor] dag_bundle_config_list``, parsed; None: the DAGs folder alone.
    """
    if setting:
        return ConnectorFolders((setting,), from_setting=True)
    if bundles is None:
        return ConnectorFolders((dags_folder,))
    folders: list[str] = []
    remote: list[str] = []
    for bundle in bundles:
        classpath = str(bundle.get("classpath", ""))
        if classpath == LOCAL_BUNDLE_CLASS or classpath.endswith(".LocalDagBundle"):
            path = str((bundle.get("kwargs") or {}).get("path") or dags_folder)
            if path not in folders:
                folders.append(path)
        else:
            remote.append(f"{bundle.get('name', '?')} ({classpath})")
    return ConnectorFolders(tuple(folders), tuple(remote))


def missing_connectors(where: ConnectorFolders) -> str:
    """Why the page shows no connector, and the setting that fixes it."""
    setting = f"[{CONFIG_SECTION}] {CONNECTORS_FOLDER_OPTION}"
    how = (
        f"Set {setting} (environment variable {env_var(CONNECTORS_FOLDER_OPTION)}) to a folder of the API "
        "server holding the connector files (*.yaml, *.yml), e.g. a checkout of the bundle's connectors/ "
        "directory or a volume mounted there."
    )
    if where.from_setting:
        return (
            f"{setting} is {where.folders[0]}, which holds no connector file (*.yaml, *.yml) on this API server "
            f"(neither in it nor in its connectors/ directory). {how}"
        )
    looked = ", ".join(where.folders) if where.folders else "no local DAG bundle"
    text = f"No connector file on this API server (looked in: {looked})."
    if where.remote_bundles:
        text += (
            f" The DAG bundles {', '.join(where.remote_bundles)} are not on the API server's disk: Airflow 3 "
            "checks them out for the DAG processor and the workers only."
        )
    return f"{text} {how}"


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class Cached(Generic[V]):
    """A value read, and how long ago (seconds) it was read."""

    value: V
    age_seconds: float


class ReadCache(Generic[K, V]):
    """Values read by key, each kept for ``ttl_seconds`` after its read (0: read every time).

    One read at a time: a request that finds its value expired while another reads it waits for
    that read instead of starting its own.

    :param ttl_seconds: how long a value is kept.
    :param clock: seconds, only ever compared (``time.monotonic`` by default; a test passes its own).
    """

    def __init__(self, ttl_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_seconds < 0:
            raise ValueError(f"a cache's time to live is at least 0 seconds, got {ttl_seconds}")
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._values: dict[K, tuple[V, float]] = {}

    def get(self, key: K, read: Callable[[], V]) -> Cached[V]:
        """The value of ``key``: kept, or read now (a read that raises keeps nothing)."""
        with self._lock:
            now = self._clock()
            kept = self._values.get(key)
            if kept is not None and now - kept[1] < self.ttl_seconds:
                return Cached(kept[0], now - kept[1])
            value = read()
            read_at = self._clock()
            self._values = {k: v for k, v in self._values.items() if read_at - v[1] < self.ttl_seconds}
            if self.ttl_seconds > 0:
                self._values[key] = (value, read_at)
            return Cached(value, 0.0)


def freshness(age_seconds: float, ttl_seconds: float) -> str:
    """How old the page's figures are, and how often they are read: the page's note."""
    if ttl_seconds <= 0:
        return f"Read now: not cached ([{CONFIG_SECTION}] {CACHE_SECONDS_OPTION} is 0)."
    return (
        f"Read {int(age_seconds)} s ago, refreshed every {ttl_seconds:g} s ([{CONFIG_SECTION}] {CACHE_SECONDS_OPTION})."
    )
