"""The sealed core as an allow-list: each rules module may import the standard library modules
named below and the other rules modules, nothing else, wherever the import statement stands.

Why an AST walk beside `lint-imports`: import-linter (grimp) does see an import inside a function,
but its `forbidden` contract lists what is banned, so anything not on the list passes (croniter,
a third-party library, sat inside `schedule.next_due` for that reason), and it folds every module
outside `loomtui` into its top-level package, so it cannot tell the private `re._parser` from `re`.
It has no allow-list for such modules. The test in test_architecture.py imports each module in a
bare interpreter, which runs only what the import executes: a function's import is never seen.
So this reads every `import` and `from ... import` in each module's syntax tree, top level and
inside functions, classes and `if TYPE_CHECKING:` alike, and a call of `__import__` too.

The core is the module list of the sealed contract in pyproject.toml: one list, read from there.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO

# The standard library a rule may use: computation on values, no clock, no file, no process, no
# network. A new entry is a decision, so each one is named here (a submodule is not allowed by
# its parent: `re` does not let `re._parser` in).
STDLIB = {
    "__future__": "annotations as strings",
    "dataclasses": "the rules' records",
    "typing": "annotations, Literal, Protocol",
    "collections.abc": "Callable, Iterable in annotations",
    "re": "matching text (watchdog pane states, durations, signatures, log patterns)",
    "unicodedata": "character classes for signatures and text.sanitize (a table lookup)",
    "json": "queue_rules quotes a string for a prompt; text.dumps formats data: strings, no files",
    "shlex": "queue_rules quotes a log path for the agent's prompt (shlex.quote only; it imports os, "
             "but shlex.quote touches nothing)",
    "hashlib": "text.digest: the ledger's short sha256 of a message (a pure function of bytes)",
    "math": "canary.rules: math.inf, the time left of a hold that lasts until released",
    "urllib.parse": "heartbeat_rules: a push URL split and joined again (no request: the shell sends it)",
    "string": "states.placeholders: a command template's fields as str.format reads them (Formatter.parse)",
    # logscan reads the literals every match of a failure pattern must contain ("needles") from the
    # pattern as Python's own `re` parses it: any other parser could disagree with `re` about what a
    # pattern means, and a needle that a match need not contain would hide failure lines. These
    # modules are private: test_sentinel_match.py::test_the_private_regex_parser_keeps_its_shape
    # fails loudly when a Python release changes what logscan reads from them.
    "re._parser": "logscan's needles: the parse tree of a pattern, as `re` itself reads it",
    "re._constants": "logscan's needles: the opcodes of that parse tree",
}


def core_modules() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    sealed = [c for c in contracts if c["name"].startswith("sealed core")]
    assert len(sealed) == 1, "pyproject.toml: one import-linter contract named 'sealed core ...'"
    return list(sealed[0]["source_modules"])


CORE = core_modules()


def module_path(name: str) -> Path:
    return REPO / (name.replace(".", "/") + ".py")


def imported_names(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """(line, module) for every import the tree holds, wherever it stands. `from pkg import x` names
    `pkg.x` when that is a module of the package (`from loomtui.telegram import rules`), else `pkg`."""
    package = module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package up
                parts = package.split(".")
                up = parts[: len(parts) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if module_path(sub).exists() or sub in CORE else base))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            arg = node.args[0] if node.args else None
            name = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "<__import__>"
            found.append((node.lineno, f"__import__({name})"))
    return found


def sealed_violations(source: str, module: str, core: list[str] = CORE) -> list[str]:
    """Each import of `module` (its source text) that neither STDLIB nor `core` allows, as
    `module:line: name`."""
    allowed = set(STDLIB) | set(core)
    tree = ast.parse(source)
    return [f"{module}:{line}: {name}" for line, name in imported_names(tree, module)
            if name not in allowed and name != module]


@pytest.mark.parametrize("module", CORE)
def test_a_rules_module_imports_only_the_allowed_standard_library_and_the_core(module):
    path = module_path(module)
    assert path.exists(), f"pyproject.toml: the sealed contract names {module}, which has no file"
    bad = sealed_violations(path.read_text(), module)
    assert not bad, ("the sealed core imports only the standard library on STDLIB's list "
                     "(tests/unit/test_sealed_core.py) and its own modules:\n" + "\n".join(bad))


def test_the_allowed_standard_library_is_the_standard_library():
    for name in STDLIB:
        assert name.split(".")[0] in sys.stdlib_module_names, name


def test_every_allowed_module_is_still_used():
    """An entry nothing imports any more goes: the list says what the core needs, not what it might."""
    used = {name for m in CORE for _line, name in imported_names(ast.parse(module_path(m).read_text()), m)}
    assert set(STDLIB) <= used, f"no rules module imports {sorted(set(STDLIB) - used)}: drop them from STDLIB"


def test_every_rules_module_of_the_tree_is_in_the_core():
    """A module named *rules* is a rules module: it belongs in the sealed contract."""
    rules = {p.relative_to(REPO).with_suffix("").as_posix().replace("/", ".")
             for p in (REPO / "loomtui").rglob("*rules.py")}
    assert rules <= set(CORE), f"add {sorted(rules - set(CORE))} to the sealed contract in pyproject.toml"


# -- the check sees what an import at run time would not ------------------------------------------

PLANTED = [
    ("def f():\n    import os\n", "os"),
    ("def f():\n    from croniter import croniter\n", "croniter"),
    ("class C:\n    def m(self):\n        import subprocess.run\n", "subprocess.run"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import psutil\n", "psutil"),
    ("def f():\n    from loomtui import clock\n", "loomtui.clock"),
    ("def f():\n    from ..store import ledger\n", "loomtui.store.ledger"),
    ("def f():\n    import re._casefix\n", "re._casefix"),
    ("def f():\n    return __import__('time')\n", "__import__(time)"),
]


PLANTED_IN = "loomtui.sentinel.schedule"


def planted_copy(tmp_path: Path, planted: str) -> Path:
    """A copy of a real rules module, at its place in a copy of the package, with `planted` appended."""
    original = module_path(PLANTED_IN)
    copy = tmp_path / original.relative_to(REPO)
    for part in ("loomtui", "loomtui/sentinel"):
        (tmp_path / part).mkdir(exist_ok=True)
        (tmp_path / part / "__init__.py").write_text("")
    for module in ("loomtui.timing", "loomtui.durations"):  # what schedule imports
        (tmp_path / module_path(module).relative_to(REPO)).write_text(module_path(module).read_text())
    copy.write_text(original.read_text() + "\n\n" + planted)
    return copy


@pytest.mark.parametrize("planted, name", PLANTED)
def test_a_planted_lazy_import_is_caught(tmp_path, planted, name):
    assert not sealed_violations(module_path(PLANTED_IN).read_text(), PLANTED_IN)
    bad = sealed_violations(planted_copy(tmp_path, planted).read_text(), PLANTED_IN)
    assert len(bad) == 1 and bad[0].endswith(f": {name}"), bad
    line = int(re.match(r".*?:(\d+):", bad[0]).group(1))
    assert line > len(module_path(PLANTED_IN).read_text().splitlines())  # the planted line, not another


def test_a_lazy_import_passes_the_import_time_check_and_not_this_one(tmp_path):
    """Why the tree is read: the planted copy imports cleanly in a bare interpreter that has no
    croniter at all (test_architecture.py's check), since no function body runs on import."""
    planted_copy(tmp_path, "def f():\n    from croniter import croniter\n    return croniter\n")
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import {PLANTED_IN} as m; "
            "assert m.__file__.startswith(sys.path[0]), m.__file__\n"
            "try:\n    m.f()\nexcept ImportError:\n    print('lazy')")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "lazy"  # imported fine; only calling f() reaches for croniter
    copy = tmp_path / module_path(PLANTED_IN).relative_to(REPO)
    assert [v.rpartition(": ")[2] for v in sealed_violations(copy.read_text(), PLANTED_IN)] == ["croniter"]


def test_the_check_lets_the_core_and_the_allowed_library_pass():
    source = ("from __future__ import annotations\nimport re\nfrom collections.abc import Callable\n"
              "def f():\n    from loomtui.durations import parse_duration\n    from loomtui import timing\n")
    assert sealed_violations(source, "loomtui.sentinel.schedule") == []
