"""A shard's user records to one Arrow batch of rows plus dead letters, in bulk.

:func:`build_batch` returns exactly what the per-record path returns (:func:`build_batch_reference`:
``parse_payload``, ``ColumnMap.map_record``, ``coerce`` and ``kinesis_metadata``, one record at a
time), several times faster:

* Payloads are parsed with orjson, which rejects everything :mod:`json` rejects and yields the same
  values, but for integers beyond 64 bits: it makes them floats. So a float of 2**63 or more among
  the values that reach a column is left to the per-record path, which parses with :mod:`json`.
* Records whose keys come in the same order share one key-to-column resolution, and each column is
  converted as a whole while its values have the column's natural JSON type.
* Anything else (a payload orjson refuses, a value of another type, a value that does not fit)
  sends just that record through the per-record path, which decides what it becomes and why.

Arrow's JSON reader is not used: it cannot keep a nested value as JSON text, infers timestamps from
strings, and loses the keys' spellings and order, which the dead letter of a record with keys
differing only by case names.

:class:`BatchFiles` stages a shard range chunk by chunk: each chunk of records is built and
appended to the rows file (Parquet, or JSON lines for a pipe) and the failures file, so a Spark task
holds one chunk's records and rows at a time, not the range's. Every record is converted on its
own, so the files hold, in order, the rows and dead letters of the whole range built at once.
"""

from __future__ import annotations

import base64
import gc
import re
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from itertools import chain
from operator import itemgetter
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_kinesis_snowflake.core.load.pipe import pipe_batch
from airflow_kinesis_snowflake.core.load.schema import (
    _SEMI_STRUCTURED,
    FAILURE_SCHEMA,
    METADATA_TYPE,
    ColumnMap,
    TableColumn,
    arrow_type,
    coerce,
)
from airflow_kinesis_snowflake.core.sources.positions import (
    SEQUENCE_DIGITS,
    SUB_SEQUENCE_DIGITS,
    sharded_sequence_number,
)
from airflow_kinesis_snowflake.core.sources.records import (
    DeadLetter,
    KinesisRecord,
    kinesis_metadata,
    parse_payload,
)

# orjson parses 1024 levels deep; json.loads stops at Python's recursion limit, which the caller's
# stack depth eats into. A payload that might nest deeper than this goes the per-record way. Each
# level takes two bytes, so shorter payloads need no counting.
_MAX_DEPTH = 600
# At and beyond this magnitude a float may be an integer orjson widened (json keeps it an int).
_WIDE = 2.0**63
# orjson's text of a value is json.dumps's but where this matches: a float of 1e16 or more
# ("1.8e+19", perhaps a widened integer), or one orjson writes unlike repr() ("1e-7" for 1e-07,
# "0.00001" for 1e-05). A string value that happens to match costs speed, not correctness.
_ORJSON_SUSPECT = re.compile(rb"[0-9]e[-+]|0\.0000")
_ORJSON_SUSPECT_HINTS = (b"+", b"e-", b".0000")  # the cheapest to search for
_LARGE_FLOAT = re.compile(r"[0-9]e\+")
# ISO 8601 text that Arrow's cast reads as Python's fromisoformat does: year 0001 and on, 1 to 6
# fractional digits, a zone offset (Arrow needs one for a zoned timestamp), ASCII digits only.
_YEAR = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
_ISO_DATE = f"^{_YEAR}-[0-9]{{2}}-[0-9]{{2}}$"
_ZONED_TIMESTAMP = (
    f"^{_YEAR}-[0-9]{{2}}-[0-9]{{2}}T[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}"
    r"(?:\.[0-9]{1,6})?(?:Z|[+-][0-9]{2}:[0-9]{2})$"
)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
# Microseconds since the epoch of datetime.min and datetime.max, in UTC.
_MIN_MICROS = -62135596800 * 10**6
_MAX_MICROS = 253402300799 * 10**6 + 999999
# Records per block, and payload bytes: enough to amortise the per-column work, few enough that
# a block's parsed objects stay cheap to hold and its text columns far below Arrow's 2 GB.
BLOCK_RECORDS = 4096
BLOCK_BYTES = 64 << 20


