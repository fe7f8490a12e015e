# dpngram — the two commands: `make demo` and `make test`. Each does the whole set-up first
# (idempotent: a second run skips finished steps in seconds).
#
#   make setup        venv with dpngram[dev] pinned by constraints-3.11.txt, Debian build packages,
#                     KenLM lmplz/build_binary in a per-machine cache shared by all clones
#   make test         setup, then the test suite (pytest, 2 workers)
#   make demo         setup, then `dpngram demo`
#   make bench        setup, then make test-platform and every benchmarks/*_bench.py (resumable)
#   make test-platform  setup, then docker/compose.yaml's two-worker platform without Docker (~5 min)
#                     (PostgreSQL, Redis, S3 on moto, Celery Airflow; tests/test_platform.py)
#   make test-postgres  the old name of make test-platform
#   make lint         ruff check
#   make constraints  re-freeze constraints-3.11.txt from the venv
#   make clean        remove .venv and runtime state (keeps the KenLM cache)

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

VENV        := .venv
PY          := $(VENV)/bin/python
CONSTRAINTS := constraints-3.11.txt
STAMP       := $(VENV)/.installed

# KenLM tools: built from the same sdist as the Python module, with the same max order
# (lm/kenlm_bin.py mirrors this path).
KENLM_VERSION   := 0.3.0
KENLM_MAX_ORDER := 6
CACHE_HOME      := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)
KENLM_PREFIX    := $(CACHE_HOME)/dpngram/kenlm-$(KENLM_VERSION)-order$(KENLM_MAX_ORDER)
KENLM_BIN       := $(KENLM_PREFIX)/bin
KENLM_TOOLS     := $(KENLM_BIN)/lmplz $(KENLM_BIN)/build_binary

export DPNGRAM_KENLM_BIN := $(KENLM_BIN)
export KENLM_VERSION KENLM_MAX_ORDER KENLM_PREFIX

# Tests run on 2 workers; a test file stays on one worker (--dist loadfile), so per-file fixtures
# (Airflow homes, DuckDB files) are never shared across processes. Override with PYTEST_ARGS=...
PYTEST_ARGS ?= -n 2 --dist loadfile --timeout 1200

.PHONY: help setup test test-platform test-postgres demo bench lint constraints clean

help:
	@sed -n 's/^#   make /  make /p' $(MAKEFILE_LIST)

# `make -s print-KENLM_BIN` shows a variable (used by tests/test_setup.py).
print-%:
	@echo '$($*)'

setup: $(STAMP) $(KENLM_TOOLS)

$(STAMP): pyproject.toml $(CONSTRAINTS) scripts/make_venv.sh
	bash scripts/make_venv.sh $(VENV) $(CONSTRAINTS)

# No file prerequisites: the cache is shared by clones with different checkout times; only the
# tools' existence matters. The venv provides the pip used to download the sdist.
$(KENLM_TOOLS): | $(STAMP)
	bash scripts/system_deps.sh
	KENLM_PIP_PYTHON=$(PY) bash scripts/build_kenlm.sh

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

demo: setup
	$(VENV)/bin/dpngram demo

# The production platform (docker/compose.yaml: CeleryExecutor, two workers sharing only S3 and
# PostgreSQL, the ledger on PostgreSQL) run for real without Docker; `make test` skips it
# (tests/conftest.py), CI runs it as a step of its own (.ci/run), `make bench` runs it too.
# (bench runs the same command, not $(MAKE) test-platform: `make -n bench` must stay a dry run.)
# system_deps.sh first: it installs Debian's postgresql and redis-server if missing (a no-op check
# otherwise). -s: the test prints its timings line.
PLATFORM_TEST = bash scripts/system_deps.sh && $(PY) -m pytest -m platform -s --timeout 1500 tests/test_platform.py
test-platform: setup
	$(PLATFORM_TEST)

test-postgres: test-platform

# Every benchmark runs (with no arguments) even if an earlier one fails; the failures are listed.
# The runner (benchmarks/run_all.py: the platform test, then benchmarks/*_bench.py) resumes an
# interrupted run on the same benchmarked code; RESTART=1 starts over, BENCH_ARGS=--list shows the
# progress, RESUME=RECORD goes on from a bench_run.json record (a run begun on another machine).
bench: setup
	$(PY) benchmarks/run_all.py --platform-command '$(PLATFORM_TEST)' $(if $(RESTART),--restart) $(if $(RESUME),--resume-from $(RESUME)) $(BENCH_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

constraints: $(STAMP)
	@{ sed -n '/^#/p' $(CONSTRAINTS); \
	   $(VENV)/bin/uv pip freeze --python $(PY) --exclude-editable | grep -v -i '^dpngram[=@ ]'; \
	 } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	@echo "re-froze $(CONSTRAINTS): $$(grep -c -v '^#' $(CONSTRAINTS)) pins"

clean:
	rm -rf $(VENV) .airflow .dpngram demo-output benchmarks/.data .pytest_cache .ruff_cache \
	       dpngram.egg-info build dist
	find . -name __pycache__ -type d -prune -not -path './.git/*' -exec rm -rf {} +
