"""The memory replica with the real git: a bare remote under tmp_path, two boxes' memory directories
(host a and host b), each synced by Loom's own code. No user or system git config is read: HOME and
GIT_CONFIG_GLOBAL point at files of the test's, and Loom sets its own identity."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loomtui.memory import replica as rep
from loomtui.memory import replica_rules as rules
from loomtui.memory.git import GIT
from loomtui.store import ledger, queue_items
from loomtui.store.db import Store

QUIET = rules.Settings(quiet=30.0, pull_interval=300.0)
T0 = 1_800_000_000.0


@pytest.fixture(autouse=True)
def git_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "gitconfig").write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return home


def git(*args: str, cwd: Path | None = None) -> str:
    env = {"HOME": str(Path.home()), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(Path.home() / "gitconfig"),
           "PATH": "/usr/bin:/bin"}
    return subprocess.run([GIT, *args], cwd=cwd, env=env, capture_output=True, text=True, check=True,
                          timeout=60).stdout


@pytest.fixture
def remote(tmp_path) -> Path:
    bare = tmp_path / "remote.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    return bare


def box(tmp_path: Path, remote: Path, host: str) -> rep.Replica:
    return rep.Replica(tmp_path / host / "memory", str(remote), host=host, timeout=60)


def sync(replica: rep.Replica, **kwargs) -> tuple[rep.Outcome, rep.State]:
    with replica.lock():
        return replica.sync(QUIET, **kwargs)


def remote_file(remote: Path, path: str) -> str:
    return git("--git-dir", str(remote), "show", f"main:{path}")


def test_an_entry_added_on_a_reaches_the_remote_and_b_after_its_pull(tmp_path, remote):
    a, b = box(tmp_path, remote, "a"), box(tmp_path, remote, "b")
    a.dir.mkdir(parents=True)
    (a.dir / "MEMORY.md").write_text("- [Deploys](deploys.md) — how we deploy\n")
    (a.dir / "deploys.md").write_text("blue/green\n")
    done, state = sync(a, forced=True)
    assert done.committed and done.pushed and state.ahead == 0 and state.last_push is not None
    assert remote_file(remote, "deploys.md") == "blue/green\n"

    done, _ = sync(b, forced=True)
    assert done.pulled and (b.dir / "deploys.md").read_text() == "blue/green\n"
    assert (b.dir / "MEMORY.md").read_text() == (a.dir / "MEMORY.md").read_text()
    assert "Loom on a" in git("log", "-1", "--format=%an", cwd=b.dir)


def test_changes_wait_for_the_quiet_period_before_a_commit(tmp_path, remote):
    a = box(tmp_path, remote, "a")
    sync(a, now=T0)  # the start: a pull (of an empty remote) and nothing to commit
    (a.dir / "note.md").write_text("one\n")
    done, state = sync(a, now=T0 + 1)
    assert not done.committed and state.changed_at == T0 + 1  # first seen: the quiet period starts
    (a.dir / "note.md").write_text("one two\n")
    done, state = sync(a, now=T0 + 20)
    assert not done.committed and state.changed_at == T0 + 20  # changed again: it starts over
    done, state = sync(a, now=T0 + 49)
    assert not done.committed
    done, state = sync(a, now=T0 + 50)
    assert done.committed and done.pushed and remote_file(remote, "note.md") == "one two\n"


def test_the_same_file_edited_on_both_keeps_both_versions_and_opens_a_queue_item(tmp_path, remote):
    a, b = box(tmp_path, remote, "a"), box(tmp_path, remote, "b")
    a.dir.mkdir(parents=True)
    (a.dir / "MEMORY.md").write_text("- [Base](base.md) — the start\n")
    sync(a, forced=True)
    sync(b, forced=True)
    (a.dir / "MEMORY.md").write_text("- [Base](base.md) — the start\n- [From a](a.md) — a's\n")
    (b.dir / "MEMORY.md").write_text("- [Base](base.md) — the start\n- [From b](b.md) — b's\n")
    sync(a, forced=True)
    done, state = sync(b, forced=True, now=T0)
    assert len(done.conflicts) == 1 and done.pushed
    path, copy = done.conflicts[0]
    assert path == "MEMORY.md" and copy.startswith("MEMORY.md.conflict-b-")
    assert "From a" in (b.dir / "MEMORY.md").read_text()  # the remote's side as the file
    assert "From b" in (b.dir / copy).read_text()         # this box's beside it
    assert "From b" in remote_file(remote, copy) and state.conflicts == 1  # both committed and pushed
    assert not (b.dir / ".git" / "rebase-merge").exists()

    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    store = Store.in_dir(state_dir)
    try:
        opened = rep.open_conflicts(store, "main", b.dir, done.conflicts, T0)
        again = rep.open_conflicts(store, "main", b.dir, done.conflicts, T0 + 1)
        assert len(opened) == 1 and again == []  # one live item per file
        item = queue_items.get(store, opened[0])
        assert item["job"] == rep.JOB and item["kind"] == rep.CONFLICT and item["count"] == 2
        assert item["log"] == str(b.dir / copy)
        assert [e.kind for e in ledger.tail(store, 5)] == ["queue_new"]
    finally:
        store.close()


def test_offline_commits_stay_local_and_are_pushed_once_the_remote_is_back(tmp_path, remote):
    a = box(tmp_path, remote, "a")
    a.dir.mkdir(parents=True)
    (a.dir / "one.md").write_text("1\n")
    sync(a, forced=True)
    away = tmp_path / "away.git"
    remote.rename(away)  # the remote unreachable
    (a.dir / "two.md").write_text("2\n")
    done, state = sync(a, forced=True, now=T0)
    assert done.committed and not done.pushed and done.error
    assert state.ahead == 1 and state.failures == 1 and state.error_since == T0
    (a.dir / "three.md").write_text("3\n")
    done, state = sync(a, forced=True, now=T0 + 5)
    assert done.committed and state.ahead == 2 and state.failures == 2 and state.error_since == T0
    assert "remote unreachable" in rules.lag_words(state.lag(), T0 + 5)
    # Not forced: inside the backoff the remote is not tried again.
    done, state = sync(a, now=T0 + 6)
    assert not done.error and state.failures == 2

    away.rename(remote)
    done, state = sync(a, forced=True, now=T0 + 30)
    assert done.pushed and state.ahead == 0 and state.failures == 0 and not state.error
    assert remote_file(remote, "two.md") == "2\n" and remote_file(remote, "three.md") == "3\n"
    assert rules.lag_words(state.lag(), T0 + 30).startswith("pushed 0s ago")


def test_checkpoints_are_read_back_from_the_remote_history(tmp_path, remote):
    a = box(tmp_path, remote, "a")
    sync(a, checkpoint=(3, "a" * 64), forced=True)
    sync(a, checkpoint=(9, "b" * 64), forced=True)
    assert remote_file(remote, ".loom/checkpoints/a") == f"9:{'b' * 64}\n"
    assert a.remote_checkpoints() == [(9, "b" * 64), (3, "a" * 64)]  # every version, newest first
