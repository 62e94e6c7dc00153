# The README's two commands: `make demo` and `make test`. Both set up .venv on first use.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Parallel test workers (pytest-xdist): one more than the cores by default. Much of a test's time is spent
# waiting for the processes it started (spark-submit, Airflow, the emulators) to start or answer: with
# one worker per core a core sits idle meanwhile; a third worker on two cores kept both busy and took the
# suite from 13.5 to 11.7 minutes, a fourth gained nothing more.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); echo $$((n + 1)))

.PHONY: demo test lint typecheck unit docs install clean check-java check-chromium lowest

$(PY):
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)

# Reinstall only when the project's dependencies change. uv (from PyPI, into the venv) resolves and
# installs the same packages as pip in a fraction of the time; pip remains the fallback. Like pip, it
# compiles the bytecode at install: the tests start many Python processes at once, each would compile it.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet 'uv>=0.4'
	$(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) -e '.[dev]' || $(PY) -m pip install --quiet -e '.[dev]'
	@# One Spark distribution: the Apache Spark provider 6.x (installed here before it was bounded < 6) brought
	@# pyspark-client, whose files overwrite pyspark's at another version. Remove it, then restore pyspark's files.
	@if $(PY) -m pip show pyspark-client >/dev/null 2>&1; then \
		version=$$($(PY) -c "import importlib.metadata as m; print(m.version('pyspark'))"); \
		echo "Removing pyspark-client and reinstalling pyspark $$version"; \
		$(PY) -m pip uninstall --quiet -y pyspark-client && \
		{ $(VENV)/bin/uv pip install --quiet --python $(PY) --reinstall-package pyspark --no-deps "pyspark==$$version" || \
		  $(PY) -m pip install --quiet --force-reinstall --no-deps "pyspark==$$version"; }; \
	fi
	$(PY) -m airflow_kinesis_snowflake.environment
	touch $(STAMP)

install: $(STAMP)

# System packages (scripts/system-deps.sh): installed from Debian's packages when missing and this
# machine can (root, apt-get); otherwise the script names what to install. spark-submit needs Java;
# the lag page's test loads the page in a real headless Chromium.
check-java:
	@scripts/system-deps.sh java

check-chromium:
	@scripts/system-deps.sh chromium

# `make demo PLATFORM=emr_serverless`: the connectors' Spark jobs run as job runs of the emulated EMR
# Serverless (tests/emulators/emr_serverless.py) instead of spark-submit on this machine.
PLATFORM ?= spark_submit

demo: install check-java
	$(PY) demo/run_demo.py --platform $(PLATFORM)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy

unit: install
	$(VENV)/bin/pytest tests/unit -q

# The documentation site (mkdocs.yml: docs/, the README and CHANGELOG, API pages from the docstrings),
# built with warnings as errors: a broken link, anchor or reference fails. NO_MKDOCS_2_WARNING quiets
# the Material theme's banner about its successor.
MKDOCS := env NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
SITE ?= site
docs: install
	$(MKDOCS) --site-dir $(SITE)

# Lint, type checks and the docs build run beside the tests (at a lower priority, in the idle moments of
# the tests' start-up), their output kept in .test-work/checks/ and printed after the tests' summary; the
# target fails when any of the four fails.
CHECKS := .test-work/checks
test: install check-java check-chromium
	@mkdir -p $(CHECKS)
	@{ nice -n 10 $(VENV)/bin/ruff check . && nice -n 10 $(VENV)/bin/ruff format --check .; } >$(CHECKS)/lint.log 2>&1 & lint=$$!; \
	nice -n 10 $(VENV)/bin/mypy >$(CHECKS)/typecheck.log 2>&1 & types=$$!; \
	nice -n 10 $(MKDOCS) --site-dir $(CHECKS)/site >$(CHECKS)/docs.log 2>&1 & docs=$$!; \
	$(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist worksteal; tests=$$?; \
	wait $$lint; lint_status=$$?; wait $$types; types_status=$$?; wait $$docs; docs_status=$$?; \
	echo "--- make lint (ruff check, ruff format --check): exit $$lint_status"; cat $(CHECKS)/lint.log; \
	echo "--- make typecheck (mypy): exit $$types_status"; cat $(CHECKS)/typecheck.log; \
	echo "--- make docs (mkdocs build --strict): exit $$docs_status"; cat $(CHECKS)/docs.log; \
	echo "--- make test: pytest exit $$tests, lint exit $$lint_status, typecheck exit $$types_status, docs exit $$docs_status"; \
	test $$tests -eq 0 && test $$lint_status -eq 0 && test $$types_status -eq 0 && test $$docs_status -eq 0

# The lower bounds, tested: in a fresh venv, every direct dependency (and the spark-submit extra's pyspark,
# Spark 3.5) at its floor in pyproject.toml and the rest resolved by uv's --resolution lowest-direct; then
# the unit tests and the tests that run spark-submit (scripts/lowest-versions.sh; minutes, so not part of
# make test: .ci/run runs it after make test).
lowest: install check-java
	UV=$(CURDIR)/$(VENV)/bin/uv PYTHON=$(PYTHON) scripts/lowest-versions.sh

clean:
	rm -rf .demo .test-work .pytest_cache .mypy_cache .ruff_cache site
