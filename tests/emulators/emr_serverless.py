"""EMR Serverless job runs that run: moto records StartJobRun and answers SUCCESS at once; here the
job runs, as a local ``spark-submit --master local[2]`` inside the moto server's process tree.

On StartJobRun the run is ``SUBMITTED``; a thread of its own then moves it as EMR Serverless does,
``PENDING`` -> ``SCHEDULED`` (the entry point and the ``--py-files`` read from moto's S3 into a
working directory named after the run) -> ``RUNNING`` (spark-submit started) -> ``SUCCESS`` or
``FAILED`` (its exit status; ``stateDetails`` then says so with the last exception lines, as EMR
Serverless does). ``sparkSubmitParameters`` are honoured: ``--py-files``, ``--conf`` settings, and
``spark.emr-serverless.driverEnv.*`` / ``spark.executorEnv.*`` as the job's environment. The job's
AWS identity is the execution role's (moto's test keys); nothing else of this process's AWS
environment reaches it. The driver's stdout and stderr are written, gzipped, where EMR Serverless
writes them under the monitoring configuration's ``logUri``
(``<logUri>/applications/<app>/jobs/<run>/SPARK_DRIVER/std{out,err}.gz``).

ListJobRuns of an application that has run nothing yet lists nothing (moto answers it does not exist).

CancelJobRun moves the run to ``CANCELLING``, ends spark-submit's process group (the JVM and its
Python workers) and then the run is ``CANCELLED``. How a run's processes start and stop is shared
with the emulated Glue (:mod:`~tests.emulators.spark_runs`).
"""

from __future__ import annotations

import gzip
import shlex
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moto.core.utils import utcnow
from moto.emrserverless.models import EMRServerlessBackend, JobRun
from moto.s3.models import s3_backends
from moto.utilities.utils import get_partition

from tests.emulators import spark_runs
from tests.emulators.spark_runs import read_s3 as _read_s3
from tests.emulators.spark_runs import s3_location as _s3_location

DRIVER_ENV = "spark.emr-serverless.driverEnv."
EXECUTOR_ENV = "spark.executorEnv."
WORK_PREFIX = "emr-serverless-"
_installed = False


@dataclass
class _Run:
    """The process of one job run, and whether it was cancelled."""

    job_run: JobRun
    cancelled: threading.Event = field(default_factory=threading.Event)
    process: subprocess.Popen[bytes] | None = None
    stopper: threading.Thread | None = None


_runs: dict[str, _Run] = {}
_lock = threading.Lock()


def _set_state(job_run: JobRun, state: str, details: str | None = None) -> None:
    job_run.state = state
    job_run.state_details = details
    job_run.updated_at = utcnow()


def _command(job_run: JobRun, backend: Any, directory: Path) -> tuple[list[str], dict[str, str]]:
    """spark-submit's command and the environment it adds, from the run's job driver."""
    driver = (job_run.job_driver or {})["sparkSubmit"]
    entry_point = _read_s3(backend, str(driver["entryPoint"]), directory)
    words = shlex.split(str(driver.get("sparkSubmitParameters") or ""))
    options: list[str] = []
    env: dict[str, str] = {}
    while words:
        word = words.pop(0)
        if word == "--py-files":
            files = [_read_s3(backend, uri, directory) for uri in words.pop(0).split(",")]
            options += ["--py-files", ",".join(str(f) for f in files)]
        elif word == "--conf":
            key, _, value = words.pop(0).partition("=")
            for prefix in (DRIVER_ENV, EXECUTOR_ENV):
                if key.startswith(prefix):
                    env[key.removeprefix(prefix)] = value
            if not key.startswith(DRIVER_ENV):
                options += ["--conf", f"{key}={value}"]
        else:
            options.append(word)
    arguments = [str(a) for a in driver.get("entryPointArguments") or []]
    return ["spark-submit", "--master", "local[2]", *options, str(entry_point), *arguments], env


def _log_uri(job_run: JobRun) -> str | None:
    overrides: dict[str, Any] = dict(job_run.configuration_overrides or {})
    monitoring = overrides.get("monitoringConfiguration") or {}
    uri = (monitoring.get("s3MonitoringConfiguration") or {}).get("logUri")
    return str(uri).rstrip("/") if uri else None


