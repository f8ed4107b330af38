"""`loom run-job`: no shell, timestamped line-by-line log, the run recorded, the exit code passed on."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import REPO, loom_env, run_loom
from harness import wait_for
from test_sentinel_scan import Fleet

from loomtui.agent import proctree
from loomtui.sentinel import jobrun, queue
from loomtui.store.db import DB_NAME

PY = sys.executable
STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}[+-]\d{2}:\d{2} "


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "job", "log": str(tmp_path / "deep" / "er" / "job.log")}])
    yield f
    f.ctx.close()


def runs(f: Fleet) -> list[dict]:
    return [dict(r) for r in f.ctx.store.query("SELECT * FROM job_runs ORDER BY id")]


def test_output_is_appended_with_timestamps_and_the_run_recorded(fleet, tmp_path):
    log = tmp_path / "deep" / "er" / "job.log"
    script = "import sys; print('out line'); print('err line', file=sys.stderr, flush=True); sys.exit(4)"
    res = run_loom("run-job", "job", "--", PY, "-c", script, env=fleet.env())
    assert res.returncode == 4
    lines = log.read_text().splitlines()
    assert all(re.match(STAMP, line) for line in lines)
    body = [re.sub(STAMP, "", line) for line in lines]
    assert body[0].startswith("[loom run-job] start run 1 of job 'job'")
    assert body[1:3] == ["out line", "err line"] and body[3].startswith("[loom run-job] run 1 exit 4 after")
    [run] = runs(fleet)
    assert (run["job"], run["exit_code"], run["failure_lines"], run["error"]) == ("job", 4, 0, None)
    assert run["ended"] >= run["started"] and run["duration"] >= 0
    assert run_loom("run-job", "job", "--", PY, "-c", "print('ERROR once')", env=fleet.env()).returncode == 0
    assert runs(fleet)[1]["failure_lines"] == 1 and "start run 2" in log.read_text()  # appended, not replaced


def test_a_multi_line_command_is_one_marked_line_and_never_read_as_output(fleet, tmp_path):
    script = "print('fine')\n# Traceback and ERROR live only in the command, not in its output"
    assert run_loom("run-job", "job", "--", PY, "-c", script, env=fleet.env()).returncode == 0
    lines = (tmp_path / "deep" / "er" / "job.log").read_text().splitlines()
    body = [re.sub(STAMP, "", line) for line in lines]
    assert len(body) == 3 and body[1] == "fine" and "\\n# Traceback" in body[0]
    assert runs(fleet)[0]["failure_lines"] == 0
    scan = run_loom("sentinel", "scan", "--no-nudge", env=fleet.env())
    assert scan.returncode == 0, scan.stderr
    assert queue.listing(fleet.ctx.store) == []


def test_the_command_never_meets_a_shell(fleet, tmp_path):
    marker = tmp_path / "pwned"
    res = run_loom("run-job", "job", "--", "echo", f"$(touch {marker})", ";", "rm", "-rf", "x", env=fleet.env())
    assert res.returncode == 0 and not marker.exists()
    assert f"$(touch {marker}) ; rm -rf x" in (tmp_path / "deep" / "er" / "job.log").read_text()


def test_unknown_job_empty_command_and_unstartable_command(fleet, tmp_path):
    res = run_loom("run-job", "nope\x1b[31m", "--", "true", env=fleet.env())
    assert res.returncode == 2 and "no job named 'nope\\x1b[31m'" in res.stderr and "\x1b" not in res.stderr
    res = run_loom("run-job", "job", "--", env=fleet.env())
    assert res.returncode == 2 and "give the command" in res.stderr
    res = run_loom("run-job", "job", "--", "/no/such/program", "arg", env=fleet.env())
    assert res.returncode == 127 and "/no/such/program" in res.stderr
    [run] = runs(fleet)
    assert run["exit_code"] == 127 and "no such file" in run["error"]
    assert "run 1 could not start: '/no/such/program'" in (tmp_path / "deep" / "er" / "job.log").read_text()


def test_a_command_that_is_not_executable_cannot_start_126(fleet, tmp_path):
    script = tmp_path / "backup.sh"
    script.write_text("#!/bin/sh\necho never\n")
    script.chmod(0o644)  # even root may not execute a file with no x bit
    res = run_loom("run-job", "job", "--", str(script), env=fleet.env())
    assert res.returncode == 126 and f"'{script}': permission denied" in res.stderr, res.stderr
    [run] = runs(fleet)
    assert run["exit_code"] == 126 and "permission denied" in run["error"] and run["ended"] is not None
    log = (tmp_path / "deep" / "er" / "job.log").read_text()
    assert f"run 1 could not start: '{script}': permission denied" in log and "never" not in log


def test_a_long_job_shows_progress_and_a_stop_signal_is_passed_on(fleet, tmp_path):
    flag = tmp_path / "go"
    script = ("import os, time\nprint('step 1 of 2', flush=True)\n"
              f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.02)\nprint('step 2 of 2')\n")
    log = tmp_path / "deep" / "er" / "job.log"
    proc = subprocess.Popen([PY, "-m", "loomtui", "run-job", "job", "--", PY, "-c", script],
                            env=loom_env(fleet.env()), cwd=REPO, start_new_session=True)
    try:
        wait_for(lambda: log.exists() and "step 1 of 2" in log.read_text(), what="the first line in the log")
        assert proc.poll() is None and runs(fleet)[0]["ended"] is None
        flag.touch()
        assert proc.wait(60) == 0
        assert "step 2 of 2" in log.read_text()

        flag.unlink()
        proc = subprocess.Popen([PY, "-m", "loomtui", "run-job", "job", "--", PY, "-c", script],
                                env=loom_env(fleet.env()), cwd=REPO, start_new_session=True)
        wait_for(lambda: len(re.findall(STAMP + "step 1 of 2$", log.read_text(), re.M)) == 2,
                 what="the second run's first line")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
        last = runs(fleet)[-1]
        assert last["exit_code"] == 128 + signal.SIGTERM and last["ended"] is not None
    finally:
        flag.touch()  # a job left behind by a failed assertion ends by itself
        kill_group(proc)


def test_a_job_that_leaves_a_process_holding_its_output_is_recorded_when_it_exits(fleet, tmp_path):
    """`server &` in a job: the job exits, the process it started keeps its output open. run-job read
    the output to its end before it waited for the job, so the run was never recorded as over, and
    its failure never judged, while that process lived. Now it is recorded once the job exits; the
    process's lines still reach the log, after the run's end, until it closes the output."""
    gate, up = tmp_path / "let the child go", tmp_path / "the child is up"
    child = (f"import os, time\nprint('child', os.getpid(), flush=True)\nopen({str(up)!r}, 'w').close()\n"
             f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.02)\nprint('ERROR from the child')\n")
    # The job exits once its child has said its first line (however long its start takes).
    script = (f"import os, subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {child!r}])\n"
              f"while not os.path.exists({str(up)!r}):\n    time.sleep(0.02)\nprint('the job is done')\nsys.exit(3)\n")
    log = tmp_path / "deep" / "er" / "job.log"
    proc = subprocess.Popen([PY, "-m", "loomtui", "run-job", "job", "--", PY, "-c", script],
                            env=loom_env(fleet.env()), cwd=REPO, start_new_session=True)
    try:
        [run] = wait_for(lambda: [r for r in runs(fleet) if r["ended"] is not None], 60, what="the run recorded as over")
        assert (run["exit_code"], run["failure_lines"]) == (3, 0)
        assert proc.poll() is None  # still copying what the child writes
        assert "exit 3 after" in log.read_text() and "still hold its output, which follows" in log.read_text()
        gate.touch()
        assert proc.wait(60) == 3
        body = [re.sub(STAMP, "", line) for line in log.read_text().splitlines()]
        assert body[-1] == "ERROR from the child" and body[-2].startswith("[loom run-job] run 1 exit 3 after")
        assert runs(fleet)[0]["failure_lines"] == 0  # the run's count is the run's own
    finally:
        gate.touch()
        kill_group(proc)

def test_a_run_job_killed_outright_counts_as_a_failed_run(fleet, tmp_path):
    flag = tmp_path / "never"
    script = f"import os, time\nwhile not os.path.exists({str(flag)!r}):\n    time.sleep(0.02)\n"
    proc = subprocess.Popen([PY, "-m", "loomtui", "run-job", "job", "--", PY, "-c", script],
                            env=loom_env(fleet.env()), cwd=REPO, start_new_session=True)
    try:
        wait_for(lambda: runs(fleet), what="the run recorded")
        report = fleet.tick(notify=False)
        assert report.runs_reviewed == 0  # still running: not judged yet
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        report = fleet.tick(notify=False)
        assert report.runs_reviewed == 1
        [item] = [i for i in queue.listing(fleet.ctx.store) if i.kind == "exit"]
        assert "without recording the exit" in item.signature
    finally:
        flag.touch()
        kill_group(proc)


def test_a_run_whose_pid_another_process_now_holds_counts_as_a_failed_run(fleet):
    # The run-job recorded its pid and start, then died; the pid is now another process's (here:
    # a live process given the dead run-job's start, which is what a reused pid looks like).
    gone = subprocess.Popen([PY, "-c", "pass"])
    gone_started = wait_for(lambda: proctree.start_time(gone.pid), what="the run-job's start")
    gone.wait()
    holder = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"])
    try:
        wait_for(lambda: proctree.start_time(holder.pid), what="the later process running")
        with fleet.ctx.store.write() as db:
            db.execute("INSERT INTO job_runs(job, started, pid, pid_started) VALUES ('job', ?, ?, ?)",
                       (time.time(), holder.pid, gone_started))
        report = fleet.tick(notify=False)
        assert report.runs_reviewed == 1
        [item] = [i for i in queue.listing(fleet.ctx.store) if i.kind == "exit"]
        assert "without recording the exit" in item.signature
        [run] = runs(fleet)
        assert run["ended"] is not None and "without recording the exit" in run["error"]
    finally:
        holder.kill()
        holder.wait()


class EndsAsLooked(proctree.MachineProcesses):
    """This machine's process table, at the instant a run-job records its end and exits: between
    the sentinel's read of its row and its look at the process."""

    def __init__(self, store, pid: int) -> None:
        self.store, self.pid = store, pid

    def alive_since(self, pid, started, wall_started) -> bool:
        if pid != self.pid:
            return super().alive_since(pid, started, wall_started)
        with self.store.write() as db:
            db.execute("UPDATE job_runs SET ended = ?, exit_code = 0, failure_lines = 0, duration = 1.0 "
                       "WHERE pid = ?", (time.time(), pid))
        return False


