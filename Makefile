VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
# The fast tier (README, Install and run): no C compiler needed, no sweeps.
FAST_MARKERS := not needs_cc and not slow and not thorough

.PHONY: test test-all fast lint run setup clean fuzz docs wheel-check

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Tests run on every core (pytest-xdist); tests that share per-process state (a cache of
# compared programs) are kept on one worker by an `xdist_group` mark (--dist loadgroup).
PARALLEL := -n auto --dist loadgroup

test: $(STAMP)
	$(PY) -m pytest -m 'not slow' $(PARALLEL)

# Everything, `slow` too: the full products (every rollout under every strategy, the whole
# xla-gpu agreement corpus, every TPU-interpret and CartPole sweep) that `make test` samples.
test-all: $(STAMP)
	$(PY) -m pytest -m '' $(PARALLEL)

fast: $(STAMP)
	$(PY) -m pytest -m '$(FAST_MARKERS)' --no-cc --durations=10 $(PARALLEL)

lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy
	$(VENV)/bin/vulture

# The package as users install it: its wheel, in a new virtual environment, run from outside
# the repository (`hlofuse cartpole --quick` and examples/from_jax_layer.py).
wheel-check: $(STAMP)
	$(PY) .ci/wheel_check.py

run: $(STAMP)
	$(VENV)/bin/hlofuse cartpole

# The documentation site (mkdocs.yml, docs/): --strict turns every warning into a failure, and
# mkdocs.yml's `validation:` makes broken links and anchors warnings. Output: build/site.
$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(VENV)/bin/mkdocs build --strict

# Differential fuzzing against JAX (docs/fuzzing.md): FUZZ_N programs from seed
# FUZZ_SEED, of FUZZ_MODE (ops: any operation; rollout: rollout-shaped programs); failures are
# shrunk into tests/fuzz/corpus/, the tally goes to results/fuzz.json.
FUZZ_N ?= 200
FUZZ_SEED ?= 0
FUZZ_MODE ?= ops
fuzz: $(STAMP)
	$(PY) -m tests.fuzz --n $(FUZZ_N) --seed $(FUZZ_SEED) --mode $(FUZZ_MODE)

clean:
	rm -rf $(VENV)