@dataclass(frozen=True)
class Batch:
    """The rows of a shard range, ready to stage, and the records kept aside with their reasons."""

    rows: pa.Table
    dead_letters: list[DeadLetter] = field(default_factory=list)


def _per_record(record: KinesisRecord, columns: ColumnMap) -> dict[str, Any] | DeadLetter:
    if record.error is not None:
        return DeadLetter(record, record.error)
    try:
        return columns.map_record(parse_payload(record.data))
    except ValueError as err:  # ParseError and ColumnValueError are
        return DeadLetter(record, str(err), getattr(err, "column", None))


def build_batch_reference(records: Sequence[KinesisRecord], stream_name: str, columns: ColumnMap) -> Batch:
    """One record at a time with the functions of ``records`` and ``schema``: what build_batch equals."""
    rows: list[dict[str, Any]] = []
    metadata: list[dict[str, Any]] = []
    dead: list[DeadLetter] = []
    for record in records:
        result = _per_record(record, columns)
        if isinstance(result, DeadLetter):
            dead.append(result)
        else:
            rows.append(result)
            metadata.append(kinesis_metadata(stream_name, record))
    return Batch(columns.to_arrow(rows, metadata), dead)


def build_batch(
    records: Sequence[KinesisRecord],
    stream_name: str,
    columns: ColumnMap,
    *,
    block_records: int = BLOCK_RECORDS,
) -> Batch:
    """Rows (``columns.arrow_schema()``) and dead letters, equal to :func:`build_batch_reference`'s."""
    if len({c.name for c in columns.columns}) != len(columns.columns):
        # Two columns of one name share their values in to_arrow: too odd to deserve a fast path.
        return build_batch_reference(records, stream_name, columns)
    with _collector_paused():
        return _build_batch(records, stream_name, columns, block_records)


def _build_batch(records: Sequence[KinesisRecord], stream_name: str, columns: ColumnMap, block_records: int) -> Batch:
    layout = _Layout(columns)
    out = _Collected()
    start = 0
    while start < len(records):
        start = layout.convert_block(records, start, min(len(records), start + block_records), out)

    rows: list[dict[str, Any]] = []
    row_positions: list[int] = []
    for position in sorted(out.per_record):
        result = _per_record(records[position], columns)
        if isinstance(result, DeadLetter):
            out.dead.append((position, result))
        else:
            rows.append(result)
            row_positions.append(position)
    if rows:
        out.pieces.append([pa.array([row.get(c.name) for row in rows], type=t) for c, t in layout.outputs])
        out.positions.append(row_positions)

    positions = pa.array(chain.from_iterable(out.positions), pa.int64())
    arrays: list[pa.Array | pa.ChunkedArray] = [
        pa.chunked_array([piece[j] for piece in out.pieces], type=t) for j, (_, t) in enumerate(layout.outputs)
    ]
    if len(positions) > 1 and pc.any(pc.greater(positions[:-1], positions[1:])).as_py():
        # several key orders, or the per-record path: back to record order
        order = pc.sort_indices(positions)
        arrays = [a.take(order) for a in arrays]
        positions = positions.take(order)
    # Every record became a row, in order: no need to pick them out.
    rows_records = records if len(positions) == len(records) else [records[p] for p in positions.to_pylist()]
    arrays.append(metadata_array(rows_records, stream_name))
    out.dead.sort(key=itemgetter(0))
    return Batch(pa.Table.from_arrays(arrays, schema=columns.arrow_schema()), [d for _, d in out.dead])


def metadata_array(records: Sequence[KinesisRecord], stream_name: str) -> pa.StructArray:
    """KINESISMETADATA of each record, as :func:`kinesis_metadata` builds it, column by column."""
    sequence = pa.array([r.sequence_number for r in records], pa.string())
    sub_sequence = pa.array([r.sub_sequence_number for r in records], pa.int64())
    arrays = [
        pa.array([stream_name] * len(records), pa.string()),
        pa.array([r.shard_id for r in records], pa.string()),
        _arrivals(records),
        pa.array([r.partition_key for r in records], pa.string()),
        sequence,
        sub_sequence,
        _sharded_sequence_numbers(records, sequence, sub_sequence),
    ]
    return pa.StructArray.from_arrays(arrays, fields=list(METADATA_TYPE))


