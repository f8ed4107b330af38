"""What any OS has: no exit or directory watch of the kernel's own. The boot is told by its time
(psutil.boot_time, whole seconds: another boot has another), the process tree is walked with
psutil, directories are watched with watchfiles, and a process's exit is found by the watchdog's
exit poll and tmux's pane-died hook."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from loomtui.platform import DirectoryWatch, Waitable


@cache
def boot_time_id() -> str | None:
    import psutil

    try:
        return f"boot-time-{int(psutil.boot_time())}"
    except (OSError, RuntimeError, psutil.Error):
        return None


class Portable:
    name = "portable"
    proc_files = False
    boot_from_file = False

    def boot_id(self) -> str | None:
        return boot_time_id()

    def exit_watch(self, pid: int) -> Waitable | None:
        return None

    def directory_watch(self, directory: Path) -> DirectoryWatch | None:
        return None


PLATFORM = Portable()
