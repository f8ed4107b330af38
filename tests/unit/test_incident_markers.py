"""Each incident in docs/DESIGN.md ("The failures this exists to survive") has tests that prove
Loom survives it, marked `@pytest.mark.incident(NAME)`; an incident with none fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO

# In DESIGN.md's order.
INCIDENTS = (
    "silent_deafness",             # 1. up, polling, redrawing, and deaf: only the canary may say so
    "confident_false_detector",    # 2. a passive gate recycled a healthy agent 32 times a day
    "recovery_storm",              # 3. a degraded probe, orphans, load 211, a recycle every 4.5 minutes
    "correct_and_wrong_together",  # 4. the same wedged session resumed four times
    "resuming_a_stranger",         # 5. "resume most recent" resumed another conversation
    "one_bot_one_poller",          # 6. a second poller deafens the agent (HTTP 409)
    "exit_zero_is_failure",        # 7. a failed boot exited 0 and was never restarted
    "supervisor_blind_spot",       # 8. an agent that acks canaries but never gets to its queue
    "garbled_replay",              # 9. re-injected scraped text fabricated messages
)


def incident_marks() -> dict[str, list[str]]:
    """incident name -> the tests marked with it, read from the test sources."""
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for deco in node.decorator_list:
                if (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)
                        and deco.func.attr == "incident" and deco.args
                        and isinstance(deco.args[0], ast.Constant)):
                    where = f"{path.relative_to(REPO)}::{node.name}"
                    found.setdefault(str(deco.args[0].value), []).append(where)
    return found


def test_every_incident_of_the_design_has_a_test():
    marks = incident_marks()
    missing = [name for name in INCIDENTS if not marks.get(name)]
    assert not missing, f"incidents with no test marked @pytest.mark.incident(...): {missing}"


def test_every_incident_marker_names_an_incident():
    unknown = {name: tests for name, tests in incident_marks().items() if name not in INCIDENTS}
    assert not unknown, f"markers naming no incident of DESIGN.md: {unknown}"


def test_the_design_still_lists_nine_incidents():
    design = (REPO / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    section = design.split("## The failures this exists to survive", 1)[1].split("\n## ", 1)[0]
    numbered = [line for line in section.splitlines() if re.match(r"\d+\. ", line)]
    assert len(numbered) == len(INCIDENTS)
