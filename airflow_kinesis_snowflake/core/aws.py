"""What a failed AWS call says: its error code, read one way by every module of ``core``."""

from __future__ import annotations

from botocore.exceptions import ClientError


def error_code(err: ClientError) -> str:
    """The AWS error code of a client error (``""`` when the response has none)."""
    return str(err.response.get("Error", {}).get("Code", ""))
