"""The suite's order: the modules of its longest tests first (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_RUNNING_MODULES

ROOT = Path(__file__).resolve().parents[1]


def test_every_long_running_module_named_exists() -> None:
    """A module renamed or removed would silently fall back to the collection's order."""
    assert LONG_RUNNING_MODULES
    assert not {module for module in LONG_RUNNING_MODULES if not (ROOT / module).is_file()}
