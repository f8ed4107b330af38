"""A command run to its end or to a deadline, whichever comes first. It runs in a session of its
own, so at the deadline its whole process group goes (git and the ssh it started; ssh and its
ProxyCommand or jump: asked with TERM, then killed), and its pipes are read to their end; so does
an interrupt of the wait (Ctrl-C), before it goes on. hosts/ssh.py and memory/git.py run their commands through it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

KILLED_WAIT = 5.0  # seconds for the pipes to close once the group is killed (a process outside it may hold them)
# Seconds the group has to end on SIGTERM before SIGKILL: git removes its lock files (index.lock, a
# ref's .lock) on a TERM; killed outright it left them, and every later git in that repository
# refused ("Unable to create index.lock"), the memory's replication stopped for good.
TERM_GRACE = 3.0


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: bytes
    stderr: bytes


def run(argv: Sequence[str], *, timeout: float, stdin: bytes | None = None,
        env: Mapping[str, str] | None = None) -> Ran | None:
    """`argv`'s exit status and output; None when `timeout` seconds came first (its group is then
    killed). `stdin`: what it reads (None: nothing, /dev/null). OSError when it cannot be started."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        try:
            proc.communicate(timeout=KILLED_WAIT)
        except subprocess.TimeoutExpired:
            proc.wait()  # the group's leader is gone: only a process outside it still holds the pipes
        return None
    except BaseException:
        # Ctrl-C, or any exception while it waits: in its own session the terminal's Ctrl-C never
        # reached it, and once the caller lets go of what it holds (the replica's lock) a git left
        # running would write on under the next holder. The group goes and is reaped first.
        _kill(proc)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a stdin flush into a dead child
                    pipe.close()
        proc.wait()
        raise
    return Ran(proc.returncode, out, err)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The group asked to end (TERM), then made to (KILL), whatever is left of it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=TERM_GRACE)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
