"""Faults raised at the emulators' boundary, described in a JSON file that tests rewrite.

Each emulator process reads the file named by its environment (``KINESIS_FAULTS_FILE`` for moto,
``FAKESNOW_FAULTS_FILE`` for fakesnow) whenever it changes. A fault matches calls; after
``skip`` matching calls it fires ``times`` times. What fired is appended to
``<file>.served.json`` so a test can tell the fault really happened.

The counters live in the emulator process. A process that loads a faults file someone else
already served from (a server started again after a ``restart`` fault) takes that record as its
own: each fault counts as past its ``skip`` and as fired as often as the record shows, so a
restarted server does not fire the same fault again. Calls that matched without firing before
the restart are not carried over.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from itertools import pairwise
from pathlib import Path
from typing import Any

import psutil

# Processes of a Spark job started by spark-submit: the JVM, the Python driver, Python workers.
SPARK_PROCESS_MARKERS = (
    "org.apache.spark.deploy.SparkSubmit",
    "kinesis_to_snowflake.py",
    "dynamodb_to_snowflake.py",
    "pyspark.daemon",
    "pyspark/daemon.py",
    "tests.emulators.spark_daemon",
)


class FaultFile:
    """The faults of one emulator process, reloaded when the file changes."""

    def __init__(self, env_var: str) -> None:
        self.env_var = env_var
        self._lock = threading.Lock()
        self._mtime = 0
        self._faults: list[dict[str, Any]] = []
        self._calls: dict[int, int] = {}
        self._served: list[dict[str, Any]] = []

    @property
    def path(self) -> Path | None:
        value = os.environ.get(self.env_var)
        return Path(value) if value else None

    def faults(self) -> list[dict[str, Any]]:
        path = self.path
        if path is None:
            return []
        try:
            mtime = path.stat().st_mtime_ns
        except FileNotFoundError:
            return []
        with self._lock:
            if mtime != self._mtime:
                self._mtime, self._faults = mtime, json.loads(path.read_text())
                # write_faults() removes the record first: one that exists belongs to these faults.
                self._served = served(path)
                self._calls = _calls_already_served(self._faults, self._served)
            return self._faults

    def fire(self, matches: Any) -> dict[str, Any] | None:
        """The first fault for which ``matches(fault)`` is true and whose turn it is, if any."""
        for index, fault in enumerate(self.faults()):
            if not matches(fault):
                continue
            with self._lock:
                seen = self._calls.get(index, 0)
                self._calls[index] = seen + 1
                skip, times = int(fault.get("skip", 0)), int(fault.get("times", 1))
                if skip <= seen < skip + times:
                    self._served.append(fault)
                    assert self.path is not None
                    Path(f"{self.path}.served.json").write_text(json.dumps(self._served))
                    return fault
        return None

    def record(self, entry: dict[str, Any]) -> None:
        """Add ``entry`` to what this emulator served: a fault it raised of its own accord (throttling)."""
        self.faults()  # a changed file first clears the record of the faults before it
        with self._lock:
            self._served.append(entry)
            assert self.path is not None
            Path(f"{self.path}.served.json").write_text(json.dumps(self._served))


def _calls_already_served(faults: list[dict[str, Any]], record: list[dict[str, Any]]) -> dict[int, int]:
    """Per fault index, a call count that resumes after the firings in ``record``."""
    unclaimed = list(record)
    calls: dict[int, int] = {}
    for index, fault in enumerate(faults):
        # Faults fire in list order, so equal faults claim the record's entries in that order too.
        fired = 0
        while fired < int(fault.get("times", 1)) and fault in unclaimed:
            unclaimed.remove(fault)
            fired += 1
        if fired:
            calls[index] = int(fault.get("skip", 0)) + fired
    return calls


def runs_work_of(words: list[str], application_name: str) -> bool:
    """Whether a Spark job's command line ``words`` carries work (``--plan`` or ``--continuous``, the
    encoded envelope) of ``application_name``: how a job run of an emulated managed platform
    (tests/emulators/spark_runs.py), whose spark-submit has no ``--name`` of the task's, is found.

    The provider is imported here, not with this module: ``tests.emulators`` is imported by the
    tests' Spark daemon on a cluster's executors, whose Python has only what a job ships.
    """
    from airflow_kinesis_snowflake.core.engine.driver import CONTINUOUS_ARG, PLAN_ARG
    from airflow_kinesis_snowflake.core.engine.wire import decode

    for flag, value in pairwise(words):
        if flag not in (PLAN_ARG, CONTINUOUS_ARG):
            continue
        try:
            body = decode(value).body
        except ValueError:
            continue
        if body.get("application_name") == application_name:
            return True
    return False


def kill_spark_jobs(application_name: str | None = None) -> list[int]:
    """SIGKILL the processes of running Spark jobs (of one application, when named); their pids.

    spark-submit runs the JVM with ``--name kinesis-to-snowflake-<application>`` (a DynamoDB
    table's batch: ``dynamodb-to-snowflake-<application>-<table>``); the Python driver and workers
    are its descendants. A job run of an emulated managed platform (EMR Serverless, Glue,
    Databricks) is the same spark-submit without that name: it is found by the application its
    encoded plan names (:func:`runs_work_of`).
    """
    names = (f"kinesis-to-snowflake-{application_name}", f"dynamodb-to-snowflake-{application_name}-")
    targets: list[psutil.Process] = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        words = list(process.info.get("cmdline") or [])
        cmdline = " ".join(words)
        if application_name is not None:
            if SPARK_PROCESS_MARKERS[0] in cmdline and (
                any(name in cmdline for name in names) or runs_work_of(words, application_name)
            ):
                targets += [process, *process.children(recursive=True)]
        elif any(marker in cmdline for marker in SPARK_PROCESS_MARKERS):
            targets.append(process)
    killed = []
    for process in targets:
        try:
            os.kill(process.pid, signal.SIGKILL)
            killed.append(process.pid)
        except ProcessLookupError:
            pass
    return killed


def kill_process(pid: int) -> None:
    """SIGKILL a process and everything it started.

    A ``run_dag`` process whose DAG runs in a process forked by the dag_runner server (see
    dag_runner.py) started that one in effect: it goes first, with what it started.
    """
    from tests.emulators.dag_runner import CLIENT_MARKER

    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    marker = f"{CLIENT_MARKER}{pid}"
    targets: list[psutil.Process] = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        if marker in " ".join(process.info.get("cmdline") or []).split():
            try:
                targets += [*process.children(recursive=True), process]
            except psutil.NoSuchProcess:
                pass
    for process in [*targets, *parent.children(recursive=True), parent]:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def write_faults(path: Path, faults: list[dict[str, Any]]) -> None:
    Path(f"{path}.served.json").unlink(missing_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(faults))
    tmp.replace(path)  # atomically, so an emulator never reads half a file


def served(path: Path) -> list[dict[str, Any]]:
    served_path = Path(f"{path}.served.json")
    return list(json.loads(served_path.read_text())) if served_path.exists() else []


def exit_with_parent() -> None:
    """End this emulator when the process that started it is gone (a killed test run)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(1)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
