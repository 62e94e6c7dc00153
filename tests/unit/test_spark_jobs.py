"""The PySpark entry points spark-submit runs: the top-level spark_jobs/ folder, shipped inside the package."""

from __future__ import annotations

from pathlib import Path

from airflow_kinesis_snowflake.hooks.glue import GLUE_APPLICATION
from airflow_kinesis_snowflake.hooks.spark import DEFAULT_APPLICATION, DYNAMODB_APPLICATION

REPO = Path(__file__).resolve().parents[2]


def test_the_package_ships_the_top_level_folder_itself_not_a_copy() -> None:
    link = REPO / "airflow_kinesis_snowflake" / "spark_jobs"
    assert link.is_symlink() and link.resolve() == REPO / "spark_jobs"


def test_each_entry_point_runs_the_engines_driver_and_is_what_the_hook_submits() -> None:
    entry_points = sorted(p.name for p in (REPO / "spark_jobs").glob("*_to_snowflake.py"))

    # One per source, and Glue's, which keeps the driver's arguments among the ones Glue adds.
    assert entry_points == ["dynamodb_to_snowflake.py", "glue_to_snowflake.py", "kinesis_to_snowflake.py"]
    for name in entry_points:
        text = (REPO / "spark_jobs" / name).read_text()
        assert "from airflow_kinesis_snowflake.core.engine.driver import" in text and "main" in text
        assert 'if __name__ == "__main__":' in text and "sys.exit(main(" in text
    submitted = {Path(DEFAULT_APPLICATION), Path(DYNAMODB_APPLICATION), Path(GLUE_APPLICATION)}
    assert {p.resolve() for p in submitted} == {REPO / "spark_jobs" / name for name in entry_points}