def test_a_run_that_records_its_end_as_the_sentinel_looks_is_judged_by_its_own_end(fleet):
    # It was taken for killed ("run-job ended without recording the exit"): a clean run made an item.
    with fleet.ctx.store.write() as db:
        db.execute("INSERT INTO job_runs(job, started, pid, pid_started) VALUES ('job', ?, 4242, 1.0)",
                   (time.time(),))
    fleet.ctx.processes = EndsAsLooked(fleet.ctx.store, 4242)
    report = fleet.tick(notify=False)
    assert report.runs_reviewed == 1
    assert not [i for i in queue.listing(fleet.ctx.store) if i.kind == "exit"]
    [run] = runs(fleet)
    assert (run["exit_code"], run["error"]) == (0, None)

def test_a_run_from_before_starts_were_kept_is_judged_the_old_way_once(fleet):
    # A row written before migration 0011 has no pid_started: a run-job still running across the
    # upgrade must not be taken for a dead one (its real end comes later); a dead one still is.
    running = subprocess.Popen([PY, "-c", "import time; time.sleep(600)"])
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    try:
        wait_for(lambda: proctree.start_time(running.pid), what="the old run-job running")
        with fleet.ctx.store.write() as db:
            for pid in (running.pid, dead.pid):
                db.execute("INSERT INTO job_runs(job, started, pid) VALUES ('job', ?, ?)", (time.time(), pid))
        report = fleet.tick(notify=False)
        assert report.runs_reviewed == 1
        by_pid = {r["pid"]: r for r in runs(fleet)}
        assert by_pid[running.pid]["ended"] is None and by_pid[running.pid]["reviewed"] == 0
        assert "without recording the exit" in by_pid[dead.pid]["error"]
    finally:
        running.kill()
        running.wait()


