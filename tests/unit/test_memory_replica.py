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
from loomtui.sentinel import queue, queue_rules
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


def replica(tmp_path: Path, remote: str, host: str, **kwargs) -> rep.Replica:
    """`host`'s memory directory at tmp_path/host/memory, its git directory under its own state dir."""
    work = tmp_path / host / "memory"
    return rep.Replica(work, remote, git_dir=rep.git_dir_of(tmp_path / host / "state", work), host=host, **kwargs)


def box(tmp_path: Path, remote: Path, host: str) -> rep.Replica:
    return replica(tmp_path, str(remote), host, timeout=60)


def shared(tmp_path: Path, remote: Path, files: dict[str, str]) -> tuple[rep.Replica, rep.Replica]:
    """Boxes a and b, each synced to the remote, which holds `files` (written on a)."""
    a, b = box(tmp_path, remote, "a"), box(tmp_path, remote, "b")
    a.dir.mkdir(parents=True)
    for name, text in files.items():
        (a.dir / name).write_text(text)
    sync(a, forced=True)
    sync(b, forced=True)
    return a, b


def repo(r: rep.Replica) -> list[str]:
    """The words that point the test's own git at a replica's repository (never found from the tree)."""
    return [f"--git-dir={r.git_dir}", f"--work-tree={r.dir}"]


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
    assert "Loom on a" in git(*repo(b), "log", "-1", "--format=%an", cwd=b.dir)


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
    a, b = shared(tmp_path, remote, {"MEMORY.md": "- [Base](base.md) — the start\n"})
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
    assert not (b.git_dir / "rebase-merge").exists()

    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    store = Store.in_dir(state_dir)
    try:
        opened = rep.open_conflicts(store, "main", b.dir, done.conflicts, T0)
        again = rep.open_conflicts(store, "main", b.dir, done.conflicts, T0 + 1)
        assert len(opened) == 1 and again == []  # one live item per copy
        item = queue_items.get(store, opened[0])
        assert item["job"] == rep.JOB and item["kind"] == rep.CONFLICT and item["count"] == 2
        assert item["log"] == str(b.dir / copy)
        assert [e.kind for e in ledger.tail(store, 5)] == ["queue_new"]
        nudge = queue_rules.nudge_text(queue.from_row(item))
        assert "kept both sides" in nudge and copy in nudge and f"loom resolve {opened[0]}" in nudge

        # The agent merges, deletes the copy and claims it; the replica, once that is pushed, witnesses it.
        assert rep.witness_reconciled(store, b.dir, True, T0 + 2) == []  # not claimed yet
        from conftest import run_loom

        claimed = run_loom("--state-dir", str(state_dir), "resolve", str(opened[0]), "--note", "merged both")
        assert claimed.returncode == 0, claimed.stderr
        assert rep.witness_reconciled(store, b.dir, True, T0 + 3) == []  # the copy is still there
        (b.dir / copy).unlink()
        done, state = sync(b, forced=True)
        assert done.pushed and state.conflicts == 0
        assert rep.witness_reconciled(store, b.dir, True, T0 + 4) == [opened[0]]
        assert queue_items.get(store, opened[0])["state"] == "witnessed"
        assert ledger.tail(store, 1)[0].kind == "queue_witness"
    finally:
        store.close()


def test_a_rebase_an_earlier_sync_left_half_done_is_finished_with_what_the_agent_wrote_since(tmp_path, remote):
    """A sync stopped mid-rebase (killed at a conflict, a git timeout, Ctrl-C on `loom memory sync`),
    and the agent edited a tracked file meanwhile. The next sync aborted that rebase, and the abort
    put the file back as it was before: the agent's edit lost. It is now finished, both sides kept."""
    a, b = shared(tmp_path, remote, {"MEMORY.md": "base\n", "other.md": "keep\n"})
    (a.dir / "MEMORY.md").write_text("base\nfrom a\n")
    sync(a, forced=True)
    (b.dir / "MEMORY.md").write_text("base\nfrom b\n")
    ident = ["-c", "user.name=b", "-c", "user.email=b@example.invalid"]
    git(*ident, *repo(b), "commit", "-q", "-am", "b's", cwd=b.dir)
    git(*repo(b), "fetch", "-q", "origin", f"+refs/heads/main:{b.remote_ref}", cwd=b.dir)
    stopped = subprocess.run([GIT, *ident, *repo(b), "rebase", "-q", b.remote_ref], cwd=b.dir, capture_output=True)
    assert stopped.returncode != 0 and (b.git_dir / "rebase-merge").exists()  # the sync that stopped here
    with open(b.dir / "other.md", "a") as fh:
        fh.write("the agent's new fact\n")  # the agent writes on meanwhile
    b.remote_checkpoints()  # `loom ledger verify --remote` reads the remote: the rebase is the next sync's
    assert (b.git_dir / "rebase-merge").exists()
    done, _ = sync(b, forced=True, now=T0)
    assert not (b.git_dir / "rebase-merge").exists() and done.pushed
    assert (b.dir / "other.md").read_text() == "keep\nthe agent's new fact\n"
    assert remote_file(remote, "other.md") == "keep\nthe agent's new fact\n"
    [(path, copy)] = done.conflicts
    assert path == "MEMORY.md" and "from a" in (b.dir / "MEMORY.md").read_text() and "from b" in (b.dir / copy).read_text()


def test_a_remote_rewritten_by_insteadof_is_not_set_again_at_every_look(tmp_path, remote, git_home):
    """README suggests url.*.insteadOf for a forge's address; `remote get-url` answers the rewritten
    URL, which never equals the configured one: the remote was set again, .git/config rewritten, at
    every look (every 10 s)."""
    with open(git_home / "gitconfig", "a") as fh:
        fh.write(f'[url "{remote}"]\n\tinsteadOf = forge:mem\n')
    a = replica(tmp_path, "forge:mem", "a", timeout=60)
    (tmp_path / "a" / "memory").mkdir(parents=True)
    (a.dir / "note.md").write_text("one\n")
    done, _ = sync(a, forced=True)
    assert done.pushed and remote_file(remote, "note.md") == "one\n"
    written = (a.git_dir / "config").stat().st_mtime_ns
    a.ensure()
    a.ensure()
    assert (a.git_dir / "config").stat().st_mtime_ns == written
    assert git(*repo(a), "config", "--get-all", "remote.origin.url", cwd=a.dir).split() == ["forge:mem"]


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


def test_a_checkpoint_is_committed_though_a_gitignore_matches_dot_loom(tmp_path, remote):
    """A .gitignore in the memory (the agent's, or pulled from another box) ignoring dot-files: the
    checkpoint's add was refused ("paths are ignored"), and every sync stopped before its commit,
    pull and push: nothing replicated at all."""
    a = box(tmp_path, remote, "a")
    a.dir.mkdir(parents=True)
    (a.dir / ".gitignore").write_text(".*\n!.gitignore\n")
    (a.dir / "MEMORY.md").write_text("- [One](one.md) — the first\n")
    done, state = sync(a, checkpoint=(3, "a" * 64), forced=True)
    assert not state.error and done.pushed
    assert remote_file(remote, ".loom/checkpoints/a") == f"3:{'a' * 64}\n"
    assert remote_file(remote, "MEMORY.md").startswith("- [One]")


