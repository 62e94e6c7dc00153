#!/usr/bin/env bash
# The lower bounds of pyproject.toml's [project] dependencies and of its `spark-submit` extra (pyspark),
# tested: every direct dependency installed at its floor (the >= bound of its line), the rest resolved by
# uv with `--resolution lowest-direct` (every other package at its newest allowed, as a user's install
# takes it), in a fresh venv with the test tools (the `dev` extra); then the unit tests and the tests
# that run spark-submit on that lowest Spark (3.5): an ingest DAG test, a DynamoDB job's snapshot and
# stream batch, the job's logs through a real spark-submit, and a standalone cluster's (two connectors
# side by side, a DynamoDB sync's scheduled and continuous runs); `make test` runs them on Spark 4. A
# floor that cannot install with the others fails the check, with uv's reason and the versions
# lowest-direct picks on its own; a floor that installs but breaks a test fails it too. Either way the
# fix is a higher floor in pyproject.toml (or, for a Spark 3.5 failure, a fix in the job).
#
#   scripts/lowest-versions.sh                 # unit tests + the Spark-running tests above (make lowest)
#   scripts/lowest-versions.sh tests/unit -x   # other pytest arguments
#
# At the end it prints the result as a markdown table (the one docs/install.md shows). Environment:
# LOWEST_VENV (the venv, recreated each run; default $TMPDIR/kinesis-snowflake-lowest), PYTHON (default
# python3.11), UV (default: uv on PATH, else .venv/bin/uv), PYTEST_WORKERS (parallel test workers; default
# one more than the cores, as make test), LOWEST_REPORT (also write the table to this file),
# EXTRA_REQUIREMENTS (versions that replace the floor of the same package, space separated, e.g.
# "orjson==3.11.6", to try one; the floor check then fails for that package, the tests still run).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${LOWEST_VENV:-${TMPDIR:-/tmp}/kinesis-snowflake-lowest}
PYTHON=${PYTHON:-python3.11}
UV=${UV:-$(command -v uv || echo "$ROOT/.venv/bin/uv")}
DYNAMODB_JOB_TEST=test_a_snapshot_of_three_segments_and_a_stream_batch_run_as_spark_tasks_and_the_table_equals_a_scan
if [ $# -eq 0 ]; then
    set -- tests/unit "tests/integration/test_ingest_dag.py::test_two_runs_load_exactly_the_records_put" \
        "tests/integration/core/test_dynamodb_job.py::$DYNAMODB_JOB_TEST" \
        tests/integration/hooks/test_spark_logs.py tests/integration/test_spark_cluster.py
fi
# The extras whose floors are tested with the dependencies' (pyproject.toml's optional-dependencies).
EXTRAS=(spark-submit databricks openlineage docs)
started=$(date +%s)

echo "== fresh venv: $VENV"
rm -rf "$VENV"
"$UV" venv --quiet --python "$PYTHON" "$VENV" || exit 2

# Each direct dependency as "name floor [extra]" (the >= bound of its line in pyproject.toml's dependencies,
# then in each extra of EXTRAS).
mapfile -t DIRECT < <("$PYTHON" - "$ROOT/pyproject.toml" "${EXTRAS[@]}" <<'PY'
import re
import sys
import tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
specs = [(spec, "") for spec in project["dependencies"]]
for extra in sys.argv[2:]:
    specs += [(spec, extra) for spec in project["optional-dependencies"][extra]]
problems = []
for spec, extra in specs:
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", spec).group(0)
    floor = re.search(r">=\s*([^,;\s]+)", spec)
    where = f"the {extra!r} extra's dependency" if extra else "dependency"
    if floor is None:
        problems.append(f"pyproject.toml: {where} {spec!r} has no lower bound (>=); give it the version tested here")
    else:
        print(name, floor.group(1), extra)
if problems:
    sys.exit("\n".join(problems))
PY
) || exit 2
EXTRA_ARGS=()
for extra in "${EXTRAS[@]}"; do EXTRA_ARGS+=(--extra "$extra"); done
# EXTRA_REQUIREMENTS replaces a floor (to try another version of a package); the floor check then fails.
: >"$VENV/floors.txt"
for entry in "${DIRECT[@]}"; do
    read -r name floor _ <<<"$entry"
    pin="$name==$floor"
    for extra in ${EXTRA_REQUIREMENTS:-}; do
        if [ "$(echo "${extra%%[=<>!~]*}" | tr 'A-Z_.' 'a-z--')" = "$(echo "$name" | tr 'A-Z_.' 'a-z--')" ]; then pin=$extra; fi
    done
    echo "$pin" >>"$VENV/floors.txt"
done

# What the resolver's lowest-direct strategy picks on its own: shown next to the floors. It holds each
# direct dependency at the lowest version it can, but it may pick a higher one than a floor that does
# install (its preference for the newest transitive versions decides which way a choice goes).
"$UV" pip compile --quiet --no-header --no-annotate --resolution lowest-direct --python "$VENV/bin/python" \
    "${EXTRA_ARGS[@]}" "$ROOT/pyproject.toml" -o "$VENV/lowest-direct.txt" || : >"$VENV/lowest-direct.txt"

echo "== resolving pyproject.toml's dependencies with --resolution lowest-direct, each direct one at its floor"
if ! "$UV" pip compile --quiet --no-header --no-annotate --resolution lowest-direct --python "$VENV/bin/python" \
    "${EXTRA_ARGS[@]}" "$ROOT/pyproject.toml" -c "$VENV/floors.txt" -o "$VENV/floors-resolved.txt"; then
    echo "== FAIL: the floors do not install together (uv's reason above). Lowest-direct alone resolves to:"
    grep -i -E "^($(cut -d= -f1 "$VENV/floors.txt" | paste -sd'|'))==" "$VENV/lowest-direct.txt" | sed 's/^/   /'
    echo "   Raise the floors it names in pyproject.toml to versions that install together."
    exit 1
fi

echo "== installing the project, its test tools and $(paste -sd' ' "$VENV/floors.txt")"
# The floors as constraints; everything else at its newest allowed (the test tools too: moto, fakesnow).
if ! "$UV" pip install --quiet --python "$VENV/bin/python" -c "$VENV/floors.txt" -e "$ROOT[dev,$(IFS=,; echo "${EXTRAS[*]}")]"; then
    echo "== FAIL: the test tools do not install with the floors ($(paste -sd' ' "$VENV/floors.txt"))"
    exit 1
fi
"$UV" pip check --python "$VENV/bin/python"

# Each direct dependency: its floor, what lowest-direct alone picks, and what is installed (the floor).
floors_status=0
FLOOR_REPORT=$("$VENV/bin/python" - "$VENV/lowest-direct.txt" "${DIRECT[@]}" <<'PY'
import importlib.metadata
import re
import sys

from packaging.utils import canonicalize_name
from packaging.version import Version

alone = {}
for line in open(sys.argv[1]).read().splitlines():
    match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
    if match:
        alone[canonicalize_name(match.group(1))] = match.group(2)
failed = False
for entry in sys.argv[2:]:
    name, floor, *extra = entry.split()
    label = f"{name} ([{extra[0]}] extra)" if extra else name
    installed = importlib.metadata.version(name)
    if Version(installed) != Version(floor):
        verdict, failed = f"installed {installed}, not the floor", True
    else:
        verdict = "ok"
    print(f"{label}\t{floor}\t{alone.get(canonicalize_name(name), '-')}\t{installed}\t{verdict}")
sys.exit(1 if failed else 0)
PY
) || floors_status=1
echo "== direct dependencies: name, floor in pyproject.toml, lowest-direct alone, installed, check"
printf '%s\n' "$FLOOR_REPORT" | awk -F'\t' '{ printf "   %-40s >=%-12s %-12s %-12s %s\n", $1, $2, $3, $4, $5 }'

cd "$ROOT" || exit 2
WORKERS=${PYTEST_WORKERS:-$(( $(nproc 2>/dev/null || echo 1) + 1 ))}
PYTHONPATH=$ROOT "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n "$WORKERS" --dist worksteal "$@"
tests_status=$?
elapsed=$(( $(date +%s) - started ))
if [ $tests_status -eq 0 ] && [ $floors_status -eq 0 ]; then verdict=PASS; else verdict=FAIL; fi

{
    echo "| direct dependency | floor in pyproject.toml (installed and tested) | lowest-direct alone picks |"
    echo "| --- | --- | --- |"
    printf '%s\n' "$FLOOR_REPORT" | awk -F'\t' '{
        note = ($5 == "ok") ? "" : " (" $5 ")"
        printf "| %s | %s%s | %s |\n", $1, $2, note, $3
    }'
    echo
    echo "**$verdict** on $(date -u +%Y-%m-%d): $("$VENV/bin/python" -c 'import platform; print("Python", platform.python_version())'), $("$UV" --version);" \
        "pytest $* (tests exit $tests_status, floors $( [ $floors_status -eq 0 ] && echo reached || echo "not reached" )); ${elapsed}s in all."
} >"$VENV/lowest-report.md"
echo "== result (markdown)"
cat "$VENV/lowest-report.md"
if [ -n "${LOWEST_REPORT:-}" ]; then cp "$VENV/lowest-report.md" "$LOWEST_REPORT"; fi
echo "== $verdict (pytest $*; ${elapsed}s in all)"
[ $verdict = PASS ]
