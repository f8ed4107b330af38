"""The sealed core stands alone: each rules module imports with nothing but the standard library.

`lint-imports` (run by .ci/run, contracts in pyproject.toml) checks what they import; this checks
that the claim holds at run time, in an isolated interpreter without site-packages.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

RULES = ["agent.policy", "agent.hold_rules", "agent.watchdog_rules", "canary.rules", "sentinel.queue_rules",
         "sentinel.logscan", "sentinel.signature", "sentinel.schedule", "report.incidents", "durations", "states",
         "pump.rules"]


@pytest.mark.parametrize("name", RULES)
def test_a_rules_module_imports_with_the_standard_library_alone(name):
    code = (f"import json, sys; sys.path.insert(0, {str(REPO)!r}); import loomtui.{name}; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('loomtui'))))")
    result = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    packages = {"loomtui"} | {f"loomtui.{r.rpartition('.')[0]}" for r in RULES if "." in r}
    loaded = {m.removeprefix("loomtui.") for m in json.loads(result.stdout) if m not in packages}
    assert loaded <= set(RULES), f"loomtui.{name} pulled in {sorted(loaded - set(RULES))}"
