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

.PHONY: install train test test-fast test-slurm lint docs docs-serve bench gpu-pack gpu-check \
	gpu-check-dry chemprop-env bench-chemprop gotennet-env \
	test-gotennet-reference bench-gotennet mace-env test-mace-reference bench-mace \
	painn-et-env test-painn-et-reference bench-painn-et clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

train: install
	$(PY) train.py $(ARGS)

# pytest-xdist workers for the suite, one test file per worker. The tests of tests/alone
# (marked `alone`) measure the memory their own process takes, which the tests before them
# in a worker would disturb: they run in a pytest process of their own that collects that
# folder only (or ARGS), started beside the workers; their report follows the workers'. A
# pass that selects no test (exit 5: ARGS naming files without such tests) is no failure.
TEST_WORKERS ?= 2

# $(call suite,MARKS): the tests MARKS selects (empty: all), in the two processes above; the
# workers' report names the slowest tests, where the suite's time goes. The project's own
# modules are compiled to bytecode first, as pip does for installed packages: where
# PYTHONDONTWRITEBYTECODE is set (containers often set it), each of the suite's hundred
# processes would compile them again.
define suite
	@$(PY) -m compileall -q -j 0 src tests bench >/dev/null
	@status=0; alone_log=$$(mktemp); \
	$(PY) -m pytest -q -n 0 -p no:cacheprovider -m "$(1) alone" $(or $(ARGS),tests/alone) \
		>$$alone_log 2>&1 & alone=$$!; \
	trap 'kill $$alone 2>/dev/null; rm -f $$alone_log' EXIT; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 -m "$(1) not alone" $(ARGS) || \
		{ code=$$?; [ $$code -eq 5 ] || status=$$code; }; \
	wait $$alone; code=$$?; \
	if [ $$code -ne 5 ]; then \
		echo "--- the tests of tests/alone, in a process of their own beside the others:"; \
		cat $$alone_log; [ $$code -eq 0 ] || status=$$code; \
	fi; \
	exit $$status
endef

test: install
	$(call suite,)

# the edit loop: everything but the slow tests (tests/e2e, and those marked slow)
test-fast: install
	$(call suite,not slow and)

# The SLURM tests on a real single-node cluster (scripts/slurm_local.sh, as root):
# installs slurm-wlm and munge where missing, starts the cluster unless it runs already,
# runs tests/e2e/test_slurm.py against it, and stops it again if it started it here.
test-slurm: install
	scripts/slurm_local.sh install
	@started=0; \
	if ! scripts/slurm_local.sh status >/dev/null 2>&1; then \
		scripts/slurm_local.sh start && started=1 || exit 1; \
	fi; \
	eval "$$(scripts/slurm_local.sh env)"; \
	OODMOL_SLURM_REQUIRED=1 $(PY) -m pytest -q tests/e2e/test_slurm.py $(ARGS); status=$$?; \
	if [ $$started = 1 ]; then scripts/slurm_local.sh stop; fi; \
	exit $$status

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The documentation site (mkdocs.yml, docs/): `make docs` builds it into site/, every
# warning an error (a broken link, a docstring that does not render); `make docs-serve`
# serves it at http://127.0.0.1:8000 and rebuilds it on every change.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site $(ARGS)

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve $(ARGS)

bench: install
	$(PY) -m bench.splits

# The device check (bench/gpu_check.sh): `make gpu-pack` here packs .gpu/ (the wheels a
# GPU machine without network lacks, the 10k set's files, compressed caches);
# `make gpu-check-dry` rehearses the check on this CPU; `make gpu-check` runs it on the
# GPU machine with its own python3 (ARGS: the steps, e.g. "tests epochs seeds").
gpu-pack: install
	bench/gpu_pack.sh

gpu-check-dry: install
	bash bench/gpu_check.sh --dry-run $(ARGS)

gpu-check:
	bash bench/gpu_check.sh $(ARGS)

# Chemprop 2.3.1 pins rdkit==2026.03.6 (through cuik-molmaker), so the reference for
# bench/chemprop_throughput.py and tests/references/test_chemprop_equivalence.py gets its own
# environment, with oodmol installed next to it.
CHEMPROP_VENV ?= .venv-chemprop
chemprop-env: $(CHEMPROP_VENV)/.installed

