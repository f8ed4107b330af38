"""`loom run-job NAME -- CMD...`: run one job, append its output to the job log, record the run.

The command is an argv list, never a shell line. Output (stdout and stderr together, in the
order written) is appended line by line with a timestamp, so a long job shows progress in
its log as it goes. The run's start, end, exit code, duration and the number of failure lines
it wrote are recorded in the store; the sentinel witnesses a claimed fix from that record.
"""

from __future__ import annotations

import datetime as dt
import os
import select
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from loomtui import clock, redact
from loomtui.agent import proctree
from loomtui.appends import end_cut_line, write_all
from loomtui.context import Context
from loomtui.errors import LoomError, StoreUnavailable
from loomtui.sentinel import logscan
from loomtui.store import job_runs
from loomtui.store.statedir import open_private, private_dir
from loomtui.timing import Instant

CHUNK = 65536
MAX_OUTPUT_LINE = 65536  # a line longer than this is broken in the log rather than held in memory
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
POLL = 0.5               # while the job runs, how often run-job looks whether it exited (when it is quiet)
DRAIN_AFTER_EXIT = 2.0   # after the job exited, how long its output may take to end before its run is recorded


@dataclass
class RunResult:
    run_id: int | None  # None: the store took neither its start nor its end
    exit_code: int
    duration: float
    failure_lines: int
    error: str | None = None


def stamp() -> bytes:
    return dt.datetime.now().astimezone().isoformat(timespec="milliseconds").encode()


class LogWriter:
    """Appends timestamped lines; counts failure lines exactly as the sentinel will see them."""

    def __init__(self, fd: int, matcher: logscan.Matcher) -> None:
        self.fd, self.matcher = fd, matcher
        self.pending = b""
        self.failures = 0
        self.error: str | None = None

    def feed(self, data: bytes) -> None:
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        while len(self.pending) > MAX_OUTPUT_LINE:
            lines.append(self.pending[:MAX_OUTPUT_LINE])
            self.pending = self.pending[MAX_OUTPUT_LINE:]
        self._write(lines)

    def close(self) -> None:
        if self.pending:
            self._write([self.pending])
            self.pending = b""

    def mark(self, text: str) -> None:
        # One line, always: an argv holding a newline (python -c "...") would otherwise spill
        # lines without the mark into the log, and the scan would read the command as output.
        one_line = redact.scrub(text).replace("\r", "\\r").replace("\n", "\\n")
        self._write([logscan.RUN_MARK + one_line.encode("utf-8", "replace")], count=False)

    def _write(self, lines: list[bytes], count: bool = True) -> None:
        if not lines or self.error:
            return
        ts = stamp()
        out = []
        for line in lines:
            if count and line.startswith(logscan.RUN_MARK):
                # The job's own line, dressed as run-job's: marks are never scanned, and a failure
                # line it carried went unseen. Kept, marked as the job's.
                line = JOB_SAID + line
            full = ts + b" " + line
            if count and self.matcher.is_failure_line(full):
                self.failures += 1
            out.append(full + b"\n")
        try:
            write_all(self.fd, b"".join(out))
        except OSError as exc:
            # Keep draining the job's output so it never blocks on a full pipe; the run is not clean.
            self.error = f"writing the log failed: {exc.strerror or exc}"


JOB_SAID = b"(the job) "


def open_log(path: Path) -> int:
    try:
        # 0600, its new directories 0700: a job's output may hold a secret (the sentinel reads it as us).
        private_dir(path.parent)
        fd = open_private(path, os.O_WRONLY | os.O_APPEND)
    except OSError as exc:
        raise LoomError(f"run-job: cannot open the job log {path}: {exc.strerror or exc}") from None
    try:
        # A last line cut short (a disk full, a run killed mid-write, a job's own write without a
        # newline) is ended first: the run's start line glued to it was no mark of run-job's any
        # more, and its command line was scanned as the job's output (a clean run made a queue item).
        end_cut_line(path, fd)
    except OSError:
        pass  # the run's own writes will say what is wrong with the log
    return fd


