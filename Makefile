VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The fast tier (README, Quick start): no C compiler needed, no sweeps; under a minute.
FAST_MARKERS := not needs_cc and not slow and not thorough

.PHONY: test fast lint run setup clean fuzz

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -m 'not slow'

fast: $(STAMP)
	$(PY) -m pytest -m '$(FAST_MARKERS)' --no-cc --durations=10

lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy

run: $(STAMP)
	$(VENV)/bin/hlofuse cartpole

# Differential fuzzing against JAX (README, Differential fuzzing): FUZZ_N programs from seed
# FUZZ_SEED; failures are shrunk into tests/fuzz/corpus/, the tally goes to results/fuzz.json.
FUZZ_N ?= 200
FUZZ_SEED ?= 0
fuzz: $(STAMP)
	$(PY) -m tests.fuzz --n $(FUZZ_N) --seed $(FUZZ_SEED)

clean:
	rm -rf $(VENV)