def failure_table(dead_letters: Sequence[DeadLetter], stream_name: str) -> pa.Table:
    """The parse-failure rows (``FAILURE_SCHEMA``): raw payload as base64, reason, column, KINESISMETADATA."""
    records = [d.record for d in dead_letters]
    return pa.Table.from_arrays(
        [
            pa.array([base64.b64encode(r.data).decode("ascii") for r in records], pa.string()),
            pa.array([d.error for d in dead_letters], pa.string()),
            pa.array([d.column for d in dead_letters], pa.string()),
            metadata_array(records, stream_name),
        ],
        schema=FAILURE_SCHEMA,
    )


def chunks_of(records: Sequence[KinesisRecord], chunk_bytes: int) -> Iterator[Sequence[KinesisRecord]]:
    """``records`` in consecutive slices of about ``chunk_bytes`` of payload (each at least one record)."""
    start = size = 0
    for end, record in enumerate(records, 1):
        size += len(record.data)
        if size >= chunk_bytes:
            yield records[start:end]
            start, size = end, 0
    if start < len(records):
        yield records[start:]


class _ParquetFile:
    """One Parquet file written table by table; created by the first table with rows."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path, self.schema = path, schema
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, self.schema)
        self._writer.write_table(table)
        self.rows += table.num_rows

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class BatchFiles:
    """The staging files of one shard range, built chunk by chunk (:meth:`add`), in record order.

    ``<stem>.parquet`` holds the rows as :func:`build_batch` builds them for ``columns`` (with
    ``columns`` None, for a pipe: ``<stem>.json``, the JSON lines of :func:`~.pipe.pipe_batch`), and
    ``<stem>.failures.parquet`` the dead letters as :func:`failure_table` makes them. A file is
    only created once it gets a row. Use it as a context manager: the files are complete once it
    closed.

    :param directory: where the files are written.
    :param stem: the files' name without its suffix.
    """

    def __init__(self, directory: Path, stem: str, stream_name: str, columns: ColumnMap | None) -> None:
        self.stream_name, self.columns = stream_name, columns
        self.rows_path = directory / (f"{stem}.json" if columns is None else f"{stem}.parquet")
        self.failures_path = directory / f"{stem}.failures.parquet"
        self._rows = None if columns is None else _ParquetFile(self.rows_path, columns.arrow_schema())
        self._failures = _ParquetFile(self.failures_path, FAILURE_SCHEMA)
        self._lines = 0

    @property
    def rows(self) -> int:
        """Rows written so far."""
        return self._lines if self._rows is None else self._rows.rows

    @property
    def dead_letters(self) -> int:
        """Dead letters written so far."""
        return self._failures.rows

    def add(self, records: Sequence[KinesisRecord]) -> None:
        """Build the rows and dead letters of the next records of the range and append them."""
        if self.columns is None:
            lines = pipe_batch(records, self.stream_name)
            if lines.rows:
                with self.rows_path.open("ab") as out:
                    out.write(lines.lines)
                self._lines += lines.rows
            dead_letters = lines.dead_letters
        else:
            batch = build_batch(records, self.stream_name, self.columns)
            assert self._rows is not None
            self._rows.write(batch.rows)
            dead_letters = batch.dead_letters
        if dead_letters:
            self._failures.write(failure_table(dead_letters, self.stream_name))

    def close(self) -> None:
        if self._rows is not None:
            self._rows.close()
        self._failures.close()

    def __enter__(self) -> BatchFiles:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def _arrivals(records: Sequence[KinesisRecord]) -> pa.Array:
    """``approximate_arrival.astimezone(UTC).isoformat()`` of each record, formatted by Arrow."""
    # The user records of one KPL aggregate share their arrival time object: convert it once.
    distinct: list[datetime] = []
    which: list[int] = []
    last: datetime | None = None
    for record in records:
        arrival = record.approximate_arrival
        if arrival is not last:
            last = arrival
            distinct.append(arrival)
        which.append(len(distinct) - 1)
    if any(a.tzinfo is None for a in distinct):  # astimezone takes a naive time as local, Arrow as UTC
        return pa.array([a.astimezone(UTC).isoformat() for a in distinct], pa.string()).take(which)
    instants = pa.array(distinct, _TIMESTAMP)
    low, high = pc.min_max(instants.cast(pa.int64())).values()
    if len(distinct) and not _MIN_MICROS <= low.as_py() <= high.as_py() <= _MAX_MICROS:
        # beyond the years datetime can hold in UTC: let astimezone raise as it does
        return pa.array([a.astimezone(UTC).isoformat() for a in distinct], pa.string()).take(which)
    # Arrow writes a date as "YYYY-MM-DD" and a time of day as "HH:MM:SS.ffffff", where isoformat
    # leaves out a zero fraction.
    texts = pc.binary_join_element_wise(
        instants.cast(pa.date32()).cast(pa.string()),
        "T",
        pc.replace_substring(instants.cast(pa.time64("us")).cast(pa.string()), ".000000", ""),
        "+00:00",
        "",
    )
    return texts if len(distinct) == len(which) else texts.take(which)


def _sharded_sequence_numbers(records: Sequence[KinesisRecord], sequence: pa.Array, sub_sequence: pa.Array) -> pa.Array:
    """``sharded_sequence_number`` of each record by zero-padding in Arrow, where that is the same."""
    if not len(records):
        return pa.array([], pa.string())
    lengths = pc.min_max(pc.binary_length(sequence))
    shortest, longest = lengths["min"].as_py(), lengths["max"].as_py()
    plain = (
        pc.all(pc.ascii_is_decimal(sequence)).as_py()
        and longest <= SEQUENCE_DIGITS
        and pc.min(sub_sequence).as_py() >= 0
    )
    if not plain:  # let the function raise, or drop the leading zeros of an over-long number
        return pa.array([sharded_sequence_number(r.sequence_number, r.sub_sequence_number) for r in records])
    sub = pc.ascii_lpad(sub_sequence.cast(pa.string()), SUB_SEQUENCE_DIGITS, "0")
    if shortest == longest:  # AWS's are all 56 digits: one padding for all, no padded copy
        return pc.binary_join_element_wise("0" * (SEQUENCE_DIGITS - longest), sequence, sub, "")
    return pc.binary_join_element_wise(pc.ascii_lpad(sequence, SEQUENCE_DIGITS, "0"), sub, "")


# -- the bulk path ----------------------------------------------------------------------------------


@contextmanager
def _collector_paused() -> Iterator[None]:
    # Parsing makes a great many containers and no reference cycles; the cyclic collector's passes
    # over them would take a fifth of the time.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class _Collected:
    pieces: list[list[pa.Array]] = field(default_factory=list)  # per piece, one array per output column
    positions: list[list[int]] = field(default_factory=list)  # per piece, its records' positions
    per_record: list[int] = field(default_factory=list)  # positions left to the per-record path
    dead: list[tuple[int, DeadLetter]] = field(default_factory=list)


# One column's values -> (Arrow array, indices of values whose records go the per-record way).
_Converter = Callable[[list[Any]], tuple[pa.Array, list[int]]]


class _Layout:
    """Which JSON key feeds which column, and how each column's values become an Arrow array."""

    def __init__(self, columns: ColumnMap) -> None:
        # As ColumnMap resolves keys: by casefold, a later column of the same casefold shadowing.
        self.by_key = {c.name.casefold(): c for c in columns.columns}
        self.slots = [c for c in columns.columns if self.by_key[c.name.casefold()] is c]
        self.converters = [_converter(c) for c in self.slots]
        self.outputs = [(c, arrow_type(c)) for c in columns.columns]
        slot_of = {c.name: i for i, c in enumerate(self.slots)}
        self.output_slots = [slot_of.get(c.name) for c in columns.columns]
        self.not_null_slots = [slot_of.get(c.name) for c in columns.columns if not c.nullable]
        self._plans: dict[tuple[str, ...], tuple[str | None, ...] | None] = {}
        self.held_back = columns.held_back
        self._holding: dict[tuple[str, ...], bool] = {}

    def holds_back(self, keys: tuple[str, ...]) -> bool:
        """Whether records with these keys may be held back (ColumnMap.keys_held_back): the per-record path decides."""
        held_back = self.held_back
        if held_back is None:
            return False
        holding = self._holding.get(keys)
        if holding is None:
            holding = self._holding[keys] = any(
                k.casefold() not in self.by_key and held_back.can_have_column(k) for k in keys
            )
        return holding

    def plan(self, keys: tuple[str, ...]) -> tuple[str | None, ...] | None:
        """For each slot, the key whose value it takes; None when two keys differ only by case and map
        to one column (ColumnMap.map_record refuses such records: the per-record path decides).
        """
        if keys in self._plans:
            return self._plans[keys]
        chosen: dict[str, str] = {}
        plan: tuple[str | None, ...] | None = None
        for key in keys:
            column = self.by_key.get(key.casefold())
            if column is None:
                continue
            if column.name in chosen:
                break
            chosen[column.name] = key
        else:
            plan = tuple(chosen.get(c.name) for c in self.slots)
        self._plans[keys] = plan
        return plan

    def convert_block(self, records: Sequence[KinesisRecord], start: int, stop: int, out: _Collected) -> int:
        """Convert records from ``start`` up to ``stop`` or ``BLOCK_BYTES`` of payload; returns where it ended."""
        loads, decode_error = orjson.loads, orjson.JSONDecodeError
        groups: dict[tuple[str, ...], tuple[list[dict[str, Any]], list[int]]] = {}
        size = 0
        position = start
        while position < stop and size < BLOCK_BYTES:
            record = records[position]
            position += 1
            data = record.data
            size += len(data)
            if record.error is not None:
                out.dead.append((position - 1, DeadLetter(record, record.error)))
                continue
            try:
                value = loads(data)
            except decode_error:
                out.per_record.append(position - 1)
                continue
            if type(value) is not dict or (
                len(data) > 2 * _MAX_DEPTH and data.count(b"[") + data.count(b"{") > _MAX_DEPTH
            ):
                out.per_record.append(position - 1)
                continue
            keys = tuple(value)
            group = groups.get(keys)
            if group is None:
                group = groups[keys] = ([], [])
            group[0].append(value)
            group[1].append(position - 1)

        # Key orders that resolve alike (unknown keys, absent optional ones) are converted together.
        by_plan: dict[tuple[str | None, ...], tuple[list[dict[str, Any]], list[int]]] = {}
        for keys, (objects, where) in groups.items():
            plan = None if self.holds_back(keys) else self.plan(keys)
            if plan is None:
                out.per_record.extend(where)
                continue
            merged = by_plan.setdefault(plan, ([], []))
            merged[0].extend(objects)
            merged[1].extend(where)
        for plan, (objects, where) in by_plan.items():
            self._convert_group(plan, objects, where, out)
        return position

    def _convert_group(
        self, plan: tuple[str | None, ...], objects: list[dict[str, Any]], positions: list[int], out: _Collected
    ) -> None:
        arrays: list[pa.Array | None] = []
        rejected: set[int] = set()
        for key, convert in zip(plan, self.converters, strict=True):
            if key is None:
                arrays.append(None)
                continue
            array, bad = convert(list(map(itemgetter(key), objects)))
            arrays.append(array)
            rejected.update(bad)
        for slot in self.not_null_slots:
            # No value for a NOT NULL column: the per-record path makes the record a dead letter.
            array = None if slot is None else arrays[slot]
            if array is None:
                rejected.update(range(len(objects)))
            elif array.null_count:
                rejected.update(_true_indices(array.is_null()))
        if rejected:
            keep = pa.array([i not in rejected for i in range(len(objects))], pa.bool_())
            arrays = [None if a is None else a.filter(keep) for a in arrays]
            out.per_record.extend(positions[i] for i in rejected)
            positions = [p for i, p in enumerate(positions) if i not in rejected]
        if not positions:
            return
        out.pieces.append(
            [
                pa.nulls(len(positions), t) if slot is None or arrays[slot] is None else arrays[slot]
                for slot, (_, t) in zip(self.output_slots, self.outputs, strict=True)
            ]
        )
        out.positions.append(positions)


