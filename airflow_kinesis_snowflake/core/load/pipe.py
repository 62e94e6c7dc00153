"""The custom pipe of a PIPE destination: its definition, and loading a batch through it.

Snowpipe loads files on its own schedule and outside any transaction, so the connector does not
hand its files to the pipe object. It runs the pipe's own COPY statement over the batch's staged
files, inside the transaction that moves the ledger, which keeps a batch exactly-once. The column
list and the SELECT of the definition are applied unchanged; only the SELECT's source becomes the
batch's stage directory, and the copy options become the connector's (JSON, abort on error).

Each staged line is one record: its JSON object as the producer wrote it, plus a
``KINESISMETADATA`` key, so ``$1:key`` and ``$1:KINESISMETADATA`` read what they would read in a
Snowpipe over the same records. Payloads that are not a JSON object never reach the pipe: they are
dead letters, loaded into the parse-failure table like those of any destination.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from airflow_kinesis_snowflake.core.load.schema import METADATA_COLUMN
from airflow_kinesis_snowflake.core.model import Destination
from airflow_kinesis_snowflake.core.sources.records import (
    DeadLetter,
    KinesisRecord,
    ParseError,
    kinesis_metadata,
    parse_payload,
)

# What the connector's staged files are, and what a value the SELECT cannot convert does: fail
# the statement, so that the transaction loads nothing and the batch can be retried as a whole.
# A key given twice keeps its last value, as Python's json module reads it; KINESISMETADATA is
# spliced in last, so a record's own key of that name gives way to it.
LOAD_OPTIONS = "FILE_FORMAT = (TYPE = JSON ALLOW_DUPLICATE = TRUE) ON_ERROR = ABORT_STATEMENT"


def _code_only(sql: str) -> str:
    """``sql`` with string literals, quoted identifiers and comments blanked out."""
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        two = sql[i : i + 2]
        if sql[i] in "'\"":
            quote, j = sql[i], i + 1
            while j < n:
                if quote == "'" and sql[j] == "\\":
                    j += 2
                    continue
                if sql[j] == quote:
                    if sql[j + 1 : j + 2] == quote:
                        j += 2
                        continue
                    break
                j += 1
            end = j + 1
        elif two == "$$" and not (i and (sql[i - 1].isalnum() or sql[i - 1] in "_$")):
            j = sql.find("$$", i + 2)
            end = j + 2 if j >= 0 else n + 1
        elif two in ("--", "//"):
            j = sql.find("\n", i)
            end = j if j >= 0 else n
        elif two == "/*":
            j = sql.find("*/", i + 2)
            end = j + 2 if j >= 0 else n + 1
        else:
            out.append(sql[i])
            i += 1
            continue
        if end > n:
            raise ValueError("has an unterminated string, quoted identifier or comment")
        out.append(" " * (end - i))
        i = end
    return "".join(out)


_IDENT_PART = r'(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)'
_COPY_INTO = re.compile(
    rf"^COPY\s+INTO\s+(?P<target>{_IDENT_PART}(?:\s*\.\s*{_IDENT_PART}){{0,2}})(?=\s|\(|$)", re.IGNORECASE
)
_FROM_SELECT = re.compile(r"\bFROM\s*\(\s*SELECT\b", re.IGNORECASE)


def _resolve(part: str) -> str:
    return part[1:-1].replace('""', '"') if part.startswith('"') else part.upper()


def validate_pipe_definition(sql: str, destination: Destination) -> str:
    """The user's pipe body: one ``COPY INTO <destination> FROM (SELECT ...)`` statement.

    The target must name the destination fully qualified (a pipe keeps its text; a partial name
    would resolve against whatever schema is current when it is created). Returns the statement
    without a trailing semicolon.
    """
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError("is empty; give the pipe's COPY INTO statement")
    text = sql.strip()
    if "\x00" in text:
        raise ValueError("contains a NUL character")
    text = text[:-1].rstrip() if text.endswith(";") else text
    code = _code_only(text)
    if ";" in code:
        raise ValueError("must be a single COPY INTO statement (found ';' between statements)")
    wanted = destination.qualified_name
    match = _COPY_INTO.match(text)
    if not match:
        raise ValueError(f"must start with COPY INTO {wanted}")
    parts = [_resolve(p) for p in re.findall(_IDENT_PART, match.group("target"))]
    if parts != [destination.database, destination.schema, destination.table]:
        raise ValueError(
            f"must load the destination table: COPY INTO {wanted} (fully qualified), "
            f"not COPY INTO {match.group('target')}"
        )
    if not _FROM_SELECT.search(code):
        raise ValueError(f"must transform with a query: COPY INTO {wanted} FROM (SELECT ... FROM ...)")
    pipe_load_sql(text, "@stage/")  # the shape each batch needs: balanced, with a FROM in its SELECT
    return text


# -- loading a batch through the pipe ---------------------------------------------------------------


def _closing(code: str, open_at: int) -> int:
    """Index of the parenthesis closing the one at ``open_at`` (``code`` is :func:`_code_only`'s)."""
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("has an unbalanced parenthesis")


def _after_quoted(text: str, at: int) -> int:
    """Index just past the string literal or quoted identifier that opens at ``at``."""
    quote, i = text[at], at + 1
    while i < len(text):
        if quote == "'" and text[i] == "\\":
            i += 2
        elif text[i] == quote and text[i + 1 : i + 2] == quote:
            i += 2
        elif text[i] == quote:
            return i + 1
        else:
            i += 1
    raise ValueError("has an unterminated string or quoted identifier")


def _end_of_source(text: str, code: str, start: int, stop: int) -> int:
    """Where the SELECT's source (``@stage/path``, a ``'url'``, ``TABLE(...)``) and its
    ``(FILE_FORMAT => ...)`` options end; an alias may follow."""
    i = start
    while i < stop and text[i].isspace():
        i += 1
    while i < stop and not text[i].isspace() and text[i] not in "()":
        i = _after_quoted(text, i) if text[i] in "'\"" else i + 1
    j = i
    while j < stop and text[j].isspace():
        j += 1
    if j < stop and code[j] == "(":  # TABLE(...) or the stage's options
        i = _closing(code, j) + 1
    return i


def pipe_load_sql(definition: str, location: str) -> str:
    """The pipe's COPY statement reading ``location`` (``@stage/dir/``) with :data:`LOAD_OPTIONS`.

    :param definition: a definition :func:`validate_pipe_definition` accepted.
    """
    text = definition.strip()
    text = text[:-1].rstrip() if text.endswith(";") else text
    code = _code_only(text)
    match = _FROM_SELECT.search(code)
    if match is None:
        raise ValueError("must transform with a query: COPY INTO <table> FROM (SELECT ... FROM ...)")
    open_at = code.index("(", match.start())
    close_at = _closing(code, open_at)
    depth, source_at = 0, None
    for token in re.finditer(r"[()]|\bFROM\b", code[open_at + 1 : close_at], re.IGNORECASE):
        if token.group(0) == "(":
            depth += 1
        elif token.group(0) == ")":
            depth -= 1
        elif depth == 0:
            source_at = open_at + 1 + token.end()
    if source_at is None:
        raise ValueError("has no FROM in its SELECT")
    end = _end_of_source(text, code, source_at, close_at)
    alias = text[end:close_at].strip()
    # A line comment after the alias would swallow the closing parenthesis: end its line first.
    close = "\n)" if "--" in alias or "//" in alias else ")"
    select = f"{text[:source_at]} {location}{' ' + alias if alias else ''}{close}"
    return f"{select} {LOAD_OPTIONS}"


@dataclass(frozen=True)
class PipeBatch:
    """A shard range's records as JSON lines for the pipe, and the records kept aside."""

    lines: bytes
    rows: int
    dead_letters: list[DeadLetter] = field(default_factory=list)


def _reject_constant(name: str) -> None:
    raise ParseError(f"invalid JSON: {name} is not a JSON number")


def _line(record: KinesisRecord, stream_name: str) -> bytes:
    value = parse_payload(record.data)  # raises ParseError for anything but a UTF-8 JSON object
    text = record.data.decode("utf-8")
    if "NaN" in text or "Infinity" in text:
        # Python's json reads these; Snowflake's JSON does not, and would fail the whole batch.
        json.loads(text, parse_constant=_reject_constant)
    metadata = json.dumps(kinesis_metadata(stream_name, record), separators=(",", ":"))
    # Keep the producer's text (numbers keep every digit); a raw line break in valid JSON is only
    # ever whitespace, so it can become a space.
    text = text.strip().replace("\r", " ").replace("\n", " ")
    comma = "," if value else ""
    return f'{text[:-1].rstrip()}{comma}"{METADATA_COLUMN}":{metadata}}}'.encode()


def pipe_batch(records: Sequence[KinesisRecord], stream_name: str) -> PipeBatch:
    """One JSON line per record that is a JSON object; every other record is a dead letter."""
    lines: list[bytes] = []
    dead: list[DeadLetter] = []
    for record in records:
        if record.error is not None:
            dead.append(DeadLetter(record, record.error))
            continue
        try:
            lines.append(_line(record, stream_name))
        except ValueError as err:  # ParseError is one
            dead.append(DeadLetter(record, str(err)))
    return PipeBatch(lines=b"\n".join(lines) + (b"\n" if lines else b""), rows=len(lines), dead_letters=dead)
