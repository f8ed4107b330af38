# The two set-up commands README promises: `make demo` and `make test`.
# Each creates .venv on first use (python3 and tmux are all a fresh machine needs).

PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-stress lint mutants venv clean screenshots bench

# constraints.txt pins the versions the tests (and their snapshots) were made with; pyproject
# keeps only lower bounds, for installs of the package itself.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/loom-tui --demo

# Tests run in random order (pytest-randomly prints the seed; replay with PYTEST_ARGS=-p randomly
# --randomly-seed=N).
test: $(STAMP)
	$(VENV)/bin/python -m pytest -n 4 $(PYTEST_ARGS)

# The architecture contracts in pyproject.toml (sealed core, layers, one control path).
lint: $(STAMP)
	$(VENV)/bin/lint-imports

# The same suite on a busy machine: one CPU-bound process per core runs beside it.
test-stress: $(STAMP)
	$(VENV)/bin/python tools/stress.py -- $(VENV)/bin/python -m pytest -n 4 $(PYTEST_ARGS)

# Mutation testing of the pure decision modules against their fast unit tests (not in CI; a few
# minutes on 2 cores). Modules and tests: [tool.mutmut] in pyproject.toml. mutmut is installed
# on demand; each run starts from a fresh mutants/ copy so the score matches the tree.
MUTMUT_VERSION := 3.8.1
mutants: $(STAMP)
	$(VENV)/bin/mutmut --version 2>/dev/null | grep -qF ' $(MUTMUT_VERSION)' || \
		$(VENV)/bin/python -m pip install --quiet -c constraints.txt 'mutmut==$(MUTMUT_VERSION)'
	rm -rf mutants
	$(VENV)/bin/mutmut run
	$(VENV)/bin/python tools/mutants.py

screenshots: $(STAMP)
	$(VENV)/bin/python screenshots/make_screenshots.py

# Every benchmark, each figure beside its anchor measured in the same run (bench/README.md);
# bench/RESULTS.md records the last run. All run even when one fails; the exit status says so.
bench: $(STAMP)
	@failed=""; for b in bench/[!_]*.py; do echo "== $$b"; \
		PYTHONUNBUFFERED=1 $(VENV)/bin/python $$b || failed="$$failed $$b"; done; \
	if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi

clean:
	rm -rf $(VENV) build dist *.egg-info
