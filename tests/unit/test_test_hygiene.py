"""The suite's own rules, read from the tests' source (docs/TESTING.md): no test swaps a function of
Loom for a recorder or a fake (it drives the real path, with a real tmux pane, process or store
below), and no test times itself (it polls for a state up to a generous deadline).

A plain AST scan of tests/: cheap, and it names the file and line that broke the rule.
"""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent

# Patches of Loom's functions that stay, each with why. By file (every patch in it) or by
# (file, target). Nothing else may monkeypatch, setattr, mock.patch or assign over a callable
# of a loomtui module or class.
ALLOWED_FILES = {
    # Planted mutants: breaking the real rules (test-local, no switch in the product) is how these
    # tests show the simulator catches each bug.
    "unit/test_sim_mutants.py",
    "unit/test_sim.py",
}
ALLOWED = {
    # The race between listing /proc and reading one process's command line cannot be hit on
    # demand: the listing is given a real pid already reaped; the reading of /proc stays real.
    ("unit/test_proctree.py", "loomtui.agent.proctree._pids"),
    # Likewise the race between reading the hook events directory and reading the store: the
    # directory's read stays real and is returned as read; the hooks loop's real `collect` runs
    # between the two.
    ("unit/test_busy_or_deaf.py", "loomtui.hooks.turns._unread_marks"),
}
# What reads a clock: a test that subtracts two of these readings and compares the difference
# times itself.
CLOCKS = {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns"}


def source_files() -> list[tuple[str, str]]:
    return [(p.relative_to(TESTS).as_posix(), p.read_text(encoding="utf-8"))
            for p in sorted(TESTS.rglob("*.py")) if "node_modules" not in p.parts]


def aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted loomtui name, from every import in the file (function-local ones too)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("loomtui"):
                    names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("loomtui") and node.level == 0:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def dotted(node: ast.AST, names: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, names)
        return f"{base}.{node.attr}" if base else None
    return None


def resolve(name: str) -> object:
    """The object a dotted loomtui name stands for (a module, then attributes)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def patched(tree: ast.AST, names: dict[str, str]) -> list[tuple[int, str]]:
    """(line, dotted loomtui name) of every attribute a test replaces: monkeypatch.setattr, setattr,
    mock.patch / patch.object, and plain assignment."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            attr = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            args = node.args
            if attr in ("setattr", "object") and len(args) >= 2 and isinstance(args[1], ast.Constant):
                base = dotted(args[0], names)
                if base:
                    found.append((node.lineno, f"{base}.{args[1].value}"))
            if attr in ("setattr", "patch") and args and isinstance(args[0], ast.Constant) \
                    and str(args[0].value).startswith("loomtui."):
                found.append((node.lineno, str(args[0].value)))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Attribute) and (name := dotted(target, names)):
                    found.append((node.lineno, name))
    return found


def swapped_functions(rel: str, source: str) -> list[str]:
    """`rel`: the file's path under tests/ (for the allow-lists and the message)."""
    if rel in ALLOWED_FILES:
        return []
    tree = ast.parse(source)
    bad = []
    for line, name in patched(tree, aliases(tree)):
        if (rel, name) in ALLOWED:
            continue
        owner, _, attr = name.rpartition(".")
        try:
            home = resolve(owner)
            loom = getattr(home, "__name__" if isinstance(home, types.ModuleType) else "__module__", "")
            swapped = str(loom).startswith("loomtui") and callable(getattr(home, attr))
        except (ImportError, AttributeError):
            swapped = True  # a name that does not resolve cannot be shown to be plain data
        # Through a Loom module to another one (`salvage.dt.datetime`, `tmux.subprocess.run`):
        # not Loom's own function.
        if swapped:
            bad.append(f"{rel}:{line}: replaces {name}")
    return bad


def clock_read(node: ast.AST, clocked: set[str]) -> bool:
    if isinstance(node, ast.Call):
        func = node.func
        return isinstance(func, ast.Attribute) and func.attr in CLOCKS or isinstance(func, ast.Name) and func.id in CLOCKS
    return isinstance(node, ast.Name) and node.id in clocked


def timed_asserts(rel: str, source: str) -> list[str]:
    """Asserts that compare a difference of clock readings (or a name holding one, or `elapsed`)."""
    tree = ast.parse(source)
    clocked = {"elapsed", "took"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(clock_read(n, set()) for n in ast.walk(node.value)):
            clocked.update(t.id for t in node.targets if isinstance(t, ast.Name))
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            if not any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in compare.ops):
                continue
            sides = [compare.left, *compare.comparators]
            diffs = [n for side in sides for n in ast.walk(side) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub)]
            if any(clock_read(d.left, clocked) or clock_read(d.right, clocked) for d in diffs) or any(
                    isinstance(side, ast.Name) and side.id in {"elapsed", "took"} for side in sides):
                bad.append(f"{rel}:{node.lineno}: asserts on a duration")
    return bad


def test_no_test_swaps_a_function_of_loom():
    bad = [line for rel, source in source_files() for line in swapped_functions(rel, source)]
    assert bad == [], "drive the real path (tests/harness.py: a real pane, process, store):\n" + "\n".join(bad)


def test_no_test_asserts_a_duration():
    bad = [line for rel, source in source_files() for line in timed_asserts(rel, source)]
    assert bad == [], "poll for the state instead (harness.wait_for, tui_state.until):\n" + "\n".join(bad)


def test_the_scan_sees_each_way_of_swapping_a_function_and_lets_data_be():
    source = """
import time
from unittest import mock
from loomtui import actions
from loomtui.telegram import bridge
import loomtui.agent.inject as typing
from loomtui.agent import tmux

def test_x(monkeypatch):
    monkeypatch.setattr(actions, "nudge", lambda *a, **k: None)
    setattr(typing, "inject", None)
    actions.recover = None
    mock.patch("loomtui.actions.recycle")
    mock.patch.object(actions, "hold")
    monkeypatch.setattr("loomtui.actions.release", None)
    monkeypatch.setattr(bridge, "READ_BYTES", 256)     # a size, not a function: allowed
    monkeypatch.setattr(time, "sleep", None)            # not Loom's
    monkeypatch.setattr(tmux.subprocess, "run", None)   # not Loom's either, reached through it
"""
    lines = sorted(line.split(": replaces ")[1] for line in swapped_functions("unit/test_x.py", source))
    assert lines == ["loomtui.actions.hold", "loomtui.actions.nudge", "loomtui.actions.recover",
                     "loomtui.actions.recycle", "loomtui.actions.release", "loomtui.agent.inject.inject"]
    assert swapped_functions("unit/test_sim_mutants.py", source) == []  # planted mutants
    proctree = "from loomtui.agent import proctree\ndef t(m):\n    m.setattr(proctree, '_pids', list)\n"
    assert swapped_functions("unit/test_proctree.py", proctree) == []
    assert swapped_functions("unit/test_other.py", proctree) == ["unit/test_other.py:3: replaces loomtui.agent.proctree._pids"]


def test_the_scan_sees_a_test_that_times_itself_and_lets_timestamps_be_compared():
    source = """
import time
def test_x(clock):
    began = time.monotonic()
    assert time.monotonic() - began < 600
    assert 0 <= clock.monotonic() - run.started < 5
    elapsed = finish - start
    assert elapsed < 1.0
    assert event["ts"] - sent["ts"] == 60      # equality of recorded times: not timing
    assert before <= run.started_mono <= after  # a reading bracketed: not timing
"""
    assert [int(line.split(":")[1]) for line in timed_asserts("unit/test_x.py", source)] == [5, 6, 8]
