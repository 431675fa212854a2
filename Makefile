# occupy: the two commands are `make demo` and `make test` (`make test-slow` for the
# slow tests); see README.md.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help venv demo test test-slow test-all mysql-driver mysql-driver-required dist databases bench \
	bench-scale faults serve lint layers messages docs docs-screenshots clean clean-install

## help: list the targets, from the `## target:` comments of this Makefile
help:
	@awk 'function flush(  n, i, words, line) { if (name == "") return; \
	    n = split(text, words, " "); line = sprintf("  %-22s", name); \
	    for (i = 1; i <= n; i++) { if (length(line) + length(words[i]) > 99) { print line; \
	      line = sprintf("  %-22s", "") } line = line " " words[i] } print line; name = "" } \
	  /^## [a-z-]+:/ { flush(); name = $$2; sub(/:$$/, "", name); text = $$0; \
	    sub(/^## [a-z-]+: */, "", text); next } \
	  /^## / && name != "" { sub(/^## /, ""); text = text " " $$0; next } \
	  { flush() } END { flush() }' $(MAKEFILE_LIST)

# The demo's venv holds what the example project imports (DRF, django-redis, Django's
# tasks framework's backport on 5.2) and Swagger UI's files for `make serve` offline;
# the development venv adds the test and lint tools.
# Both are .venv: `make test` after `make demo` only adds what the demo did not install.
DEMO_STAMP := $(VENV)/.demo-installed
DEMO_EXTRAS := drf,redis,tasks

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	@echo "setting up $(VENV): occupy and its development tools (a minute or two, once)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml | $(PY)
	@echo "setting up $(VENV): occupy and what the example project imports (once)"
	$(PY) -m pip install --quiet -e ".[$(DEMO_EXTRAS)]" "drf-spectacular-sidecar>=2024.1"
	touch $(DEMO_STAMP)

venv: $(STAMP)

## demo: set up, migrate the example project on SQLite and replay the races between writers
demo: $(DEMO_STAMP)
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py race_demo

## test: the suite but the tests marked slow (`make test-slow` runs those, `make test
## SLOW=1` everything at once) on every server that answers; the tests needing PostgreSQL,
## MariaDB or Redis skip when it does not, and the summary names each server skipped
test: venv mysql-driver
	@$(PY) -m pytest $(if $(SLOW),,-m "not slow"); status=$$?; \
	  [ -n "$(SLOW)" ] || echo "make test: the tests marked slow were left out;" \
	    "make test-slow runs them (make test SLOW=1: everything)"; exit $$status

## test-slow: the tests marked slow (the race demo, the 100,000-row sweep, the API fuzz,
## the admin heartbeat and takeover race, the etcd failover and Redis restart runs, the
## PostgreSQL wake-up soak); CI runs them after `make test`
test-slow: venv mysql-driver
	$(PY) -m pytest -m slow

## mysql-driver: install mysqlclient (the MariaDB driver) where the MariaDB or MySQL client
## headers it compiles against are found; otherwise say how to get them. It is compiled
## here, never taken from a wheel cache: a wheel built while the headers were half
## installed imports with "undefined symbol" (a broken install is rebuilt the same way)
MYSQL_HEADERS := pkg-config --exists libmariadb 2>/dev/null || pkg-config --exists mysqlclient \
	2>/dev/null || command -v mysql_config >/dev/null 2>&1
mysql-driver: venv
	@if $(PY) -c "import MySQLdb" 2>/dev/null; then :; \
	elif $(MYSQL_HEADERS); then \
	  echo "installing mysqlclient, the MariaDB driver"; \
	  $(PY) -m pip install --quiet --no-cache-dir --force-reinstall --no-deps \
	    --no-binary mysqlclient "mysqlclient>=2.2" && $(PY) -c "import MySQLdb"; \
	else \
	  echo "mysqlclient (the MariaDB driver) is not installed: it compiles against the"; \
	  echo "MariaDB client headers, which are not here. Debian/Ubuntu: apt-get install"; \
	  echo "libmariadb-dev pkg-config; Fedora: dnf install mariadb-connector-c-devel"; \
	  echo "pkgconf; macOS: brew install mariadb-connector-c pkg-config. Then run make"; \
	  echo "test again. Until then the MariaDB tests skip."; \
	fi

## mysql-driver-required: the driver, or fail (make test-all runs on MariaDB)
mysql-driver-required: mysql-driver
	@$(PY) -c "import MySQLdb" 2>/dev/null || { \
	  echo "make test-all needs mysqlclient (see above)" >&2; exit 1; }

## test-all: the suite with PostgreSQL, then MariaDB, as the default database, slow tests
## included; fails when a server is missing. The Redis, cache, file and etcd backends
## (their failover runs too), the Celery storm (its locks are in PostgreSQL or Redis
## whatever the default database), the example site (its own SQLite), the user project
## (tests/userproject: its own databases) and the browser's view of the admin (the admin's
## requests and queries run here too, over plain requests) ran in `make test` and
## `make test-slow` and are skipped here.
STORE_TESTS := --ignore=tests/backends/test_redis.py --ignore=tests/backends/test_redis_servers.py \
	--ignore=tests/backends/test_cache.py --ignore=tests/backends/test_file.py \
	--ignore=tests/example --ignore=tests/admin/test_browser.py --ignore=tests/test_userproject.py \
	--ignore=tests/admin/test_browser_leases.py --ignore=tests/backends/test_etcd.py \
	--ignore=tests/backends/test_etcd_failover.py --ignore=tests/backends/test_redis_sentinel.py \
	--ignore=tests/backends/test_redis_cluster.py --ignore=tests/backends/test_redis_replication.py \
	--ignore=tests/celery/test_storm.py
