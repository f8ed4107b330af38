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