$(CHEMPROP_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CHEMPROP_VENV)
	$(CHEMPROP_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CHEMPROP_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(CHEMPROP_VENV)/bin/python -m pip install --quiet chemprop==2.3.1 -e '.[dev]'
	touch $@

bench-chemprop: chemprop-env
	$(CHEMPROP_VENV)/bin/python -m bench.chemprop_throughput $(ARGS)
	$(CHEMPROP_VENV)/bin/python -m pytest -q tests/references/test_chemprop_equivalence.py

# The authors' gotennet 1.1.2, the reference for tests/references/test_gotennet_equivalence.py and
# bench/gotennet_reference.py, imports torch-cluster and torch-scatter at module load,
# which have no wheels for torch 2.13 on CPU: it is installed without its dependencies,
# beside its pure-Python ones and the pure-torch stand-ins of scripts/reference_standins/
# (this environment only, never $(VENV)).
GOTENNET_VENV ?= .venv-gotennet
GOTENNET_DEPS ?= ase pytorch-lightning ./scripts/reference_standins
gotennet-env: $(GOTENNET_VENV)/.installed

$(GOTENNET_VENV)/.installed: pyproject.toml $(wildcard scripts/reference_standins/*/*.py)
	$(PYTHON) -m venv $(GOTENNET_VENV)
	$(GOTENNET_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(GOTENNET_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(GOTENNET_VENV)/bin/python -m pip install --quiet -e '.[dev]' $(GOTENNET_DEPS)
	$(GOTENNET_VENV)/bin/python -m pip install --quiet --no-deps gotennet==1.1.2
	touch $@

test-gotennet-reference: gotennet-env
	$(GOTENNET_VENV)/bin/python -m pytest -q tests/references/test_gotennet_equivalence.py $(ARGS)

bench-gotennet: gotennet-env
	$(GOTENNET_VENV)/bin/python -m bench.gotennet_reference $(ARGS)

# mace-torch 0.3.16 pins e3nn==0.4.4, whose import fails under torch 2.13's weights-only
# torch.load; installed --no-deps beside e3nn 0.6 it imports and computes the same. Its
# `import mace` also turns off safe loading for the whole process
# (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1), so it lives only here, never in $(VENV): the
# reference for tests/references/test_mace_equivalence.py and bench/mace_reference.py.
MACE_VENV ?= .venv-mace
MACE_DEPS ?= ase opt_einsum prettytable torch-ema matscipy configargparse h5py gitpython \
	torchmetrics python-hostlist orjson
mace-env: $(MACE_VENV)/.installed

$(MACE_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(MACE_VENV)
	$(MACE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MACE_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(MACE_VENV)/bin/python -m pip install --quiet -e '.[dev]' $(MACE_DEPS)
	$(MACE_VENV)/bin/python -m pip install --quiet --no-deps mace-torch==0.3.16
	touch $@

test-mace-reference: mace-env
	$(MACE_VENV)/bin/python -m pytest -q tests/references/test_mace_equivalence.py $(ARGS)

bench-mace: mace-env
	$(MACE_VENV)/bin/python -m bench.mace_reference $(ARGS)

# The references of tests/references/test_painn_et_references.py and bench/painn_et_reference.py:
# schnetpack 2.1.1 (PaiNN) and torchmd-net 3.1.0 (ET), each installed without its
# dependencies, beside only what `schnetpack.representation` and
# `torchmdnet.models.torchmd_et` import: ase, and NVIDIA Warp (torchmd-net's neighbour
# kernels, pure Python plus a runtime; the tests and the bench give it our neighbour list).
# schnetpack pins sympy<=1.12 and pulls hydra, matscipy and tensorboard for its training
# CLI, and its package __init__ fails under torch 2.13 (`T_co`), so the bench imports its
# representation without it. torchmd-net is an sdist: setuptools-scm reads its version.
# This environment only, never $(VENV).
PAINN_ET_VENV ?= .venv-painn-et
PAINN_ET_DEPS ?= ase "warp-lang>=1.10.1" setuptools-scm
painn-et-env: $(PAINN_ET_VENV)/.installed

$(PAINN_ET_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(PAINN_ET_VENV)
	$(PAINN_ET_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PAINN_ET_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(PAINN_ET_VENV)/bin/python -m pip install --quiet -e '.[dev]' $(PAINN_ET_DEPS)
	$(PAINN_ET_VENV)/bin/python -m pip install --quiet --no-deps schnetpack==2.1.1
	$(PAINN_ET_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation \
		torchmd-net==3.1.0
	touch $@

test-painn-et-reference: painn-et-env
	$(PAINN_ET_VENV)/bin/python -m pytest -q tests/references/test_painn_et_references.py $(ARGS)

bench-painn-et: painn-et-env
	$(PAINN_ET_VENV)/bin/python -m bench.painn_et_reference $(ARGS)

clean:
	rm -rf $(VENV) $(CHEMPROP_VENV) $(GOTENNET_VENV) $(MACE_VENV) $(PAINN_ET_VENV) .pytest_cache .ruff_cache site
