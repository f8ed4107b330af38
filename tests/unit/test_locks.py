"""flock helpers: one holder at a time, across threads and processes; a dead holder frees the lock."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest
from conftest import REPO, loom_env

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