def test_a_lock_file_renamed_with_the_index_is_excluded_in_a_repository_made_before(tmp_path, remote):
    """The names never committed were written into the repository's exclude list when it was made:
    `memory.index` renamed later, `loom memory add`'s new lock file was committed (its holder's pid
    in it, conflicting between boxes)."""
    first = replica(tmp_path, str(remote), "a", timeout=60, ignored=(".A.md.lock",))
    first.dir.mkdir(parents=True)
    (first.dir / "A.md").write_text("a\n")
    (first.dir / ".B.md.lock").write_text("      4141\n")  # committed by the Loom that excluded only A's
    (first.dir / "notes").mkdir()
    (first.dir / "notes" / ".B.md.lock").write_text("      4141\n")  # an index in a folder: its lock there
    sync(first, forced=True)
    assert ".B.md.lock" in git("--git-dir", str(remote), "ls-tree", "--name-only", "main").split()
    renamed = replica(tmp_path, str(remote), "a", timeout=60, ignored=(".B.md.lock",))
    (renamed.dir / ".B.md.lock").write_text("      4242\n")
    (renamed.dir / "B.md").write_text("b\n")
    done, _ = sync(renamed, forced=True)
    assert done.pushed
    tracked = git("--git-dir", str(remote), "ls-tree", "--name-only", "main").split()
    assert "B.md" in tracked and ".B.md.lock" not in tracked  # excluded now, and no longer tracked
    assert git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main").split() == ["A.md", "B.md"]
    assert (renamed.dir / ".B.md.lock").read_text() == "      4242\n"  # the holder's file left alone


# -- through `loom`: the commands, the status line, the configuration --------------------------------


def write_config(tmp_path: Path, remote: Path, host: str = "a", **memory: str) -> Path:
    config = tmp_path / f"config-{host}.toml"
    lines = [f'state_dir = "{tmp_path / ("state-" + host)}"', "[memory]", f'dir = "{tmp_path / host / "memory"}"',
             f'remote = "{remote}"', f'host = "{host}"']
    lines += [f'{key} = "{value}"' for key, value in memory.items()]
    config.write_text("\n".join(lines) + "\n")
    return config


def loom_at(config: Path, *args: str):
    from conftest import run_loom

    return run_loom("--config", str(config), *args,
                    env={"HOME": str(Path.home()), "GIT_CONFIG_GLOBAL": str(Path.home() / "gitconfig")})


def test_loom_memory_sync_commits_pushes_and_says_so_and_status_shows_the_lag(tmp_path, remote):
    config = write_config(tmp_path, remote)
    (tmp_path / "a" / "memory").mkdir(parents=True)
    (tmp_path / "a" / "memory" / "MEMORY.md").write_text("- [One](one.md) — the first\n")
    (tmp_path / "a" / "memory" / ".MEMORY.md.lock").write_text("      4242\n")  # `loom memory add`'s lock
    done = loom_at(config, "memory", "sync")
    assert done.returncode == 0, done.stderr
    assert "committed" in done.stdout and "pushed" in done.stdout and "0 commits to push" in done.stdout
    assert remote_file(remote, "MEMORY.md").startswith("- [One]")
    # Loom's own lock file is never replicated: committed, it conflicted on every box that took it.
    assert git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main").split() == ["MEMORY.md"]
    status = loom_at(config, "status")
    assert "memory replica  pushed" in status.stdout and "0 commits to push" in status.stdout
    data = __import__("json").loads(loom_at(config, "status", "--json").stdout)
    assert data["replica"]["unpushed"] == 0 and data["replica"]["last_push"] is not None
    assert data["replica"]["remote"] == str(remote) and data["replica"]["error_kind"] == ""


def test_loom_memory_sync_offline_keeps_the_commit_and_fails(tmp_path, remote):
    config = write_config(tmp_path, tmp_path / "nowhere.git")
    (tmp_path / "a" / "memory").mkdir(parents=True)
    (tmp_path / "a" / "memory" / "note.md").write_text("kept\n")
    done = loom_at(config, "memory", "sync")
    assert done.returncode == 1
    assert "remote unreachable" in done.stdout and "1 commit kept locally" in done.stdout
    assert "memory replica  remote unreachable" in loom_at(config, "status").stdout
    data = __import__("json").loads(loom_at(config, "status", "--json").stdout)["replica"]
    assert data["error"] and data["error_kind"] == "remote"  # the remote's: its backoff grows
    work = tmp_path / "a" / "memory"
    assert git(f"--git-dir={rep.git_dir_of(tmp_path / 'state-a', work)}", "log", "-1", "--format=%s").startswith(
        "memory on a")


@pytest.mark.parametrize(("key", "value", "words"), [
    ("remote", "-oProxyCommand=touch pwned", "must not start with '-'"),
    ("remote", "https://me:ghp_secret@forge.example/mem.git", "credential helper"),
    ("remote", "https://ghp_secret@github.com/o/mem.git", "credential helper"),  # a token as the user
    ("sync_quiet", "0s", "must be longer than 0s"),
    ("pull_interval", "soon", "duration"),
    ("host", "a/b", "letters, digits"),
])
def test_a_bad_replica_setting_is_one_line_naming_the_file_and_key(tmp_path, remote, key, value, words):
    config = write_config(tmp_path, remote)
    text = config.read_text()
    text = text.replace(f'remote = "{remote}"', f'remote = "{value}"') if key == "remote" else text + \
        f'{key} = "{value}"\n'
    if key == "host":
        text = text.replace('host = "a"\n', "")
    config.write_text(text)
    done = loom_at(config, "memory", "sync")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(config) in lines[0] and f"memory.{key}" in lines[0] and words in lines[0]
    assert "ghp_secret" not in done.stderr  # a secret in the URL is refused without being repeated


def test_a_conflict_is_witnessed_once_its_copys_deletion_is_pushed_not_while_it_waits_to_be_committed(
        tmp_path, remote):
    """The agent deleted the copy and claimed the item; the next sync fell within the quiet period:
    nothing committed, nothing ahead, no error, and the item was witnessed while the remote still
    held the copy (a push failing after it left it there for good)."""
    from loomtui.config import load_config

    a = box(tmp_path, remote, "a")
    a.dir.mkdir(parents=True)
    (a.dir / "MEMORY.md").write_text("base\n")
    sync(a, forced=True)
    config = write_config(tmp_path, remote, "b", sync_quiet="1h")
    state_dir = tmp_path / "state-b"
    state_dir.mkdir(mode=0o700)
    loaded, _ = load_config(str(config), {})
    [target] = rep.targets(loaded, state_dir)
    with Store.in_dir(state_dir) as store:
        rep.sync_once(store, target, forced=True)  # b has the base
        b_dir = tmp_path / "b" / "memory"
        (a.dir / "MEMORY.md").write_text("base\nfrom a\n")
        (b_dir / "MEMORY.md").write_text("base\nfrom b\n")
        sync(a, forced=True)
        outcome, _ = rep.sync_once(store, target, forced=True)
        [(_, copy)] = outcome.conflicts
        [item] = [r for r in queue_items.unwitnessed(store) if r["job"] == rep.JOB]
        from conftest import run_loom

        claimed = run_loom("--state-dir", str(state_dir), "resolve", str(item["id"]), "--note", "merged both")
        assert claimed.returncode == 0, claimed.stderr
        (b_dir / copy).unlink()
        outcome, state = rep.sync_once(store, target)  # within the quiet period: not committed
        assert not outcome.committed and state.ahead == 0 and not state.error
        assert queue_items.get(store, item["id"])["state"] == "claimed" and copy in git(
            "--git-dir", str(remote), "ls-tree", "--name-only", "main")
        outcome, state = rep.sync_once(store, target, forced=True)
        assert outcome.pushed and queue_items.get(store, item["id"])["state"] == "witnessed"


def test_a_conflict_whose_report_was_lost_gets_its_item_at_the_next_sync_and_another_boxs_copy_none(
        tmp_path, remote):
    """The copies are committed during the rebase; their queue items come after, from what the sync
    reported: a git that timed out mid-way, an interrupt, or a store that refused the items lost
    the report, and the copies, in the tree for good, were never the agent's to reconcile."""
    from loomtui.config import load_config

    a = box(tmp_path, remote, "a")
    a.dir.mkdir(parents=True)
    (a.dir / "MEMORY.md").write_text("base\n")
    sync(a, forced=True)
    config = write_config(tmp_path, remote, "b")
    state_dir = tmp_path / "state-b"
    state_dir.mkdir(mode=0o700)
    loaded, _ = load_config(str(config), {})
    [target] = rep.targets(loaded, state_dir)
    b = target.replica()
    with Store.in_dir(state_dir) as store:
        rep.sync_once(store, target, forced=True)  # b has the base
        (a.dir / "MEMORY.md").write_text("base\nfrom a\n")
        (b.dir / "MEMORY.md").write_text("base\nfrom b\n")
        sync(a, forced=True)
        done, _ = sync(b, forced=True)  # the sync alone: its report never reaches the queue
        [(_, copy)] = done.conflicts
        assert [r for r in queue_items.unwitnessed(store) if r["job"] == rep.JOB] == []
        rep.sync_once(store, target)
        [item] = [r for r in queue_items.unwitnessed(store) if r["job"] == rep.JOB]
        assert item["log"] == str(b.dir / copy) and item["agent"] == "main"
        rep.sync_once(store, target)  # told once
        assert len([r for r in queue_items.unwitnessed(store) if r["job"] == rep.JOB]) == 1
        # a pulls b's copy: b's agent reconciles it, not a's.
        sync(a, forced=True)
        assert (a.dir / copy).exists() and a.own_conflicts() == []
        # Deleted, not committed yet (its quiet period): reconciled, never an item to open again.
        assert b.own_conflicts() == [("MEMORY.md", copy)]
        index = b.git_dir / "index"
        saved = index.read_bytes()
        index.write_bytes(b"not an index")
        assert b.own_conflicts() == []  # git refused: asked again at the next sync, no error out of this one
        index.write_bytes(saved)
        (b.dir / copy).unlink()
        assert b.own_conflicts() == []


def test_changes_git_cannot_commit_leave_nothing_waiting_to_be_pushed(tmp_path, remote):
    """A repository inside the memory (an agent's clone) with changes of its own: `status` says
    changed, `add -A` stages nothing, and the change's quiet period never ended, so no conflict was
    ever witnessed again (witnessing waits for nothing to be waiting)."""
    a = box(tmp_path, remote, "a")
    a.dir.mkdir(parents=True)
    inner = a.dir / "clone"
    git("init", "-q", str(inner))
    (inner / "f").write_text("x\n")
    git("-C", str(inner), "add", "f")
    git("-C", str(inner), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    sync(a, forced=True)
    (inner / "f").write_text("x\ny\n")  # the clone's own change: nothing the memory's commit takes
    _, state = sync(a, forced=True, now=T0)
    assert state.changed_at is None and rep.pushed_all(state)


def test_the_head_a_sync_sends_off_the_box_is_on_disk_first(tmp_path, remote):
    # With synchronous = NORMAL a commit is sure only at a checkpoint: a power cut after the push
    # could lose the events the pushed head names, and their ids, reused, read as a rewritten history.
    import contextlib
    import shutil
    import sqlite3

    from test_ledger_head import fill

    from loomtui.config import load_config

    config = write_config(tmp_path, remote)
    state_dir = tmp_path / "state-a"
    state_dir.mkdir(mode=0o700)
    loaded, _ = load_config(str(config), {})
    (tmp_path / "a" / "memory").mkdir(parents=True)
    with Store.in_dir(state_dir) as store:  # open throughout: nothing checkpoints it on a close
        fill(store, 12)
        [target] = rep.targets(loaded, state_dir)
        outcome, _ = rep.sync_once(store, target, forced=True)
        assert outcome.checkpoint.startswith("12:") and remote_file(remote, ".loom/checkpoints/a").startswith("12:")
        alone = tmp_path / "alone"
        alone.mkdir()
        shutil.copy(state_dir / "loom.db", alone / "loom.db")  # the file, not its write-ahead log
        with contextlib.closing(sqlite3.connect(alone / "loom.db")) as db:
            assert db.execute("SELECT max(id) FROM ledger").fetchone()[0] == 12


def test_ledger_verify_remote_passes_then_fails_after_a_local_rewrite_with_recomputed_hashes(tmp_path, remote):
    from test_ledger_head import fill, rewrite

    config = write_config(tmp_path, remote)
    state_dir = tmp_path / "state-a"
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        fill(store, 12)
    assert loom_at(config, "memory", "sync").returncode == 0  # the head goes off the box with the sync
    assert remote_file(remote, ".loom/checkpoints/a").startswith("12:")
    with Store.in_dir(state_dir) as store:
        fill(store, 3)  # the ledger goes on after the checkpoint
    ok = loom_at(config, "ledger", "verify", "--remote")
    assert ok.returncode == 0, ok.stderr
    assert "1 checkpoint on the remote" in ok.stdout and "(the newest 12:" in ok.stdout

    rewrite(state_dir, 5, {"i": 999, "forged": True})
    assert loom_at(config, "ledger", "verify").returncode == 0  # the chain alone cannot tell
    caught = loom_at(config, "ledger", "verify", "--remote")
    assert caught.returncode == 1
    assert "ledger broken at event 12" in caught.stderr and "the checkpoint's" in caught.stderr


def salvaged_after_a_checkpoint(tmp_path, remote, damaged_table: str):
    """Twelve events checkpointed off the box, then the store damaged (`damaged_table`'s root page
    overwritten) and salvaged as the daemon does: a new chain, the old file moved aside."""
    from test_ledger_head import fill
    from test_store_health import scribble_table

    from loomtui.store.salvage import open_or_salvage

    config = write_config(tmp_path, remote)
    state_dir = tmp_path / "state-a"
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        fill(store, 12)
    assert loom_at(config, "memory", "sync").returncode == 0
    assert remote_file(remote, ".loom/checkpoints/a").startswith("12:")
    with Store.in_dir(state_dir) as store:
        scribble_table(store, damaged_table)
    store, salvage = open_or_salvage(state_dir)
    assert salvage is not None
    with store:
        fill(store, 3)  # the new chain: its salvage event, then three
    return config, state_dir, salvage


def test_after_a_salvage_the_old_ledgers_checkpoints_are_proven_against_the_file_it_moved_aside(tmp_path, remote):
    # The new chain restarts at event 1: the head checkpointed before the salvage is not in it, and
    # verify --remote failed on it at every run from then on.
    from test_ledger_head import rewrite

    config, state_dir, salvage = salvaged_after_a_checkpoint(tmp_path, remote, "meta")
    ok = loom_at(config, "ledger", "verify", "--remote")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("ledger intact: 4 events; 1 head kept off the box before the salvage of ")
    assert f"proven against the ledger it moved aside, {salvage.moved_to} (the newest 12:" in ok.stdout
    # Passed, but never silently: the history is in that file, and a salvage is anyone's who can write the store.
    assert "this ledger begins at a salvage on " in ok.stderr and f"the history before it is in {salvage.moved_to}" in ok.stderr
    assert "one you were never told of was made by someone else" in ok.stderr
    # A head the operator kept before the salvage (an escalation's, `loom ledger head`) is proven there too.
    head = remote_file(remote, ".loom/checkpoints/a").split()[0]
    kept = loom_at(config, "ledger", "verify", "--head", head)
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout.startswith("ledger intact: 4 events; 1 head kept off the box before the salvage of ")
    assert loom_at(config, "ledger", "verify", "--head", "12:" + "0" * 64).returncode == 1
    assert loom_at(config, "memory", "sync").returncode == 0  # the new chain's head goes off the box too
    both = loom_at(config, "ledger", "verify", "--remote")
    assert both.returncode == 0, both.stderr
    assert "and to all 1 checkpoint on the remote (the newest 4:" in both.stdout and "before the salvage" in both.stdout
    # The old file is held to the heads kept off the box: edited, hashes and all, its chain no longer
    # reaches the checkpoint, and nothing else can prove it.
    import shutil
    import sqlite3

    kept = tmp_path / "kept.db"
    shutil.copy(salvage.moved_to, kept)
    with sqlite3.connect(salvage.moved_to, isolation_level=None) as old:
        old.execute("UPDATE ledger SET detail = ? WHERE id = 5", (ledger.canonical({"i": 999}),))
        prev = old.execute("SELECT hash FROM ledger WHERE id = 4").fetchone()[0]
        for rid, ts, kind, source, cause, detail, agent in old.execute(
                "SELECT id, ts, kind, source, cause, detail, agent FROM ledger WHERE id >= 5 ORDER BY id").fetchall():
            digest = ledger.event_hash(prev, rid, ts, kind, source, cause, detail, agent)
            old.execute("UPDATE ledger SET prev_hash = ?, hash = ? WHERE id = ?", (prev, digest, rid))
            prev = digest
    old.close()
    edited = loom_at(config, "ledger", "verify", "--remote")
    assert edited.returncode == 1
    assert "the ledger ends at event 4, before the checkpoint of event 12" in edited.stderr
    assert (f"the ledger before it, {salvage.moved_to}, holds its chain to event 12: a head of that ledger "
            "beyond it cannot be proven") in edited.stderr
    shutil.copy(kept, salvage.moved_to)
    assert loom_at(config, "ledger", "verify", "--remote").returncode == 0
    # The new chain is held to its own checkpoint as any other: rewritten, it fails.
    rewrite(state_dir, 2, {"i": 999, "forged": True})
    caught = loom_at(config, "ledger", "verify", "--remote")
    assert caught.returncode == 1 and "ledger broken at event 4" in caught.stderr


def test_after_a_salvage_that_lost_the_old_ledger_its_checkpoints_are_said_unprovable(tmp_path, remote):
    config, _, salvage = salvaged_after_a_checkpoint(tmp_path, remote, "ledger")
    lost = loom_at(config, "ledger", "verify", "--remote")
    assert lost.returncode == 1
    assert "the ledger ends at event 4, before the checkpoint of event 12" in lost.stderr
    assert f"the ledger before it, {salvage.moved_to}, holds its chain to event 0:" in lost.stderr
    # A link named as a salvage names its file is never followed: the proof reads this directory's files only.
    state_dir = salvage.moved_to.parent
    moved_name = salvage.moved_to.name
    salvage.moved_to.rename(state_dir / "elsewhere.db")
    (state_dir / moved_name).symlink_to(state_dir / "elsewhere.db")
    linked = loom_at(config, "ledger", "verify", "--remote")
    assert linked.returncode == 1 and "begins at a salvage" not in linked.stderr


def test_ledger_verify_remote_without_a_remote_or_a_checkpoint_says_why(tmp_path, remote):
    bare = tmp_path / "config.toml"
    bare.write_text(f'state_dir = "{tmp_path / "s"}"\n')
    none = loom_at(bare, "ledger", "verify", "--remote")
    assert none.returncode == 2 and "neither is set" in none.stderr
    empty = loom_at(write_config(tmp_path, remote), "ledger", "verify", "--remote")
    assert empty.returncode == 1 and "no ledger checkpoint of host a" in empty.stderr


def test_the_console_memory_summary_shows_the_lag_at_80_columns(tmp_path, remote):
    import asyncio

    from test_memory_panel import PanelApp, until
    from textual.widgets import Static

    a = box(tmp_path, remote, "a")
    a.dir.mkdir(parents=True)
    (a.dir / "MEMORY.md").write_text("- [One](one.md) — the first\n")
    (a.dir / "one.md").write_text("1\n")
    sync(a, forced=True)
    (a.dir / "two.md").write_text("2\n")
    remote.rename(tmp_path / "away.git")
    sync(a, forced=True)  # offline: one commit kept locally

    async def run() -> None:
        app = PanelApp(a.dir, state_dir=tmp_path / "a" / "state")
        async with app.run_test(size=(80, 24)) as pilot:
            summary = app.query_one("#memory-summary", Static)
            # The lag may come before the index is read ("loading… · replica …"): wait for both.
            await until(pilot, lambda: "replica" in summary.content.plain and "MEMORY.md" in summary.content.plain,
                        what="the index and the replica's lag")
            line = summary.content.plain
            assert "MEMORY.md: 1 entry" in line and "1 to push offline" in line and "↑" in line
            assert len(line) <= 78 and summary.region.width <= 80  # one line inside the padding

    asyncio.run(run())


def test_a_remote_that_hangs_is_given_up_after_the_git_timeout_and_the_commit_kept(tmp_path, monkeypatch):
    # ssh that never answers (a sleep in its place): git waits on it until Loom ends the group.
    monkeypatch.setenv("GIT_SSH_COMMAND", "sleep 600; true")  # git appends its arguments to `true`
    hung = replica(tmp_path, "ssh://nowhere.invalid/memory.git", "h", timeout=1)
    hung.dir.mkdir(parents=True)
    (hung.dir / "note.md").write_text("kept\n")
    done, state = sync(hung, forced=True)
    assert done.committed and not done.pushed
    assert "did not finish within 1s" in state.error and state.ahead == 1


# -- the repository is Loom's, out of the agent's reach ----------------------------------------------

def plant(git_dir: Path, marker: Path) -> None:
    """What an agent that writes its memory directory could leave in a `.git` there: a hook that
    runs at each commit and a clean filter every `git add` runs through a shell, each writing the
    environment it was given to `marker`."""
    hooks = git_dir / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    for name in ("post-commit", "pre-commit", "reference-transaction", "pre-push", "post-rewrite"):
        (hooks / name).write_text(f"#!/bin/sh\nenv > '{marker}.{name}'\n")
        (hooks / name).chmod(0o755)
    with open(git_dir / "config", "a") as fh:
        fh.write(f"[filter \"x\"]\n\tclean = \"env > '{marker}.filter'; cat\"\n[core]\n\tfsmonitor = \"env > '{marker}.fsm'\"\n")


def test_a_git_dir_the_agent_writes_in_its_memory_is_never_run(tmp_path, remote, monkeypatch):
    # The daemon's environment holds the bot token; the agent's does not (its driver drops it).
    monkeypatch.setenv("LOOM_TELEGRAM_TOKEN", "123456:the-bots-secret")
    a = box(tmp_path, remote, "a")
    a.dir.mkdir(parents=True)
    (a.dir / "note.md").write_text("one\n")
    sync(a, forced=True)
    assert a.git_dir.is_dir() and not (a.dir / ".git").exists()
    assert a.git_dir.is_relative_to(tmp_path / "a" / "state" / rep.REPLICAS_DIR)
    marker = tmp_path / "ran"
    plant(a.dir / ".git", marker)  # a .git of the agent's making in the work tree
    (a.dir / ".gitattributes").write_text("* filter=x\n")
    (a.dir / "note.md").write_text("one two\n")
    done, _ = sync(a, forced=True)
    assert done.committed and done.pushed and remote_file(remote, "note.md") == "one two\n"
    assert list(tmp_path.glob("ran.*")) == []
    assert ".git/config" not in git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", "main")
    assert "the-bots-secret" not in str(rep.Git(a.dir, "a", 5, git_dir=a.git_dir).env)


def test_a_git_dir_an_older_loom_made_in_the_work_tree_is_adopted_without_what_runs(tmp_path, remote, monkeypatch):
    monkeypatch.setenv("LOOM_TELEGRAM_TOKEN", "123456:the-bots-secret")
    work = tmp_path / "a" / "memory"
    work.mkdir(parents=True)
    (work / "old.md").write_text("from before\n")
    git("init", "-q", "-b", "main", cwd=work)
    git("-c", "user.name=x", "-c", "user.email=x@y", "add", "-A", cwd=work)
    git("-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "-m", "an older Loom's commit", cwd=work)
    (work / ".git" / rep.STATE_FILE).write_text('{"last_push": 1.0}')  # what an older Loom's sync left
    marker = tmp_path / "ran"
    plant(work / ".git", marker)
    (work / ".gitattributes").write_text("* filter=x\n")
    a = box(tmp_path, remote, "a")
    (work / "new.md").write_text("after\n")
    done, _ = sync(a, forced=True)
    assert done.pushed and not (work / ".git").exists()
    [kept] = a.git_dir.parent.glob(a.git_dir.name + ".adopted-*")  # moved aside, never run
    assert (kept / "hooks" / "post-commit").exists()
    log = git("--git-dir", str(remote), "log", "--format=%s", "main").splitlines()
    assert log[-1] == "an older Loom's commit" and len(log) == 2  # its history kept, the change on top
    assert remote_file(remote, "new.md") == "after\n" and remote_file(remote, "old.md") == "from before\n"
    assert list(tmp_path.glob("ran.*")) == []
    found = subprocess.run([GIT, f"--git-dir={a.git_dir}", "config", "--get", "filter.x.clean"], capture_output=True)
    assert found.returncode == 1  # its config stayed behind, with its hooks


def test_a_git_dir_of_the_operators_own_in_the_memory_dir_is_refused_and_left_whole(tmp_path, remote):
    # memory.dir pointed at a repository of the operator's: adopted, its config, LFS objects,
    # stashes and worktrees would have been lost with the rmtree.
    work = tmp_path / "a" / "memory"
    work.mkdir(parents=True)
    (work / "notes.md").write_text("mine\n")
    git("init", "-q", "-b", "main", cwd=work)
    git("config", "user.name", "me", cwd=work)
    before = sorted(p.relative_to(work).as_posix() for p in (work / ".git").rglob("*"))
    a = box(tmp_path, remote, "a")
    with pytest.raises(rep.GitError, match="not a Loom replica's"):
        a.lock()
    assert sorted(p.relative_to(work).as_posix() for p in (work / ".git").rglob("*")) == before
    assert git("config", "--get", "user.name", cwd=work).strip() == "me"
    assert not a.git_dir.exists() and not list(a.git_dir.parent.glob("*.new-*"))  # nothing half made


# -- a rebase stopped where `--continue` cannot go on: what is there is committed, never reset away ----


def two_local_commits(tmp_path: Path, remote: Path, *, conflicting: bool = False) -> rep.Replica:
    """b with two commits the remote has not got (x.md, then y.md) and a's newer commit fetched.
    `conflicting`: b's first commit and a's both changed MEMORY.md."""
    a, b = shared(tmp_path, remote, {"MEMORY.md": "base\n", "other.md": "keep\n"})
    (a.dir / ("MEMORY.md" if conflicting else "fromA.md")).write_text("base\nfrom a\n")
    sync(a, forced=True)
    if conflicting:
        (b.dir / "MEMORY.md").write_text("base\nfrom b\n")
    (b.dir / "x.md").write_text("x1\n")
    b.commit(T0, "c1")
    (b.dir / "y.md").write_text("y1\n")
    b.commit(T0 + 1, "c2")
    b.fetch()
    return b


def rebase_with(b: rep.Replica, line: str, after: str = "1") -> subprocess.CompletedProcess:
    """The real `git rebase -i`, `line` put in its todo after the first pick (a `break`, an `exec`),
    or after each line `after` (a sed address) matches."""
    env = {"HOME": str(Path.home()), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(Path.home() / "gitconfig"),
           "PATH": "/usr/bin:/bin", "GIT_SEQUENCE_EDITOR": f"sed -i '{after}a {line}'"}
    return subprocess.run([GIT, "-c", "user.name=b", "-c", "user.email=b@example.invalid", *repo(b), "rebase", "-i",
                           b.remote_ref], cwd=b.dir, env=env, capture_output=True, timeout=60)


def test_a_rebase_stopped_between_picks_keeps_what_the_agent_wrote_meanwhile(tmp_path, remote):
    """Killed between two picks, and the agent wrote on: `--continue` refuses the staged change, and
    the `--skip` that followed reset it away (the agent's line lost, the sync said it pushed)."""
    b = two_local_commits(tmp_path, remote)
    rebase_with(b, "break")
    assert (b.git_dir / "rebase-merge").exists()
    with open(b.dir / "x.md", "a") as fh:
        fh.write("the agent's fact\n")
    done, _ = sync(b, forced=True)
    assert done.pushed and not (b.git_dir / "rebase-merge").exists()
    assert (b.dir / "x.md").read_text() == "x1\nthe agent's fact\n"
    assert remote_file(remote, "x.md") == "x1\nthe agent's fact\n"
    assert remote_file(remote, "y.md") == "y1\n" and remote_file(remote, "fromA.md") == "base\nfrom a\n"


def test_a_rebase_killed_mid_pick_keeps_that_pick(tmp_path, remote):
    """Killed inside a pick: its change applied to the index, the todo past it, nothing committed
    and no author-script. `--continue` cannot commit it, and `--skip` reset this box's commit away."""
    b = two_local_commits(tmp_path, remote)
    rebase_with(b, "break")
    todo = b.git_dir / "rebase-merge" / "git-rebase-todo"
    pick, *rest = todo.read_text().splitlines()
    todo.write_text("".join(f"{line}\n" for line in rest))  # as the sequencer leaves it mid-pick
    with open(b.git_dir / "rebase-merge" / "done", "a") as fh:
        fh.write(pick + "\n")
    git(*repo(b), "cherry-pick", "-n", pick.split()[1], cwd=b.dir)
    done, _ = sync(b, forced=True)
    assert done.pushed and not (b.git_dir / "rebase-merge").exists()
    assert (b.dir / "y.md").read_text() == "y1\n" and remote_file(remote, "y.md") == "y1\n"
    assert remote_file(remote, "x.md") == "x1\n"


def test_a_file_written_just_after_an_empty_picks_clean_check_is_kept(tmp_path, remote):
    """This box deleted a file the remote changed: the remote's side is kept, and the pick is left
    empty. A git before 2.26 refuses to `--continue` with an empty pick (git here drops it: that
    answer is given in its place); the pick was then skipped (`rebase --skip`, a hard reset) once the
    tree read clean, and a file the agent wrote between that check and the skip was reset away."""
    from loomtui.memory.git import Result

    a, b = shared(tmp_path, remote, {"MEMORY.md": "base\n", "notes.md": "notes\n"})
    (a.dir / "MEMORY.md").write_text("base\nfrom a\n")
    sync(a, forced=True)
    (b.dir / "MEMORY.md").unlink()
    b.commit(T0, "b deletes")
    run = b.git.run
    seen: list[tuple[str, ...]] = []

    def older_git_and_an_agent_that_writes(*args, **kwargs):
        seen.append(args)
        if args[-2:] == ("rebase", "--continue") and seen.count(args) == 1:
            return Result(1, "No changes - did you forget to use 'git add'?", "")
        result = run(*args, **kwargs)
        if args[:3] == ("diff", "--cached", "--quiet"):
            with open(b.dir / "notes.md", "a") as fh:  # the agent, at that moment
                fh.write("the agent's fact\n")
        return result

    b.git.run = older_git_and_an_agent_that_writes  # type: ignore[method-assign]
    done, state = sync(b, forced=True, now=T0 + 1)
    assert ("diff", "--cached", "--quiet", "HEAD") in seen and ("rebase", "--skip") not in seen
    assert not done.error and not (b.git_dir / "rebase-merge").exists()
    assert (b.dir / "notes.md").read_text() == "notes\nthe agent's fact\n"
    assert (b.dir / "MEMORY.md").read_text() == "base\nfrom a\n"  # the remote's side kept
    b.git.run = run  # type: ignore[method-assign]
    done, state = sync(b, forced=True, now=T0 + 2)
    assert remote_file(remote, "notes.md") == "notes\nthe agent's fact\n" and state.ahead == 0
    assert remote_file(remote, "MEMORY.md") == "base\nfrom a\n"


def test_a_rebase_of_gits_older_backend_left_at_an_empty_pick_is_finished(tmp_path, remote):
    """A rebase begun on the `apply` backend (by hand, or by a git whose config chose it) stopped at
    a pick that keeping the remote's side leaves empty. That backend will not go on past an empty
    commit: one made per stop would stop it at the same place again, MAX_REBASE_STOPS times a sync."""
    a, b = shared(tmp_path, remote, {"MEMORY.md": "base\n", "notes.md": "notes\n"})
    (a.dir / "MEMORY.md").write_text("base\nfrom a\n")
    sync(a, forced=True)
    (b.dir / "MEMORY.md").unlink()
    b.commit(T0, "b deletes")
    (b.dir / "notes.md").write_text("notes\nfrom b\n")
    b.commit(T0 + 1, "b notes")
    b.fetch()
    ident = ["-c", "user.name=b", "-c", "user.email=b@example.invalid"]
    stopped = subprocess.run([GIT, *ident, *repo(b), "rebase", "--apply", "-q", b.remote_ref], cwd=b.dir,
                             capture_output=True)
    assert stopped.returncode != 0 and (b.git_dir / "rebase-apply").exists()  # at the modify/delete
    assert b.ahead() == 2  # the branch it rebases keeps b's two commits meanwhile
    done, state = sync(b, forced=True, now=T0 + 2)
    assert not done.error and done.pushed and not b._rebasing()
    assert remote_file(remote, "MEMORY.md") == "base\nfrom a\n" and remote_file(remote, "notes.md") == "notes\nfrom b\n"
    assert int(git("--git-dir", str(remote), "rev-list", "--count", "main")) <= 5  # no empty commit per stop


def test_a_branch_changed_in_the_config_is_pushed_to(tmp_path, remote):
    """`memory.branch` changed: the repository stays on the branch it has. Counting the configured
    branch's commits (none: it does not exist here) said nothing was ahead, and nothing was pushed."""
    a = box(tmp_path, remote, "a")
    a.dir.mkdir(parents=True)
    (a.dir / "MEMORY.md").write_text("base\n")
    sync(a, forced=True)
    moved = rep.Replica(a.dir, str(remote), git_dir=a.git_dir, host="a", branch="next", timeout=60)
    (a.dir / "MEMORY.md").write_text("base\nmore\n")
    done, state = sync(moved, forced=True, now=T0)
    assert not done.error and done.pushed and state.ahead == 0
    assert git("--git-dir", str(remote), "show", "next:MEMORY.md") == "base\nmore\n"


def test_a_file_written_while_a_conflict_stop_is_continued_is_kept_with_the_conflict_copy(tmp_path, remote):
    """At a conflict stop the work tree is added, then `--continue`: a file written while it runs (here
    by an `exec` in the todo, as the agent could at any moment) made it stop with nothing unmerged,
    and the `--skip` that followed reset the write away."""
    b = two_local_commits(tmp_path, remote, conflicting=True)
    stopped = rebase_with(b, "exec echo the agent wrote >> other.md")
    assert stopped.returncode != 0 and (b.git_dir / "rebase-merge").exists()  # at the conflict in c1
    done, _ = sync(b, forced=True, now=T0)
    assert done.pushed and not (b.git_dir / "rebase-merge").exists()
    [(path, copy)] = done.conflicts
    assert path == "MEMORY.md" and (b.dir / copy).read_text() == "base\nfrom b\n"
    assert remote_file(remote, copy) == "base\nfrom b\n"
    assert remote_file(remote, "other.md") == "keep\nthe agent wrote\n"
    assert remote_file(remote, "y.md") == "y1\n" and remote_file(remote, "x.md") == "x1\n"


def test_a_rebase_past_a_syncs_stops_is_left_to_the_next_and_nothing_written_meanwhile_is_lost(tmp_path, remote,
                                                                                                 monkeypatch):
    """A rebase that stops more often than one sync goes on (MAX_REBASE_STOPS, 3 here: five conflicting
    commits stand for hundreds), the agent writing between the stops (an `exec` after each pick).
    Past the limit it was aborted: a hard reset, and the agent's lines (those committed at the stops
    and by `_unstick`, and the last one not yet added) were gone with the conflict copies kept so far;
    the next sync began the same rebase again and stopped at the same place."""
    monkeypatch.setattr(rep, "MAX_REBASE_STOPS", 3)
    a, b = shared(tmp_path, remote, {"MEMORY.md": "base\n", "notes.md": "notes\n"})
    (a.dir / "MEMORY.md").write_text("base\nfrom a\n")
    sync(a, forced=True)
    for n in range(1, 6):
        (b.dir / "MEMORY.md").write_text(f"base\nfrom b {n}\n")
        b.commit(T0 + n, f"b{n}")
    b.fetch()
    stopped = rebase_with(b, "exec echo the agent wrote >> notes.md", after="/^pick/")
    assert stopped.returncode != 0 and (b.git_dir / "rebase-merge").exists()  # at the conflict in b1
    done, state = sync(b, forced=True, now=T0 + 10)
    assert done.error and state.error_kind == "local" and not done.pushed and state.failures == 0
    # b's five commits are still its own (the branch keeps them until the rebase ends): said so,
    # where the count kept from b's last good sync said 0.
    assert state.ahead == done.ahead == 5 and "5 commits kept locally" in done.lines()[-1]
    written = (b.dir / "notes.md").read_text()
    assert written.startswith("notes\nthe agent wrote\n") and set(written.splitlines()[1:]) == {"the agent wrote"}
    assert (b.git_dir / "rebase-merge").exists()  # where it stopped, for the next sync to go on from
    assert "left in progress" in rep.lag_line(state, T0 + 10)
    kept = list(done.conflicts)  # each copy it made so far is the agent's to reconcile, now
    assert kept and all((b.dir / copy).exists() for _, copy in kept)
    assert (b.dir / "MEMORY.md").read_text() == "base\nfrom a\n"  # its last stop kept both ways: no markers
    for n in range(4):  # each sync takes the rebase MAX_REBASE_STOPS further
        done, state = sync(b, forced=True, now=T0 + 11 + n)
        kept += done.conflicts
        if not done.error:
            break
    assert done.pushed and not state.error and not (b.git_dir / "rebase-merge").exists()
    assert remote_file(remote, "notes.md") == "notes\n" + "the agent wrote\n" * 5
    assert remote_file(remote, "MEMORY.md") == "base\nfrom a\n"
    assert sorted(remote_file(remote, copy) for _, copy in kept) == [f"base\nfrom b {n}\n" for n in range(1, 6)]


def test_a_rebase_left_half_done_that_cannot_be_finished_now_is_not_committed_over(tmp_path, remote):
    """The look that finishes an earlier sync's rebase failed (here: the remote's URL changed and a
    crashed git left config.lock). The sync went on regardless: `add -A` marked the conflicted file
    resolved with its conflict markers, committed it with the ledger's checkpoint mid-rebase, and
    the next sync pushed the markers. Now nothing is committed, checkpointed or pushed that round."""
    a, b = shared(tmp_path, remote, {"MEMORY.md": "base\n"})
    (a.dir / "MEMORY.md").write_text("base\nfrom a\n")
    sync(a, forced=True)
    (b.dir / "MEMORY.md").write_text("base\nfrom b\n")
    b.commit(T0)
    b.fetch()
    stopped = subprocess.run([GIT, *repo(b), "rebase", "-q", b.remote_ref], cwd=b.dir, capture_output=True)
    assert stopped.returncode != 0 and (b.git_dir / "rebase-merge").exists()
    head = git(*repo(b), "rev-parse", "HEAD", cwd=b.dir)
    moved = replica(tmp_path, f"file://{remote}", "b", timeout=60)  # memory.remote spelled anew
    (b.git_dir / "config.lock").write_text("")  # a git that died holding the config
    done, state = sync(moved, forced=True, now=T0 + 10, checkpoint=(5, "ab" * 32))
    assert done.error and state.error and not done.committed and not done.checkpoint and not done.pushed
    assert git(*repo(b), "rev-parse", "HEAD", cwd=b.dir) == head and (b.git_dir / "rebase-merge").exists()
    assert "MEMORY.md" in git(*repo(b), "ls-files", "-u", cwd=b.dir)  # still the rebase's to finish

    (b.git_dir / "config.lock").unlink()
    done, _ = sync(moved, forced=True, now=T0 + 20, checkpoint=(5, "ab" * 32))
    assert done.pushed and done.checkpoint and not (b.git_dir / "rebase-merge").exists()
    [(path, copy)] = done.conflicts
    assert remote_file(remote, path) == "base\nfrom a\n" and remote_file(remote, copy) == "base\nfrom b\n"
    markers = subprocess.run([GIT, "--git-dir", str(remote), "log", "-G<<<<<<<", "--format=%s", "main"],
                             capture_output=True, text=True, check=True).stdout
    assert markers == ""  # no commit ever held a conflict marker


def test_a_conflict_in_a_file_whose_name_is_not_utf8_is_kept_both_ways(tmp_path, remote):
    """git's `-z` output was decoded with "replace": `caf\\xe9.md` came back as `caf\\ufffd.md`, a
    name git did not know, so keeping both sides failed at every sync and the rebase stayed half
    done. Names now round-trip as the bytes on disk; what is stored and shown is text."""
    import os

    name = os.fsdecode(b"caf\xe9.md")
    a, b = shared(tmp_path, remote, {name: "base\n"})
    (a.dir / name).write_text("base\nfrom a\n")
    sync(a, forced=True)
    (b.dir / name).write_text("base\nfrom b\n")
    done, state = sync(b, forced=True, now=T0)
    assert not done.error and done.pushed and not (b.git_dir / "rebase-merge").exists()
    [(path, copy)] = done.conflicts
    assert path == name and (b.dir / name).read_text() == "base\nfrom a\n"
    assert (b.dir / copy).read_text() == "base\nfrom b\n" and state.conflicts == 1
    assert copy.encode("utf-8")  # a text name: the queue item (SQLite) and the log take it
    assert remote_file(remote, name) == "base\nfrom a\n" and remote_file(remote, copy) == "base\nfrom b\n"
    assert all(line.encode("utf-8") for line in done.lines())  # the daemon's log takes them

    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        [opened] = rep.open_conflicts(store, "main", b.dir, done.conflicts, T0)
        assert queue_items.get(store, opened)["log"] == str(b.dir / copy)


def test_two_names_not_utf8_that_read_alike_get_a_queue_item_each(tmp_path):
    """Each name's undecodable byte reads as U+FFFD: both conflicts went into one item, the second
    copy taking the first's place in it, and the first copy was never the agent's to reconcile."""
    import os

    first, second, plain = os.fsdecode(b"a\xff.md"), os.fsdecode(b"a\xfe.md"), "a\ufffd.md"
    copies = [(first, "a\ufffd.md.conflict-b-1"), (second, "a\ufffd.md.conflict-b-2"), (plain, "a\ufffd.md.conflict-b-3")]
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        opened = rep.open_conflicts(store, "main", tmp_path, copies, T0)
        assert len(opened) == 3
        assert [queue_items.get(store, i)["log"] for i in opened] == [str(tmp_path / c) for _, c in copies]
        assert rep.open_conflicts(store, "main", tmp_path, copies[:1], T0 + 1) == []  # the same file again
        assert [queue_items.get(store, i)["count"] for i in opened] == [2, 1, 1]
        # A UTF-8 name is its own signature, with its copy's suffix, in its directory
        assert queue_items.get(store, opened[2])["signature"] == f"{plain}.conflict-b-3 in {tmp_path}"


def test_the_same_file_in_conflict_in_two_agents_memories_is_an_item_each(tmp_path):
    """Two agents, each with a memory of its own, both with MEMORY.md in conflict: the second went
    into the first's item (its copy in the first's place, its agent the first's), and the second
    agent was never told; the first's copy, no longer the item's, was never reconciled."""
    first, second = tmp_path / "memory-a", tmp_path / "memory-b"
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        [a] = rep.open_conflicts(store, "a", first, [("MEMORY.md", "MEMORY.md.conflict-x-1")], T0)
        [b] = rep.open_conflicts(store, "b", second, [("MEMORY.md", "MEMORY.md.conflict-y-1")], T0 + 1)
        assert (queue_items.get(store, a)["agent"], queue_items.get(store, a)["log"]) == (
            "a", str(first / "MEMORY.md.conflict-x-1"))
        assert (queue_items.get(store, b)["agent"], queue_items.get(store, b)["log"]) == (
            "b", str(second / "MEMORY.md.conflict-y-1"))
        # The same copy reported again: counted on its own item.
        assert rep.open_conflicts(store, "a", first, [("MEMORY.md", "MEMORY.md.conflict-x-1")], T0 + 2) == []
        assert [queue_items.get(store, i)["count"] for i in (a, b)] == [2, 1]
        # A second conflict of the file, before the first was reconciled: its copy an item of its own
        # (folded into the first, the older copy, which may hold edits the newer lacks, was no item's).
        [again] = rep.open_conflicts(store, "a", first, [("MEMORY.md", "MEMORY.md.conflict-x-2")], T0 + 3)
        assert queue_items.get(store, a)["log"] == str(first / "MEMORY.md.conflict-x-1")
        assert queue_items.get(store, again)["log"] == str(first / "MEMORY.md.conflict-x-2")


def test_a_local_refusal_is_not_said_to_be_the_remote_and_does_not_back_it_off(tmp_path, remote, git_home,
                                                                                 monkeypatch):
    """The agent wrote while the fetch ran (here: the ssh in git's place writes, then serves the
    fetch), so the rebase refused a dirty tree. That was shown as "remote unreachable" and grew the
    remote's backoff, while the remote had just answered."""
    a = box(tmp_path, remote, "a")
    a.dir.mkdir(parents=True)
    (a.dir / "MEMORY.md").write_text("base\n")
    sync(a, forced=True)
    (a.dir / "new.md").write_text("from a\n")
    sync(a, forced=True)
    memory, ssh = tmp_path / "b" / "memory", tmp_path / "ssh"
    ssh.write_text(f"#!/bin/sh\ncase \"$2\" in git-upload-pack*) [ -f '{memory}/MEMORY.md' ] && "
                   f"echo 'the agent writes' >> '{memory}/MEMORY.md';; esac\nexec sh -c \"$2\"\n")
    ssh.chmod(0o755)
    with open(git_home / "gitconfig", "a") as fh:
        fh.write("[ssh]\n\tvariant = simple\n")  # host and command only: what the script takes
    monkeypatch.setenv("GIT_SSH_COMMAND", str(ssh))
    b = replica(tmp_path, f"ssh://forge{remote}", "b", timeout=60)
    sync(b, forced=True, now=T0)  # the first pull: nothing tracked to write into yet
    done, state = sync(b, forced=True, now=T0 + 1)
    assert done.error and "unstaged changes" in done.error and not done.pushed
    assert state.failures == 0 and state.error_kind == "local"
    said = " ".join(done.lines()) + rep.lag_line(state, T0 + 1)
    assert "remote unreachable" not in said and "offline" not in rep.lag_line(state, T0 + 1, short=True)
    assert "not the remote" in said


def test_a_leftover_index_lock_is_an_error_here_recorded_where_the_operator_looks(tmp_path, remote):
    """A git killed while it held the index left index.lock: the commit's `add -A` failed, and the
    GitError escaped the sync unrecorded (status, commit and the count of commits ahead ran outside
    its try): `loom status` went on showing the last good sync, and the daemon's loop had the error."""
    config = write_config(tmp_path, remote)
    work = tmp_path / "a" / "memory"
    work.mkdir(parents=True)
    (work / "MEMORY.md").write_text("base\n")
    assert loom_at(config, "memory", "sync").returncode == 0
    (work / "MEMORY.md").write_text("base\nmore\n")
    lock = rep.git_dir_of(tmp_path / "state-a", work) / "index.lock"
    lock.write_text("")
    done = loom_at(config, "memory", "sync")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "not synced (git refused here, not the remote)" in done.stdout and "index.lock" in done.stdout
    state = rep.state_of(tmp_path / "state-a", work)
    assert state is not None and state.error_kind == "local" and state.failures == 0 and "index.lock" in state.error
    status = loom_at(config, "status")
    assert "memory replica  not synced (git refused here, not the remote)" in status.stdout
    data = __import__("json").loads(loom_at(config, "status", "--json").stdout)["replica"]
    assert "index.lock" in data["error"] and data["error_kind"] == "local"  # here: no wait for the remote mends it
    lock.unlink()
    assert loom_at(config, "memory", "sync").returncode == 0
    assert remote_file(remote, "MEMORY.md") == "base\nmore\n" and not rep.state_of(tmp_path / "state-a", work).error


def test_the_error_shown_is_gits_own_word_not_its_progress():
    from loomtui.memory.git import Result

    rebase = Result(1, "", "Rebasing (3/10)\rAuto-merging notes.md\nCONFLICT (content): Merge conflict in notes.md\n"
                          "error: could not apply 1a2b3c4... notes\nhint: Resolve all conflicts manually")
    assert rebase.first_error_line() == "CONFLICT (content): Merge conflict in notes.md"
    assert Result(1, "", "Rebasing (1/2)\nfatal: no rebase in progress").first_error_line() == "fatal: no rebase in progress"
    assert Result(128, "", "ssh: connect to host b: Connection refused").first_error_line() == \
        "ssh: connect to host b: Connection refused"
    assert Result(1, "", "Rebasing (1/2)\nhint: see git help").first_error_line() == "exit 1"
