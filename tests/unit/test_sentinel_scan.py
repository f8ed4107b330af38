"""The sentinel scan against real files and a real store: items, dedupe, rotation, truncation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import toml_value
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomtui.context import Context
from loomtui.sentinel import logscan, queue
from loomtui.sentinel.tick import sentinel_tick
from loomtui.store import ledger

PY = sys.executable


class Fleet:
    """A config with jobs under a temp dir, and the context to tick the sentinel with."""

    def __init__(self, root: Path, jobs: list[dict], sentinel: dict | None = None,
                 agent: dict | None = None) -> None:
        self.root = root
        self.logs = root / "logs"
        self.state_dir = root / "state"
        self.config_path = root / "config.toml"
        root.mkdir(parents=True)
        lines = [f"state_dir = {toml_value(str(self.state_dir))}", "[sentinel]"]
        lines += [f"{k} = {toml_value(v)}" for k, v in (sentinel or {}).items()]
        if agent:  # where the nudges go (a harness.LinePane's keys): without it, nothing may be nudged
            lines.append("[agent]")
            lines += [f"{k} = {toml_value(v)}" for k, v in agent.items()]
        for job in jobs:
            job = {"log": str(self.logs / f"{job['name']}.log"), **job}
            lines.append("[[jobs]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in job.items()]
        self.config_path.write_text("\n".join(lines) + "\n")
        self.ctx = Context.load(str(self.config_path), None, environ={})

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def write(self, name: str, text: str | bytes, mode: str = "ab") -> None:
        path = self.log(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, mode) as fh:
            fh.write(text.encode() if isinstance(text, str) else text)

    def tick(self, now: float | None = None, notify: bool = False):
        return sentinel_tick(self.ctx, now, notify=notify)

    def items(self) -> list[queue.Item]:
        return queue.listing(self.ctx.store, include_witnessed=1000)

    def env(self) -> dict[str, str]:
        return {"LOOM_CONFIG": str(self.config_path)}


@pytest.fixture
def fleet(tmp_path):
    made = []

    def make(jobs, sentinel=None):
        f = Fleet(tmp_path / f"f{len(made)}", jobs, sentinel)
        made.append(f)
        return f

    yield make
    for f in made:
        f.ctx.close()


def run_job(fleet: Fleet, name: str, *cmd: str):
    from conftest import run_loom

    return run_loom("run-job", name, "--", *cmd, env=fleet.env())


def test_35_jobs_yield_exactly_the_expected_items_and_a_rescan_nothing(fleet):
    jobs = [{"name": f"clean{i}"} for i in range(10)]
    jobs += [{"name": f"err{i}"} for i in range(8)]
    jobs += [{"name": f"anti{i}"} for i in range(5)]
    jobs += [{"name": "own-patterns", "patterns": ["^FAIL"]}, {"name": "no-anti", "anti_patterns": []}]
    jobs += [{"name": f"exit{i}"} for i in range(1, 6)]
    jobs += [{"name": "dirty-zero"}, {"name": "unstartable"}]
    jobs += [{"name": "missed", "schedule": "every 10m"}, {"name": "yearly", "schedule": "0 0 1 1 *"},
             {"name": "watched", "schedule": "every 10m"}]
    assert len(jobs) == 35
    f = fleet(jobs, {"anti_patterns": ["expected"], "missed_grace": "5m"})
    for i in range(10):
        f.write(f"clean{i}", "".join(f"INFO step {k} ok\n" for k in range(20)))
    for i in range(8):
        # Three occurrences of one error that differ only in numbers and ids: one item, count 3.
        f.write(f"err{i}", "".join(f"2025-06-0{k + 1}T07:00:0{k}Z ERROR job {i} timed out after {30 + k}s "
                                   f"(request 0x{k}f3a9)\nINFO retrying\n" for k in range(3)))
        if i % 2:
            f.write(f"err{i}", "Traceback (most recent call last):\n  File \"x.py\", line 3\nValueError: bad\n")
    for i in range(5):
        f.write(f"anti{i}", "ERROR expected: cache miss, retrying\nINFO fine\n")
    f.write("own-patterns", "FAIL checksum mismatch\nERROR not a failure for this job\n")
    f.write("no-anti", "ERROR expected: but this job has its own empty anti-pattern list\n")
    for code in range(1, 6):
        assert run_job(f, f"exit{code}", PY, "-c", f"print('working'); raise SystemExit({code})").returncode == code
    assert run_job(f, "dirty-zero", PY, "-c", "print('ERROR but exit 0')").returncode == 0
    bad = run_job(f, "unstartable", str(f.root / "no-such-script.sh"))
    assert bad.returncode == 127 and "no-such-script.sh" in bad.stderr
    assert run_job(f, "missed", PY, "-c", "print('ok')").returncode == 0
    assert run_job(f, "yearly", PY, "-c", "print('ok')").returncode == 0

    later = time.time() + 7200  # the `every 10m` job's last run is now two hours old
    report = f.tick(later)
    got = {(i.job, i.kind, i.signature, i.count) for i in f.items()}
    expected = {(f"err{i}", "line", "<ts> ERROR job <n> timed out after <n>s (request <hex>)", 3) for i in range(8)}
    expected |= {(f"err{i}", "line", "Traceback (most recent call last):", 1) for i in range(1, 8, 2)}
    expected |= {("own-patterns", "line", "FAIL checksum mismatch", 1),
                 ("no-anti", "line", "ERROR expected: but this job has its own empty anti-pattern list", 1),
                 ("dirty-zero", "line", "<ts> ERROR but exit <n>", 1),
                 ("missed", "missed", "missed schedule", 1)}
    expected |= {(f"exit{c}", "exit", f"exit code {c}", 1) for c in range(1, 6)}
    unstartable = [i for i in f.items() if i.job == "unstartable"]
    assert len(unstartable) == 1 and "no such file" in unstartable[0].signature
    got -= {(i.job, i.kind, i.signature, i.count) for i in unstartable}
    assert got == expected
    assert all(i.state == "open" and i.nudges == 0 for i in f.items())
    assert sorted(report.new_items) == sorted(i.id for i in f.items()) and report.jobs == 35
    assert len(ledger.tail(f.ctx.store, 1000, kinds=["queue_new"])) == len(f.items())

    before = ledger.count(f.ctx.store)
    again = f.tick(later + 1)
    assert again.bytes_read == 0 and again.new_items == again.recurred == [] and again.runs_reviewed == 0
    assert ledger.count(f.ctx.store) == before
    assert [i.count for i in f.items()] == [i.count for i in queue.listing(f.ctx.store, include_witnessed=1000)]

    # A recurring error keeps its one item and counts up.
    f.write("err0", "2025-06-09T07:00:09Z ERROR job 0 timed out after 99s (request 0xabc123)\n")
    third = f.tick(later + 2)
    err0 = [i for i in f.items() if i.job == "err0"]
    assert len(err0) == 1 and err0[0].count == 4 and third.recurred == [err0[0].id] and third.new_items == []


def errors_in(f: Fleet, name: str) -> int:
    items = [i for i in f.items() if i.job == name]
    assert len(items) <= 1, items
    return items[0].count if items else 0


def test_rotation_copytruncate_truncation_and_replacement_lose_no_line_and_double_none(fleet):
    f = fleet([{"name": "app"}])
    log = f.log("app")
    written = 0

    def emit(n: int, partial: bool = False, unterminated: bool = False) -> None:
        nonlocal written
        for _ in range(n):
            written += 1
            f.write("app", f"ERROR event {written} happened\n")
        if partial or unterminated:
            written += 1
            f.write("app", f"ERROR event {written} " + ("happened" if unterminated else "hap"))

    emit(3)
    f.tick()
    assert errors_in(f, "app") == 3
    emit(2, partial=True)
    f.tick()
    assert errors_in(f, "app") == 5  # the partial line waits for its end
    f.write("app", "pened\n")
    emit(2)  # written to the old file after the last scan, before the rotation
    os.rename(log, log.with_name("app.log.1"))
    emit(3, partial=True)  # the new file, ending mid-line
    f.tick()
    assert errors_in(f, "app") == written - 1
    f.write("app", "pened\n")
    f.tick()
    assert errors_in(f, "app") == written

    # copytruncate: copy aside, then truncate in place; lines written since the last scan are in the copy.
    emit(4)
    shutil.copyfile(log, log.with_name("app.log.1"))
    os.truncate(log, 0)
    emit(2)
    f.tick()
    assert errors_in(f, "app") == written

    # Plain truncation, then a rewrite in place (same inode) that grows past the old offset.
    os.truncate(log, 0)
    emit(1)
    f.tick()
    assert errors_in(f, "app") == written
    old_size = log.stat().st_size
    with open(log, "w") as fh:
        fh.write("".join(f"ERROR event {written + k + 1} happened\n" for k in range(40)))
    assert log.stat().st_size > old_size
    written += 40
    f.tick()
    assert errors_in(f, "app") == written

    # Rotated away and not recreated: the old file is finished, its unterminated last line counted.
    emit(1, unterminated=True)
    os.rename(log, log.with_name("app.log.2"))
    f.tick()
    assert errors_in(f, "app") == written
    emit(2)
    f.tick()
    assert errors_in(f, "app") == written
    f.tick()
    assert errors_in(f, "app") == written



def stamp(*paths: Path, second: int) -> None:
    """An explicit mtime: whether a scan sees a write never depends on the filesystem's timestamp granularity."""
    for path in paths:
        os.utime(path, ns=((1_700_000_000 + second) * 10**9,) * 2)


