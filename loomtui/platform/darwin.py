"""macOS: the boot's identity from `sysctl kern.bootsessionuuid`, a process's exit through a kqueue
(EVFILT_PROC, NOTE_EXIT: the kqueue's descriptor turns readable when the event is pending), the
process tree from psutil, directories through watchfiles (FSEvents)."""

from __future__ import annotations

import select
import subprocess
import sys
from pathlib import Path

from loomtui.platform import DirectoryWatch, Waitable
from loomtui.platform.portable import boot_time_id


_SESSION: list[str] = []  # the boot session's uuid, once read: it is the boot's for as long as it runs
NO_SYSCTL = "no sysctl"


def _boot_session() -> str | None:
    """The boot's uuid; NO_SYSCTL where no sysctl knows it (not macOS: LOOM_PLATFORM forced);
    None when it did not answer this time (a timeout): asked again at the next call, never cached.
    Cached, a failure had this process name its boot by another scheme (its boot time) than every
    other Loom process, and each then took the other's probes for another boot's, settled at once."""
    if _SESSION:
        return _SESSION[0]
    try:
        done = subprocess.run(["/usr/sbin/sysctl", "-n", "kern.bootsessionuuid"], capture_output=True, text=True,
                              timeout=5, check=False)
    except FileNotFoundError:
        return NO_SYSCTL
    except (OSError, subprocess.SubprocessError):
        return None
    found = done.stdout.strip() if done.returncode == 0 else ""
    if not found:  # a sysctl that does not know it (not macOS, an old one): every process alike
        return NO_SYSCTL
    _SESSION.append(found)
    return found


class Darwin:
    name = "darwin"
    proc_files = False
    boot_from_file = False

    def boot_id(self) -> str | None:
        session = _boot_session()
        return boot_time_id() if session == NO_SYSCTL else session  # None: not known this time

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
