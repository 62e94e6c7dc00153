"""AWS Glue job runs that run: moto records CreateJob and StartJobRun and moves a run to SUCCEEDED
by itself; here the run runs its job's script as a local ``spark-submit --master local[2]``
(:mod:`~tests.emulators.spark_runs`), and moto gains the UpdateJob and BatchStopJobRun that the
Amazon provider's ``GlueJobHook`` and the task's ``on_kill`` call.

On StartJobRun the run is ``STARTING``; a thread of its own reads the job's ``ScriptLocation`` and
the run's ``--extra-py-files`` from moto's S3 into a working directory named after the run, then
the run is ``RUNNING`` (spark-submit started, the ``--extra-py-files`` as ``--py-files``, the
``--conf`` job argument's Spark settings as spark-submit's) and ends ``SUCCEEDED`` or ``FAILED`` by
spark-submit's exit status, a failed run with an ``ErrorMessage`` of its last exception lines. As
on Glue, the script gets every job argument of the run (the job's ``DefaultArguments`` and the
run's ``Arguments``) as ``--key value``, after Glue's own ``--JOB_ID``, ``--JOB_RUN_ID``,
``--JOB_NAME`` and ``--job-bookmark-option``. Nothing but the role's identity (moto's test keys)
and the Spark settings reaches the job's environment: the driver's AWS region and endpoints come
through its arguments. The driver's stdout and stderr go where Glue sends them, to CloudWatch
Logs: the log groups ``/aws-glue/jobs/output`` and ``/aws-glue/jobs/error``, in a stream named
after the run (the run's ``LogGroupName`` is ``/aws-glue/jobs``).

BatchStopJobRun moves a run that has not ended to ``STOPPING``, ends spark-submit's process group,
and then the run is ``STOPPED``; a run that ended is among the answer's ``Errors``, as on Glue.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moto.core.responses import ActionResult
from moto.core.utils import camelcase_to_underscores, unix_time_millis, utcnow
from moto.glue.models import FakeJob, FakeJobRun
from moto.glue.responses import GlueResponse
from moto.logs.models import logs_backends
from moto.moto_api._internal.managed_state_model import ManagedState
from moto.s3.models import s3_backends
from moto.utilities.utils import get_partition

from tests.emulators import spark_runs

WORK_PREFIX = "glue-"
LOG_GROUP = "/aws-glue/jobs"
ENDED = ("SUCCEEDED", "FAILED", "STOPPED", "TIMEOUT", "ERROR")
_installed = False


@dataclass
class _Run:
    """The process of one job run, its state, and whether it was stopped."""

    job: FakeJob
    job_run: FakeJobRun
    state: str = "STARTING"
    error: str | None = None
    stopped: threading.Event = field(default_factory=threading.Event)
    process: subprocess.Popen[bytes] | None = None
    stopper: threading.Thread | None = None


_runs: dict[str, _Run] = {}
_lock = threading.Lock()


def _set_state(run: _Run, state: str, error: str | None = None) -> None:
    run.state, run.error = state, error
    run.job_run.modified_on = utcnow()
    if state in ENDED:
        run.job_run.completed_on = utcnow()


def _command(run: _Run, backend: Any, directory: Path) -> list[str]:
    """spark-submit's command: the job's script with Glue's arguments and the run's."""
    command: Any = run.job.command  # a dict: moto types it as str
    script = spark_runs.read_s3(backend, str(command["ScriptLocation"]), directory)
    arguments = dict(run.job_run.arguments or {})
    options: list[str] = []
    if extra := arguments.get("--extra-py-files"):
        files = [spark_runs.read_s3(backend, uri, directory) for uri in extra.split(",")]
        options += ["--py-files", ",".join(str(f) for f in files)]
    if conf := arguments.get("--conf"):
        for setting in conf.split(" --conf "):
            options += ["--conf", setting.strip()]
    words = ["--JOB_ID", f"j_{run.job.name}", "--JOB_RUN_ID", run.job_run.job_run_id, "--JOB_NAME", run.job.name]
    words += ["--job-bookmark-option", "job-bookmark-disable"]
    for key, value in arguments.items():
        words += [key, value]
    return ["spark-submit", "--master", "local[2]", *options, str(script), *words]


def _write_logs(run: _Run, directory: Path) -> None:
    """The driver's stdout and stderr as CloudWatch Logs events in the run's streams."""
    backend = logs_backends[run.job.backend.account_id][run.job.backend.region_name]
    now = int(unix_time_millis())
    for stream, suffix in (("stdout", "output"), ("stderr", "error")):
        name = f"{LOG_GROUP}/{suffix}"
        if name not in backend.groups:
            backend.create_log_group(name, tags={})
        group = backend.groups[name]
        group.create_log_stream(run.job_run.job_run_id)
        lines = spark_runs.output(directory, stream).decode("utf-8", "replace").splitlines()
        if lines := [line for line in lines if line.strip()]:
            group.put_log_events(run.job_run.job_run_id, [{"timestamp": now, "message": line} for line in lines])


def _run(run: _Run, backend: Any) -> None:
    directory = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{run.job_run.job_run_id}-"))
    try:
        command = _command(run, backend, directory)
        with _lock:
            if run.stopped.is_set():
                _set_state(run, "STOPPED")
                return
            run.process = spark_runs.start(command, {}, directory)
            _set_state(run, "RUNNING")
        code = run.process.wait()
        _write_logs(run, directory)
        if run.stopped.is_set():
            with _lock:
                stopper = run.stopper
            if stopper is not None:
                stopper.join()  # STOPPED once no process of the run is left
            _set_state(run, "STOPPED")
        elif code == 0:
            _set_state(run, "SUCCEEDED")
        else:
            exceptions = spark_runs.last_exceptions(directory, count=1)
            _set_state(run, "FAILED", exceptions[-1] if exceptions else f"Command failed with exit code {code}")
    except Exception as err:  # noqa: BLE001 - the run fails, as Glue fails one it cannot start
        _set_state(run, "FAILED", f"The job run could not start: {type(err).__name__}: {err}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _start_job_run(original: Any) -> Any:
    def start(self: FakeJob, **kwargs: Any) -> str:
        job_run_id: str = original(self, **kwargs)
        job_run = next(r for r in self.job_runs if r.job_run_id == job_run_id)
        run = _runs[job_run_id] = _Run(self, job_run)
        backend = s3_backends[self.backend.account_id][get_partition(self.backend.region_name)]
        threading.Thread(target=_run, args=(run, backend), name=f"glue-run-{job_run_id}", daemon=True).start()
        return job_run_id

    return start


def _status(self: FakeJobRun) -> str | None:
    run = _runs.get(self.job_run_id)
    return run.state if run is not None else ManagedState.status.fget(self)  # type: ignore[attr-defined]


def _as_dict(original: Any) -> Any:
    def as_dict(self: FakeJobRun) -> dict[str, Any]:
        answer: dict[str, Any] = original(self)
        run = _runs.get(self.job_run_id)
        if run is None:
            return answer
        answer["LogGroupName"] = LOG_GROUP
        answer["GlueVersion"] = run.job.glue_version
        if run.state not in ENDED:
            answer.pop("CompletedOn", None)
        if run.error:
            answer["ErrorMessage"] = run.error
        return answer

    return as_dict


def _update_job(self: GlueResponse) -> ActionResult:
    """UpdateJob: the job's definition becomes the update's (moto has none)."""
    job = self.glue_backend.get_job(self._get_param("JobName"))
    for key, value in (self._get_param("JobUpdate") or {}).items():
        setattr(job, camelcase_to_underscores(key), value)
    job.last_modified_on = utcnow()
    return ActionResult({"JobName": job.name})


def _batch_stop_job_run(self: GlueResponse) -> ActionResult:
    """BatchStopJobRun: each run that has not ended is stopping (moto has none)."""
    name = self._get_param("JobName")
    stopped, errors = [], []
    for job_run_id in self._get_param("JobRunIds") or []:
        run = _runs.get(job_run_id)
        if run is None or run.job.name != name or run.state in ENDED:
            errors.append(
                {
                    "JobName": name,
                    "JobRunId": job_run_id,
                    "ErrorDetail": {"ErrorCode": "InvalidInputException", "ErrorMessage": "Job Run cannot be stopped"},
                }
            )
            continue
        with _lock:
            _set_state(run, "STOPPING")
            run.stopped.set()
            if run.process is not None:
                run.stopper = threading.Thread(target=spark_runs.stop, args=(run.process,), daemon=True)
                run.stopper.start()
        stopped.append({"JobName": name, "JobRunId": job_run_id})
    return ActionResult({"SuccessfulSubmissions": stopped, "Errors": errors})


def install() -> None:
    """Patch moto's Glue (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    FakeJob.start_job_run = _start_job_run(FakeJob.start_job_run)  # type: ignore[method-assign]
    FakeJobRun.status = property(_status, ManagedState.status.fset)  # type: ignore[assignment,attr-defined]
    FakeJobRun.as_dict = _as_dict(FakeJobRun.as_dict)  # type: ignore[method-assign]
    GlueResponse.update_job = _update_job  # type: ignore[attr-defined]
    GlueResponse.batch_stop_job_run = _batch_stop_job_run  # type: ignore[attr-defined]
