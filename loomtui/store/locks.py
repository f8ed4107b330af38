"""flock-based locks in the state directory.

`inject.lock` serializes every keystroke typed into the pane, `recycle.lock` allows one
relaunch at a time, `supervisor.lock` one daemon per state directory. flock belongs to the
open file description, so two threads of one process exclude each other too, and the kernel
drops the lock when its holder dies: a SIGKILLed holder never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from loomtui import clock
from loomtui.errors import LockHeld

INJECT = "inject.lock"
RECYCLE = "recycle.lock"
SUPERVISOR = "supervisor.lock"
# `is_held` looks with a shared lock for an instant; a `timeout=0` try keeps trying this long, so
# that a look never makes an acquirer believe the lock is taken.
LOOK_GRACE = 0.05


class FileLock:
    def __init__(self, state_dir: Path, name: str) -> None:
        self.path = Path(state_dir) / name
        self.name = name
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, timeout: float | None = None, poll: float = 0.01) -> None:
        """Block until held; `timeout=0` tries at once (for LOOK_GRACE); raises LockHeld when the time runs out."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this object")
        # Never through a link: a lock file in a directory someone else writes (the memory
        # directory's, replicated) could name a file whose first bytes the pid note would overwrite.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            if timeout is None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            else:
                deadline = clock.monotonic() + max(timeout, LOOK_GRACE)
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if clock.monotonic() >= deadline:
                            holder = self.holder_pid()
                            who = f" (held by pid {holder})" if holder else ""
                            raise LockHeld(f"{self.path} is held by another process{who}") from None
                        clock.sleep(poll)
                        poll = min(poll * 2, 0.1)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        try:
            # A fixed-width note overwrites the last one in place: no truncation, which is a
            # journal transaction that waits behind other writers to the same disk.
            os.pwrite(fd, f"{os.getpid():>10}\n".encode(), 0)
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
    """Whether a holder has `name` right now.

    The look takes a shared lock for an instant: two looks at once never see each other as a
    holder (an exclusive try would: a daemon's loops and a console asking at the same moment
    each saw "a relaunch is under way").
    """
    fd = os.open(Path(state_dir) / name, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing the descriptor drops the shared lock
    return False
