#!/usr/bin/env bash
# Install the project into a fresh venv with the lowest versions its bounds allow for Airflow and the
# three providers it builds on, then run the unit tests and one DAG test against them.
#
#   scripts/lowest-versions.sh                 # unit tests + one ingest DAG test (make lowest)
#   scripts/lowest-versions.sh tests/unit -x   # other pytest arguments
#
# The lower bounds are read from pyproject.toml ([project] dependencies), so raising a bound there is
# what this script then tests. Every other dependency resolves to its newest allowed version, as a
# user's `pip install` would. Environment: LOWEST_VENV (the venv, recreated each run; default
# $TMPDIR/kinesis-snowflake-lowest), PYTHON (default python3.11), UV (default: uv on PATH, else .venv/bin/uv),
# EXTRA_REQUIREMENTS (more pins, space separated, e.g. "snowflake-connector-python==5.2.0").
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${LOWEST_VENV:-${TMPDIR:-/tmp}/kinesis-snowflake-lowest}
PYTHON=${PYTHON:-python3.11}
UV=${UV:-$(command -v uv || echo "$ROOT/.venv/bin/uv")}
LOWEST=(apache-airflow apache-airflow-providers-amazon apache-airflow-providers-apache-spark apache-airflow-providers-snowflake)
SHOWN="${LOWEST[*]} apache-airflow-core apache-airflow-task-sdk apache-airflow-providers-common-compat pyspark pyspark-client snowflake-connector-python fakesnow boto3 botocore cryptography protobuf pyarrow pydantic"
if [ $# -eq 0 ]; then
    set -- tests/unit "tests/integration/test_ingest_dag.py::test_two_runs_load_exactly_the_records_put"
fi
started=$(date +%s)

# "name==lower bound" for each of LOWEST, from pyproject.toml.
mapfile -t PINS < <("$PYTHON" - "$ROOT/pyproject.toml" "${LOWEST[@]}" <<'PY'
import re, sys, tomllib

dependencies = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
for name in sys.argv[2:]:
    spec = next(d for d in dependencies if re.match(rf"{re.escape(name)}\s*[<>=!~;\[]", d))
    lower = re.search(r">=\s*([^,;\s]+)", spec)
    if lower is None:
        sys.exit(f"pyproject.toml: {spec!r} has no lower bound (>=) to test")
    print(f"{name}=={lower.group(1)}")
PY
) || exit 2
# shellcheck disable=SC2206
PINS+=(${EXTRA_REQUIREMENTS:-})

echo "== lowest versions: ${PINS[*]}"
echo "== fresh venv: $VENV"
rm -rf "$VENV"
"$UV" venv --quiet --python "$PYTHON" "$VENV" || exit 2
if ! "$UV" pip install --quiet --python "$VENV/bin/python" -e "$ROOT[dev]" "${PINS[@]}"; then
    echo "== FAIL: the lowest versions do not install together (${PINS[*]})"
    exit 1
fi

echo "== installed"
for name in $SHOWN; do
    version=$("$VENV/bin/python" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: print('-')" "$name")
    printf '   %-45s %s\n' "$name" "$version"
done
"$UV" pip check --python "$VENV/bin/python"

cd "$ROOT" || exit 2
PYTHONPATH=$ROOT "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
status=$?
elapsed=$(( $(date +%s) - started ))
if [ $status -eq 0 ]; then verdict=PASS; else verdict=FAIL; fi
echo "== $verdict with ${PINS[*]} (pytest $*; ${elapsed}s in all)"
exit $status
