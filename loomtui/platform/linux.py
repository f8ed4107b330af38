"""Linux: the boot's identity from /proc, a process's exit as a pidfd (it turns readable when the
process exits), a directory's new files through inotify, the process tree from /proc's children
files (proctree)."""

from __future__ import annotations

import os
import struct
from functools import cache
from pathlib import Path

from loomtui.platform import DirectoryWatch, Waitable

BOOT_ID = "/proc/sys/kernel/random/boot_id"
IN_CLOSE_WRITE, IN_MOVED_TO = 0x8, 0x80
IN_Q_OVERFLOW, IN_IGNORED = 0x4000, 0x8000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


@cache
def _boot_id() -> str | None:
    try:
        with open(BOOT_ID, encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


class Fd:
    """A descriptor of our own, closed once."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        # A watch dropped unclosed (a loop restarted after an error, its closure gone): closed with
        # it, never one descriptor more per restart until EMFILE.
        try:
            self.close()
        except OSError:
            pass


class Inotify(Fd):
    def changes(self) -> tuple[set[str], bool, bool]:
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return set(), False, False
        return inotify_names(data)


def inotify_names(data: bytes) -> tuple[set[str], bool, bool]:
    """(names of the files in these events, whether events were lost, whether the watch ended)."""
    names: set[str] = set()
    lost = ended = False
    offset = 0
    while offset + _EVENT.size <= len(data):
        _, mask, _, length = _EVENT.unpack_from(data, offset)
        name = data[offset + _EVENT.size:offset + _EVENT.size + length].split(b"\0", 1)[0]
        offset += _EVENT.size + length
        lost |= bool(mask & IN_Q_OVERFLOW)
        ended |= bool(mask & IN_IGNORED)
        if name:
            names.add(os.fsdecode(name))
    return names, lost, ended


def has_children_files(proc: str = "/proc", pid: int | None = None) -> bool:
    """The /proc walk reads each thread's `children` file: a kernel built without it
    (CONFIG_PROC_CHILDREN comes with CHECKPOINT_RESTORE; Termux, some embedded kernels) has `task`
    but no `children`, and every tree read as its root alone: the poller missing on every look (a
    recycle each poller_grace), a stop that left the agent's children. psutil walks those."""
    pid = os.getpid() if pid is None else pid
    return os.path.exists(f"{proc}/{pid}/task/{pid}/children")


class Linux:
    name = "linux"
    proc_files = has_children_files()
    boot_from_file = os.path.exists(BOOT_ID)  # the boot id is a file to read (no psutil, no process)

    def boot_id(self) -> str | None:
        return _boot_id()

    def exit_watch(self, pid: int) -> Waitable | None:
        if not hasattr(os, "pidfd_open"):
            return None  # Python built without it, or a kernel before 5.3
        try:
            return Fd(os.pidfd_open(pid))
        except OSError:
            return None

    def directory_watch(self, directory: Path) -> DirectoryWatch | None:
        """Told of every file written (closed after writing) or moved into `directory`."""
        import ctypes  # the watch alone needs it: the clock's and pidfd's users never load it

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init1, add_watch = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        fd = init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        if add_watch(fd, os.fsencode(directory), IN_CLOSE_WRITE | IN_MOVED_TO) < 0:
            os.close(fd)
            return None
        return Inotify(fd)


PLATFORM = Linux()
