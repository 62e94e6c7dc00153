"""Which Snowflake statements the fakesnow emulator runs, and which the tests can only check as text.

fakesnow has no roles, users, grants, pipes or interactive tables. A provisioning plan's statements
of those kinds are checked as text (the golden plans of tests/unit/core/admin/test_provisioning.py)
and, against the fakesnow server, accepted as no-ops through its ``nop_regexes`` session
parameter; everything else runs for real there. Production code knows nothing of this.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

# The statement kinds fakesnow lacks, by their leading keywords.
TEXT_ONLY_KINDS = ("CREATE ROLE", "CREATE USER", "GRANT", "CREATE PIPE", "CREATE INTERACTIVE TABLE")


class _HasSql(Protocol):
    @property
    def sql(self) -> str: ...


S = TypeVar("S", bound=_HasSql)


def runs_on_fakesnow(sql: str) -> bool:
    """Whether the fakesnow emulator runs ``sql`` (False: the tests check it as text only)."""
    words = " ".join(sql.split()).upper()
    return not any(words == kind or words.startswith(kind + " ") for kind in TEXT_ONLY_KINDS)


def text_only(statements: Iterable[S]) -> tuple[S, ...]:
    """The statements (anything with ``sql``) the fakesnow emulator does not run."""
    return tuple(s for s in statements if not runs_on_fakesnow(s.sql))
