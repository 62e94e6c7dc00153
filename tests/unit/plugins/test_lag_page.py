"""The lag page's reads: where it finds the connectors under Airflow 3 DAG bundles, and its cache."""

from __future__ import annotations

import json
import logging
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_kinesis_snowflake.core.lag_page import ReadCache
from airflow_kinesis_snowflake.plugins import lag_page
from airflow_kinesis_snowflake.plugins.lag_page import PageCache, render_lag_page, where_connectors
from airflow_kinesis_snowflake.status import ConnectorStatus
from tests.emulators.servers import REPO_ROOT

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
GIT_BUNDLES = [{"name": "repo", "classpath": "airflow.providers.git.bundles.git.GitDagBundle", "kwargs": {}}]


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The connectors the page reads (each read answers a status without AWS or Snowflake)."""
    done: list[str] = []

    def status(config: Any, *, batches: int) -> ConnectorStatus:
        done.append(config.connector_id)
        return ConnectorStatus(config.connector_id, "app", "stream", "A.B.C", 24)

    monkeypatch.setattr(lag_page, "any_connector_status", status)
    return done


def connectors_folder(root: Path) -> Path:
    (root / "connectors").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "airflow_kinesis_snowflake/templates/connectors/example.yaml", root / "connectors")
    return root


def page(cache: PageCache | None = None) -> tuple[int, str]:
    response = render_lag_page(where_connectors(), 20, cache or ReadCache(30, Clock()), lambda: NOW)
    return response.status_code, bytes(response.body).decode()


def test_with_only_a_git_bundle_and_no_dags_folder_the_page_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reads: list[str]
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "absent"))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(GIT_BUNDLES))
    monkeypatch.delenv("AIRFLOW__KINESIS_SNOWFLAKE__CONNECTORS_FOLDER", raising=False)

    status, html = page()

    assert status == 200 and reads == []
    assert "<p class='failed needs-setting'>No connector file on this API server" in html
    assert "repo (airflow.providers.git.bundles.git.GitDagBundle) are not on the API server&#x27;s disk" in html
    assert "AIRFLOW__KINESIS_SNOWFLAKE__CONNECTORS_FOLDER" in html


def test_with_a_git_bundle_the_connectors_folder_setting_is_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reads: list[str]
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "absent"))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(GIT_BUNDLES))
    monkeypatch.setenv("AIRFLOW__KINESIS_SNOWFLAKE__CONNECTORS_FOLDER", str(connectors_folder(tmp_path / "checkout")))

    status, html = page()

    assert status == 200 and reads == ["example"]
    assert "data-connector='example'" in html and "needs-setting" not in html


def test_a_local_bundle_is_read_in_its_own_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reads: list[str]
) -> None:
    local = [{"name": "team", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}}]
    local[0]["kwargs"] = {"path": str(connectors_folder(tmp_path / "team"))}
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "absent"))
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(local))
    monkeypatch.delenv("AIRFLOW__KINESIS_SNOWFLAKE__CONNECTORS_FOLDER", raising=False)

    assert page()[0] == 200 and reads == ["example"]


def test_the_page_reads_each_connector_once_per_time_to_live_and_says_how_old_its_figures_are(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, reads: list[str]
) -> None:
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(connectors_folder(tmp_path / "dags")))
    monkeypatch.delenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", raising=False)
    monkeypatch.delenv("AIRFLOW__KINESIS_SNOWFLAKE__CONNECTORS_FOLDER", raising=False)
    clock = Clock()
    cache: PageCache = ReadCache(30, clock)

    first = page(cache)[1]
    clock.now += 12
    second = page(cache)[1]
    clock.now += 18
    page(cache)

    assert reads == ["example", "example"]  # the second load kept the first read; the third read again
    assert "Read 0 s ago, refreshed every 30 s" in first
    assert "As of 2026-03-01 08:59:48 UTC. <span class='freshness'>Read 12 s ago, refreshed every 30 s" in second


def test_the_time_to_live_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__KINESIS_SNOWFLAKE__LAG_PAGE_CACHE_SECONDS", "5")
    assert lag_page.page_cache().ttl_seconds == 5
    monkeypatch.delenv("AIRFLOW__KINESIS_SNOWFLAKE__LAG_PAGE_CACHE_SECONDS")
    assert lag_page.page_cache().ttl_seconds == 30


def test_on_an_airflow_without_menu_entries_for_plugins_the_plugin_says_where_the_page_is(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(lag_page, "airflow_at_least", lambda version: version != lag_page.MENU_ENTRIES_SINCE)
    with caplog.at_level(logging.WARNING, logger=lag_page.__name__):
        lag_page.KinesisSnowflakeLagPlugin.on_load()
    assert caplog.messages == [
        "The Kinesis lag page is at /kinesis-snowflake/lag on the API server, without an entry under Browse: "
        "menu entries for plugin pages need Airflow 3.1.0 or later (upgrade Airflow to get it in the menu)"
    ]


def test_where_airflow_has_menu_entries_for_plugins_the_plugin_loads_without_a_word(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(lag_page, "airflow_at_least", lambda version: True)
    with caplog.at_level(logging.DEBUG, logger=lag_page.__name__):
        lag_page.KinesisSnowflakeLagPlugin.on_load()
    assert caplog.messages == []