# -- one column's values ----------------------------------------------------------------------------


def _converter(column: TableColumn) -> _Converter:
    """The bulk conversion of one column: the values and refusals of ``coerce``, value by value."""
    target = arrow_type(column)
    if column.base_type in _SEMI_STRUCTURED and pa.types.is_string(target):
        return lambda values: _json_texts(values, column)
    if pa.types.is_integer(target):
        fast = _integers(column)
    elif pa.types.is_decimal(target):
        fast = _decimals(column, target)
    elif pa.types.is_floating(target):
        fast = _floats
    elif pa.types.is_boolean(target):
        fast = _booleans
    elif pa.types.is_timestamp(target):
        fast = _timestamps
    elif pa.types.is_date32(target):
        fast = _dates
    else:
        fast = _texts(column)

    def convert(values: list[Any]) -> tuple[pa.Array, list[int]]:
        try:
            # Arrow's inference says which JSON types are present: int64 only for ints (never
            # bools), string only for strings, and it refuses incompatible mixtures outright.
            inferred = pa.array(values)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            inferred = None
        if inferred is not None and pa.types.is_null(inferred.type):
            return pa.nulls(len(values), target), []
        result = None if inferred is None else fast(values, inferred)
        return result if result is not None else _per_value(values, column, target)

    return convert


