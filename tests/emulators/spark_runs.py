"""What the emulated managed Spark platforms (:mod:`~tests.emulators.emr_serverless`,
:mod:`~tests.emulators.glue`) share: a job run is a local ``spark-submit --master local[2]`` in a
process group of its own, inside the moto server's process tree, its files read from moto's S3 into
a working directory named after the run (every process of a run has the run's id in its command
line, which is how a test finds them), its AWS identity the run's role (moto's test keys), and
stopping it ends the whole process group (the JVM and its Python workers).

The JVMs start as the suite's other jobs do (:func:`~tests.emulators.spark_env.spark_env`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.emulators.servers import AWS_KEY, REPO_ROOT

_EXCEPTION_LINE = re.compile(r"^\s*([\w.]+(Error|Exception)|SystemExit)\b.*")


def s3_location(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` as ``(bucket, key)``."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def read_s3(backend: Any, uri: str, directory: Path) -> Path:
    """The object at ``uri`` in moto's S3 ``backend``, written under its file name in ``directory``."""
    bucket, key = s3_location(uri)
    path = directory / key.rsplit("/", 1)[-1]
    path.write_bytes(backend.get_object(bucket, key).value)
    return path


def environment(added: dict[str, str]) -> dict[str, str]:
    """The job's environment: this process's without its AWS variables, the suite's Spark settings, the
    run's role's identity (moto's test keys), and what the run's settings add."""
    from tests.emulators.spark_env import spark_env

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(spark_env())
    env["PYSPARK_PYTHON"] = sys.executable
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update({"AWS_ACCESS_KEY_ID": AWS_KEY, "AWS_SECRET_ACCESS_KEY": AWS_KEY})
    env.update(added)
    return env


def start(command: list[str], added: dict[str, str], directory: Path) -> subprocess.Popen[bytes]:
    """spark-submit's ``command`` in a process group of its own, its stdout and stderr in ``directory``."""
    with (directory / "stdout").open("wb") as out, (directory / "stderr").open("wb") as err:
        return subprocess.Popen(
            command, stdout=out, stderr=err, env=environment(added), cwd=directory, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    """End spark-submit's process group (the JVM and the Python processes it started), all of it."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        pass
    for _ in range(100):  # what outlives the group's leader, until none is left (zombies aside)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        process.wait()
        time.sleep(0.05)


def output(directory: Path, stream: str) -> bytes:
    """What the run wrote to ``stream`` (stdout or stderr), empty when nothing."""
    path = directory / stream
    return path.read_bytes() if path.exists() else b""


def last_exceptions(directory: Path, count: int = 3) -> list[str]:
    """The last exception lines the run wrote (stdout, then stderr)."""
    lines: list[str] = []
    for stream in ("stdout", "stderr"):
        lines += [
            m.group(0).strip()
            for line in output(directory, stream).decode("utf-8", "replace").splitlines()
            if (m := _EXCEPTION_LINE.match(line))
        ]
    return lines[-count:]