def test_a_run_job_records_its_own_start_beside_its_pid(fleet):
    assert run_loom("run-job", "job", "--", PY, "-c", "pass", env=fleet.env()).returncode == 0
    [run] = runs(fleet)
    assert run["pid"] and run["pid_started"] is not None


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


# Loaded into run-job through PYTHONPATH: it writes down each back-off of jobrun._finish, the
# moment a try to record the run's end has failed and the next has not begun. It only watches.
PROBE = """
import os, sys, time

def _probe(frame, event, arg):
    # loomtui.clock.sleep called by _finish: its back-off (on the clock port, as every wait of Loom's)
    caller = frame.f_back
    if (event == "call" and frame.f_code.co_name == "sleep"
            and frame.f_globals.get("__name__") == "loomtui.clock" and caller is not None
            and caller.f_code.co_name == "_finish"
            and caller.f_globals.get("__name__") == "loomtui.sentinel.jobrun"):
        with open(os.environ["RUN_JOB_PROBE"], "a") as fh:
            fh.write("back-off\\n")

sys.setprofile(_probe)
"""


def start_probed_run(fleet: Fleet, tmp_path, script: str) -> tuple[subprocess.Popen, object]:
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    (probe_dir / "sitecustomize.py").write_text(PROBE)
    backoffs = tmp_path / "backoffs"
    env = loom_env({**fleet.env(), "PYTHONPATH": f"{probe_dir}{os.pathsep}{REPO}", "RUN_JOB_PROBE": str(backoffs)})
    proc = subprocess.Popen([PY, "-m", "loomtui", "run-job", "job", "--", PY, "-c", script], env=env, cwd=REPO,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    return proc, backoffs


@contextlib.contextmanager
def store_write_locked(fleet: Fleet):
    """Another process's write transaction: SQLite's write lock held until the block ends."""
    blocker = sqlite3.connect(fleet.ctx.state_dir / DB_NAME, timeout=60, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        yield
    finally:
        blocker.close()  # rolls back


def waiting_job(tmp_path) -> tuple[str, object, object]:
    started, flag = tmp_path / "started", tmp_path / "go"
    script = (f"import os, pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
              f"while not os.path.exists({str(flag)!r}):\n    time.sleep(0.02)\n")
    return script, started, flag


def test_a_store_locked_at_the_end_of_a_run_still_records_it_and_keeps_the_jobs_code(fleet, tmp_path):
    script, started, flag = waiting_job(tmp_path)
    proc, backoffs = start_probed_run(fleet, tmp_path, script)
    try:
        wait_for(started.exists, 60, what="the job running")
        with store_write_locked(fleet):
            flag.touch()
            # The store stays locked until a try to record the end has timed out and run-job backs off.
            wait_for(lambda: backoffs.exists() or proc.poll() is not None, 120,
                     what="run-job's first try to record the end failing")
            assert backoffs.exists(), proc.communicate()[1]
        _, err = proc.communicate(timeout=120)
    finally:
        flag.touch()
        kill_group(proc)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "could not be recorded" not in err
    [run] = runs(fleet)
    assert run["exit_code"] == 0 and run["ended"] is not None and run["error"] is None


def test_a_clean_run_whose_end_cannot_be_recorded_exits_75(fleet, tmp_path):
    script, started, flag = waiting_job(tmp_path)
    proc, backoffs = start_probed_run(fleet, tmp_path, script)
    try:
        wait_for(started.exists, 60, what="the job running")
        # Locked from before the job ends until run-job has given up on every try.
        with store_write_locked(fleet):
            flag.touch()
            _, err = proc.communicate(timeout=280)
    finally:
        flag.touch()
        kill_group(proc)
    assert proc.returncode == jobrun.UNRECORDED == 75, err
    assert "run 1 ended with 0 but could not be recorded" in err and "Traceback" not in err
    assert len(backoffs.read_text().splitlines()) == jobrun.FINISH_ATTEMPTS - 1  # it tried again first
    assert "run 1 exit 0 after" in (tmp_path / "deep" / "er" / "job.log").read_text()
    [run] = runs(fleet)
    assert run["ended"] is None and run["exit_code"] is None
    # Unrecorded is not clean: the sentinel counts it as a run that died without recording its exit.
    scan = run_loom("sentinel", "scan", "--no-nudge", env=fleet.env())
    assert scan.returncode == 0, scan.stderr
    [item] = queue.listing(fleet.ctx.store)
    assert item.kind == "exit" and "without recording the exit" in item.signature


def test_a_store_locked_from_before_the_start_to_after_the_end_runs_the_job_all_the_same(tmp_path):
    """The start's record is tried again as the end's is; one the store never takes no longer
    keeps the job from running (a nightly backup skipped for Loom's bookkeeping: it exited 1 at
    once), and the run, clean but unrecorded, exits 75. Waits run on a fake clock."""
    from fake_clock import FakeClock
    from harness import clock_waiting_context, locked_by_another

    from loomtui import clock

    f = Fleet(tmp_path / "fleet", [{"name": "job"}])
    f.ctx.close()
    ctx = clock_waiting_context(f.config_path)
    ran = tmp_path / "ran"
    blocker = locked_by_another(ctx.store.path)
    try:
        with clock.use(FakeClock()):
            result = jobrun.run_job(ctx, "job", [PY, "-c", f"open({str(ran)!r}, 'w').write('backed up')"])
    finally:
        blocker.close()
    try:
        assert ran.read_text() == "backed up"
        assert (result.run_id, result.exit_code) == (None, jobrun.UNRECORDED)
        log = f.log("job").read_text()
        assert "start a run the locked store could not record yet of job 'job'" in log and "the run exit 0" in log
        assert ctx.store.query("SELECT * FROM job_runs") == []  # nothing was recorded: it said so, 75
    finally:
        ctx.close()


def test_a_start_the_locked_store_took_late_is_the_runs_own(tmp_path):
    from fake_clock import FakeClock
    from harness import clock_waiting_context, locked_by_another

    from loomtui import clock

    f = Fleet(tmp_path / "fleet", [{"name": "job"}])
    f.ctx.close()
    ctx = clock_waiting_context(f.config_path)
    blocker = locked_by_another(ctx.store.path)
    virtual = FakeClock()
    real_sleep = virtual.sleep

    def sleep_then_let_in(seconds: float) -> None:
        real_sleep(seconds)
        # The lock ends in run-job's first back-off (clock.sleep called by jobrun._start), not in
        # the store's own busy wait before it.
        if sys._getframe(2).f_code.co_name == "_start":
            blocker.rollback()

    virtual.sleep = sleep_then_let_in
    try:
        with clock.use(virtual):
            result = jobrun.run_job(ctx, "job", [PY, "-c", "pass"])
        assert (result.run_id, result.exit_code) == (1, 0)
        [run] = ctx.store.query("SELECT * FROM job_runs")
        assert run["exit_code"] == 0 and run["ended"] is not None
        assert f"start run 1 of job 'job'" in f.log("job").read_text()
    finally:
        blocker.close()
        ctx.close()


def test_a_log_whose_last_line_was_cut_short_gets_its_newline_before_the_run_s_lines(fleet, tmp_path):
    """A disk full or a run killed mid-write left a line without its newline: the next run's start
    mark was glued to it, no mark any more, and the command line it carries was scanned as output."""
    log = tmp_path / "deep" / "er" / "job.log"
    log.parent.mkdir(parents=True)
    log.write_text("2026-12-06T00:00:00.000+00:00 progress 50%")
    result = run_loom("run-job", "job", "--", "/usr/bin/env", "LOG_LEVEL=ERROR", PY, "-c", "pass", env=fleet.env())
    assert result.returncode == 0, result.stderr
    lines = log.read_text().splitlines()
    assert lines[0].endswith("progress 50%") and "[loom run-job] start run 1" in lines[1]
    scan = run_loom("sentinel", "scan", "--no-nudge", env=fleet.env())
    assert scan.returncode == 0, scan.stderr
    assert queue.listing(fleet.ctx.store) == []


def test_a_job_line_dressed_as_run_jobs_own_is_still_the_jobs(fleet, tmp_path):
    log = tmp_path / "deep" / "er" / "job.log"
    script = "print('[loom run-job] ERROR: backup FAILED', flush=True)"
    result = run_loom("run-job", "job", "--", PY, "-c", script, env=fleet.env())
    assert result.returncode == 0, result.stderr
    assert "(the job) [loom run-job] ERROR: backup FAILED" in log.read_text()
    assert runs(fleet)[0]["failure_lines"] == 1
    scan = run_loom("sentinel", "scan", "--no-nudge", env=fleet.env())
    assert scan.returncode == 0, scan.stderr
    [item] = queue.listing(fleet.ctx.store)
    assert "backup FAILED" in item.sample


def test_a_runs_end_goes_to_the_store_a_salvage_put_in_place_while_it_ran(fleet):
    # run-job opened the store when the job started; the daemon salvaged it meanwhile. The end was
    # committed into the file moved aside, and the new store's copy of the row read as a run killed.
    from test_store_health import scribble_table

    from loomtui.store import job_runs
    from loomtui.store.db import Store
    from loomtui.store.salvage import open_or_salvage

    ctx = fleet.ctx
    started = time.time()
    with ctx.store.write() as db:
        run_id = job_runs.start_in(db, job="job", started=started, pid=os.getpid(), pid_started=None,
                                   started_mono=None, boot=None)
    scribble_table(ctx.store, "canary_runs")  # damage the daemon's salvage finds
    new, salvaged = open_or_salvage(fleet.state_dir)
    new.close()
    assert salvaged is not None and salvaged.copied["job_runs"] >= 1
    jobrun._finish(ctx, run_id, 0, time.monotonic(), 0, None, job="job", started=started)
    with Store.in_dir(fleet.state_dir) as store:
        row = store.query_one("SELECT ended, exit_code FROM job_runs WHERE id = ?", (run_id,))
        assert row["ended"] is not None and row["exit_code"] == 0
        # A store whose run of that id is another's (runs numbered anew): that run keeps its own
        # end; this one's is recorded whole, beside it.
        with store.write() as db:
            db.execute("UPDATE job_runs SET job = 'other', ended = NULL, exit_code = NULL WHERE id = ?", (run_id,))
    jobrun._finish(ctx, run_id, 3, time.monotonic(), 0, None, job="job", started=started)
    with Store.in_dir(fleet.state_dir) as store:
        rows = [dict(r) for r in store.query("SELECT id, job, exit_code, started FROM job_runs ORDER BY id")]
    assert rows[0]["job"] == "other" and rows[0]["exit_code"] is None
    assert rows[-1]["job"] == "job" and rows[-1]["exit_code"] == 3 and rows[-1]["started"] == started


def test_a_clean_job_whose_log_cannot_be_written_exits_74_never_0(tmp_path):
    # The disk full under the log: the run was recorded unclean, but cron read exit 0.
    f = Fleet(tmp_path / "full", [{"name": "full", "log": "/dev/full"}])
    try:
        res = run_loom("run-job", "full", "--", PY, "-c", "print('fine')", env=f.env())
        assert res.returncode == jobrun.LOG_UNWRITTEN == 74, res.stderr
        assert "writing the log failed" in res.stderr
        [run] = runs(f)
        assert run["exit_code"] == 0 and "writing the log failed" in run["error"]
        failing = run_loom("run-job", "full", "--", PY, "-c", "raise SystemExit(3)", env=f.env())
        assert failing.returncode == 3  # a failing job keeps its own code
    finally:
        f.ctx.close()
