# The README's commands for trying jobclaims, `make demo` and `make test`, come
# first among its console commands, and both create the virtual environment
# they need on a fresh machine.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# pytest's arguments (tox.ini's default: -n auto --dist loadgroup --durations=30, a test
# database per xdist worker).
PYTEST_ARGS ?=

.PHONY: demo test lint docs matrix package clean

demo: $(VENV)/.demo-installed
	$(BIN)/python manage.py migrate --verbosity 0
	$(BIN)/python manage.py demo

# tox.ini's py-{sqlite,postgres,mariadb}: this Python, the newest Django it takes.
test: $(VENV)/.test-installed
	scripts/install-browser
	TOX=$(BIN)/tox scripts/test-databases py $(PYTEST_ARGS)

# ruff, then mypy with django-stubs, at the versions setup.cfg's lint extra pins.
lint: $(VENV)/.test-installed
	$(BIN)/python -m pip install --quiet -e ".[lint]"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The documentation site, into docs/_build/html, read afresh (-E) so no
# page escapes the checks. Warnings are errors, and
# nitpicky: a broken link, anchor or cross-reference fails the build.
docs: $(VENV)/.demo-installed
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	$(BIN)/python -m sphinx -E -W --keep-going -n -q -b html docs docs/_build/html


# tox.ini's env_list: every supported Django on every Python it supports.
matrix: $(VENV)/.test-installed
	TOX=$(BIN)/tox scripts/test-django-matrix

# Build the sdist and wheel, run a job from the installed wheel, and leave
# both in dist/ (what a project installs until jobclaims is on PyPI).
package:
	scripts/check-package

$(VENV)/.demo-installed: setup.cfg
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e . "django-environ>=0.11"
	touch $@

$(VENV)/.test-installed: $(VENV)/.demo-installed setup.cfg
	scripts/install-database-headers
	$(BIN)/python -m pip install --quiet -e ".[test,tox]"
	touch $@

# What a claim costs beside the database's own floor, on each database that
# answers (or the one DATABASE_URL names); see docs/performance.md.
.PHONY: bench
bench: $(VENV)/.test-installed
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	benchmarks/run-databases $(BIN)/python $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .tox .databases example_project/db.sqlite3 test-output
