"""Where spark-submit runs, a ``spark-submit`` to run and one Spark distribution: ``pyspark``, not
``pyspark-client`` laid over it.

pyspark is needed only where spark-submit runs (the Airflow workers that run the ingest and sync
tasks), and comes with the package's ``spark-submit`` extra; DAG parsing, the scheduler, the API
server and the command line never import it. :func:`check_spark_submit` finds the ``spark-submit``
to run (on the ``PATH``, else the one pyspark installs next to the interpreter) and, without one,
names the extra to install.

``pyspark`` (the Python API, Spark's jars and ``spark-submit``) and ``pyspark-client`` (the Spark
Connect client, which the Apache Spark provider 6.x requires) install the same ``pyspark/*.py``
files. With both installed at different versions, whichever was installed last wins file by file:
the driver then runs one version's Python against the other's jars, and ``pip check`` says nothing.
:func:`check_spark_distribution` finds that from package metadata and a few file names, without
importing pyspark, so it is cheap enough to run before every ``spark-submit``.

``python -m airflow_kinesis_snowflake.environment`` prints the versions and exits 1 on a problem.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

_VERSION_LINE = re.compile(r"""^__version__(?:\s*:\s*str)?\s*=\s*["']([^"']+)["']""", re.MULTILINE)
_CORE_JAR = re.compile(r"^spark-core_[0-9.]+-(.+)\.jar$")


# The distribution's name, and what installs spark-submit with it.
DISTRIBUTION = "airflow-provider-kinesis-snowflake"
SPARK_SUBMIT_EXTRA = "spark-submit"
INSTALL_SPARK_SUBMIT = f"pip install '{DISTRIBUTION}[{SPARK_SUBMIT_EXTRA}]'"


class SparkDistributionError(RuntimeError):
    """This Python environment cannot run the job's spark-submit as it is: pyspark files of more
    than one Spark version, or no spark-submit at all (:class:`SparkSubmitNotFoundError`)."""


class SparkSubmitNotFoundError(SparkDistributionError):
    """No spark-submit where the job would be submitted from: the ``spark-submit`` extra is missing."""


@dataclass(frozen=True)
class SparkDistribution:
    """What the environment says about its Spark version, each from its own source.

    :param pyspark: the installed ``pyspark`` distribution's version (None when not installed).
    :param pyspark_client: the installed ``pyspark-client`` distribution's version (None when not installed).
    :param module: ``pyspark.__version__`` as written in ``pyspark/version.py`` on disk.
    :param jars: the version of ``pyspark/jars/spark-core_*.jar`` (None without jars: ``pyspark-client``
        alone, or no pyspark at all).
    :param location: the ``pyspark`` package directory.
    """

    pyspark: str | None
    pyspark_client: str | None
    module: str | None
    jars: str | None
    location: Path | None

    def problems(self) -> list[str]:
        """Each disagreement between the versions, with the fix; empty when they agree."""
        found: list[str] = []
        if self.pyspark and self.pyspark_client and self.pyspark != self.pyspark_client:
            found.append(
                f"pyspark {self.pyspark} and pyspark-client {self.pyspark_client} are both installed and write the "
                f"same files in {self.location}. Keep one Spark distribution: `pip uninstall -y pyspark-client` "
                f"then `pip install --force-reinstall --no-deps pyspark=={self.pyspark}` (uninstalling one "
                "removes files the other shares). pyspark-client comes with apache-airflow-providers-apache-spark "
                "6.x; this provider needs < 6"
            )
        if self.module and self.jars and self.module != self.jars:
            found.append(
                f"{self.location}: pyspark's Python files are version {self.module} but its jars are {self.jars}; "
                f"reinstall pyspark (`pip install --force-reinstall --no-deps pyspark=={self.jars}`)"
            )
        elif self.module and self.pyspark and not self.pyspark_client and self.module != self.pyspark:
            found.append(
                f"{self.location}: pyspark {self.pyspark} is installed but its files say {self.module}; "
                f"reinstall it (`pip install --force-reinstall --no-deps pyspark=={self.pyspark}`)"
            )
        return found


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def spark_distribution() -> SparkDistribution:
    """Read the versions of the Spark distributions in this Python environment (pyspark is not imported)."""
    spec = importlib.util.find_spec("pyspark")
    location = Path(spec.origin).parent if spec is not None and spec.origin else None
    module = jars = None
    if location is not None:
        version_file = location / "version.py"
        if version_file.is_file():
            match = _VERSION_LINE.search(version_file.read_text(encoding="utf-8"))
            module = match.group(1) if match else None
        for jar in (location / "jars").glob("spark-core_*.jar"):
            core = _CORE_JAR.match(jar.name)
            jars = core.group(1) if core else jars
    return SparkDistribution(
        pyspark=_version("pyspark"),
        pyspark_client=_version("pyspark-client"),
        module=module,
        jars=jars,
        location=location,
    )


def spark_submit_path(binary: str = "spark-submit") -> str | None:
    """The ``binary`` (``spark-submit``, or a distribution's ``spark3-submit``) a submission runs: the
    one on the ``PATH``, else the one pyspark installs next to this interpreter; None without either."""
    return shutil.which(binary) or shutil.which(binary, path=str(Path(sys.executable).parent))


def check_spark_submit(binary: str = "spark-submit") -> str:
    """Refuse a submission from an environment without ``binary``, naming the extra that brings it.

    :param binary: the Spark connection's ``spark-binary``.
    :returns: the path of ``binary``.
    :raises SparkSubmitNotFoundError: naming ``pip install 'airflow-provider-kinesis-snowflake[spark-submit]'``.
    """
    found = spark_submit_path(binary)
    if found is None:
        raise SparkSubmitNotFoundError(
            f"{binary} is not on the PATH, nor next to {sys.executable}: the Spark job is submitted from here, "
            f"which needs pyspark (Spark 3.5 or 4.x) with its spark-submit. Install the provider's "
            f"{SPARK_SUBMIT_EXTRA} extra where the ingest and sync tasks run (`{INSTALL_SPARK_SUBMIT}`), or put "
            "the bin directory of a Spark distribution on the PATH"
        )
    return found


def check_spark_distribution() -> SparkDistribution:
    """Refuse an environment whose pyspark files come from more than one Spark version.

    :returns: the versions found, when they agree.
    :raises SparkDistributionError: naming each disagreement and its fix.
    """
    found = spark_distribution()
    problems = found.problems()
    if problems:
        raise SparkDistributionError("; ".join(problems))
    return found


def main() -> int:
    """Print the Spark versions of this environment; exit status 1 when they disagree."""
    found = spark_distribution()
    for name, value in (
        ("pyspark", found.pyspark),
        ("pyspark-client", found.pyspark_client),
        ("pyspark.__version__", found.module),
        ("spark-core jar", found.jars),
        ("spark-submit", spark_submit_path()),
    ):
        print(f"{name:20} {value or '-'}")
    problems = found.problems()
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