def _write_logs(job_run: JobRun, backend: Any, directory: Path) -> None:
    log_uri = _log_uri(job_run)
    if log_uri is None:
        return
    bucket, prefix = _s3_location(log_uri)
    for stream in ("stdout", "stderr"):
        data = spark_runs.output(directory, stream)
        key = "/".join(p for p in (prefix, "applications", job_run.application_id, "jobs", job_run.id) if p)
        backend.put_object(bucket, f"{key}/SPARK_DRIVER/{stream}.gz", gzip.compress(data))


def _run(run: _Run, backend: Any) -> None:
    job_run = run.job_run
    directory = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{job_run.id}-"))
    started = utcnow()
    try:
        for state in ("PENDING", "SCHEDULED"):
            with _lock:
                if not run.cancelled.is_set():  # CANCELLING stays until the run ends
                    _set_state(job_run, state)
        command, added = _command(job_run, backend, directory)
        with _lock:
            if run.cancelled.is_set():
                _set_state(job_run, "CANCELLED", "Job run cancelled by user.")
                return
            run.process = spark_runs.start(command, added, directory)
            _set_state(job_run, "RUNNING")
        code = run.process.wait()
        _write_logs(job_run, backend, directory)
        job_run.total_execution_duration_seconds = int((utcnow() - started).total_seconds())
        if run.cancelled.is_set():
            with _lock:
                stopper = run.stopper
            if stopper is not None:
                stopper.join()  # CANCELLED once no process of the run is left
            _set_state(job_run, "CANCELLED", "Job run cancelled by user.")
        elif code == 0:
            _set_state(job_run, "SUCCESS")
        else:
            exceptions = "; ".join(spark_runs.last_exceptions(directory))
            _set_state(
                job_run,
                "FAILED",
                "Job failed, please check complete logs in configured logging destination. "
                f"ExitCode: {code}." + (f" Last few exceptions: {exceptions}" if exceptions else ""),
            )
    except Exception as err:  # noqa: BLE001 - the run fails, as EMR Serverless fails one it cannot start
        _set_state(job_run, "FAILED", f"Job run could not start: {type(err).__name__}: {err}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _start_job_run(original: Any) -> Any:
    def start(self: EMRServerlessBackend, **kwargs: Any) -> JobRun:
        job_run: JobRun = original(self, **kwargs)
        _set_state(job_run, "SUBMITTED")
        run = _runs[job_run.id] = _Run(job_run)
        backend = s3_backends[self.account_id][get_partition(self.region_name)]
        threading.Thread(target=_run, args=(run, backend), name=f"job-run-{job_run.id}", daemon=True).start()
        return job_run

    return start


def _cancel_job_run(original: Any) -> Any:
    def cancel(self: EMRServerlessBackend, application_id: str, job_run_id: str) -> tuple[str, str]:
        job_run = self.get_job_run(application_id, job_run_id)
        run = _runs.get(job_run_id)
        if run is None:
            return original(self, application_id, job_run_id)
        if job_run.state in ("SUCCESS", "FAILED", "CANCELLED"):
            return application_id, job_run_id  # it ended already
        with _lock:
            _set_state(job_run, "CANCELLING")
            run.cancelled.set()
            process = run.process
            if process is not None:
                run.stopper = threading.Thread(target=spark_runs.stop, args=(process,), daemon=True)
                run.stopper.start()
        return application_id, job_run_id

    return cancel


def _list_job_runs(original: Any) -> Any:
    def list_runs(self: EMRServerlessBackend, application_id: str, *args: Any, **kwargs: Any) -> list[JobRun]:
        if application_id in self.applications:
            self.job_runs.setdefault(application_id, [])  # an application without runs has none, as on AWS
        return original(self, application_id, *args, **kwargs)

    return list_runs


def install() -> None:
    """Patch moto's EMR Serverless backend (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    EMRServerlessBackend.start_job_run = _start_job_run(EMRServerlessBackend.start_job_run)  # type: ignore[method-assign]
    EMRServerlessBackend.cancel_job_run = _cancel_job_run(EMRServerlessBackend.cancel_job_run)  # type: ignore[method-assign]
    EMRServerlessBackend.list_job_runs = _list_job_runs(EMRServerlessBackend.list_job_runs)  # type: ignore[method-assign]
