"""The sources a connector file can name in ``source.type``: one entry each, and where its parts live.

Every room that acts per source looks the source up here by ``source.type`` instead of testing a
connector's class: reading a connector file (:mod:`airflow_kinesis_snowflake.config`), building its DAGs
(:mod:`airflow_kinesis_snowflake.dags`), reading its status (:mod:`airflow_kinesis_snowflake.status`),
drawing it on the lag page (:mod:`airflow_kinesis_snowflake.plugins.render`), writing its IAM policy
(``python -m airflow_kinesis_snowflake policy``) and running its work on the Spark driver
(:mod:`airflow_kinesis_snowflake.core.engine.driver`, which ships this module to the cluster with ``core``).

A source's parts live in those rooms, most of them above this one, so an entry names each part by its import path
(``module:attribute``, as Airflow's provider info names hooks) and :meth:`RegisteredSource.part`
imports it when it is first asked for. This module imports nothing of the package: any room may
consult it.

To add a source: write its connector model and one part for each role of :class:`RegisteredSource`
in the room the role belongs to, and add its entry to :data:`SOURCES`. ``tests/unit/test_registry.py``
checks that every part of every entry exists and has the role's signature, and ``tests/contract`` runs
the source contract suite against every entry's ``source``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol, TypeVar

KINESIS_SOURCE = "kinesis"
DYNAMODB_SOURCE = "dynamodb"


class OfASource(Protocol):
    """A connector model, or a connector's status: anything that names its ``source.type``."""

    @property
    def source_type(self) -> str: ...


_T = TypeVar("_T", bound=OfASource)


@dataclass(frozen=True)
class RegisteredSource:
    """One value of ``source.type`` and the part of each room that serves it.

    :param source_type: the value of ``source.type`` (a Kinesis connector may leave it out).
    :param reads: what its connector reads, for messages ("a Kinesis data stream").
    :param connector_model: the pydantic model of its connector files (``config``).
    :param dags: ``(config, *, backup_dir) -> Sequence[DAG]``: the DAGs of one connector (``dags``).
    :param status: ``(config, *, batches) -> status``: what the connector has loaded and how far
        behind it is (``status``); the status names its ``source_type``.
    :param lag_section: ``(status) -> str``: its section of the lag page (``plugins.render``).
    :param policy: ``(args) -> int``: prints the IAM policy of ``args.config`` (``__main__``).
    :param job: ``(work, *, credentials, attempt_id) -> int``: runs one batch's or a continuous run's
        work on the Spark driver (``core``, a :class:`~.core.engine.driver.SourceJob`); the driver finds
        it by the work's source.
    :param source: the class that reads it (``core``, a :class:`~.core.engine.source.Source`): its
        units with their lineage, its positions as text, and a reader of one unit's range. The
        source contract suite (``tests/contract``) runs against every registered one.
    :param sink: the class that loads it into Snowflake (``core``, a :class:`~.core.engine.sink.Sink`:
        the support objects' one owner plus its load method, append or merge).
    """

    source_type: str
    reads: str
    connector_model: str
    dags: str
    status: str
    lag_section: str
    policy: str
    job: str
    source: str
    sink: str

    def part(self, role: str) -> Any:
        """The object that serves ``role`` (a field name: ``dags``, ``status``, ...) for this source."""
        if role not in ROLES:
            raise KeyError(f"{role!r} is not a role of a registered source; the roles are {', '.join(ROLES)}")
        module, _, attribute = getattr(self, role).partition(":")
        return getattr(importlib.import_module(module), attribute)


#: The roles every source fills: each field of :class:`RegisteredSource` that names a part.
ROLES: tuple[str, ...] = tuple(f.name for f in fields(RegisteredSource) if f.name not in ("source_type", "reads"))

_PACKAGE = "airflow_kinesis_snowflake"

#: Every registered source by ``source.type``, in the order messages list them.
SOURCES: Mapping[str, RegisteredSource] = {
    KINESIS_SOURCE: RegisteredSource(
        source_type=KINESIS_SOURCE,
        reads="a Kinesis data stream",
        connector_model=f"{_PACKAGE}.config:ConnectorConfig",
        dags=f"{_PACKAGE}.dags:kinesis_connector_dags",
        status=f"{_PACKAGE}.status:connector_status",
        lag_section=f"{_PACKAGE}.plugins.render:kinesis_section",
        policy=f"{_PACKAGE}.__main__:kinesis_policy",
        job=f"{_PACKAGE}.core.job:kinesis_job",
        source=f"{_PACKAGE}.core.sources.kinesis:KinesisSource",
        sink=f"{_PACKAGE}.core.load.snowflake_sink:SnowflakeSink",
    ),
    DYNAMODB_SOURCE: RegisteredSource(
        source_type=DYNAMODB_SOURCE,
        reads="DynamoDB tables, a snapshot then their streams",
        connector_model=f"{_PACKAGE}.config:DynamoDBConnectorConfig",
        dags=f"{_PACKAGE}.dags:dynamodb_connector_dags",
        status=f"{_PACKAGE}.status:dynamodb_connector_status",
        lag_section=f"{_PACKAGE}.plugins.render:dynamodb_section",
        policy=f"{_PACKAGE}.__main__:dynamodb_policy",
        job=f"{_PACKAGE}.core.dynamodb_driver:dynamodb_job",
        source=f"{_PACKAGE}.core.sources.dynamodb.source:DynamoDBSource",
        sink=f"{_PACKAGE}.core.load.dynamodb_sink:DynamoDBSink",
    ),
}

#: Every value ``source.type`` may take (a connector file without one reads a Kinesis stream).
SOURCE_TYPES: tuple[str, ...] = tuple(SOURCES)
#: The source of a connector file that names none.
DEFAULT_SOURCE = KINESIS_SOURCE


def registered(source_type: str) -> RegisteredSource:
    """The entry of ``source_type``; :class:`KeyError` naming the registered ones otherwise."""
    try:
        return SOURCES[source_type]
    except KeyError:
        raise KeyError(
            f"source.type {source_type!r} is not registered; the sources are {', '.join(SOURCE_TYPES)}"
        ) from None


def source_of(connector: OfASource) -> RegisteredSource:
    """The entry of a connector (a validated connector model, or its status): by its ``source_type``."""
    return registered(connector.source_type)


def of_source(connectors: Iterable[_T], source_type: str) -> list[_T]:
    """The connectors (or statuses) of one source, in their order."""
    registered(source_type)
    return [c for c in connectors if c.source_type == source_type]