def run_job(ctx: Context, name: str, argv: list[str]) -> RunResult:
    job = ctx.config.job(name)
    if job is None:
        where = f" in {ctx.config_path}" if ctx.config_path else " (no config file)"
        raise LoomError(f"run-job: no job named {name!r}{where}", exit_code=2)
    if not argv:
        raise LoomError("run-job: give the command after --, e.g. loom run-job NAME -- ./backup.sh", exit_code=2)
    cfg = ctx.config.sentinel
    matcher = logscan.matcher_for(job.patterns, job.anti_patterns, cfg.patterns, cfg.anti_patterns)
    ctx.store  # opened first: an unusable store (not a locked one) is named and nothing runs
    # Whoever stops run-job (cron's timeout, systemd, Ctrl-C) stops the job, and the run is still recorded.
    with _Stopper() as stopper:
        at, t0 = clock.now(), time.monotonic()
        started = at.wall
        run_id = _start(ctx, name, at)
        try:
            fd = open_log(job.log)
        except LoomError as exc:
            _finish(ctx, run_id, 1, t0, 0, str(exc), job=name, started=started)
            raise
        writer = LogWriter(fd, matcher)
        left: IO[bytes] | None = None  # the job's output, still held by processes it left running
        try:
            which = f"run {run_id}" if run_id is not None else "a run the locked store could not record yet"
            writer.mark(f"start {which} of job {name!r}: {shlex.join(argv)}")
            env = {"LOOM_JOB": name, "LOOM_RUN_ID": "" if run_id is None else str(run_id)}
            code, error, left = _spawn_and_copy(argv, writer, env, stopper)
            duration = time.monotonic() - t0
            ended = f"could not start: {error}" if error else f"exit {code} after {duration:.1f}s"
            if left is not None:
                ended += "; processes it started still hold its output, which follows"
            writer.mark(("the run " if run_id is None else f"run {run_id} ") + ended)
        finally:
            if left is None:
                os.close(fd)
        error = error or writer.error
    # Outside the stopper: the job is over, and a stop asked for now stops run-job itself.
    try:
        _finish(ctx, run_id, code, t0, writer.failures, error, job=name, started=started)
    except StoreUnavailable as exc:
        # Never 0 after a failure: a clean job whose end could not be recorded exits 75
        # (EX_TEMPFAIL); a failing job keeps its own code.
        print(f"loom: run-job: run {run_id} ended with {code} but could not be recorded: {exc}", file=sys.stderr)
        code = code or UNRECORDED
    result = RunResult(run_id, code, time.monotonic() - t0, writer.failures, error)
    if left is not None:
        # The run is over and recorded; what the job left running writes on into the log until it
        # closes the output (closed here, those processes would die of SIGPIPE at their next line).
        _copy_left(left, writer)
    return result


