"""flock helpers: one holder at a time, across threads and processes; a dead holder frees the lock."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO, loom_env
from harness import wait_for

from loomtui.errors import LockHeld
from loomtui.store import locks

HOLDER = """
import sys, time
from pathlib import Path
from loomtui.store import locks
lock = locks.hold(Path(sys.argv[1]), locks.SUPERVISOR)
print("held", flush=True)
time.sleep(600)
"""


def test_second_holder_gets_a_clear_error(state_dir):
    state_dir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(state_dir)], stdout=subprocess.PIPE, text=True,
                            env=loom_env(), cwd=REPO)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(LockHeld) as info:
            locks.hold(state_dir, locks.SUPERVISOR, timeout=0)
        assert str(state_dir / "supervisor.lock") in str(info.value)
        assert f"pid {proc.pid}" in str(info.value)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        # The kernel dropped the dead holder's lock: no stale lock file to clean up by hand.
        lock = locks.hold(state_dir, locks.SUPERVISOR, timeout=5)
        lock.release()
    finally:
        proc.kill()
        proc.wait()


def test_threads_exclude_each_other(state_dir):
    state_dir.mkdir()
    inside = []
    overlap = []

    def worker():
        for _ in range(50):
            with locks.hold(state_dir, locks.INJECT, timeout=30):
                inside.append(1)
                if len(inside) > 1:
                    overlap.append(1)
                inside.pop()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == []


def test_lock_file_is_private(state_dir):
    state_dir.mkdir()
    with locks.hold(state_dir, locks.RECYCLE):
        pass
    assert (state_dir / "recycle.lock").stat().st_mode & 0o777 == 0o600


def test_looks_at_a_lock_never_see_each_other_as_its_holder(state_dir):
    state_dir.mkdir()
    stop, seen = threading.Event(), []

    def look():
        while not stop.is_set():
            seen.append(locks.is_held(state_dir, locks.RECYCLE))
            time.sleep(0.001)  # pacing, as loops look every few hundred ms: not a wait for a state

    lookers = [threading.Thread(target=look) for _ in range(4)]
    for t in lookers:
        t.start()
    try:
        # While others keep looking, a try at once still gets the lock, and a look then sees it held.
        for _ in range(200):
            with locks.hold(state_dir, locks.RECYCLE, timeout=0):
                assert locks.is_held(state_dir, locks.RECYCLE)
        held_by_us = len(seen)
    finally:
        stop.set()
        for t in lookers:
            t.join(30)
    seen.clear()
    stop.clear()
    lookers = [threading.Thread(target=look) for _ in range(4)]
    for t in lookers:
        t.start()
    wait_for(lambda: len(seen) >= 2000, what="2000 looks")
    stop.set()
    for t in lookers:
        t.join(30)
    assert held_by_us > 0 and not any(seen), "a look saw another look as the lock's holder"


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(state_dir):
    # A lock file in a directory another writes (the memory directory, replicated): the pid note
    # would have overwritten the first bytes of whatever the link names.
    state_dir.mkdir()
    victim = state_dir / "victim"
    victim.write_bytes(b"SQLite format 3\x00")
    (state_dir / "x.lock").symlink_to(victim)
    with pytest.raises(OSError):
        locks.FileLock(state_dir, "x.lock").acquire(timeout=0)
    assert victim.read_bytes() == b"SQLite format 3\x00"
