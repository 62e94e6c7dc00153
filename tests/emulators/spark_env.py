"""The environment of the tests' ``spark-submit --master local[2]`` jobs: JVMs and Python workers that start fast.

The jobs are short, so start-up is what counts, and most of a JVM's start-up is loading classes.
Both JVMs of a ``spark-submit`` (the launcher that builds the command, then the driver) map a
class-data archive (AppCDS) that a warm-up job wrote at its exit, once per machine, Java and Spark:
``.test-work/spark-cds/<key>/``. An archive needs every directory on the class path to be empty,
and Spark puts ``SPARK_CONF_DIR`` on it: so the settings are Java system properties in
``SPARK_SUBMIT_OPTS`` and ``SPARK_CONF_DIR`` is an empty directory. Without an archive (the warm-up
failed) the same settings apply, only slower.

Spark's Python daemon is :mod:`tests.emulators.spark_daemon`, which imports the libraries every
worker of the ingestion job imports before it forks them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from tests.emulators.servers import REPO_ROOT

CDS_ROOT = REPO_ROOT / ".test-work" / "spark-cds"
# No UI; a JVM tuned to start fast, for seconds of work.
JVM_OPTIONS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]
SPARK_SETTINGS = {
    "spark.ui.enabled": "false",
    "spark.python.daemon.module": "tests.emulators.spark_daemon",
}
WARM_UP_JOB = Path(__file__).with_name("spark_warmup.py")


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _key() -> str:
    """What an archive is only valid for: this Java, these Spark jars, these options."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    # A jar rewritten in place (pyspark reinstalled) invalidates an archive as a new one does: the JVM
    # checks each jar's size and time and would otherwise ignore the archive.
    jars = sorted(f"{p.name} {p.stat().st_size} {p.stat().st_mtime_ns}" for p in (_spark_home() / "jars").glob("*.jar"))
    text = "\n".join([java, *jars, *JVM_OPTIONS, str(sorted(SPARK_SETTINGS.items())), str(REPO_ROOT)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _options(extra: list[str]) -> str:
    return " ".join([*JVM_OPTIONS, *extra, *(f"-D{k}={v}" for k, v in SPARK_SETTINGS.items())])


def _base_env(conf_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SPARK_CONF_DIR"] = str(conf_dir)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _write_archives(directory: Path, conf_dir: Path) -> None:
    """Run the warm-up job with both JVMs writing their archives at exit."""
    driver, launcher = directory / "driver.jsa", directory / "launcher.jsa"
    env = _base_env(conf_dir)
    env["SPARK_SUBMIT_OPTS"] = _options([f"-XX:ArchiveClassesAtExit={driver}.tmp"])
    env["SPARK_LAUNCHER_OPTS"] = " ".join([*JVM_OPTIONS, f"-XX:ArchiveClassesAtExit={launcher}.tmp"])
    proc = subprocess.run(
        ["spark-submit", "--master", "local[2]", str(WARM_UP_JOB)],
        env=env,
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    (directory / "warm-up.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode == 0:
        for archive in (driver, launcher):
            if Path(f"{archive}.tmp").exists():
                Path(f"{archive}.tmp").replace(archive)


def spark_env() -> dict[str, str]:
    """``SPARK_CONF_DIR``, ``SPARK_SUBMIT_OPTS`` and ``SPARK_LAUNCHER_OPTS`` of the tests' jobs.

    The first session on a machine writes the archives; xdist workers wait for it on a file lock.
    """
    directory = CDS_ROOT / _key()
    conf_dir = directory / "conf"  # empty, and the same path as when the archive was written
    conf_dir.mkdir(parents=True, exist_ok=True)
    with (directory / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / "driver.jsa").exists():
            _write_archives(directory, conf_dir)
    driver, launcher = directory / "driver.jsa", directory / "launcher.jsa"
    return {
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_SUBMIT_OPTS": _options([f"-XX:SharedArchiveFile={driver}"] if driver.exists() else []),
        "SPARK_LAUNCHER_OPTS": " ".join(
            [*JVM_OPTIONS, *([f"-XX:SharedArchiveFile={launcher}"] if launcher.exists() else [])]
        ),
    }
