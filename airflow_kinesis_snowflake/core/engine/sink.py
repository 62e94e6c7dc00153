"""What a destination gives the engine, whatever its load method: the :class:`Sink` protocol.

Every sink is a :class:`~..load.snowflake_sink.SupportObjects`, the one owner of a destination's
support objects in Snowflake (the ledger of shard marks, the batch outcomes, the stage and the
parse-failure table), plus its own load method, which moves the ledger in the same transaction as
the rows:

* **append** (:class:`~..load.snowflake_sink.SnowflakeSink`, a Kinesis connector's): the batch is
  staged and loaded with ``COPY INTO``, or through a pipe's ``SELECT``;
* **merge** (:class:`~..load.dynamodb_sink.DynamoDBSink`, a DynamoDB connector's): the batch's
  changes are staged and merged, newest version per key, so the destination converges to the table.

What the engine, the hooks and the operators read and write there (ledger marks, outcomes, staged
files) is written once, in ``SupportObjects``, so a feature built on it (reading a submission's
outcomes, the status, the clean-up's last ledger update) serves every source. The registry names
each source's sink (its ``sink`` role) and ``tests/unit/test_registry.py`` checks that it has every
member of this protocol with its parameters.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from airflow_kinesis_snowflake.core.load.schema import TableColumn
from airflow_kinesis_snowflake.core.load.snowflake_sink import OutcomeKey
from airflow_kinesis_snowflake.core.model import BatchResult, Checkpoint


@runtime_checkable
class Sink(Protocol):
    """A destination in Snowflake and its support objects, over one snowflake-connector-python connection."""

    #: How its batches reach the destination: ``append`` or ``merge``.
    load_method: str

    def ensure_support_objects(self) -> None:
        """Create the support objects that are missing (idempotent DDL, outside any transaction)."""
        ...

    def describe_columns(self) -> list[TableColumn]:
        """The destination's columns in table order."""
        ...

    def read_ledger(self, application_name: str, generation_id: str) -> dict[str, Checkpoint]:
        """Each unit's mark in the ledger, by unit (the truth a lease table caches)."""
        ...

    def advance_ledger(
        self,
        application_name: str,
        generation_id: str,
        batch_id: str,
        shard_id: str,
        start: Checkpoint | None,
        end: Checkpoint,
    ) -> None:
        """Move one unit's mark from ``start`` to ``end`` inside the caller's transaction; a mark that is
        no longer ``start`` refuses the batch (the guard against a stale or second writer)."""
        ...

    def record_outcome(self, key: OutcomeKey, result: BatchResult, now: datetime | None = None) -> None:
        """Record a batch's outcome inside the caller's transaction."""
        ...

    def record_outcome_alone(self, key: OutcomeKey, result: BatchResult) -> None:
        """Record the outcome of a batch that committed nothing, in a transaction of its own."""
        ...

    def read_outcome(self, key: OutcomeKey) -> BatchResult | None:
        """The outcome one run of a batch recorded."""
        ...

    def recent_outcomes(self, application_name: str, limit: int = 20) -> list[BatchResult]:
        """The application's latest batches, newest first."""
        ...

    def read_attempt_outcomes(self, attempt_id: str) -> list[tuple[str, BatchResult]]:
        """Every outcome one submission recorded, oldest first."""
        ...

    def put_file(self, local_path: str | Path, stage_dir: str) -> None:
        """Upload one local file to the stage."""
        ...

    def remove_staged(self, stage_dir: str) -> None:
        """Remove a batch's staged files."""
        ...

    def run_copy(self, sql: str, table: str, stage_dir: str, expected_rows: int) -> int:
        """Run a COPY INTO of staged files; the rows loaded, or an error unless every row loaded."""
        ...