def test_a_copy_written_into_the_file_of_the_last_copy_is_read_once(fleet):
    # `cp app.log app.log.1 && : > app.log` twice: the second cp writes into the existing app.log.1, so the
    # new copy has the inode number of the copy finished at the last rotation, with other lines in it.
    f = fleet([{"name": "app"}])
    log = f.log("app")
    copy = log.with_name("app.log.1")
    f.write("app", "ERROR event 1 happened\nERROR event 2 happened\n")
    stamp(log, second=1)
    f.tick()
    f.write("app", "ERROR event 3 happened\n")
    shutil.copyfile(log, copy)
    os.truncate(log, 0)
    stamp(copy, log, second=2)
    f.tick()
    assert errors_in(f, "app") == 3
    inode = copy.stat().st_ino
    f.write("app", "ERROR event 4 happened\n")
    shutil.copyfile(log, copy)
    os.truncate(log, 0)
    stamp(copy, log, second=3)
    assert copy.stat().st_ino == inode
    f.tick()
    assert errors_in(f, "app") == 4
    # That copy is now the file finished last: a later look for a copy must not read it again.
    f.write("app", "ERROR event 5 happened\n")
    stamp(copy, log, second=4)
    f.tick()
    assert errors_in(f, "app") == 5


@pytest.mark.parametrize("last_seen", ["ERROR event 1 happened\n", ""])
def test_a_copy_that_took_the_inode_number_of_a_deleted_log_is_read(fleet, last_seen):
    # ext4 gives a freed inode number to the next file created: the log is deleted and recreated, then the
    # copy of a copy-and-truncate gets the deleted log's number (about 1 run in 13 here). To make that happen
    # every time, the old log is moved out of sight instead of deleted, and later becomes the copy.
    f = fleet([{"name": "app"}])
    log = f.log("app")
    written = last_seen.count("\n")
    f.write("app", last_seen)
    stamp(log, second=1)
    f.tick()
    gone = f.root / "deleted"
    os.rename(log, gone)
    f.write("app", "")
    stamp(log, second=2)
    f.tick()
    assert errors_in(f, "app") == written
    f.write("app", "ERROR event 2 happened\n")
    written += 1
    with open(gone, "wb") as fh:
        fh.write(log.read_bytes())
    copy = gone.rename(log.with_name("app.log.1"))
    os.truncate(log, 0)
    stamp(copy, log, second=3)
    f.tick()
    assert errors_in(f, "app") == written


