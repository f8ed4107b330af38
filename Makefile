# The two set-up commands README promises: `make demo` and `make test`.
# Each creates .venv on first use (python3 and tmux are all a fresh machine needs).

PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test test-stress test-portable lint mutants venv clean screenshots bench

# constraints.txt pins the versions the tests (and their snapshots) were made with; pyproject
# keeps only lower bounds, for installs of the package itself.
# `make demo` installs Loom alone; the tests' extras (pytest, playwright, ...) come with `make test`.
$(DEMO_STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -c constraints.txt -e .
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	$(VENV)/bin/python -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

# The real Claude Code CLI the stream-json tests run (tests/claude: its version pinned by the lock),
# installed with npm ci beside the venv and again only when its package files change. Its
# postinstall puts the native binary in place; --version proves it did.
CLAUDE_DIR := tests/claude
CLAUDE_STAMP := $(CLAUDE_DIR)/node_modules/.installed
$(CLAUDE_STAMP): $(CLAUDE_DIR)/package.json $(CLAUDE_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "make: npm is required to install the Claude Code CLI the tests run" >&2; exit 1; }
	cd $(CLAUDE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	$(CLAUDE_DIR)/node_modules/.bin/claude --version
	touch $(CLAUDE_STAMP)

venv: $(STAMP) $(CLAUDE_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/loom-tui --demo

# Tests run in random order (pytest-randomly prints the seed; replay with PYTEST_ARGS=-p randomly
# --randomly-seed=N).
test: $(STAMP) $(CLAUDE_STAMP)
	$(VENV)/bin/python -m pytest -n 4 $(PYTEST_ARGS)

# The architecture contracts in pyproject.toml (sealed core, layers, one control path), and the
# type checker over loomtui/ ([tool.mypy]).
lint: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# The simulator's tests run on its virtual clock: a busy machine changes only how long they take.
SIM_TESTS := --ignore=tests/unit/test_sim.py --ignore=tests/unit/test_sim_mutants.py --ignore=tests/unit/test_sim_preflight.py \
	--ignore=tests/unit/test_sim_wired.py --ignore=tests/unit/test_sim_pump.py --ignore=tests/unit/test_sim_hooks.py
# The code macOS runs: the unit tests and the watchdog's e2e tests with the portable platform
# forced (psutil's process tree, watchfiles, no pidfd, no inotify; loomtui/platform).
PORTABLE_TESTS := tests/unit $(SIM_TESTS) tests/e2e/test_supervise.py tests/e2e/test_witnessed_recovery.py

test-portable: $(STAMP) $(CLAUDE_STAMP)
	LOOM_PLATFORM=portable $(VENV)/bin/python -m pytest -n 4 $(PYTEST_ARGS) $(PORTABLE_TESTS)

# The suite on a busy machine: one CPU-bound process per core runs beside it. In two parts, so
# that one busy run also covers the code macOS runs: the unit tests (and the watchdog's e2e) with
# the portable platform forced, then the e2e tests with this machine's. With `make test`, which
# runs everything on an idle machine with this machine's platform, CI runs every test twice.
test-stress: $(STAMP) $(CLAUDE_STAMP)
	LOOM_PLATFORM=portable $(VENV)/bin/python tools/stress.py -- $(VENV)/bin/python -m pytest -n 4 $(PYTEST_ARGS) \
		$(PORTABLE_TESTS)
	$(VENV)/bin/python tools/stress.py -- $(VENV)/bin/python -m pytest -n 4 $(PYTEST_ARGS) tests/e2e

# Mutation testing of the pure decision modules against their fast unit tests, and of the wired
# modules (actions, recovery, holds, the loops) against real-store unit tests and the
# simulation-driven tests (not in CI; docs/TESTING.md says how long). Modules and tests:
# [tool.mutmut] in pyproject.toml. mutmut is installed on demand; each run starts from a fresh
# mutants/ copy so the score matches the tree, made without tests/claude/node_modules
# (tools/mutmut_run.py: mutmut has no option to leave a part of tests/ out).
MUTMUT_VERSION := 3.8.1
mutants: $(STAMP)
	$(VENV)/bin/mutmut --version 2>/dev/null | grep -qF ' $(MUTMUT_VERSION)' || \
		$(VENV)/bin/python -m pip install --quiet -c constraints.txt 'mutmut==$(MUTMUT_VERSION)'
	rm -rf mutants
	$(VENV)/bin/python tools/mutmut_run.py run
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
