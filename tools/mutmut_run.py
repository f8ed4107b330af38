"""`mutmut run`, leaving tests/claude/node_modules out of the mutants/ copy (see `make mutants`).

mutmut copies tests/ whole into mutants/ before each run, and has no option to leave a part of it
out. tests/claude/node_modules holds the pinned Claude Code CLI that only the e2e tests run (never
a mutant's tests): followed through its links it is over a gigabyte, copied for nothing on every
run. This runs mutmut's own command line with the copy told to skip directories of that name.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import mutmut.__main__ as mutmut_main
from mutmut.configuration import config

SKIPPED = "node_modules"


def copy_also_copy_files() -> None:
    """mutmut's copy of its also_copy paths (tests/, pyproject.toml, ...), without SKIPPED."""
    for path in map(Path, config().also_copy):
        destination = Path("mutants") / path
        if path.is_file():
            shutil.copy2(path, destination)
        elif path.is_dir():
            shutil.copytree(path, destination, dirs_exist_ok=True, ignore=shutil.ignore_patterns(SKIPPED))


if __name__ == "__main__":
    mutmut_main.copy_also_copy_files = copy_also_copy_files  # the name mutmut's `run` calls
    sys.argv[0] = "mutmut"
    sys.exit(mutmut_main.cli())
