# Two commands do everything: `make run` and `make test`. Both bootstrap .venv from the lock.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint venv services browser bench clean

# The install also builds the one C part (setup.py: analysis/diagnosis/_sweep.c), so it needs a C compiler.
$(STAMP): pyproject.toml constraints.txt setup.py analysis/diagnosis/_sweep.c
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found (set PYTHON=...)"; exit 2; }
	@bash scripts/ensure-cc.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/goodput serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python scripts/unused_code.py

services:
	@bash scripts/ensure-services.sh

browser:
	@bash scripts/ensure-browser.sh

# Two pytest-xdist workers (PYTEST_WORKERS=0 runs in one process); the browser tests share one service, so
# they form one group on one worker (--dist loadgroup).
PYTEST_WORKERS ?= 2

test: $(STAMP) lint services browser
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/analyze.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache build *.egg-info