# Values and Arrow's inferred array of them -> converted array and refusals, or None when only
# coerce, value by value, will do.
_Fast = Callable[[list[Any], pa.Array], tuple[pa.Array, list[int]] | None]


def _per_value(values: list[Any], column: TableColumn, target: pa.DataType) -> tuple[pa.Array, list[int]]:
    """``coerce`` value by value; a value it refuses marks its record for the per-record path."""
    converted: list[Any] = []
    bad: list[int] = []
    for i, value in enumerate(values):
        if value is None:
            converted.append(None)
            continue
        if type(value) is float and not -_WIDE < value < _WIDE:  # perhaps an int orjson widened
            converted.append(None)
            bad.append(i)
            continue
        try:
            converted.append(coerce(value, column))
        except Exception:  # noqa: BLE001 - whatever it is, the per-record path meets it and decides
            converted.append(None)
            bad.append(i)
    return pa.array(converted, type=target), bad


def _true_indices(mask: pa.Array) -> list[int]:
    indices: list[int] = pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist()
    return indices


def _integers(column: TableColumn) -> _Fast:
    precision = column.numeric_precision

    def fast(values: list[Any], inferred: pa.Array) -> tuple[pa.Array, list[int]] | None:
        if inferred.type != pa.int64():
            return None
        if precision and precision < 19:
            limit = 10**precision
            return inferred, _true_indices(pc.or_(pc.greater_equal(inferred, limit), pc.less_equal(inferred, -limit)))
        return inferred, []

    return fast


