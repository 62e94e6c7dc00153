"""The job on Databricks: a one-time run (Jobs API ``runs/submit``) per submission, through the
Databricks provider's :class:`~airflow.providers.databricks.hooks.databricks.DatabricksHook`.

The run has one Python script task (``spark_python_task``): the source's entry point from
``spark_jobs/`` with the job's arguments (the encoded plan, the attempt id, the Snowflake connection's
secret name), on the connector's existing cluster or on a new job cluster of its spec. The package
(``core``, as :func:`~airflow_kinesis_snowflake.hooks.spark.package_core` zips it for ``--py-files``)
goes as a wheel, a library of the task, which Databricks installs on the cluster's driver and
workers before the script starts; the libraries the connector lists go with it as PyPI libraries.
The entry point and the wheel are uploaded to the connector's artifacts location, DBFS or a Unity
Catalog volume, content-addressed (:mod:`~airflow_kinesis_snowflake.hooks.artifacts`).

The driver runs as the cluster's own AWS identity (its instance profile) and reads the Snowflake
connection from Secrets Manager: no credential is in the run. On a new cluster the task's Spark
settings join the spec's ``spark_conf`` and the region and endpoints of AWS its ``spark_env_vars``;
an existing cluster keeps its own. The task polls the run's state every ``poll_seconds`` until its
life cycle ends (:meth:`DatabricksSubmitter.run_state` is what a deferred task's trigger polls instead),
then reads the outcome from Snowflake as after spark-submit; a run that did not
succeed raises with its state message and the driver's last lines (``runs/get-output``).
``on_kill`` cancels the run.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import tempfile
import time
import uuid
import zipfile
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests
from airflow.providers.databricks.hooks.databricks import DatabricksHook, RunState
from airflow.providers.databricks.hooks.databricks_base import _TokenAuth
from requests.auth import AuthBase, HTTPBasicAuth
from tenacity import RetryError

import airflow_kinesis_snowflake
from airflow_kinesis_snowflake.compat import AirflowException
from airflow_kinesis_snowflake.config import DATABRICKS_PLATFORM
from airflow_kinesis_snowflake.hooks.artifacts import Artifact, store_artifacts
from airflow_kinesis_snowflake.hooks.managed import (
    JobRunState,
    ManagedSubmitter,
    Submission,
    check_driver_identity,
    driver_tail,
    failure_message,
    spark_settings,
    wait_until_ended,
)
from airflow_kinesis_snowflake.hooks.spark import package_core

if TYPE_CHECKING:
    from airflow_kinesis_snowflake.hooks.spark import SparkJobSubmitHook

DBFS_SCHEME = "dbfs:"
# The run's one task.
TASK_KEY = "kinesis_snowflake"
# The wheel's distribution: the package's core, as the driver and the executors import it.
WHEEL_DISTRIBUTION = "kinesis_snowflake_core"
# DBFS's add-block takes at most 1 MB of base64 per call: this many bytes of the file each.
DBFS_BLOCK = 512 * 1024
# A run's life-cycle states once it ended.
ENDED_STATES = frozenset({"TERMINATED", "SKIPPED", "INTERNAL_ERROR"})
# The AWS location's variables that are not the region: endpoints an existing cluster does not get.
REGION_VARIABLE = "AWS_DEFAULT_REGION"


def package_wheel(directory: Path) -> Path:
    """The package's core, the files of the ``--py-files`` zip
    (:func:`~airflow_kinesis_snowflake.hooks.spark.package_core`), as a pure-Python wheel in
    ``directory``, which Databricks installs on the cluster as a library of the run.

    Its version is the package's with the hash of its files as local label (``0.1.0+sha256.<hex>``), so
    that a cluster that has an older build installs this one instead of keeping it; the same files give
    the same bytes (entries in one order, one fixed time), so that the wheel's content-addressed path is
    the same from every worker.
    """
    with zipfile.ZipFile(package_core(directory)) as core:
        files = [(name, core.read(name)) for name in core.namelist()]
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    version = f"{airflow_kinesis_snowflake.__version__}+sha256.{digest.hexdigest()[:16]}"
    info = f"{WHEEL_DISTRIBUTION}-{version}.dist-info"
    files += [
        (
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: {WHEEL_DISTRIBUTION}\nVersion: {version}\n"
            "Summary: The Spark job's package of airflow-provider-kinesis-snowflake\n".encode(),
        ),
        (
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: airflow-provider-kinesis-snowflake\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n",
        ),
    ]
    record = [f"{name},sha256={_record_digest(data)},{len(data)}" for name, data in files] + [f"{info}/RECORD,,"]
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    wheel = directory / f"{WHEEL_DISTRIBUTION}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            entry = zipfile.ZipInfo(name)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    return wheel


def _record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


class DatabricksJobHook(DatabricksHook):
    """The Databricks provider's hook, and the job's files in the workspace's storage (an
    :class:`~airflow_kinesis_snowflake.hooks.artifacts.ArtifactStore`): ``dbfs:/`` paths through the
    DBFS API, Unity Catalog volume paths (``/Volumes/...``) through the Files API, each call with the
    connection's authentication and the hook's retries. It takes the provider hook's arguments
    (``databricks_conn_id`` ...).
    """

    def exists(self, uri: str) -> bool:
        """Whether a file is at ``uri`` (``dbfs:/...`` or ``/Volumes/...``)."""
        if uri.startswith(DBFS_SCHEME):
            try:
                self._do_api_call(("GET", "2.0/dbfs/get-status"), {"path": _dbfs_path(uri)}, wrap_http_errors=False)
            except requests.HTTPError as err:
                if err.response is not None and err.response.status_code == 404:
                    return False
                raise AirflowException(_http_error("DBFS get-status", uri, err.response)) from None
            return True
        return self._files_api("HEAD", uri).status_code != 404

    def put(self, uri: str, data: bytes) -> None:
        """Write ``data`` as a new file at ``uri``: DBFS's create, add-block and close, or the Files API's upload."""
        if uri.startswith(DBFS_SCHEME):
            path = _dbfs_path(uri)
            handle = self._do_api_call(("POST", "2.0/dbfs/create"), {"path": path, "overwrite": False})["handle"]
            for start in range(0, len(data), DBFS_BLOCK):
                block = base64.b64encode(data[start : start + DBFS_BLOCK]).decode()
                self._do_api_call(("POST", "2.0/dbfs/add-block"), {"handle": handle, "data": block})
            self._do_api_call(("POST", "2.0/dbfs/close"), {"handle": handle})
            return
        response = self._files_api("PUT", uri, data=data, params={"overwrite": "false"})
        if response.status_code == 404:
            raise AirflowException(_http_error("the Files API's upload", uri, response))

    def _files_api(
        self, method: str, path: str, *, data: bytes | None = None, params: dict[str, str] | None = None
    ) -> requests.Response:
        """One Files API call on ``path`` (a volume path) with the connection's authentication, retried as
        the hook retries its own calls; a 404 is returned, any other error raised.

        :raises AirflowException: the call failed.
        """
        url = self._endpoint_url(f"api/2.0/fs/files{quote(path)}")
        headers = {**self.user_agent_header, **self._get_aad_headers()}
        if data is not None:
            headers["Content-Type"] = "application/octet-stream"
        token = self._get_token()
        conn = self.databricks_conn
        auth: AuthBase = _TokenAuth(token) if token else HTTPBasicAuth(conn.login or "", conn.password or "")
        proxies: dict[str, Any] = getattr(self, "_get_requests_kwargs", dict)()  # proxies, in recent providers
        try:
            for attempt in self._get_retry_object():
                with attempt:
                    response = requests.request(
                        method,
                        url,
                        data=data,
                        params=params,
                        headers=headers,
                        auth=auth,
                        timeout=self.timeout_seconds,
                        **proxies,
                    )
                    if response.status_code != 404:
                        response.raise_for_status()
                    return response
        except RetryError as err:
            raise AirflowException(
                f"the Files API's {method} of {path} failed {self.retry_limit} times: {err}"
            ) from None
        except requests.HTTPError as err:
            raise AirflowException(_http_error(f"the Files API's {method}", path, err.response)) from None
        raise AssertionError("unreachable: the retries return or raise")


def _dbfs_path(uri: str) -> str:
    """``dbfs:/a/b`` as the DBFS API's absolute path ``/a/b``."""
    return "/" + uri[len(DBFS_SCHEME) :].lstrip("/")


