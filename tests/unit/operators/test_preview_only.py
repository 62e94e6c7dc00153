"""One name for a dry run across the maintenance operators: ``preview_only``; ``dry_run`` still works, warning."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk import BaseOperator

from airflow_kinesis_snowflake.operators.migration import MigrateLegacyCheckpointsOperator
from airflow_kinesis_snowflake.operators.snowflake import ProvisionSnowflakeObjectsOperator


def provision(**kwargs: Any) -> BaseOperator:
    return ProvisionSnowflakeObjectsOperator(task_id="provision", database="A", schema="B", table="C", **kwargs)


def migrate(**kwargs: Any) -> BaseOperator:
    return MigrateLegacyCheckpointsOperator(task_id="migrate", application_name="app", stream_name="s", **kwargs)


BUILDERS = [pytest.param(provision, id="provision"), pytest.param(migrate, id="migrate")]


@pytest.mark.parametrize("build", BUILDERS)
def test_preview_only_is_the_name_and_off_by_default(build: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert build().preview_only is False
        assert build(preview_only=True).preview_only is True
    # BaseOperator's dry_run() stays a method, where this Airflow's BaseOperator has one (3.1 and later).
    assert callable(build().dry_run) if hasattr(BaseOperator, "dry_run") else "dry_run" not in vars(build())


@pytest.mark.parametrize("build", BUILDERS)
def test_the_old_dry_run_keyword_warns_and_still_works(build: Any) -> None:
    with pytest.warns(AirflowProviderDeprecationWarning, match="dry_run is deprecated; use preview_only"):
        operator = build(dry_run=True)

    assert operator.preview_only is True
    with pytest.raises(ValueError, match="set only preview_only"):
        build(preview_only=True, dry_run=True)
