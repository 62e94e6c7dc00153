"""DynamoDB Scan throttling, which moto never does, injected at the emulator boundary.

A fault ``{"operation": "DynamoDB.Scan", "table": "t", "error": "ProvisionedThroughputExceededException",
"skip": 1, "times": 2}`` in the moto faults file (see faults.py and kinesis_extensions) fails Scan
calls on table ``t`` with that AWS error code, as a table whose read capacity is used up.
"""

from __future__ import annotations

from typing import Any

from moto.core.exceptions import JsonRESTError
from moto.dynamodb.responses import DynamoHandler

from tests.emulators.kinesis_extensions import FAULTS

_installed = False


def _scan(original: Any) -> Any:
    def scan(self: DynamoHandler) -> Any:
        table = self.body.get("TableName", "")
        fault = FAULTS.fire(
            lambda f: f["operation"] == "DynamoDB.Scan" and f.get("table", table) == table and "error" in f
        )
        if fault is not None:
            raise JsonRESTError(fault["error"], f"injected {fault['error']} for Scan on {table}")
        return original(self)

    return scan


def install() -> None:
    """Patch moto's DynamoDB Scan; idempotent."""
    global _installed
    if _installed:
        return
    DynamoHandler.scan = _scan(DynamoHandler.scan)  # type: ignore[method-assign]
    _installed = True
