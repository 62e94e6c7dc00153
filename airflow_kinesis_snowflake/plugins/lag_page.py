"""The lag page in Airflow's UI: an Airflow 3 plugin (a FastAPI app mounted by the API server, and an
external view that puts it in the UI's navigation, shown inside the UI).

The page lists the connector files of ``[kinesis_snowflake] connectors_folder`` when set, else of
each local DAG bundle's folder (by default ``[core] dags_folder``: its ``connectors/`` directory,
else the folder itself), of either source (:mod:`~.core.lag_page`); with only remote bundles (Git)
and no such setting it says what to set. It reads each connector as ``status`` does (lease table,
Snowflake's tables, through Airflow's connections), keeps what it read for
``[kinesis_snowflake] lag_page_cache_seconds`` (30 by default), and shows its shards' lag over recent
batches, or a DynamoDB connector's tables (their snapshot's progress) and their stream shards'
checkpoint ages (:mod:`.render`). Only a signed-in user allowed to see the plugins view gets it.

The navigation entry needs Airflow 3.1 or later (``external_views``); on Airflow 3.0 the page is served all
the same, at ``/kinesis-snowflake/lag``, without a menu entry, and the plugin says so when it loads.

The provider registers the plugin twice, as providers do: ``plugins`` in ``get_provider_info()``
and the ``airflow.plugins`` entry point (Airflow loads the latter by default, the former when
``[core] lazy_discover_providers`` is off).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import requires_access_view
from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse

from airflow_kinesis_snowflake.compat import airflow_at_least
from airflow_kinesis_snowflake.core.lag_page import (
    CACHE_SECONDS_OPTION,
    CONFIG_SECTION,
    CONNECTORS_FOLDER_OPTION,
    DEFAULT_CACHE_SECONDS,
    ConnectorFolders,
    ReadCache,
    connector_folders,
    freshness,
)
from airflow_kinesis_snowflake.plugins.render import render_page
from airflow_kinesis_snowflake.status import (
    RECENT_BATCHES,
    AnyConnectorStatus,
    any_connector_status,
    find_connector_configs,
)

URL_PREFIX = "/kinesis-snowflake"
PAGE_PATH = "/lag"
#: The first Airflow whose UI links plugin pages from its menus (a plugin's ``external_views``).
MENU_ENTRIES_SINCE = "3.1.0"

log = logging.getLogger(__name__)

app = FastAPI(title="Kinesis to Snowflake: lag", docs_url=None, redoc_url=None, openapi_url=None)

PageCache = ReadCache[tuple[ConnectorFolders, int], list[AnyConnectorStatus]]
_caches: dict[float, PageCache] = {}


def where_connectors() -> ConnectorFolders:
    """Where the connector files are, from Airflow's configuration (:func:`~.core.lag_page.connector_folders`)."""
    try:
        bundles = conf.getjson("dag_processor", "dag_bundle_config_list", fallback=None)
    except Exception:  # noqa: BLE001  an unreadable list is Airflow's to report: the DAGs folder is read
        bundles = None
    return connector_folders(
        conf.get(CONFIG_SECTION, CONNECTORS_FOLDER_OPTION, fallback="") or None,
        conf.get("core", "dags_folder"),
        bundles if isinstance(bundles, list) else None,
    )


def page_cache() -> PageCache:
    """The cache for ``[kinesis_snowflake] lag_page_cache_seconds`` (one per value the setting had)."""
    ttl = conf.getfloat(CONFIG_SECTION, CACHE_SECONDS_OPTION, fallback=DEFAULT_CACHE_SECONDS)
    if ttl not in _caches:
        _caches[ttl] = ReadCache(max(ttl, 0.0))
    return _caches[ttl]


def render_lag_page(
    where: ConnectorFolders,
    batches: int,
    cache: PageCache,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> HTMLResponse:
    """The page: every connector of ``where`` as ``cache`` keeps it; what to set when there is none.

    An invalid connector file is a 500 naming it (nothing kept, so its fix shows at the next load).
    """

    def read() -> list[AnyConnectorStatus]:
        return [any_connector_status(config, batches=batches) for config in find_connector_configs(where)]

    try:
        cached = cache.get((where, batches), read)
    except ValueError as err:  # ConnectorConfigError is a ValueError
        return HTMLResponse(f"<!DOCTYPE html><p>{escape(str(err))}</p>", status_code=500)
    except FileNotFoundError as err:
        return HTMLResponse(render_page([], now(), problem=str(err)))
    read_at = now() - timedelta(seconds=cached.age_seconds)
    return HTMLResponse(render_page(cached.value, read_at, freshness(cached.age_seconds, cache.ttl_seconds)))


@app.get(PAGE_PATH, response_class=HTMLResponse, dependencies=[Depends(requires_access_view(AccessView.PLUGINS))])
def lag_page(batches: int = Query(RECENT_BATCHES, ge=1, le=200)) -> HTMLResponse:
    """Every connector's shards: lag over the last ``batches`` batches, checkpoint, last batch."""
    return render_lag_page(where_connectors(), batches, page_cache())


class KinesisSnowflakeLagPlugin(AirflowPlugin):
    """The lag page: ``/kinesis-snowflake/lag`` on the API server, "Kinesis lag" under Browse."""

    name = "kinesis_snowflake_lag"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Kinesis to Snowflake lag"}]
    external_views = [
        {
            "name": "Kinesis lag",
            "href": URL_PREFIX + PAGE_PATH,
            "destination": "nav",
            "category": "browse",
            "url_route": "kinesis-snowflake-lag",
        }
    ]

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        """Say where the page is when this Airflow has no menu entries for plugin pages (Airflow 3.0).

        :param args: what Airflow passes, unused.
        :param kwargs: what Airflow passes, unused.
        """
        if not airflow_at_least(MENU_ENTRIES_SINCE):
            log.warning(
                "The Kinesis lag page is at %s%s on the API server, without an entry under Browse: menu entries "
                "for plugin pages need Airflow %s or later (upgrade Airflow to get it in the menu)",
                URL_PREFIX,
                PAGE_PATH,
                MENU_ENTRIES_SINCE,
            )
