# Two entry points (see README): `make reproduce` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

.PHONY: install reproduce test bench docs serve clean
install: $(STAMP)

reproduce: $(STAMP)  ## run the chapter end to end; results, report and figures in runs/reproduce
	$(BIN)/agentrl reproduce --out runs/reproduce

# test: two workers share the cores, so OpenMP threads sleep when idle instead of spinning (a two-thread run beside
# another worker takes 22 s, not 127 s); the figures are the same. The longest files start first (tests/conftest.py's
# SLOWEST_FIRST, kept in that order by --no-loadscope-reorder), so no worker runs a long one alone at the end. The suite
# starts many Python processes (the workers, sweeps' workers, the command line): with PYTHONDONTWRITEBYTECODE set (some
# sandboxes set it), each would compile agentrl again and pytest would rewrite every test module again, so the suite
# writes its bytecode (__pycache__, ignored by git; docs/getting-started.md says what that saves)
test: $(STAMP)  ## the test suite, a file per worker process, one per core (up to 4): a few minutes on 2 cores
	OMP_WAIT_POLICY=PASSIVE PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder

bench: $(STAMP)  ## rollout and training throughput against a transformers GPT-2 peer
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	$(BIN)/agentrl bench

docs: $(STAMP)  ## this documentation site, built strictly into site/ (no network needed)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

serve: $(STAMP)  ## this site at http://127.0.0.1:8000 with search (opened as files, it has none), rebuilt on edits
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[docs]'
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:8000

clean:
	rm -rf $(VENV) runs site .pytest_cache
