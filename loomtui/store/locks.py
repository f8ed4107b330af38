"""flock-based locks in the state directory.

`inject.lock` serializes every keystroke typed into the pane, `recycle.lock` allows one
relaunch at a time, `supervisor.lock` one daemon per state directory. flock belongs to the
open file description, so two threads of one process exclude each other too, and the kernel
drops the lock when its holder dies: a SIGKILLed holder never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from loomtui.errors import LockHeld

INJECT = "inject.lock"
RECYCLE = "recycle.lock"
SUPERVISOR = "supervisor.lock"


class FileLock:
    def __init__(self, state_dir: Path, name: str) -> None:
        self.path = Path(state_dir) / name
        self.name = name
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, timeout: float | None = None, poll: float = 0.01) -> None:
        """Block until held; `timeout=0` tries once; raises LockHeld when the time runs out."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if timeout is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                deadline = time.monotonic() + timeout
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            holder = self.holder_pid()
                            who = f" (held by pid {holder})" if holder else ""
                            raise LockHeld(f"{self.path} is held by another process{who}") from None
                        time.sleep(poll)
                        poll = min(poll * 2, 0.1)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid note is a courtesy for error messages; the flock is what counts

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def holder_pid(self) -> int | None:
        try:
            text = self.path.read_text().strip()
            return int(text) if text else None
        except (OSError, ValueError):
            return None

    def __enter__(self) -> FileLock:
        if self._fd is None:
            self.acquire()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def hold(state_dir: Path, name: str, timeout: float | None = None) -> FileLock:
    """A held lock; use as `with hold(dir, INJECT, timeout=5): ...`."""
    lock = FileLock(state_dir, name)
    lock.acquire(timeout)
    return lock


def is_held(state_dir: Path, name: str) -> bool:
    """Whether another holder has `name` right now (a try that releases at once)."""
    try:
        hold(state_dir, name, timeout=0).release()
    except LockHeld:
        return True
    return False
