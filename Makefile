# Two commands do everything on a fresh machine: `make train` and `make test`.
# Both set up the environment first (`make install`) when it is not there yet.
SHELL := /bin/bash
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
# The CPU build of torch; on GPU machines use environment.yaml (conda) instead.
TORCH_SPEC ?= torch==2.13.0
# Offline copies of the public data sets (laid out like ../shared/data) replace the
# download where there is no network; a checkout beside such a folder uses it.
ifneq ($(wildcard ../shared/data),)
export OODMOL_SOURCE_DIR ?= $(abspath ../shared/data)
endif

.PHONY: install train test lint bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

train: install
	$(PY) train.py $(ARGS)

test: install
	$(PY) -m pytest -q $(ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	$(PY) bench/splits.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
