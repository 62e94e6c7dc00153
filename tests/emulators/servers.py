"""Start a moto server and a fakesnow server on free loopback ports; stop them afterwards.

They run as child processes so that every other process (Airflow tasks, spark-submit, Spark's
Python workers) reaches them over HTTP exactly as it would reach AWS and Snowflake.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import requests

from tests.emulators.faults import served, write_faults

REPO_ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
AWS_KEY = "testing"
SNOWFLAKE_DATABASE = "ANALYTICS"
SNOWFLAKE_SCHEMA = "RAW"
FAULTS_FILE = "moto-faults.json"
SNOWFLAKE_FAULTS = "fakesnow-faults.json"
# In a fakesnow data dir, written by its supervisor: {"pid": serving process, "restarts": count}.
FAKESNOW_STATE_FILE = "server.json"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until_up(url: str, process: subprocess.Popen[bytes], name: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}; see {log}:\n{log.read_text()[-2000:]}")
        try:
            requests.get(url, timeout=1)
            return
        except requests.RequestException:
            time.sleep(0.2)
    raise RuntimeError(f"{name} did not answer on {url} within {timeout}s; see {log}")


@dataclass
class Emulators:
    """Where the emulators listen, and Airflow connections that point at them."""

    moto_port: int
    fakesnow_port: int
    work_dir: Path
    # Where the fakesnow server keeps its state when it survives restarts (see fakesnow_server).
    fakesnow_data_dir: Path | None = None

    @property
    def aws_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.moto_port}"

    def aws_connection(self) -> dict[str, Any]:
        return {
            "conn_type": "aws",
            "login": AWS_KEY,
            "password": AWS_KEY,
            # STS is named separately: the Amazon provider's connection test never uses endpoint_url.
            "extra": {
                "region_name": REGION,
                "endpoint_url": self.aws_endpoint,
                "service_config": {"sts": {"endpoint_url": self.aws_endpoint}},
            },
        }

    def snowflake_connection(self) -> dict[str, Any]:
        return {
            "conn_type": "snowflake",
            "login": "fake",
            "password": "snow",
            "schema": SNOWFLAKE_SCHEMA,
            "extra": {
                "account": "fakesnow",
                "database": SNOWFLAKE_DATABASE,
                "host": "127.0.0.1",
                "port": self.fakesnow_port,
                "protocol": "http",
            },
        }

    def iam_user_connection(self, user_name: str, policy: dict[str, Any]) -> dict[str, Any]:
        """Create an IAM user holding exactly ``policy`` (inline); an aws connection with its keys."""
        iam = self.boto3_client("iam")
        iam.create_user(UserName=user_name)
        iam.put_user_policy(UserName=user_name, PolicyName="connector", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user_name)["AccessKey"]
        connection = self.aws_connection()
        connection.update(login=key["AccessKeyId"], password=key["SecretAccessKey"])
        return connection

    @staticmethod
    def spark_connection() -> dict[str, Any]:
        return {"conn_type": "spark", "host": "local[2]"}

    def airflow_env(self) -> dict[str, str]:
        """``AIRFLOW_CONN_*`` variables (JSON form) for aws_default, snowflake_default, spark_default."""
        return {
            "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(self.aws_connection()),
            "AIRFLOW_CONN_SNOWFLAKE_DEFAULT": json.dumps(self.snowflake_connection()),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(self.spark_connection()),
        }

    def inject_kinesis_faults(self, faults: list[dict[str, Any]]) -> None:
        """Make the moto server fail calls as listed (see kinesis_extensions); [] clears."""
        write_faults(self.work_dir / FAULTS_FILE, faults)

    def served_kinesis_faults(self) -> list[dict[str, Any]]:
        """The faults the moto server raised since the last inject_kinesis_faults()."""
        return served(self.work_dir / FAULTS_FILE)

    def inject_snowflake_faults(self, faults: list[dict[str, Any]]) -> None:
        """Make the fakesnow server misbehave as listed (see fakesnow_server); [] clears."""
        write_faults(self.work_dir / SNOWFLAKE_FAULTS, faults)

    def served_snowflake_faults(self) -> list[dict[str, Any]]:
        return served(self.work_dir / SNOWFLAKE_FAULTS)

    def snowflake_server_state(self) -> dict[str, int]:
        """The serving fakesnow process's ``pid`` and how many ``restarts`` its supervisor made."""
        if self.fakesnow_data_dir is None:
            raise RuntimeError("this fakesnow server runs without --data-dir: it cannot restart")
        return dict(json.loads((self.fakesnow_data_dir / FAKESNOW_STATE_FILE).read_text()))

    def wait_for_snowflake_restarts(self, restarts: int, timeout: float = 120) -> dict[str, int]:
        """Wait until the fakesnow server was restarted ``restarts`` times in all and answers again."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.snowflake_server_state()
            if state["restarts"] >= restarts:
                try:
                    requests.get(f"http://127.0.0.1:{self.fakesnow_port}/", timeout=1)
                    return state
                except requests.ConnectionError:
                    pass
            time.sleep(0.2)
        raise RuntimeError(f"the fakesnow server was not restarted {restarts} times: {self.snowflake_server_state()}")

    def boto3_client(self, service: str, **config: Any) -> Any:
        """A client of the moto server; ``config``: botocore ``Config`` settings (retries, ...)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            service,
            region_name=REGION,
            endpoint_url=self.aws_endpoint,
            aws_access_key_id=AWS_KEY,
            aws_secret_access_key=AWS_KEY,
            config=Config(**config),
        )

    def snowflake_params(self) -> dict[str, Any]:
        """snowflake.connector.connect() arguments that reach the fakesnow server."""
        return {
            "user": "fake",
            "password": "snow",
            "account": "fakesnow",
            "host": "127.0.0.1",
            "port": self.fakesnow_port,
            "protocol": "http",
        }

    def snowflake_connect(self, **kwargs: Any) -> Any:
        import snowflake.connector

        return snowflake.connector.connect(**{**self.snowflake_params(), **kwargs})


