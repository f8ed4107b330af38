"""A command run to its end or to a deadline, whichever comes first. It runs in a session of its
own, so at the deadline its whole process group goes (git and the ssh it started; ssh and its
ProxyCommand or jump: asked with TERM, then killed), and its pipes are read to their end; so does
an interrupt of the wait (Ctrl-C), before it goes on. hosts/ssh.py and memory/git.py run their commands through it."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
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


class TooLong(OSError):
    """The command wrote more than the caller's `limit` (its group is ended): an answer no caller
    reads whole (a host streaming gigabytes within its timeout filled the console's memory)."""


def run(argv: Sequence[str], *, timeout: float, stdin: bytes | None = None,
        env: Mapping[str, str] | None = None, limit: int | None = None) -> Ran | None:
    """`argv`'s exit status and output; None when `timeout` seconds came first (its group is then
    killed). `stdin`: what it reads (None: nothing, /dev/null). `limit`: the most bytes its stdout
    and stderr may hold together (TooLong past it). OSError when it cannot be started."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        if limit is None:
            out, err = proc.communicate(stdin, timeout=timeout)
        else:
            out, err = _read(proc, stdin, timeout, limit)
    except subprocess.TimeoutExpired:
        try:
            _kill(proc)
        finally:  # reaped even when a Ctrl-C comes in the grace
            if limit is None:
                try:
                    proc.communicate(timeout=KILLED_WAIT)
                except subprocess.TimeoutExpired:
                    proc.wait()  # the group's leader is gone: only a process outside it still holds the pipes
            else:
                _close(proc)  # its pipes were read by hand: nothing left to read them to their end
                proc.wait()
        return None
    except BaseException:
        # Ctrl-C, or any exception while it waits: in its own session the terminal's Ctrl-C never
        # reached it, and once the caller lets go of what it holds (the replica's lock) a git left
        # running would write on under the next holder. The group goes and is reaped first.
        _kill(proc)
        _close(proc)
        proc.wait()
        raise
    return Ran(proc.returncode, out, err)


def _read(proc: subprocess.Popen[bytes], stdin: bytes | None, timeout: float, limit: int) -> tuple[bytes, bytes]:
    """communicate(), but stopping at `limit` bytes of output (TooLong): stdin written and both
    pipes read as they are ready, until both close, then the pipes closed. TimeoutExpired at the
    deadline."""
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {}
    total = 0
    pending = memoryview(stdin or b"")
    writing = -1  # stdin's fd while there is more to write
    with selectors.DefaultSelector() as sel:
        for pipe in (proc.stdout, proc.stderr):
            assert pipe is not None
            chunks[pipe.fileno()] = []
            sel.register(pipe.fileno(), selectors.EVENT_READ)
        if proc.stdin is not None:
            if pending:
                writing = proc.stdin.fileno()
                os.set_blocking(writing, False)
                sel.register(writing, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            for key, _ in sel.select(left):
                fd = int(key.fd)
                if fd == writing:
                    assert proc.stdin is not None
                    try:
                        pending = pending[os.write(fd, pending[:65536]):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = memoryview(b"")
                    if not pending:
                        sel.unregister(fd)
                        proc.stdin.close()
                        writing = -1
                    continue
                data = os.read(fd, 65536)
                if not data:
                    sel.unregister(fd)
                    continue
                total += len(data)
                if total > limit:
                    raise TooLong(f"more than {limit} bytes of output")
                chunks[fd].append(data)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = b"".join(chunks[proc.stdout.fileno()]), b"".join(chunks[proc.stderr.fileno()])
    _close(proc)
    left = deadline - time.monotonic()
    proc.wait(timeout=max(left, 0.001))  # TimeoutExpired, as communicate's, when it outlives its pipes
    return out, err


def _close(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):  # a stdin flush into a dead child
                pipe.close()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The group asked to end (TERM), then made to (KILL), whatever is left of it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=TERM_GRACE)
    finally:  # a second Ctrl-C in the grace still ends the group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