def _decimals(column: TableColumn, target: pa.DataType) -> _Fast:
    precision = column.numeric_precision or 38
    # NUMBER(38, s) needs no check beyond the cast: decimal128(38, s) holds nothing wider.
    limit = Decimal(10) ** (precision - column.numeric_scale) if precision < 38 else None

    def fast(values: list[Any], inferred: pa.Array) -> tuple[pa.Array, list[int]] | None:
        try:
            if inferred.type == pa.int64():
                array = inferred.cast(target)
            elif inferred.type == pa.float64():
                if pc.any(pc.greater_equal(pc.abs(inferred), _WIDE)).as_py():
                    return None
                # coerce reads str(value) as a Decimal. Arrow writes a double as the same shortest
                # round-trip digits, and its cast to decimal refuses any text it cannot hold
                # exactly at the column's scale, so what passes needs no rounding.
                array = inferred.cast(pa.string()).cast(target)
            else:
                return None
        except pa.ArrowException:
            return None
        if limit is None:
            return array, []
        bound = pa.scalar(limit, target)
        return array, _true_indices(pc.or_(pc.greater_equal(array, bound), pc.less_equal(array, pc.negate(bound))))

    return fast


def _floats(values: list[Any], inferred: pa.Array) -> tuple[pa.Array, list[int]] | None:
    # Ints mixed in are converted only when the double holds them exactly, as float() would.
    if inferred.type == pa.float64():
        return inferred, []
    if inferred.type == pa.int64():
        try:
            return inferred.cast(pa.float64()), []
        except pa.ArrowInvalid:
            return None
    return None


def _booleans(values: list[Any], inferred: pa.Array) -> tuple[pa.Array, list[int]] | None:
    return (inferred, []) if inferred.type == pa.bool_() else None


