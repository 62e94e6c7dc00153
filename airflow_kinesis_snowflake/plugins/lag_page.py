"""The lag page in Airflow's UI: an Airflow 3 plugin (a FastAPI app mounted by the API server, and an
external view that puts it in the UI's navigation, shown inside the UI).

The page lists the connector files of the DAGs folder (``[core] dags_folder``: its ``connectors/``
directory, else the folder itself), of either source, reads each connector as ``status`` does (lease
table, Snowflake's tables, through Airflow's connections) and shows its shards' lag over recent
batches, or a DynamoDB connector's tables and their stream shards' checkpoint ages (:mod:`.render`).
Only a signed-in user allowed to see the plugins view gets it.

The provider registers the plugin twice, as providers do: ``plugins`` in ``get_provider_info()``
and the ``airflow.plugins`` entry point (Airflow loads the latter by default, the former when
``[core] lazy_discover_providers`` is off).
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
from airflow.api_fastapi.core_api.security import requires_access_view
from airflow.configuration import conf
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse

from airflow_kinesis_snowflake.plugins.render import render_page
from airflow_kinesis_snowflake.status import RECENT_BATCHES, any_connector_status, connector_configs

URL_PREFIX = "/kinesis-snowflake"
PAGE_PATH = "/lag"

app = FastAPI(title="Kinesis to Snowflake: lag", docs_url=None, redoc_url=None, openapi_url=None)


@app.get(PAGE_PATH, response_class=HTMLResponse, dependencies=[Depends(requires_access_view(AccessView.PLUGINS))])
def lag_page(batches: int = Query(RECENT_BATCHES, ge=1, le=200)) -> HTMLResponse:
    """Every connector's shards: lag over the last ``batches`` batches, checkpoint, last batch."""
    try:
        configs = connector_configs(conf.get("core", "dags_folder"))
    except (ValueError, FileNotFoundError) as err:  # ConnectorConfigError is a ValueError
        return HTMLResponse(f"<!DOCTYPE html><p>{escape(str(err))}</p>", status_code=500)
    statuses = [any_connector_status(config, batches=batches) for config in configs]
    return HTMLResponse(render_page(statuses, datetime.now(UTC)))


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