def test_a_first_look_at_a_big_old_log_reads_only_its_recent_end(fleet):
    f = fleet([{"name": "old"}])
    line = "ERROR ancient failure number 1 " + "y" * 60 + "\n"
    f.write("old", line * (3 * logscan.FIRST_LOOK // len(line)))
    f.write("old", "FATAL the recent one\n")
    report = f.tick()
    assert report.bytes_read == logscan.FIRST_LOOK
    counts = {i.signature[:12]: i.count for i in f.items()}
    assert counts["FATAL the re"] == 1
    assert counts["ERROR ancien"] == (logscan.FIRST_LOOK - len("FATAL the recent one\n")) // len(line)


def scan_unprivileged(fleet: Fleet):
    """`loom sentinel scan` as a process that permission bits bind, even when the tests run as root."""
    from conftest import REPO, loom_env

    command = [PY, "-m", "loomtui", "sentinel", "scan", "--no-nudge"]
    if os.geteuid() == 0:
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *command]
    return subprocess.run(command, capture_output=True, text=True, env=loom_env(fleet.env()), cwd=REPO, timeout=120)


def test_unreadable_log_is_an_item_and_long_lines_and_bad_utf8_are_handled(fleet):
    f = fleet([{"name": "locked"}, {"name": "binary"}])
    f.write("binary", b"ERROR \xff\xfe bad bytes " + b"z" * 20000 + b"\nok\n")
    f.write("locked", "ERROR x\n")
    f.log("locked").chmod(0)
    result = scan_unprivileged(f)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    items = {i.job: i for i in f.items()}
    assert set(items) == {"locked", "binary"}
    assert items["binary"].sample.startswith("ERROR \ufffd\ufffd bad bytes zzz") and len(items["binary"].sample) == 500
    assert items["locked"].kind == "scan" and "Permission denied" in items["locked"].signature
    f.log("locked").chmod(0o644)
    result = scan_unprivileged(f)
    assert result.returncode == 0, result.stderr
    assert {i.kind for i in f.items() if i.job == "locked"} == {"scan", "line"}


def test_a_named_pipe_in_a_log_s_place_is_an_item_not_a_hung_sentinel(fleet):
    # Opened without O_NONBLOCK, a FIFO blocked the pass until someone wrote to it: the sentinel hung
    # holding its lock, and no job was scanned, nudged or escalated again. One beside a rotated log
    # (a name starting with the log's) was opened while looking for the old file, and hung it too.
    import os
    import threading

    f = fleet([{"name": "piped"}, {"name": "plain"}])
    f.write("piped", "ERROR before the pipe\n")
    f.tick(1000.0)
    f.log("piped").rename(f.logs / "piped.log.1")
    os.mkfifo(f.logs / "piped.log.fifo")
    os.mkfifo(f.log("piped"))
    f.write("plain", "ERROR disk full\n")
    done = threading.Event()
    threading.Thread(target=lambda: (f.tick(1060.0), done.set()), daemon=True).start()
    assert done.wait(60), "the sentinel pass hung on a named pipe"
    items = {(i.job, i.kind) for i in f.items()}
    assert ("plain", "line") in items and ("piped", "scan") in items
    [scan] = [i for i in f.items() if i.kind == "scan"]
    assert "not a regular file" in scan.sample


def test_many_distinct_failures_fold_into_a_bounded_number_of_items(fleet):
    f = fleet([{"name": "noisy"}])
    f.write("noisy", "".join(f"ERROR {word} broke\n" for word in
                             (f"{a}{b}" for a in "ghijklmnopqrstuvwxyz" for b in "ghijklmnopqrstuvwxyz")))
    f.tick()
    items = f.items()
    assert len(items) == 21 and sum(i.count for i in items) == 400
    assert sum(i.signature.startswith("(more distinct") for i in items) == 1


def test_a_scan_reads_only_the_new_bytes_whatever_the_log_size(fleet):
    f = fleet([{"name": "big"}, {"name": "idle"}])
    f.write("big", ("INFO " + "x" * 95 + "\n") * 50_000)  # 5 MB
    f.write("idle", "INFO quiet\n")
    first = f.tick()
    assert first.bytes_read == logscan.FIRST_LOOK + len("INFO quiet\n")
    for extra in (b"ERROR one new line\n", b"INFO two\nINFO three\n" * 50):
        f.write("big", extra)
        report = f.tick()
        assert report.bytes_read == len(extra)
    assert f.tick().bytes_read == 0


EPOCH = st.tuples(
    st.integers(min_value=0, max_value=4),  # lines appended before the structural change
    st.booleans(),  # ... the last one left unterminated
    st.sampled_from(["none", "rotate", "copytruncate", "truncate", "recreate"]),
    st.integers(min_value=0, max_value=4),  # lines appended after it, before the scan
    st.booleans(),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(EPOCH, min_size=1, max_size=6))
def test_property_every_line_is_counted_once_across_rotations_and_truncations(tmp_path_factory, epochs):
    f = Fleet(tmp_path_factory.mktemp("prop") / "fleet", [{"name": "app"}])
    log = f.log("app")
    state = {"written": 0, "open_partial": False, "rotations": 0}

    def emit(n: int, partial: bool) -> None:
        if state["open_partial"] and (n or partial):
            f.write("app", "pened\n")  # the writer finishes its line first
            state["open_partial"] = False
        for _ in range(n):
            state["written"] += 1
            f.write("app", f"ERROR event {state['written']} happened\n")
        if partial:
            state["written"] += 1
            f.write("app", f"ERROR event {state['written']} hap")
            state["open_partial"] = True

    try:
        f.write("app", "")
        f.tick()
        for before, before_partial, change, after, after_partial in epochs:
            emit(before, before_partial)
            if change in ("truncate", "recreate"):
                f.tick()  # lines written after the last scan and then truncated or deleted are gone for anyone
            if change != "none":
                state["rotations"] += 1
                aside = log.with_name(f"app.log.{state['rotations']}")
                if change == "rotate":
                    os.rename(log, aside)
                elif change == "copytruncate":
                    shutil.copyfile(log, aside)
                    os.truncate(log, 0)
                elif change == "truncate":
                    os.truncate(log, 0)
                else:
                    os.unlink(log)
                state["open_partial"] = False
                f.write("app", "")
            emit(after, after_partial)
            f.tick()
        emit(0, False)
        if state["open_partial"]:
            f.write("app", "pened\n")
        f.tick()
        assert sum(i.count for i in f.items()) == state["written"]
    finally:
        f.ctx.close()


def test_new_distinct_failures_scan_after_scan_fold_once_the_job_holds_its_share(fleet):
    """A log whose errors differ by words (a user, a feed, a file), not numbers: each scan's twenty
    new signatures became twenty more items, each nudged and then sent to the operator, without end.
    Once the job holds MAX_SIGNATURES live line items, more fold into its one overflow item."""
    from loomtui.sentinel import jobscan

    f = fleet([{"name": "words"}])
    words = (f"{a}{b}{c}" for a in "ghijklmnop" for b in "ghijklmnop" for c in "ghijklmnop")
    for _ in range(6):
        f.write("words", "".join(f"ERROR user {next(words)} not found\n" for _ in range(30)))
        f.tick()
    items = f.items()
    assert len(items) == jobscan.MAX_SIGNATURES + 1
    [overflow] = [i for i in items if i.signature == jobscan.OVERFLOW]
    assert sum(i.count for i in items) == 180 and overflow.count == 180 - jobscan.MAX_SIGNATURES
    # A line the job already has an item for is still counted there, not in the overflow.
    f.write("words", "ERROR user ggg not found\n")
    f.tick()
    [first] = [i for i in f.items() if i.sample.endswith(" ggg not found")]
    assert first.count == 2
