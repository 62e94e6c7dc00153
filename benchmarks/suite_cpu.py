"""Where the test suite's CPU goes: CPU seconds by component for a pytest selection, and the wall
time that much CPU allows on this machine's cores.

Runs pytest (parallel workers as ``make test`` does) with a marker in its environment, which every
process it starts inherits: the xdist workers, the emulators (moto, fakesnow), the DAG runner and
the DAG runs it forks, spark-submit's JVMs, the job's Python driver and its workers. Every half
second it reads each marked process's CPU time from ``/proc`` and keeps the highest it saw; at the
end it prints CPU seconds per component, and the run's wall time against the shortest wall time
that CPU allows (CPU seconds divided by the cores): the ratio is how much of the machine the suite
kept busy. A component that dominates the CPU is what to make cheaper; a wall time far above the
floor is waiting (sleeps, polling, timeouts) that more workers can fill.

Linux only (``/proc``). Processes that live under half a second are missed.

    .venv/bin/python benchmarks/suite_cpu.py [-n WORKERS] [pytest arguments ...]
    .venv/bin/python benchmarks/suite_cpu.py -n 3 tests/integration/test_lost_lease_table.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = "SUITE_CPU_RUN"
TICKS = os.sysconf("SC_CLK_TCK")

# (component, substrings of the command line that name it), the first that matches wins.
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Snowflake emulator (fakesnow)", ("fakesnow_server",)),
    ("AWS emulator (moto)", ("moto_server", "moto.server")),
    ("Spark JVMs", ("java",)),
    ("PySpark workers", ("spark_daemon", "pyspark.daemon", "pyspark/worker", "pyspark.worker")),
    ("DAG runs (Airflow dag.test)", ("dag_runner", "run_dag", "run-dag-client")),
    ("Spark job drivers (Python)", ("spark_jobs", "_to_snowflake.py")),
    ("pytest workers", ("pytest", "xdist", "execnet", "exec(eval(sys.stdin")),
)


def component(cmdline: str) -> str:
    for name, needles in COMPONENTS:
        if any(needle in cmdline for needle in needles):
            return name
    return "other: " + (Path(cmdline.split(" ", 1)[0]).name or "?")


def _marked(pid: str, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read()
    except OSError:
        return False


def sample(marker: bytes, seen: dict[tuple[str, str], tuple[str, float]]) -> None:
    """Add each marked process's CPU seconds so far to ``seen`` (by pid and start time)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        key = (pid, fields[19])  # a pid is reused; with its start time it names one process
        cpu = (int(fields[11]) + int(fields[12])) / TICKS
        if key in seen:
            seen[key] = (seen[key][0], max(seen[key][1], cpu))
        elif _marked(pid, marker):
            # Named once, by its first command line (a worker renames itself later).
            seen[key] = (component(cmdline), cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--workers", type=int, default=(os.cpu_count() or 1) + 1)
    args, pytest_args = parser.parse_known_args()
    run_id = uuid.uuid4().hex
    env = {**os.environ, MARKER: run_id}
    seen: dict[tuple[str, str], tuple[str, float]] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            sample(f"{MARKER}={run_id}".encode(), seen)
            done.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(args.workers)]
    status = subprocess.call([*command, "--dist", "worksteal", *(pytest_args or ["tests"])], cwd=ROOT, env=env)
    wall = time.monotonic() - started
    done.set()
    watcher.join()

    totals: Counter[str] = Counter()
    for name, cpu in seen.values():
        totals[name] += cpu
    cpu_total = sum(totals.values())
    cores = os.cpu_count() or 1
    print(f"\n{'component':<34} {'CPU s':>9} {'share':>7}")
    for name, cpu in totals.most_common():
        print(f"{name:<34} {cpu:9.1f} {cpu / cpu_total:7.1%}")
    print(f"{'all':<34} {cpu_total:9.1f} {1:7.1%}")
    floor = cpu_total / cores
    print(f"\nwall {wall:.0f} s; the CPU above takes at least {floor:.0f} s on {cores} cores")
    print(f"wall / floor: {wall / floor:.2f} (1.00: every core busy all the time); pytest exit {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
