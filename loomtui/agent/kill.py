"""The only code in Loom that signals a process: ending a tree or a foreign poller, and asking
tmux to recreate its socket.

Only the actions module (the foreign-poller reap, the socket repair) and the tmux driver (ending
the agent's own tree on a relaunch, itself reached through the actions module) import this: an
import-linter contract in pyproject.toml keeps it so. Looking at processes is proctree's.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomtui.agent.ports import Signals
    from loomtui.context import Context
    import psutil


def end_processes(pids: list[int], grace: float = 3.0, *, last: Collection[int] = (),
                  last_grace: float = 0.0) -> list[int]:
    """SIGTERM, wait up to `grace`, SIGKILL what is left (interactive shells ignore SIGTERM).

    `last`: processes that end by themselves once the others have (the pump, which records the
    lines its CLI left unread when it sees the CLI gone): SIGTERMed with the rest, SIGKILLed only
    if they still run `last_grace` after the rest are gone. Killed with the rest, a pump whose CLI
    ignored SIGTERM recorded nothing, and a message that hangs every CLI it reaches was never set
    aside (pump.rules.MAX_UNREAD).

    Returns the pids that could not be ended. A zombie has ended: its parent (tmux, for the
    pane's process) reaps it when it gets round to it, which can take seconds, and waiting
    for that would only stretch every relaunch.
    """
    import psutil

    procs = []
    for pid in pids:
        if pid == os.getpid():
            # Never this process: a `loom recycle` the agent ran from its own pane is in the tree it
            # ends. Killed first (children first), it left the agent running and its relaunch
            # recorded but never made (the pin on a session never launched).
            continue
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    for proc in procs:
        _signal(proc, signal.SIGTERM)
    alive = _wait_ended(procs, grace)
    first = [p for p in alive if p.pid not in last]
    for proc in first:
        _signal(proc, signal.SIGKILL)
    stubborn = _wait_ended(first, grace)
    spared = _wait_ended([p for p in alive if p.pid in last], last_grace)
    for proc in spared:
        _signal(proc, signal.SIGKILL)
    return [p.pid for p in stubborn + _wait_ended(spared, grace)]


def _signal(proc: psutil.Process, sig: int) -> None:
    import psutil

    try:
        proc.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        pass


def _wait_ended(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if _really_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if _really_alive(p)]
    return alive


def _really_alive(proc: psutil.Process) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def recreate_socket(server_pid: int) -> None:
    """SIGUSR1 makes a tmux server recreate its socket: a repair that touches no agent (OSError if
    the signal cannot be sent)."""
    os.kill(server_pid, signal.SIGUSR1)


class MachineSignals:
    """The `Signals` port on this machine: the functions above."""

    def end(self, pids: list[int], grace: float) -> list[int]:
        return end_processes(pids, grace)

    def recreate_socket(self, server_pid: int) -> None:
        recreate_socket(server_pid)


MACHINE = MachineSignals()


def of(ctx: Context) -> Signals:
    """The context's signals: the simulator's where it filled them in, else this machine's."""
    return ctx.signals if ctx.signals is not None else MACHINE
