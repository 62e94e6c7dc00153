"""One Spark distribution: pyspark's Python files, its metadata and its jars are one version."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from airflow_kinesis_snowflake.environment import (
    SparkDistribution,
    SparkDistributionError,
    check_spark_distribution,
    main,
    spark_distribution,
)


def test_this_environment_runs_one_spark_version() -> None:
    import pyspark

    installed = importlib.metadata.version("pyspark")
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert jars, "pyspark without its jars: spark-submit cannot run"
    assert pyspark.__version__ == installed, f"pyspark {installed} is installed but its files say {pyspark.__version__}"
    assert all(jar.name.endswith(f"-{installed}.jar") for jar in jars), [jar.name for jar in jars]
    try:
        client = importlib.metadata.version("pyspark-client")
    except importlib.metadata.PackageNotFoundError:
        client = None
    assert client in (None, installed), f"pyspark-client {client} overwrites pyspark {installed}"
    found = check_spark_distribution()
    assert (found.pyspark, found.module, found.jars) == (installed, pyspark.__version__, installed)


def _fake_pyspark(root: Path, module: str, jars: str | None) -> Path:
    package = root / "pyspark"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "version.py").write_text(f'__version__: str = "{module}"\n')
    if jars is not None:
        (package / "jars").mkdir()
        (package / "jars" / f"spark-core_2.13-{jars}.jar").write_bytes(b"")
    return package


def test_versions_are_read_from_the_files_without_importing_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = _fake_pyspark(tmp_path, module="4.2.0", jars="4.3.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pyspark", raising=False)

    found = spark_distribution()

    assert (found.module, found.jars, found.location) == ("4.2.0", "4.3.0", package)
    assert "pyspark" not in sys.modules


def test_pyspark_client_at_another_version_is_refused_with_the_fix() -> None:
    mixed = SparkDistribution(pyspark="4.3.0", pyspark_client="4.2.0", module="4.2.0", jars="4.3.0", location=None)

    problems = mixed.problems()

    assert "pyspark 4.3.0 and pyspark-client 4.2.0 are both installed" in problems[0]
    assert "pip uninstall -y pyspark-client" in problems[0]
    assert "pyspark==4.3.0" in problems[0]
    assert "Python files are version 4.2.0 but its jars are 4.3.0" in problems[1]


def test_pyspark_client_at_the_same_version_is_accepted() -> None:
    same = SparkDistribution(pyspark="4.2.0", pyspark_client="4.2.0", module="4.2.0", jars="4.2.0", location=None)

    assert same.problems() == []


def test_files_of_another_version_than_the_metadata_are_refused() -> None:
    site = Path("/site-packages/pyspark")
    stale = SparkDistribution(pyspark="4.3.0", pyspark_client=None, module="4.1.0", jars=None, location=site)

    assert stale.problems() == [
        f"{site}: pyspark 4.3.0 is installed but its files say 4.1.0; reinstall it "
        "(`pip install --force-reinstall --no-deps pyspark==4.3.0`)"
    ]


def test_pyspark_client_alone_has_nothing_to_disagree_with() -> None:
    client_only = SparkDistribution(pyspark=None, pyspark_client="4.2.0", module="4.2.0", jars=None, location=None)

    assert client_only.problems() == []


def test_the_check_raises_and_the_command_exits_1_on_a_mixed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_pyspark(tmp_path, module="4.2.0", jars="4.3.0")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pyspark", raising=False)

    with pytest.raises(SparkDistributionError, match=r"Python files are version 4\.2\.0 but its jars are 4\.3\.0"):
        check_spark_distribution()
    assert main() == 1
    out, err = capsys.readouterr()
    assert "spark-core jar       4.3.0" in out
    assert "error:" in err