test-all: mysql-driver-required
	OCCUPY_REQUIRE_SERVERS=1 OCCUPY_TEST_ONLY_DB=1 OCCUPY_TEST_DB=postgresql $(PY) -m pytest $(STORE_TESTS)
	OCCUPY_REQUIRE_SERVERS=1 OCCUPY_TEST_ONLY_DB=1 OCCUPY_TEST_DB=mysql $(PY) -m pytest $(STORE_TESTS)

## clean-install: occupy as users install it (.ci/clean_install.py): the wheel built once,
## then for Django 5.2 and 6.1 and each extra a fresh venv with only that extra, a project
## from `django-admin startproject`, the public modules imported, `manage.py check` and the
## extra's how-to run (PostgreSQL, Redis and RabbitMQ on 127.0.0.1; etcd's on a member of
## its own, skipped without etcd unless CI=true or OCCUPY_REQUIRE_SERVERS=1); CI runs it.
## CLEAN_INSTALL_ARGS="--django 6.1 --extras celery" picks cells
clean-install: venv
	$(PY) .ci/clean_install.py $(CLEAN_INSTALL_ARGS)

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
## benchmarks last: occupy's DRF mixins against plain DRF with one client, then several
## client processes incrementing one object through gunicorn, which the bench extra brings;
## then the one-client DRF benchmark by instruction counts, under valgrind, a few minutes);
## it writes nothing into docs/ (`python -m bench telemetry --draw PATH` draws the
## telemetry how-to's picture)
bench: venv databases
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	$(PY) -m bench
	$(PY) -m bench http --instructions

## bench-scale: how occupy's cost grows (live claims, queues, many keys, footprint,
## sweeps) on every store that answers; plots and CSV in bench/results/. Well under an
## hour; `make bench-scale SCALE_ARGS=--quick` takes a few minutes.
bench-scale: mysql-driver databases
	$(PY) -m pip install --quiet -e ".[dev,mysql,bench]"
	$(PY) -m bench scale $(SCALE_ARGS)

## faults: the fault soak (docs/benchmarks/faults.md): private PostgreSQL, MariaDB and Redis
## servers in a temporary directory on ports from 16700, workers in acquire, fenced read,
## fenced write, release loops on every store while servers restart, connections are
## killed, holders are paused past their ttl and killed; fails on any overlap, lost
## increment or fence violation. About 20 minutes; FAULTS_ARGS=--short: about 2 (CI).
faults: mysql-driver
	$(PY) -m bench faults $(FAULTS_ARGS)

## serve: the example site (front page, API, schema, Swagger UI, admin) on SQLite, at
## 127.0.0.1:8000
serve: $(DEMO_STAMP)
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py runserver 127.0.0.1:8000

## dist: build the sdist and the wheel into dist/, and check them (twine's metadata
## check, and that the wheel carries the migrations, templates, static files and py.typed)
dist: venv
	# A stale egg-info (the editable install's) would add its file list to the sdist.
	rm -rf dist build django_occupy.egg-info
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*
	$(PY) .ci/check_dist.py dist

## lint: ruff format --check, ruff check (complexity at most 10 outside the backends, no
## print, lazy logging), no module of occupy over 400 lines, the messages of the commits
## since main (Django's form), mypy (strict, with django-stubs), the import-linter contracts
## (.importlinter: the layers, concrete backends only under occupy.backends, no cycles) and the
## layers picture of docs/development.md (drawn from the imports: `make layers` redraws it)
COMMITS_SINCE ?= main
lint: venv
	$(PY) -m ruff format --check occupy tests bench example_project noxfile.py docs/conf.py \
	  manage.py .ci
	$(PY) -m ruff check occupy tests bench example_project .ci
	$(PY) .ci/module_size.py
	$(PY) .ci/commit_msg.py --since $(COMMITS_SINCE)
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	$(PY) .ci/layers.py --check

## messages: bring occupy's source catalog, occupy/locale/en/LC_MESSAGES/django.po, up to
## date with the messages the code and templates mark for translation (needs GNU gettext)
messages: venv
	cd occupy && $(abspath $(PY)) -m django makemessages -l en --add-location=file

## layers: redraw the layers picture of docs/development.md from the imports
layers: venv
	$(PY) .ci/layers.py --write

## docs-screenshots: copy the admin screenshots the docs show from the browser tests'
## last run (tests/.screenshots/) into docs/images/admin-*.png
DOCS_SCREENSHOTS := read-only-banner lease-lost conflict-page changelist-column occupations \
	lease-released-edit-again store-down-save
docs-screenshots:
	for name in $(DOCS_SCREENSHOTS); do \
	  cp tests/.screenshots/$$name.png docs/images/admin-$$name.png || exit 1; done

## docs: the documentation site (Sphinx, furo) into docs/_build/html; any warning fails
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY) -m sphinx -E -W --keep-going -b html docs docs/_build/html

clean:
	rm -rf $(VENV) example_project/var .pytest_cache .ruff_cache docs/_build .nox dist build