def _http_error(what: str, path: str, response: requests.Response | None) -> str:
    if response is None:
        return f"{what} of {path} failed"
    return f"{what} of {path} failed: HTTP {response.status_code} {response.text[:500]}"


class DatabricksSubmitter(ManagedSubmitter):
    """Runs the job as a one-time Databricks run and waits for it (a
    :class:`~airflow_kinesis_snowflake.hooks.spark.PlatformSubmitter`).

    :param artifacts: ``dbfs:/<path>`` or ``/Volumes/<catalog>/<schema>/<volume>/<path>`` of the entry
        point and the package wheel.
    :param databricks_conn_id: the workspace's Airflow connection.
    :param existing_cluster_id: the all-purpose cluster the run uses; or
    :param new_cluster: the spec of the job cluster created for the run.
    :param libraries: pip requirements installed on the cluster for the run besides the package.
    :param timeout_minutes: runs/submit's ``timeout_seconds``, in minutes; no timeout when None.
    :param aws_conn_id: the connector's AWS connection: the region and endpoints a new cluster's driver gets.
    :param region_name: its region; the connection's when None.
    :param poll_seconds: seconds between two reads of the run's state.
    """

    platform = DATABRICKS_PLATFORM

    def __init__(
        self,
        *,
        artifacts: str,
        databricks_conn_id: str = "databricks_default",
        existing_cluster_id: str | None = None,
        new_cluster: dict[str, Any] | None = None,
        libraries: list[str] | None = None,
        timeout_minutes: int | None = None,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        poll_seconds: int = 30,
    ) -> None:
        if (existing_cluster_id is None) == (new_cluster is None):
            raise ValueError("give existing_cluster_id or new_cluster, one of them")
        super().__init__(
            artifacts=artifacts, aws_conn_id=aws_conn_id, region_name=region_name, poll_seconds=poll_seconds
        )
        self.databricks_conn_id = databricks_conn_id
        self.existing_cluster_id, self.new_cluster = existing_cluster_id, new_cluster
        self.libraries = list(libraries or [])
        self.timeout_minutes = timeout_minutes

    @cached_property
    def databricks(self) -> DatabricksJobHook:
        """The Databricks hook of the workspace's connection (runs and files)."""
        return DatabricksJobHook(databricks_conn_id=self.databricks_conn_id)

    @property
    def cluster(self) -> str:
        """The cluster, as messages name it."""
        return f"cluster {self.existing_cluster_id}" if self.existing_cluster_id else "a new job cluster"

    def check(self, hook: SparkJobSubmitHook) -> None:
        """Refuse a Spark connection without ``driver_identity`` and ``snowflake_connection_ref``
        (:func:`~airflow_kinesis_snowflake.hooks.managed.check_driver_identity`): on Databricks the
        driver runs as the cluster's identity."""
        check_driver_identity(
            hook,
            platform=DATABRICKS_PLATFORM,
            role=f"the AWS identity of {self.cluster} (its instance profile)",
            anchor="databricks",
        )

    def run_request(self, hook: SparkJobSubmitHook, job: Submission, entry_point: str, wheel: str) -> dict[str, Any]:
        """runs/submit's request: one Python script task running ``entry_point`` with the job's arguments,
        the package ``wheel`` and the connector's libraries installed for it, on the existing cluster or
        a new one (whose ``spark_conf`` gets the task's Spark settings and Spark's log level, and whose
        ``spark_env_vars`` the region and endpoints of AWS: no credential)."""
        libraries: list[dict[str, Any]] = [{"whl": wheel}]
        libraries += [{"pypi": {"package": requirement}} for requirement in self.libraries]
        task: dict[str, Any] = {
            "task_key": TASK_KEY,
            "spark_python_task": {"python_file": entry_point, "parameters": list(job.arguments)},
            "libraries": libraries,
        }
        if self.existing_cluster_id is not None:
            task["existing_cluster_id"] = self.existing_cluster_id
        else:
            cluster = copy.deepcopy(self.new_cluster or {})
            cluster["spark_conf"] = {**(cluster.get("spark_conf") or {}), **spark_settings(hook, sizes=False)}
            cluster["spark_env_vars"] = {**(cluster.get("spark_env_vars") or {}), **job.location}
            task["new_cluster"] = cluster
        request: dict[str, Any] = {"run_name": job.name, "tasks": [task], "idempotency_token": uuid.uuid4().hex}
        if self.timeout_minutes is not None:
            request["timeout_seconds"] = self.timeout_minutes * 60
        return request

    def upload(self, application: str) -> tuple[Artifact, Artifact]:
        """The entry point ``application`` and the package wheel, uploaded under the artifacts location."""
        with tempfile.TemporaryDirectory(prefix="kinesis-snowflake-artifacts-") as directory:
            entry_point, wheel = store_artifacts(
                self.databricks, self.artifacts, [Path(application), package_wheel(Path(directory))]
            )
        return entry_point, wheel

    def _start(self, job: Submission) -> str:
        """Upload the entry point and the wheel, and submit the run (runs/submit); its id."""
        if self.existing_cluster_id is not None and (endpoints := sorted(set(job.location) - {REGION_VARIABLE})):
            self.log.warning(
                "The AWS connection names endpoints (%s); a run on existing cluster %s has the cluster's own "
                "environment: set them in the cluster's spark_env_vars if its driver needs them",
                ", ".join(endpoints),
                self.existing_cluster_id,
            )
        entry_point, wheel = self.upload(job.application)
        run_id = self.databricks.submit_run(self.run_request(job.hook, job, entry_point.uri, wheel.uri))
        self.log.info(
            "Databricks run %s started on %s: %s %s (%s), library %s; %s",
            run_id,
            self.cluster,
            entry_point.uri,
            job.label,
            job.name,
            wheel.uri,
            self.databricks.get_run_page_url(run_id),
        )
        return str(run_id)

    def run_state(self, job_run_id: str) -> JobRunState:
        """The run's life-cycle and result state and its state message (runs/get), read once: ended once
        its life cycle is ``TERMINATED``, ``SKIPPED`` or ``INTERNAL_ERROR``, succeeded with ``SUCCESS``."""
        state = self.databricks.get_run_state(int(job_run_id))
        shown = " ".join(word for word in (state.life_cycle_state, state.result_state) if word)
        return JobRunState(
            shown, state.is_terminal, state.is_terminal and state.is_successful, str(state.state_message or "").strip()
        )

    @property
    def wait_seconds(self) -> float | None:
        """How long a wait for one run lasts at most: ten polls beyond the run's timeout, after which
        Databricks ends it; None when it has none."""
        if self.timeout_minutes is None:
            return None
        return self.timeout_minutes * 60 + 10 * self.poll_seconds

    def _wait_for_run(self, job_run_id: str, name: str) -> None:
        """Poll the run's state every ``poll_seconds`` until its life cycle ended, logging each change; a
        run that outlives :attr:`wait_seconds` is cancelled.

        :raises AirflowException: the wait ran out.
        """
        run_id = int(job_run_id)
        deadline = None if self.wait_seconds is None else time.monotonic() + self.wait_seconds
        seen: tuple[str, str] | None = None
        while True:
            state: RunState = self.databricks.get_run_state(run_id)
            if (state.life_cycle_state, state.result_state) != seen:
                seen = (state.life_cycle_state, state.result_state)
                self.log.info("Databricks run %s is %s %s", run_id, state.life_cycle_state, state.result_state)
            if state.is_terminal:
                return
            if deadline is not None and time.monotonic() > deadline:
                self._stop(job_run_id)
                raise AirflowException(
                    f"Databricks run {run_id} of {name} did not end within its timeout of {self.timeout_minutes} "
                    "minutes: it was cancelled"
                )
            time.sleep(self.poll_seconds)

    def failure(self, job_run_id: str, name: str) -> str:
        """The exception's message for a run that ended without success: its end, its state message, its
        task's error and the driver's last error lines (its last lines when none is at ERROR), from the
        task run's output."""
        run_id = int(job_run_id)
        run = self.databricks.get_run(run_id)
        state = run.get("state") or {}
        ended = " ".join(s for s in (state.get("life_cycle_state"), state.get("result_state")) if s)
        message = str(state.get("state_message") or "").strip()
        what = f"The Spark job {name} failed on Databricks: run {run_id} on {self.cluster} ended {ended}"
        what += f" ({message})" if message else ""
        tasks = run.get("tasks") or []
        if not tasks:
            return failure_message(what, None, "", "the run has no task run to read the output of")
        task_run = tasks[0]["run_id"]
        try:
            output = self.databricks.get_run_output(task_run)
        except AirflowException as err:  # the output only explains a failure raised anyway
            self.log.warning("The output of task run %s could not be read: %s", task_run, err)
            return failure_message(what, None, "", f"the output of task run {task_run} could not be read")
        if error := str(output.get("error") or "").strip():
            what += f"; its task: {error}"
        texts = [str(output[key]) for key in ("logs", "error_trace") if output.get(key)]
        tail = driver_tail(texts) if texts else None
        return failure_message(
            what, tail, f"the output of task run {task_run}", f"task run {task_run} has no output to show"
        )

    def _stop(self, job_run_id: str) -> None:
        """Cancel the run ``job_run_id`` and wait until its life cycle ended (the task is being killed)."""
        run_id = int(job_run_id)
        self.log.info("Cancelling Databricks run %s on %s", run_id, self.cluster)
        self.databricks.cancel_run(run_id)
        wait_until_ended(
            self.databricks.get_run,
            {"run_id": run_id},
            ["state", "life_cycle_state"],
            ENDED_STATES,
            poll_seconds=self.poll_seconds,
        )
