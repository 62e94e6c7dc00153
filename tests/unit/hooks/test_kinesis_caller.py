"""The Kinesis and lease-table hooks name their caller in the user agent as the Amazon provider does,
without reading source files."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

from airflow_kinesis_snowflake.hooks.kinesis import KinesisStreamHook, LeaseTableHook


class ReadOrders:
    """Stands for an operator: the hook is asked for its caller from within ``execute``."""

    def __init__(self, hook: AwsBaseHook) -> None:
        self.hook = hook

    def execute(self) -> str:
        return self.nested()

    def nested(self) -> str:
        return self.hook._get_caller()


@pytest.mark.parametrize("hook_class", [KinesisStreamHook, LeaseTableHook])
def test_the_caller_is_the_class_whose_execute_made_the_client(hook_class: type[AwsBaseHook]) -> None:
    expected = ReadOrders(AwsBaseHook(client_type="kinesis")).execute()
    assert expected == "ReadOrders"  # the provider's own answer, through inspect.stack()
    assert ReadOrders(hook_class(aws_conn_id=None)).execute() == expected


@pytest.mark.parametrize("hook_class", [KinesisStreamHook, LeaseTableHook])
def test_finding_the_caller_reads_no_source(hook_class: type[AwsBaseHook], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_stack(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("inspect.stack() reads the source of every frame")

    monkeypatch.setattr(inspect, "stack", no_stack)
    assert ReadOrders(hook_class(aws_conn_id=None)).execute() == "ReadOrders"
    assert hook_class(aws_conn_id=None)._get_caller() == "Unknown"  # no execute, no executor on the stack
