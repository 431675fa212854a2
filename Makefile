# occupy: the two commands are `make demo` and `make test`; see README.md.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv demo test test-all mysql-driver databases bench bench-scale serve lint clean

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

## test-all: the suite with PostgreSQL, then MariaDB, as the default database; fails
## when a server is missing. The Redis, cache and file backends, the example site (its
## own SQLite) and the browser's view of the admin (the admin's requests and queries run
## here too, over plain requests) ran in `make test` and are skipped here.
STORE_TESTS := --ignore=tests/backends/test_redis.py --ignore=tests/backends/test_redis_servers.py \
	--ignore=tests/backends/test_cache.py --ignore=tests/backends/test_file.py \
	--ignore=tests/example --ignore=tests/admin/test_browser.py
test-all: mysql-driver
	OCCUPY_REQUIRE_SERVERS=1 OCCUPY_TEST_ONLY_DB=1 OCCUPY_TEST_DB=postgresql $(PY) -m pytest $(STORE_TESTS)
	OCCUPY_REQUIRE_SERVERS=1 OCCUPY_TEST_ONLY_DB=1 OCCUPY_TEST_DB=mysql $(PY) -m pytest $(STORE_TESTS)

## databases: create the `occupy` databases the benchmarks use, on each server that is up
## (the tests create their own)
databases:
	@if pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then \
	  psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'occupy'" \
	    | grep -q 1 || psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE occupy"; \
	else echo "PostgreSQL is not answering on 127.0.0.1:5432; its benchmarks will skip"; fi
	@if mariadb-admin -h 127.0.0.1 -uroot ping >/dev/null 2>&1; then \
	  mariadb -h 127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS occupy CHARACTER SET utf8mb4"; \
	else echo "MariaDB is not answering on 127.0.0.1:3306; its benchmarks will skip"; fi

## bench: occupy against its peers on the local servers, figures and ratios (the HTTP
## benchmark, occupy's DRF mixins against plain DRF, last)
bench: venv databases
	$(PY) -m bench

## bench-scale: how occupy's cost grows (live claims, queues, many keys, footprint,
## sweeps) on every store that answers; plots and CSV in bench/results/. Well under an
## hour; `make bench-scale SCALE_ARGS=--quick` takes a few minutes.
bench-scale: mysql-driver databases
	$(PY) -m pip install --quiet -e ".[dev,mysql,bench]"
	$(PY) -m bench scale $(SCALE_ARGS)

## serve: the example site (admin and API) at http://127.0.0.1:8000/
serve: venv
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py runserver 127.0.0.1:8000

lint: venv
	$(PY) -m ruff check occupy tests bench example_project

clean:
	rm -rf $(VENV) example_project/var .pytest_cache .ruff_cache
