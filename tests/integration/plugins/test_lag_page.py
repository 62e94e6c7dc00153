"""The lag page in a real Airflow api-server, loaded by a real headless Chromium after one real batch."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import requests

from airflow_kinesis_snowflake.plugins.lag_page import PAGE_PATH, URL_PREFIX
from tests.conftest import LagBatch
from tests.emulators import Emulators
from tests.emulators.airflow_stack import AirflowStack
from tests.emulators.chromium import INSTALL_HINT, chromium_executable, headless_chromium
from tests.integration.test_ingest_dag import shard_tips

pytestmark = pytest.mark.integration

# Set to a path (docs/images/lag-page.png) to keep the screenshot the README shows.
SCREENSHOT_ENV = "LAG_PAGE_SCREENSHOT"


def test_the_plugin_is_registered_and_its_page_needs_a_signed_in_user(lag_page_server: AirflowStack) -> None:
    plugins = lag_page_server.api("GET", "plugins")["plugins"]
    (plugin,) = [p for p in plugins if p["name"] == "kinesis_snowflake_lag"]
    assert [(v["name"], v["href"]) for v in plugin["external_views"]] == [("Kinesis lag", URL_PREFIX + PAGE_PATH)]

    anonymous = requests.get(lag_page_server.api_url + URL_PREFIX + PAGE_PATH, timeout=60)
    assert anonymous.status_code == 401, anonymous.text


def test_the_page_shows_each_shard_of_the_connector_with_its_lag_from_the_batch(
    lag_page_server: AirflowStack, lag_batch: LagBatch, emulators: Emulators, tmp_path: Path
) -> None:
    assert chromium_executable() is not None, INSTALL_HINT
    tips = shard_tips(emulators.boto3_client("kinesis"), lag_batch.stream_name)
    url = lag_page_server.api_url + URL_PREFIX + PAGE_PATH

    with headless_chromium() as browser:
        page = browser.load(url, cookies={"_token": lag_page_server.token()})
    (tmp_path / "lag-page.png").write_bytes(page.screenshot_png)
    if target := os.environ.get(SCREENSHOT_ENV):
        shutil.copy(tmp_path / "lag-page.png", target)

    dom = page.dom
    assert page.screenshot_png.startswith(b"\x89PNG")
    assert '<section class="connector" data-connector="orders">' in dom
    assert f"<code>{lag_batch.stream_name}</code>" in dom and f"<code>{lag_batch.table}</code>" in dom
    assert "retention 24 h" in dom
    # A table row per shard, with the lag the batch reported (read to the tip), its checkpoint and figures.
    rows = dict(re.findall(r'<tr class="ok" data-shard="([^"]+)" data-lag-ms="(\d+)">', dom))
    assert rows == {shard_id: "0" for shard_id in tips}
    for shard_id, tip in tips.items():
        assert f'<td class="shard">{shard_id}</td><td class="num lag">0s</td>' in dom
        assert f"<code>{tip}</code>" in dom
    rows_loaded = [int(n) for n in re.findall(r'<td class="num rows">(\d+)</td>', dom)]
    dead_letters = [int(n) for n in re.findall(r'<td class="num dead-letters">(\d+)</td>', dom)]
    assert sum(rows_loaded) == 20 and sum(dead_letters) == 1
    # The chart: a point per shard and batch, in the shard's colour.
    assert '<svg class="lag-chart"' in dom
    assert sorted(re.findall(r'<circle data-shard="([^"]+)"', dom)) == sorted(tips)
