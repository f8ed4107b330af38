from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent

# Property tests judge what is generated, never how fast: Hypothesis's own timing checks (an
# example's 200 ms deadline, a slow draw) fail on a busy 2-core machine (a CI run: "only
# generated 1 valid inputs after 2.99 seconds"), so they are off for every test.
settings.register_profile("loom", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("loom")


def _cost(item: pytest.Item) -> int:
    """0 for a unit test, 1 for a simulated incident, 2 for a simulated day."""
    if "test_sim" not in item.nodeid:
        return 0
    return 2 if "stormy_day" in item.nodeid else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under `make mutants` (mutmut names the mutant in MUTANT_UNDER_TEST and stops at the first
    # failure), a mutant's cheapest tests run first: one a unit test kills then costs that unit
    # test, not the simulated days after it. The order is otherwise left as collected.
    if os.environ.get("MUTANT_UNDER_TEST"):
        items.sort(key=_cost)


def loom_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # The operator's own LOOM_ settings never leak into a test's loom; the platform forced for a
    # whole run (LOOM_PLATFORM=portable, make test-portable) reaches every loom it starts.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_") or k == "LOOM_PLATFORM"}
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


@pytest.fixture
def make_pane(tmp_path: Path):
    """Real tmux panes that read lines (`harness.LinePane`), each on a private socket, torn down by pid."""
    from harness import LinePane

    made: list[LinePane] = []

    def make(session: str = "agent") -> LinePane:
        pane = LinePane(tmp_path / "panes", session)
        made.append(pane)
        return pane.start()

    yield make
    for pane in made:
        pane.cleanup()


@dataclass(frozen=True)
class Installed:
    wheel: Path
    bin: Path

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of an operator who installed Loom: no LOOM_* settings, no PYTHONPATH."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_") and k != "PYTHONPATH"}
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        env.update(extra or {})
        return env


@pytest.fixture(scope="session")
def installed(tmp_path_factory, worker_id) -> Installed:
    """Loom built as a wheel and installed into a fresh venv with its dependencies, once per run.

    xdist workers share one build: the first to take the lock builds, the others wait for it.
    """
    base = tmp_path_factory.getbasetemp()
    root = base if worker_id == "master" else base.parent
    target = root / "installed"
    with open(root / "installed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        venv = target / "venv"
        if not (target / "done").exists():
            dist = target / "dist"

            def run(*argv: str) -> None:
                result = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=target)
                assert result.returncode == 0, f"{' '.join(argv)}\n{result.stdout}\n{result.stderr}"

            target.mkdir(exist_ok=True)
            # From a copy of the working tree: an in-tree build leaves build/ behind, and a stale
            # build/lib (say, a module since moved) would be packed into the next wheel.
            source = target / "source"
            shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
                ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "mutants", ".hypothesis", "state",
                "node_modules"))
            run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(source))
            run(sys.executable, "-m", "venv", str(venv))
            wheel = next(dist.glob("loomtui-*.whl"))
            run(str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-c", str(REPO / "constraints.txt"),
                str(wheel))
            (target / "done").touch()
    return Installed(wheel=next((target / "dist").glob("loomtui-*.whl")), bin=venv / "bin")


@pytest.fixture
def sshd(tmp_path):
    from sshd import SSHD, Sshd

    if not Path(SSHD).exists():
        pytest.skip(f"{SSHD} is missing (Debian's openssh-server; .ci/run installs it)")
    server = Sshd(tmp_path / "sshd")
    try:
        yield server.start()
    finally:
        server.stop()
