"""Secret values kept out of output, in every form they may be printed in."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

# snowflake-connector-python arguments whose values are secrets (a Snowflake connection's fields,
# and those of a Secrets Manager secret holding one).
SECRET_PARAMS = (
    "password",
    "private_key",
    "private_key_der_base64",
    "private_key_passphrase",
    "token",
    "refresh_token",
    "client_secret",
    "oauth_client_secret",
    "proxy_password",
    "passcode",
)
# Shorter values are not replaced (Airflow's masker skips them too): they would hide common words.
MIN_REDACTED_LENGTH = 5


def secret_forms(value: str) -> list[str]:
    """``value`` as it may appear in output: itself, JSON-escaped, and each line of a multi-line value
    (a PEM key's base64 lines)."""
    forms = [value, json.dumps(value)[1:-1]]
    forms += [line.strip() for line in value.splitlines() if not line.strip().startswith("-----")]
    return sorted({f for f in forms if len(f) >= MIN_REDACTED_LENGTH}, key=len, reverse=True)


class RedactingStream:
    """A text stream that writes to ``target`` with every one of ``secrets`` replaced by ``***``.

    Written text is redacted call by call, so a secret split across two ``write`` calls is not
    caught; ``print`` and ``traceback`` write each line's text whole.
    """

    def __init__(self, target: Any, secrets: Iterable[str]) -> None:
        self._target = target
        self._secrets = sorted({s for s in secrets if len(s) >= MIN_REDACTED_LENGTH}, key=len, reverse=True)

    def write(self, text: str) -> int:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return int(self._target.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


@contextmanager
def redacted_output(secrets: Iterable[str]) -> Iterator[None]:
    """Within the block, ``sys.stdout`` and ``sys.stderr`` replace each of ``secrets`` by ``***``."""
    values = list(secrets)
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(stdout, values), RedactingStream(stderr, values)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr
