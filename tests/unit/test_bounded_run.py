"""bounded_run with real children: a command in a session of its own, ended with its group."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from loomtui import bounded_run


def test_an_interrupt_while_it_waits_ends_the_child_and_its_group_before_it_goes_on(tmp_path: Path):
    """Ctrl-C on `loom memory sync` arrived while git ran: the exception went up, the caller let go
    of the replica's lock, and git (in its own session, so untouched by the terminal's Ctrl-C)
    kept writing in the repository the next holder then used."""
    pid_file, marker = tmp_path / "pid", tmp_path / "marker"
    script = f"echo $$ > '{pid_file}.tmp' && mv '{pid_file}.tmp' '{pid_file}'; sleep 30; echo done > '{marker}'"

    def interrupt(_signum, _frame) -> None:
        if pid_file.exists():  # the child has started: the interrupt comes while run() waits on it
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
    try:
        with pytest.raises(KeyboardInterrupt):
            bounded_run.run(["sh", "-c", script], timeout=120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    pid = int(pid_file.read_text())
    try:
        alive = True
        os.kill(pid, 0)
    except ProcessLookupError:
        alive = False  # killed and reaped before the interrupt went on
    finally:
        if alive:
            os.killpg(pid, signal.SIGKILL)  # the test's own child: not left running after a failure
            os.waitpid(pid, 0)
    assert not alive and not marker.exists()


def test_a_git_at_its_deadline_is_asked_to_end_and_leaves_no_lock_behind(tmp_path: Path):
    """Killed outright at its timeout, git left its index.lock, and every later git in the replica's
    repository refused: "Unable to create index.lock", the memory's replication stopped for good.
    Here git holds the lock while a pre-commit hook runs (the replica runs none; a stand-in for a
    git slow at anything under its lock), past the deadline."""
    import shutil
    import subprocess

    git = shutil.which("git")
    assert git is not None
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    repo = tmp_path / "repo"
    subprocess.run([git, "init", "-q", str(repo)], env=env, check=True, timeout=60)
    (repo / "a.md").write_text("a\n")
    subprocess.run([git, "-C", str(repo), "add", "a.md"], env=env, check=True, timeout=60)
    subprocess.run([git, "-C", str(repo), "commit", "-q", "-m", "a"], env=env, check=True, timeout=60)
    (repo / "a.md").write_text("a\nb\n")
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nsleep 60\n")
    hook.chmod(0o755)
    # -a: the commit's own index, under index.lock until the commit is made (as `commit --only` does).
    done = bounded_run.run([git, "-C", str(repo), "commit", "-a", "-q", "-m", "b"], timeout=1.0, env=env)
    assert done is None  # the deadline came first
    assert not (repo / ".git" / "index.lock").exists()
    hook.unlink()
    again = subprocess.run([git, "-C", str(repo), "commit", "-a", "-q", "-m", "b"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0, again.stderr


def test_a_group_that_ignores_the_request_to_end_is_killed(tmp_path: Path):
    pid_file = tmp_path / "pid"
    script = f"trap '' TERM; echo $$ > '{pid_file}.tmp' && mv '{pid_file}.tmp' '{pid_file}'; while :; do sleep 1; done"
    assert bounded_run.run(["sh", "-c", script], timeout=1.0) is None
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped


def test_with_a_limit_it_reads_and_writes_as_communicate_does(tmp_path: Path):
    big = os.urandom(3 * 2**20)  # more than a pipe holds, both ways: written while its echo is read
    done = bounded_run.run(["sh", "-c", "cat; echo said >&2; exit 3"], timeout=120, stdin=big, limit=8 * 2**20)
    assert done is not None and (done.code, done.stdout, done.stderr) == (3, big, b"said\n")
    assert bounded_run.run(["true"], timeout=120, stdin=b"", limit=10) == bounded_run.Ran(0, b"", b"")


def test_an_answer_past_its_limit_ends_the_command_and_says_so(tmp_path: Path):
    """A host streaming gigabytes within its timeout: all of it was held in memory before any
    parser's bound applied."""
    pid_file = tmp_path / "pid"
    script = f"echo $$ > '{pid_file}'; while :; do head -c 65536 /dev/zero; done"
    with pytest.raises(bounded_run.TooLong):
        bounded_run.run(["sh", "-c", script], timeout=120, limit=2**20)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # ended and reaped


def test_with_a_limit_the_deadline_still_ends_it(tmp_path: Path):
    pid_file = tmp_path / "pid"
    script = f"echo $$ > '{pid_file}'; echo partial; sleep 60"
    assert bounded_run.run(["sh", "-c", script], timeout=1.0, limit=2**20) is None
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


@pytest.mark.parametrize("limit", [None, 2**20])
def test_an_interrupt_while_the_group_is_given_its_grace_still_ends_it(tmp_path: Path, limit):
    """A second Ctrl-C during the TERM's grace went up before the KILL: a group deaf to TERM ran on
    after the caller let go of the replica's lock."""
    import psutil

    pid_file = tmp_path / "pid"
    script = f"trap '' TERM; echo $$ > '{pid_file}.tmp' && mv '{pid_file}.tmp' '{pid_file}'; while :; do sleep 1; done"
    fired = []

    def interrupt(_signum, _frame) -> None:
        if not fired:
            fired.append(True)
            raise KeyboardInterrupt

    rescued = []

    def rescue() -> None:  # unkilled, the group would hold run() in its wait for good
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
                rescued.append(True)

    import contextlib
    import threading

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.5)  # the deadline at 0.5 s, then the grace of TERM_GRACE
    timer = threading.Timer(60.0, rescue)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            bounded_run.run(["sh", "-c", script], timeout=0.5, limit=limit)
    finally:
        timer.cancel()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert fired and not rescued, "the group outlived the interrupt"
    pid = int(pid_file.read_text())
    try:
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, "still running"
    except psutil.NoSuchProcess:
        pass
