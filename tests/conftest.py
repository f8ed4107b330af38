from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def loom_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env["PYTHONPATH"] = str(REPO)
    env["HOME"] = env.get("HOME", "/tmp")
    env.update(extra or {})
    return env


def run_loom(*args: str, env: dict[str, str] | None = None, timeout: float = 60, input: str | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loomtui", *args],
        capture_output=True,
        text=True,
        env=loom_env(env),
        timeout=timeout,
        input=input,
        cwd=cwd,
    )


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def loom(state_dir: Path):
    """Run `loom` as a real subprocess with a private state dir and no stray LOOM_* settings."""

    def _run(*args: str, **kwargs):
        return run_loom("--state-dir", str(state_dir), *args, **kwargs)

    return _run


@pytest.fixture
def make_harness(tmp_path: Path):
    """Build real demo-agent setups on private tmux sockets; every one is torn down by pid."""
    from harness import AgentHarness

    made: list[AgentHarness] = []

    def make(**kwargs) -> AgentHarness:
        harness = AgentHarness(tmp_path / f"h{len(made)}", **kwargs)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.cleanup()


@pytest.fixture
def harness(make_harness):
    return make_harness()