def _timestamps(values: list[Any], inferred: pa.Array) -> tuple[pa.Array, list[int]] | None:
    if inferred.type != pa.string():
        return None
    if pc.all(pc.match_substring_regex(inferred, _ZONED_TIMESTAMP)).as_py():
        try:
            # On text of this form, Arrow's parser refuses whatever fromisoformat refuses and
            # reads the same instant (it also refuses some offsets fromisoformat takes, "+00:60").
            return inferred.cast(_TIMESTAMP), []
        except pa.ArrowInvalid:
            pass
    fromisoformat = datetime.fromisoformat
    try:
        # coerce's rule for a string; Arrow takes a naive datetime as UTC, as coerce makes it.
        parsed = [None if v is None else fromisoformat(v.replace("Z", "+00:00")) for v in values]
    except ValueError:
        return _each(values, lambda v: fromisoformat(v.replace("Z", "+00:00")), _TIMESTAMP)
    return pa.array(parsed, _TIMESTAMP), []


def _dates(values: list[Any], inferred: pa.Array) -> tuple[pa.Array, list[int]] | None:
    if inferred.type != pa.string():
        return None
    if pc.all(pc.match_substring_regex(inferred, _ISO_DATE)).as_py():
        try:  # as for timestamps: on this form, Arrow agrees with date.fromisoformat
            return inferred.cast(pa.date32()), []
        except pa.ArrowInvalid:
            pass
    try:  # coerce's rule for a string
        parsed = [None if v is None else date.fromisoformat(v) for v in values]
    except ValueError:
        return _each(values, date.fromisoformat, pa.date32())
    return pa.array(parsed, pa.date32()), []


def _each(values: list[Any], parse: Callable[[str], Any], target: pa.DataType) -> tuple[pa.Array, list[int]]:
    """``parse`` value by value, when some value in the list is refused."""
    parsed: list[Any] = []
    bad: list[int] = []
    for i, value in enumerate(values):
        try:
            parsed.append(None if value is None else parse(value))
        except ValueError:
            parsed.append(None)
            bad.append(i)
    return pa.array(parsed, target), bad


def _texts(column: TableColumn) -> _Fast:
    max_length = column.max_length

    def fast(values: list[Any], inferred: pa.Array) -> tuple[pa.Array, list[int]] | None:
        if inferred.type != pa.string():
            return None
        if max_length is None:
            return inferred, []
        return inferred, _true_indices(pc.greater(pc.utf8_length(inferred), max_length))

    return fast


def _json_texts(values: list[Any], column: TableColumn) -> tuple[pa.Array, list[int]]:
    """VARIANT/OBJECT/ARRAY: orjson's compact text, which is json.dumps's but for some floats."""
    # Written into one buffer: keeping each of orjson's results as its own bytes object costs
    # several times more than making it.
    data = bytearray()
    ends = [0]
    present: list[bool] = []
    unwritten: list[int] = []
    dumps, encode_error = orjson.dumps, orjson.JSONEncodeError
    for i, value in enumerate(values):
        if value is not None:
            try:
                data += dumps(value)
            except encode_error:  # nested beyond orjson's limit
                unwritten.append(i)
        ends.append(len(data))
        present.append(value is not None)
    validity = None if all(present) else pa.array(present, pa.bool_()).buffers()[1]
    array = pa.Array.from_buffers(
        pa.large_binary(), len(values), [validity, pa.array(ends, pa.int64()).buffers()[1], pa.py_buffer(data)]
    )
    suspects = set(unwritten)
    for needle in _ORJSON_SUSPECT_HINTS:  # plain searches first, the exact pattern only on their hits
        at = data.find(needle)
        while at >= 0:
            i = bisect_right(ends, at) - 1
            if _ORJSON_SUSPECT.search(data, ends[i], ends[i + 1]):
                suspects.add(i)
            at = data.find(needle, ends[i + 1])
    bad: list[int] = []
    if suspects:
        texts = array.to_pylist()
        for i in sorted(suspects):
            try:
                text: str = coerce(values[i], column)
            except ValueError:
                bad.append(i)
                continue
            if _LARGE_FLOAT.search(text):  # perhaps an integer orjson widened
                bad.append(i)
            else:
                texts[i] = text.encode("utf-8")
        array = pa.array(texts, pa.large_binary())
    return array.cast(pa.string()), bad
