"""The memory replica through the real daemon: `loom supervise` commits the memory directory after
its quiet period and pushes to a bare repository, pulls what another box pushed, and checkpoints the
ledger's head there, which `loom ledger verify --remote` then proves. Real git, real bare repo,
every path under tmp_path; HOME and GIT_CONFIG_GLOBAL are the test's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness import wait_for
from test_supervise import Daemon

from loomtui.memory import replica as rep
from loomtui.memory import replica_rules as rules
from loomtui.memory.git import GIT

pytestmark = pytest.mark.e2e


def bare_show(bare: Path, path: str, env: dict[str, str]) -> str | None:
    done = subprocess.run([GIT, "--git-dir", str(bare), "show", f"main:{path}"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env}, timeout=60)
    return done.stdout if done.returncode == 0 else None


def test_the_daemon_replicates_memory_both_ways_and_checkpoints_the_ledger(make_harness, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "gitconfig").write_text("")
    git_env = {"HOME": str(home), "GIT_CONFIG_GLOBAL": str(home / "gitconfig"), "GIT_CONFIG_NOSYSTEM": "1"}
    for name, value in git_env.items():
        monkeypatch.setenv(name, value)  # host b's Replica below runs in this process
    bare = tmp_path / "remote.git"
    subprocess.run([GIT, "init", "-q", "--bare", "-b", "main", str(bare)], check=True, env={"PATH": "/usr/bin:/bin",
                   **git_env}, timeout=60)
    mem_a = tmp_path / "a-memory"
    mem_a.mkdir()
    harness = make_harness(sections={
        "watchdog": {"interval": "1s", "exit_check": "300ms"},
        "memory": {"dir": str(mem_a), "remote": str(bare), "host": "a", "sync_quiet": "1s", "pull_interval": "2s"},
        "ledger": {"checkpoint_interval": "1s"},
    })
    harness.start()
    daemon = Daemon(harness, env=git_env)

    (mem_a / "MEMORY.md").write_text("- [Deploys](deploys.md) — how we deploy\n")
    (mem_a / "deploys.md").write_text("blue/green\n")
    wait_for(lambda: bare_show(bare, "deploys.md", git_env) == "blue/green\n", 60, what="a's entry in the remote")
    # The ledger's head went there too (the daemon's start is in the ledger).
    wait_for(lambda: bare_show(bare, ".loom/checkpoints/a", git_env), 60, what="a's ledger checkpoint")

    b = rep.Replica(tmp_path / "b-memory", str(bare), git_dir=tmp_path / "b-state" / "memory.git", host="b", timeout=60)
    with b.lock():
        b.sync(rules.Settings(30.0, 300.0), forced=True)
    assert (b.dir / "deploys.md").read_text() == "blue/green\n"  # b's pull brought a's entry
    (b.dir / "from-b.md").write_text("b was here\n")
    with b.lock():
        done, _ = b.sync(rules.Settings(30.0, 300.0), forced=True)
    assert done.pushed
    wait_for(lambda: (mem_a / "from-b.md").exists(), 60, what="b's file pulled into a's memory")

    # The remote away for a while: a's next entry is committed locally, then pushed once it is back.
    away = tmp_path / "away.git"
    bare.rename(away)
    (mem_a / "offline.md").write_text("written while the remote was away\n")

    def offline() -> bool:
        state = rep.state_of(harness.state_dir, mem_a)
        return state is not None and bool(state.error) and state.ahead >= 1
    wait_for(offline, 60, what="a's commit kept locally while the remote is away")
    assert "remote unreachable" in harness.loom("status", env=git_env).stdout
    away.rename(bare)
    wait_for(lambda: bare_show(bare, "offline.md", git_env), 90, what="the offline entry pushed after the return")
    wait_for(lambda: (rep.state_of(harness.state_dir, mem_a) or rep.State(error="?")).error == "", 60, what="the error cleared")

    status = harness.loom("status", env=git_env)
    assert "memory replica  pushed" in status.stdout, status.stdout
    verified = harness.loom("ledger", "verify", "--remote", env=git_env)
    assert verified.returncode == 0 and "checkpoint" in verified.stdout, verified.stderr
    assert daemon.stop() == 0, daemon.output()
    assert "loop replica failed" not in daemon.output()
