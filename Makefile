# occupy: the two commands are `make demo` and `make test`; see README.md.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo test test-all mysql-driver bench serve lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

## demo: set up, migrate the example project on SQLite and replay the seeds' races
demo: venv
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py race_demo

## test: the whole suite; tests needing PostgreSQL, MariaDB or Redis skip when absent
test: venv
	$(PY) -m pytest

## mysql-driver: mysqlclient compiles against the MariaDB client headers
## (Debian: apt-get install libmariadb-dev pkg-config)
mysql-driver: venv
	$(PY) -m pip install --quiet -e ".[dev,mysql]"

## test-all: the whole suite with PostgreSQL, then MariaDB, as the default database;
## fails when a server is missing
test-all: mysql-driver
	OCCUPY_REQUIRE_SERVERS=1 OCCUPY_TEST_DB=postgresql $(PY) -m pytest
	OCCUPY_REQUIRE_SERVERS=1 OCCUPY_TEST_DB=mysql $(PY) -m pytest

## bench: occupy against its peers on the local servers, figures and ratios
bench: venv
	$(PY) -m bench

## serve: the example site (admin and API) at http://127.0.0.1:8000/
serve: venv
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py runserver 127.0.0.1:8000

lint: venv
	$(PY) -m ruff check occupy tests bench example_project

clean:
	rm -rf $(VENV) example_project/var .pytest_cache .ruff_cache
