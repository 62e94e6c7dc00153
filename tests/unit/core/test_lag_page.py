"""Where the lag page finds connector files (DAG bundles), and how long it keeps what it read."""

from __future__ import annotations

import pytest

from airflow_kinesis_snowflake.core.lag_page import (
    LOCAL_BUNDLE_CLASS,
    ConnectorFolders,
    ReadCache,
    connector_folders,
    freshness,
    missing_connectors,
)

GIT_BUNDLE = {"name": "repo", "classpath": "airflow.providers.git.bundles.git.GitDagBundle", "kwargs": {}}


def test_the_setting_wins_over_the_dags_folder_and_the_bundles() -> None:
    where = connector_folders("/etc/connectors", "/opt/dags", [GIT_BUNDLE])
    assert where == ConnectorFolders(("/etc/connectors",), from_setting=True)


def test_local_bundles_are_read_where_they_point_or_in_the_dags_folder() -> None:
    bundles = [
        {"name": "dags-folder", "classpath": LOCAL_BUNDLE_CLASS, "kwargs": {}},
        {"name": "team", "classpath": LOCAL_BUNDLE_CLASS, "kwargs": {"path": "/srv/team-dags"}},
        GIT_BUNDLE,
    ]
    where = connector_folders(None, "/opt/dags", bundles)
    assert where.folders == ("/opt/dags", "/srv/team-dags")
    assert where.remote_bundles == ("repo (airflow.providers.git.bundles.git.GitDagBundle)",)
    assert connector_folders("", "/opt/dags", None) == ConnectorFolders(("/opt/dags",))


def test_with_only_a_git_bundle_the_message_names_it_and_the_setting_to_set() -> None:
    message = missing_connectors(connector_folders(None, "/opt/dags", [GIT_BUNDLE]))
    assert message.startswith("No connector file on this API server (looked in: no local DAG bundle).")
    assert "repo (airflow.providers.git.bundles.git.GitDagBundle) are not on the API server's disk" in message
    assert (
        "Set [kinesis_snowflake] connectors_folder (environment variable AIRFLOW__KINESIS_SNOWFLAKE__CONNECTORS_FOLDER)"
        in message
    )
    set_but_empty = missing_connectors(ConnectorFolders(("/etc/connectors",), from_setting=True))
    assert set_but_empty.startswith(
        "[kinesis_snowflake] connectors_folder is /etc/connectors, which holds no connector"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_read_is_kept_for_the_time_to_live_then_read_again() -> None:
    clock, reads = Clock(), []

    def read() -> str:
        reads.append(clock.now)
        return f"read at {clock.now:g}"

    cache: ReadCache[str, str] = ReadCache(30, clock)
    assert cache.get("page", read).value == "read at 1000"
    clock.now += 12
    kept = cache.get("page", read)
    assert (kept.value, kept.age_seconds) == ("read at 1000", 12)
    assert cache.get("another key", read).value == "read at 1012"
    clock.now += 18  # 30 s after the first read
    again = cache.get("page", read)
    assert (again.value, again.age_seconds) == ("read at 1030", 0)
    assert reads == [1000, 1012, 1030]


def test_a_failed_read_keeps_nothing_and_zero_seconds_reads_every_time() -> None:
    clock = Clock()
    cache: ReadCache[str, int] = ReadCache(30, clock)

    def fail() -> int:
        raise FileNotFoundError("no connector")

    with pytest.raises(FileNotFoundError):
        cache.get("page", fail)
    assert cache.get("page", lambda: 7).value == 7

    uncached: ReadCache[str, int] = ReadCache(0, clock)
    counter = iter(range(3))
    assert [uncached.get("page", lambda: next(counter)).value for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="at least 0 seconds"):
        ReadCache(-1, clock)


def test_the_page_says_how_old_its_figures_are_and_how_often_they_are_read() -> None:
    assert freshness(12.7, 30) == "Read 12 s ago, refreshed every 30 s ([kinesis_snowflake] lag_page_cache_seconds)."
    assert freshness(0, 0) == "Read now: not cached ([kinesis_snowflake] lag_page_cache_seconds is 0)."
