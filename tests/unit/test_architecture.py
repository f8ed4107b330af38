"""The sealed core stands alone: each rules module imports with nothing but the standard library.

`lint-imports` (run by .ci/run, contracts in pyproject.toml) and test_sealed_core.py (the allow-list,
every import statement wherever it stands) check what they import; this checks that the claim holds
at run time, in an isolated interpreter without site-packages.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib

import pytest
from conftest import REPO

# The modules of the sealed contract in pyproject.toml (test_sealed_core.py checks every import they hold).
RULES = [m.removeprefix("loomtui.") for c in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
         ["contracts"] if c["name"].startswith("sealed core") for m in c["source_modules"]]


@pytest.mark.parametrize("name", RULES)
def test_a_rules_module_imports_with_the_standard_library_alone(name):
    code = (f"import json, sys; sys.path.insert(0, {str(REPO)!r}); import loomtui.{name}; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('loomtui'))))")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    packages = {"loomtui"} | {f"loomtui.{r.rpartition('.')[0]}" for r in RULES if "." in r}
    loaded = {m.removeprefix("loomtui.") for m in json.loads(result.stdout) if m not in packages}
    assert loaded <= set(RULES), f"loomtui.{name} pulled in {sorted(loaded - set(RULES))}"


# -- the driver is asked what it can do, never which it is ----------------------------------------

# Where the driver's name may be read: the maker that picks the class, the config that checks the
# key (a Telegram bridge needs the pump), and the drivers themselves (their `name`).
# sim/machine.py's simulated_driver is the simulator's drivers.py: it picks the simulated driver by name.
NAME_READERS = {"agent/drivers.py", "config.py", "config_schema.py", "sim/machine.py"}
WHICH_DRIVER = [
    re.compile(r"isinstance\([^)]*\b(StreamJsonDriver|TmuxDriver)\b"),
    re.compile(r"\b(type|issubclass)\([^)]*\)\s*(is|==)\s*(StreamJsonDriver|TmuxDriver)\b"),
    re.compile(r"""[=!]=\s*["'](stream-json|tmux)["']|["'](stream-json|tmux)["']\s*[=!]="""),
    re.compile(r"""\bin\s*[(\[{][^)\]}]*["']stream-json["']"""),
    re.compile(r"(?<!loomtui\.)\bagent\.driver\b"),  # the config key, not the module
]


def which_driver_asked(text: str) -> list[str]:
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if any(p.search(code) for p in WHICH_DRIVER):
            lines.append(f"{number}: {line.strip()}")
    return lines


def test_callers_decide_by_the_drivers_capabilities_not_its_class_or_name():
    found = []
    for path in sorted((REPO / "loomtui").rglob("*.py")):
        rel = path.relative_to(REPO / "loomtui").as_posix()
        if rel in NAME_READERS or rel.startswith("demo/"):
            continue  # the demo agent's own --input-format stream-json is a CLI flag, not a driver
        text = path.read_text()
        # A docstring may say `agent.driver`; code may not read it. (Its lines kept, for the numbers.)
        code = re.sub(r'"""(.|\n)*?"""', lambda m: "\n" * m.group().count("\n"), text)
        found += [f"loomtui/{rel}:{hit}" for hit in which_driver_asked(code)]
    assert not found, "ask the driver's capabilities (agent/ports.py) instead:\n" + "\n".join(found)


@pytest.mark.parametrize("line", [
    "if isinstance(driver, StreamJsonDriver):",
    'if ctx.config.agent.driver == "stream-json":',
    'dialogs = agent.driver != "stream-json"',
    'if self.driver == "stream-json":',
    'if "tmux" == look.driver:',
    "if type(driver) is TmuxDriver:",
])
def test_the_hygiene_check_sees_each_way_of_asking_which_driver(line):
    assert which_driver_asked(line)


def test_the_hygiene_check_lets_capabilities_and_cli_flags_pass():
    assert not which_driver_asked("if driver.owns_turns:\n    stream = driver_class(ctx.config).has_dialogs")
    assert not which_driver_asked('("--input-format", "stream-json"),  # a flag the pump appends')
    assert not which_driver_asked("from loomtui.agent.driver import TmuxDriver")