class _Server:
    def __init__(self, name: str, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        self.process = subprocess.Popen(
            args,
            cwd=REPO_ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **env} if env else None,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # Its own session: the group is the server and anything it started (a supervised child).
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


def start_moto(work_dir: Path, env: dict[str, str] | None = None) -> tuple[_Server, int]:
    """Start a moto server; ``env`` adds variables to its environment (e.g. ``INITIAL_NO_AUTH_ACTION_COUNT``)."""
    port = free_port()
    server = _Server(
        "moto",
        [sys.executable, "-m", "tests.emulators.moto_server", "--port", str(port)],
        work_dir / "moto.log",
        env=env,
    )
    _wait_until_up(f"http://127.0.0.1:{port}/moto-api/", server.process, "moto server", server.log_path)
    return server, port


def start_fakesnow(
    work_dir: Path, env: dict[str, str] | None = None, data_dir: Path | None = None
) -> tuple[_Server, int]:
    """Start a fakesnow server; with ``data_dir`` it keeps its state there and can be restarted."""
    port = free_port()
    args = [sys.executable, "-m", "tests.emulators.fakesnow_server", "--port", str(port)]
    if data_dir is not None:
        args += ["--data-dir", str(data_dir)]
    server = _Server("fakesnow", args, work_dir / "fakesnow.log", env=env)
    _wait_until_up(f"http://127.0.0.1:{port}/", server.process, "fakesnow server", server.log_path)
    return server, port


@contextmanager
def local_emulators(work_dir: Path) -> Iterator[Emulators]:
    """Run both emulators for the duration of the block; they are stopped however it ends.

    The fakesnow server keeps its state under ``work_dir/fakesnow-data`` and survives a ``restart``
    fault (see fakesnow_server); file-backed DuckDB measured no slower than in-memory here.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    servers: list[_Server] = []
    try:
        moto, moto_port = start_moto(work_dir, env={"MOTO_FAULTS_FILE": str(work_dir / FAULTS_FILE)})
        servers.append(moto)
        # Kept on disk, as Snowflake keeps it, so that the fakesnow server can be restarted.
        data_dir = work_dir / "fakesnow-data"
        fakesnow, fakesnow_port = start_fakesnow(
            work_dir, env={"FAKESNOW_FAULTS_FILE": str(work_dir / SNOWFLAKE_FAULTS)}, data_dir=data_dir
        )
        servers.append(fakesnow)
        yield Emulators(moto_port=moto_port, fakesnow_port=fakesnow_port, work_dir=work_dir, fakesnow_data_dir=data_dir)
    finally:
        for server in reversed(servers):
            server.stop()


def main() -> None:
    """`python -m tests.emulators.servers`: run the emulators and print the connection variables."""
    import tempfile

    with local_emulators(Path(tempfile.mkdtemp(prefix="emulators-"))) as emulators:
        for key, value in emulators.airflow_env().items():
            print(f"export {key}='{value}'")
        sys.stdout.flush()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
