"""The Spark job's lines and Spark's own, each read at its level; the log4j2 file that keeps Spark at WARN."""

from __future__ import annotations

import io
import logging

import pytest

from airflow_kinesis_snowflake.core.job_log import (
    JobLogFormatter,
    OutputTail,
    job_lines,
    log4j2_properties,
    read_output_line,
    say,
    say_exception,
    spark_log_level,
)


def test_the_jobs_lines_are_read_back_at_their_level_without_the_mark() -> None:
    out = io.StringIO()
    say(logging.WARNING, "staged files were not removed")
    say(logging.WARNING, "two\nlines", out)
    say(logging.ERROR, "the batch failed", out)

    read = [read_output_line(line) for line in out.getvalue().splitlines()]

    assert [(r.level, r.text) for r in read] == [
        (logging.WARNING, "two"),
        (logging.WARNING, "lines"),
        (logging.ERROR, "the batch failed"),
    ]
    assert job_lines(logging.INFO, "done") == ["kinesis-snowflake INFO: done"]


def test_sparks_lines_have_the_level_of_their_layout_and_a_stack_trace_that_of_its_record() -> None:
    lines = [
        "26/11/27 18:07:36 INFO SparkContext: Running Spark version 4.3.0",
        "26/11/27 18:07:36 WARN NativeCodeLoader: Unable to load native-hadoop library",
        "26/11/27 18:07:37 ERROR Executor: Exception in task 0.0 in stage 0.0 (TID 0)",
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):",
        '  File "/job/core/job.py", line 1, in process_range',
        "ValueError: a value",
        "",
        "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)",
        "Caused by: java.io.IOException: closed",
        "batch b1: 5 rows loaded, 0 dead letters, 1 shards",
        "    indented, after an INFO line",
    ]
    levels = []
    previous = None
    for line in lines:
        previous = read_output_line(line, previous)
        levels.append(previous.level)

    # The executor's exception goes on its ERROR record; the driver's next line and what follows it do not.
    assert levels == [logging.INFO, logging.WARNING, *[logging.ERROR] * 7, logging.INFO, logging.INFO]
    error = read_output_line("26/11/27 18:07:37 ERROR Executor: failed")
    frame = "\tat org.apache.spark.executor.Executor.run(Executor.scala:1)"
    assert read_output_line(frame, error).level == logging.ERROR
    assert read_output_line("Caused by: java.io.IOException: closed", error).level == logging.ERROR
    assert read_output_line("\tat x", read_output_line("26/11/27 18:07:37 INFO X: y")).level == logging.INFO


def test_an_exception_is_written_at_error_traceback_and_all() -> None:
    out = io.StringIO()
    try:
        raise RuntimeError("Database 'NOPE' does not exist")
    except RuntimeError:
        say_exception(out)

    read = [read_output_line(line) for line in out.getvalue().splitlines()]
    assert {r.level for r in read} == {logging.ERROR}
    assert read[0].text == "Traceback (most recent call last):"
    assert read[-1].text == "RuntimeError: Database 'NOPE' does not exist"


def test_the_formatter_marks_each_line_of_a_record_with_its_level() -> None:
    record = logging.LogRecord("airflow_kinesis_snowflake.core.batch", logging.WARNING, __file__, 1, "a\nb", (), None)
    assert JobLogFormatter().format(record).splitlines() == [
        "kinesis-snowflake WARNING: airflow_kinesis_snowflake.core.batch: a",
        "kinesis-snowflake WARNING: b",
    ]


def test_the_tail_keeps_the_last_error_lines_and_the_last_lines() -> None:
    tail = OutputTail(size=2)
    for text, level in [("e1", logging.ERROR), ("i1", logging.INFO), ("e2", logging.ERROR), ("e3", logging.CRITICAL)]:
        tail.add(read_output_line(f"kinesis-snowflake {logging.getLevelName(level)}: {text}"))
    tail.add(read_output_line("i2"))
    tail.add(read_output_line(""))

    assert tail.errors == ["e2", "e3"]
    assert tail.last == ["e3", "i2"]


@pytest.mark.parametrize("value", ["warn", " WARN ", "Error", "off"])
def test_a_spark_log_level_is_written_as_spark_writes_it(value: str) -> None:
    assert spark_log_level(value) == value.strip().upper()


@pytest.mark.parametrize("value", ["WARNING", "verbose", "", None, 3])
def test_a_spark_log_level_spark_does_not_know_is_refused_naming_the_levels(value: object) -> None:
    with pytest.raises(ValueError, match="must be a Spark log level: one of ALL, TRACE, DEBUG, INFO, WARN, ERROR"):
        spark_log_level(value)


def loggers(settings: dict[str, str]) -> dict[str, str]:
    """The loggers a log4j2 file names, with their levels."""
    return {
        v: settings[k.replace(".name", ".level")]
        for k, v in settings.items()
        if k.startswith("logger.") and k.endswith(".name")
    }


def properties(text: str) -> dict[str, str]:
    return dict(
        (key.strip(), value.strip())
        for key, value in (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    )


def test_the_log4j2_file_keeps_spark_at_the_level_in_sparks_layout_on_standard_error() -> None:
    client = properties(log4j2_properties("warn", cluster_deploy=False))

    assert client["rootLogger.level"] == "warn"
    assert client["appender.console.target"] == "SYSTEM_ERR"
    assert client["appender.console.layout.pattern"] == "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"
    assert loggers(client) == {"org.apache.hadoop.util.NativeCodeLoader": "error"}
    # Its lines are read at their level.
    assert read_output_line("26/11/27 18:07:36 WARN Utils: x").level == logging.WARNING


def test_in_cluster_mode_the_submissions_loggers_stay_at_info_for_the_spark_providers_tracking() -> None:
    cluster = properties(log4j2_properties("ERROR", cluster_deploy=True))

    assert cluster["rootLogger.level"] == "error"
    assert loggers(cluster) == {"org.apache.spark.deploy": "info"}
    chosen_info = properties(log4j2_properties("info", cluster_deploy=True))
    assert chosen_info["rootLogger.level"] == "info"
    assert not [k for k in chosen_info if k.startswith("logger.")]
