"""The Spark job's output as a person reads it in the Airflow task log.

spark-submit's output (stdout and stderr, merged) is forwarded to the task log line by line. Two
kinds of line carry a level there:

* the job's own messages, which the driver writes one text line each as
  ``kinesis-snowflake <LEVEL>: <text>`` (:func:`job_lines`, :func:`say`, :func:`say_exception`,
  :class:`JobLogFormatter`): ``warning`` and ``error`` lines that would otherwise land at INFO;
* Spark's own logging, in the log4j2 layout Spark uses by default and :func:`log4j2_properties`
  writes (``%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m``), whose level is the second word.

:func:`read_output_line` gives each line its level (INFO for anything else), and :class:`OutputTail`
keeps the last error lines a failed job is reported with. Spark's own logging is kept at
``spark.log.level`` (WARN unless the connector's ``spark.log_level`` says otherwise): the file of
:func:`log4j2_properties` sets it for the spark-submit JVM from its first line (the driver, in client
deploy mode), and Spark applies ``spark.log.level`` when the SparkContext starts, wherever the
driver runs.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any, TextIO

MARK = "kinesis-snowflake"
# Python's level names the job writes; the hook logs each at its level.
_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}
_JOB_LINE = re.compile(rf"^{MARK} (DEBUG|INFO|WARNING|ERROR|CRITICAL): ?(.*)$")

# Spark's log4j2 layout (its log4j2-defaults.properties), kept by the file this module writes.
SPARK_LAYOUT = "%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex"
_SPARK_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")
_SPARK_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}
# A line that goes on the record before it: a blank or indented line (a Java stack frame, a Python
# traceback's), a cause, an exception's first or last line (``org.apache.spark.api.python.PythonException:
# Traceback ...``, ``ValueError: ...``).
_CONTINUATION = re.compile(r"^(\s|$|Caused by: |Traceback \(most recent call last\)|[\w.$]*(Exception|Error)\b)")

# The levels SparkContext.setLogLevel and spark.log.level take.
SPARK_LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
DEFAULT_SPARK_LOG_LEVEL = "WARN"
SPARK_LOG_LEVEL_SETTING = "spark.log.level"
# Loggers the Spark provider's SparkSubmitHook reads in cluster deploy mode (the YARN application id,
# the Kubernetes driver pod and exit code): they stay at INFO in the submitting JVM.
SUBMISSION_LOGGERS = ("org.apache.spark.deploy",)
# Warnings of every run that ask nothing of anyone: Hadoop's native library is optional.
QUIET_LOGGERS = ("org.apache.hadoop.util.NativeCodeLoader",)
# The last error lines a failed job is reported with; the last lines at all when it wrote none.
TAIL_LINES = 25


def spark_log_level(value: Any) -> str:
    """``value`` as Spark writes a log level (upper case); :class:`ValueError` naming the levels if it is none."""
    level = value.strip().upper() if isinstance(value, str) else None
    if level not in SPARK_LOG_LEVELS:
        raise ValueError(f"must be a Spark log level: one of {', '.join(SPARK_LOG_LEVELS)}")
    return level


def job_lines(level: int, text: str) -> list[str]:
    """``text`` as the job writes it at ``level``: each of its lines marked with the level."""
    name = logging.getLevelName(level) if level in _LEVELS.values() else "ERROR" if level > logging.ERROR else "INFO"
    return [f"{MARK} {name}: {line}" for line in (text.splitlines() or [""])]


def say(level: int, text: str, file: TextIO | None = None) -> None:
    """Write ``text`` at ``level`` (:func:`job_lines`) to ``file``, standard error by default."""
    out = file if file is not None else sys.stderr
    for line in job_lines(level, text):
        print(line, file=out, flush=True)


def say_exception(file: TextIO | None = None) -> None:
    """Write the exception being handled, its traceback included, at ERROR (:func:`say`)."""
    say(logging.ERROR, traceback.format_exc().rstrip("\n"), file)


class JobLogFormatter(logging.Formatter):
    """Formats a log record as the job's lines at the record's level (:func:`job_lines`)."""

    def __init__(self) -> None:
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(job_lines(record.levelno, super().format(record)))


@dataclass(frozen=True)
class OutputLine:
    """One line of spark-submit's output: its level, and its text (without the job's mark)."""

    level: int
    text: str


def read_output_line(line: str, previous: OutputLine | None = None) -> OutputLine:
    """The level of one line of spark-submit's output: the job's mark, else Spark's layout, else INFO.

    A line that goes on a Spark record of WARN or above (a stack frame, ``Caused by:``, a traceback, a
    blank line) has the level of ``previous``, the line read before it.
    """
    if match := _JOB_LINE.match(line):
        return OutputLine(_LEVELS.get(match.group(1), logging.CRITICAL), match.group(2))
    if match := _SPARK_LINE.match(line):
        return OutputLine(_SPARK_LEVELS[match.group(1)], line)
    if previous is not None and previous.level >= logging.WARNING and _CONTINUATION.match(line):
        return OutputLine(previous.level, line)
    return OutputLine(logging.INFO, line)


class OutputTail:
    """The last lines of spark-submit's output, and the last of them at ERROR or above."""

    def __init__(self, size: int = TAIL_LINES) -> None:
        self._lines: deque[str] = deque(maxlen=size)
        self._errors: deque[str] = deque(maxlen=size)

    def add(self, line: OutputLine) -> None:
        if not line.text.strip():
            return
        self._lines.append(line.text)
        if line.level >= logging.ERROR:
            self._errors.append(line.text)

    @property
    def errors(self) -> list[str]:
        """The last lines at ERROR or above."""
        return list(self._errors)

    @property
    def last(self) -> list[str]:
        """The last lines at any level: what a job that failed before it could say anything wrote."""
        return list(self._lines)


def log4j2_properties(level: str, *, cluster_deploy: bool) -> str:
    """A log4j2 configuration for spark-submit's JVM: everything at ``level`` to standard error, in
    Spark's layout.

    :param level: a Spark log level (:func:`spark_log_level`).
    :param cluster_deploy: the driver runs on the cluster: the submission's own loggers
        (:data:`SUBMISSION_LOGGERS`) stay at INFO, which the Spark provider's hook reads.
    """
    level = spark_log_level(level).lower()
    lines = [
        f"# spark.log.level {level.upper()}, written for one spark-submit by airflow-provider-kinesis-snowflake",
        f"rootLogger.level = {level}",
        "rootLogger.appenderRef.stderr.ref = console",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.target = SYSTEM_ERR",
        "appender.console.layout.type = PatternLayout",
        f"appender.console.layout.pattern = {SPARK_LAYOUT}",
    ]
    named = [(name, "error") for name in QUIET_LOGGERS] if level == "warn" else []
    if cluster_deploy and level not in ("all", "trace", "debug", "info"):
        named += [(name, "info") for name in SUBMISSION_LOGGERS]
    for number, (name, logger_level) in enumerate(named):
        lines += [f"logger.l{number}.name = {name}", f"logger.l{number}.level = {logger_level}"]
    return "\n".join(lines) + "\n"
