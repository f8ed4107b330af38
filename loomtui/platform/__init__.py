"""The machine's own facilities, one module per OS behind one small interface (as toolong has one
file watcher per platform behind one factory): which boot this is, a process's exit as something to
wait on, a directory's new files as something to wait on, and whether /proc can be read.

- linux.py: /proc's boot id, a pidfd, inotify, the /proc files the process tree is walked by;
- darwin.py: `kern.bootsessionuuid`, a kqueue EVFILT_PROC/NOTE_EXIT, psutil's tree, watchfiles
  (FSEvents) for directories;
- portable.py: what any OS has: psutil's tree, watchfiles, the exit poll and tmux's hook alone.

`LOOM_PLATFORM=portable` (read once, at the first use) forces the portable one on any OS: CI runs
the unit tests and the watchdog's e2e tests a second time so, which runs here the code macOS runs
(everything but its kqueue and sysctl).
"""

from __future__ import annotations

import importlib
import os
import sys
from functools import cache
from pathlib import Path
from typing import Protocol

from loomtui.errors import ConfigError

ENV = "LOOM_PLATFORM"
NAMES = ("linux", "darwin", "portable")


class Waitable(Protocol):
    """What select() waits on; closed by whoever asked for it."""

    def fileno(self) -> int: ...

    def close(self) -> None: ...


class DirectoryWatch(Waitable, Protocol):
    def changes(self) -> tuple[set[str], bool, bool]:
        """Read what is pending: (names of the files written or moved in, events lost, watch ended)."""
        ...


class Platform(Protocol):
    name: str
    proc_files: bool  # /proc/<pid>/task/*/children, cmdline and stat are there to read
    boot_from_file: bool  # boot_id() reads a file: no psutil, no process (the pump stands on the standard library)

    def boot_id(self) -> str | None:
        """This boot's identity (the monotonic clock is comparable within one), None if unknown."""
        ...

    def exit_watch(self, pid: int) -> Waitable | None:
        """Something that turns readable once `pid` exits; None where there is no such facility or
        the process is gone already (the caller checks which by the process record)."""
        ...

    def directory_watch(self, directory: Path) -> DirectoryWatch | None:
        """Something that turns readable when a file is written or moved into `directory`; None:
        use watchfiles."""
        ...


def chosen(environ: dict[str, str] | os._Environ[str] = os.environ, platform: str = sys.platform) -> str:
    """The platform module's name: LOOM_PLATFORM if set (one of NAMES), else the OS's own."""
    forced = environ.get(ENV, "")
    if forced:
        if forced not in NAMES:
            raise ConfigError(f"{ENV}={forced!r}: expected one of {', '.join(NAMES)} (or unset: this OS's own)")
        return forced
    if platform.startswith("linux"):
        return "linux"
    if platform == "darwin":
        return "darwin"
    return "portable"


@cache
def current() -> Platform:
    platform: Platform = importlib.import_module(f"loomtui.platform.{chosen()}").PLATFORM
    return platform