class _Stopper:
    """Passes a stop signal on to the job; one that comes before the job exists stops it from starting."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.signal: int | None = None

    def __call__(self, sig: int, _frame: object) -> None:
        self.signal = sig
        if self.proc is not None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def __enter__(self) -> _Stopper:
        self.previous = {sig: signal.signal(sig, self) for sig in FORWARDED}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _spawn_and_copy(argv: list[str], writer: LogWriter, extra_env: dict[str, str],
                    stopper: _Stopper) -> tuple[int, str | None, IO[bytes] | None]:
    """The job's exit code, why it could not start, and its output when processes it left running
    still hold it (the caller copies the rest once the run is recorded)."""
    if stopper.signal is not None:
        return 128 + stopper.signal, f"stopped by signal {stopper.signal} before the command started", None
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, **extra_env})
    except FileNotFoundError:
        return 127, f"{argv[0]!r}: no such file or command", None
    except PermissionError:
        return 126, f"{argv[0]!r}: permission denied", None
    except OSError as exc:
        return 126, f"{argv[0]!r}: {exc.strerror or exc}", None
    stopper.proc = proc
    if stopper.signal is not None:
        stopper(stopper.signal, None)
    assert proc.stdout is not None
    try:
        whole = _copy_while_it_runs(proc.stdout.fileno(), writer, proc)
        # The job's last line, ended or not, is the run's (and counted with it) before the end mark.
        writer.close()
        code = proc.wait()
    except BaseException:
        proc.stdout.close()
        raise
    if whole:
        proc.stdout.close()
    return (128 - code if code < 0 else code), None, (None if whole else proc.stdout)


def _copy_while_it_runs(out: int, writer: LogWriter, proc: subprocess.Popen) -> bool:
    """The job's output into the log until every process holding it has closed it (True), or until
    DRAIN_AFTER_EXIT after the job's own process exited (False). A job that starts a process it
    leaves running (`server &`, `nohup x &`) passes it the output: read to its end, the run was
    never recorded as over, never judged (its failure never reported) while that process lived."""
    exited_at: float | None = None
    while True:
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
        wait = POLL if exited_at is None else exited_at + DRAIN_AFTER_EXIT - time.monotonic()
        if wait <= 0:
            return False
        ready, _, _ = select.select([out], [], [], wait)
        if ready:
            data = os.read(out, CHUNK)
            if not data:
                return True
            writer.feed(data)


def _copy_left(out: IO[bytes], writer: LogWriter) -> None:
    """What processes a finished job left running write, into the log until they close it."""
    try:
        while data := os.read(out.fileno(), CHUNK):
            writer.feed(data)
        writer.close()
    finally:
        out.close()
        os.close(writer.fd)


FINISH_ATTEMPTS = 6
UNRECORDED = 75  # EX_TEMPFAIL: the job ran clean, its end could not be written down
LOG_UNWRITTEN = 74  # EX_IOERR: the job ran clean, its output could not be written to its log


def _start(ctx: Context, name: str, at: Instant) -> int | None:
    """Record the run's start, its id; a store busy past its timeout is tried again as the end is,
    and None when it never takes it: the job runs anyway (a nightly backup skipped for Loom's
    bookkeeping is the worse loss; it had exited 1, never run) and its end records it whole."""
    for attempt in range(FINISH_ATTEMPTS):
        try:
            # The start on both clocks: a claim is witnessed by a run that started after it, which
            # a step of the wall clock between the two must not decide (queue_rules.review).
            with ctx.store.write() as db:
                return job_runs.start_in(db, job=name, started=at.wall, pid=os.getpid(),
                                         pid_started=proctree.start_time(os.getpid()), started_mono=at.mono,
                                         boot=at.boot)
        except StoreUnavailable as exc:
            if attempt == FINISH_ATTEMPTS - 1:
                print(f"loom: run-job: the start of job {name!r} could not be recorded ({exc}): running it "
                      "anyway, to be recorded at its end", file=sys.stderr)
                return None
            clock.sleep(min(2 ** attempt, 10))
    return None


def _finish(ctx: Context, run_id: int | None, code: int, t0: float, failures: int, error: str | None, *,
            job: str, started: float) -> None:
    """Record the run's end. A store busy past its timeout is tried again (the job is over; what
    is left is only to say how it went): an unrecorded end would read as a killed run later."""
    ended, duration = time.time(), time.monotonic() - t0
    for attempt in range(FINISH_ATTEMPTS):
        try:
            if ctx.store.unusable() is not None:
                # The daemon salvaged the store while the job ran: this connection still holds the
                # file moved aside, and the end written there would be lost (the new store's copy of
                # the row read later as a run killed before its end). The store in its place takes it.
                ctx.close()
            with ctx.store.write() as db:
                if run_id is None or not job_runs.finish_in(db, run_id, ended=ended, exit_code=code,
                                                            duration=duration, failure_lines=failures, error=error,
                                                            job=job, started=started):
                    # Not in that store (a salvage that could not read the runs numbers them anew):
                    # the run recorded whole, never its end on another run's row.
                    again = job_runs.start_in(db, job=job, started=started, pid=os.getpid(), pid_started=None,
                                              started_mono=None, boot=None)
                    job_runs.finish_in(db, again, ended=ended, exit_code=code, duration=duration,
                                       failure_lines=failures, error=error)
            return
        except StoreUnavailable:
            if attempt == FINISH_ATTEMPTS - 1:
                raise
            clock.sleep(min(2 ** attempt, 10))
