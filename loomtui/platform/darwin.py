"""macOS: the boot's identity from `sysctl kern.bootsessionuuid`, a process's exit through a kqueue
(EVFILT_PROC, NOTE_EXIT: the kqueue's descriptor turns readable when the event is pending), the
process tree from psutil, directories through watchfiles (FSEvents)."""

from __future__ import annotations

import select
import subprocess
import sys
from functools import cache
from pathlib import Path

from loomtui.platform import DirectoryWatch, Waitable
from loomtui.platform.portable import boot_time_id


@cache
def _boot_session() -> str | None:
    try:
        done = subprocess.run(["/usr/sbin/sysctl", "-n", "kern.bootsessionuuid"], capture_output=True, text=True,
                              timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


class Darwin:
    name = "darwin"
    proc_files = False

    def boot_id(self) -> str | None:
        return _boot_session() or boot_time_id()

    def exit_watch(self, pid: int) -> Waitable | None:
        if sys.platform != "darwin" or not hasattr(select, "kqueue"):
            return None  # LOOM_PLATFORM=darwin elsewhere: no kqueue to ask (and a checker reads it as macOS's)
        queue = select.kqueue()
        event = select.kevent(pid, filter=select.KQ_FILTER_PROC,
                              flags=select.KQ_EV_ADD | select.KQ_EV_ONESHOT, fflags=select.KQ_NOTE_EXIT)
        try:
            queue.control([event], 0, 0)
        except OSError:  # no such process: gone already
            queue.close()
            return None
        return queue

    def directory_watch(self, directory: Path) -> DirectoryWatch | None:
        return None


PLATFORM = Darwin()
