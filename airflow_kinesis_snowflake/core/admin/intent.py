"""Where reset and restore record their intent: the generations table next to the ledger.

Recorded before DynamoDB changes, so that ingest knows a new generation is wanted (or an old one is
back) even if a lease table is lost right after; see
:func:`~airflow_kinesis_snowflake.core.state.generations.choose_generation`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from airflow_kinesis_snowflake.core.admin.window import AdminError
from airflow_kinesis_snowflake.core.load.snowflake_sink import SnowflakeSink
from airflow_kinesis_snowflake.core.model import Destination, GenerationRecord
from airflow_kinesis_snowflake.core.state.errors import IdentityError
from airflow_kinesis_snowflake.core.state.leases import LeaseTable
from airflow_kinesis_snowflake.core.state.metadata import TableIdentity, check_identity


@dataclass(frozen=True)
class GenerationLog:
    """The generations table of one connector's destination, opened on demand.

    :param connect: opens a Snowflake DB-API connection (closed after each use).
    :param connector_id: the connector the records are for.
    :param database: the destination database; with ``schema`` it locates the generations table.
    :param schema: the destination schema.
    :param table: the destination table, recorded with each generation.
    """

    connect: Callable[[], Any]
    connector_id: str
    database: str | None
    schema: str | None
    table: str | None

    def destination(self) -> Destination:
        """The destination, upper-cased; :class:`AdminError` when a part is missing (checked before acting)."""
        if not (self.database and self.schema and self.table):
            raise AdminError(
                f"connector {self.connector_id}: database, schema and table are needed to record the change in "
                "Snowflake (the generations table next to the ledger); nothing was changed"
            )
        return Destination(self.database.upper(), self.schema.upper(), self.table.upper())

    def destination_text(self) -> str:
        d = self.destination()
        return f"{d.database}.{d.schema}.{d.table}"

    @contextmanager
    def open(self) -> Iterator[SnowflakeSink]:
        """A sink on the destination whose generations table exists; the connection is closed after."""
        conn = self.connect()
        try:
            sink = SnowflakeSink(conn, self.destination())
            sink.ensure_generations_table()
            yield sink
        finally:
            conn.close()

    def record(self, record: GenerationRecord) -> None:
        """Append ``record`` (with this destination when it names none)."""
        with self.open() as sink:
            sink.record_generation(replace(record, destination=record.destination or self.destination_text()))

    def check_identity(self, client: Any, *names: str | None) -> None:
        """Refuse a lease table whose progress belongs to a connector loading another destination."""
        current = TableIdentity(self.connector_id, self.destination_text())
        for name in dict.fromkeys(n for n in names if n):
            metadata = LeaseTable(client, name).metadata() if LeaseTable(client, name).exists() else None
            if metadata is None:
                continue
            try:
                check_identity(name, metadata.identity, current)
            except IdentityError as err:
                raise AdminError(f"{err} (nothing was changed)") from err


def identity_fields(identity: TableIdentity) -> tuple[str | None, str | None, str | None]:
    """The connector and stream of ``identity``, in :class:`GenerationRecord`'s order."""
    return identity.connector_id, identity.stream_arn, identity.stream_created_at
