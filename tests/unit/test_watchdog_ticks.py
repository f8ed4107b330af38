"""The watchdog's tick in Loom's real code (issue 25's mutants of agent/watchdog.py): what it records
in the real store, what it says, and the second looks it takes before it acts."""

from __future__ import annotations

import json
import re

import pytest

from fake_clock import FakeClock
from loomtui import clock
from loomtui.agent import holds, launches, proctree
from loomtui.agent.driver import GONE, UP
from loomtui.agent.ports import AgentFacts
from loomtui.agent.proctree import MISSING, PRESENT, UNKNOWN
from loomtui.agent.tmux import PaneInfo, TmuxError
from loomtui.agent.watchdog import Watchdog, record_denials
from loomtui.agent.watchdog_rules import Observation, Step
from loomtui.context import Context
from loomtui.pump import transcript
from loomtui.store import counters, ledger, locks
from loomtui.text import printable


def load(tmp_path, text: str = "") -> Context:
    config = tmp_path / "loom.toml"
    config.write_text(text)
    return Context.load(str(config), str(tmp_path / "state"), environ={})


def test_an_ambiguous_look_is_recorded_with_its_reason(tmp_path):
    ctx = load(tmp_path)
    try:
        assert Watchdog(ctx).act(Step("ambiguous", note="pane unreadable"), None, None) == "ambiguous: pane unreadable"
        [event] = ledger.tail(ctx.store, 5, kinds=["observation_ambiguous"])
        assert (event.source, event.detail) == ("watchdog", {"why": "pane unreadable"})
    finally:
        ctx.close()


# -- the pump's denials ----------------------------------------------------------------------------


def transcript_lines(records: list[dict]) -> bytes:
    return b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)


def result(denials, ts: float = 5.0, **event) -> dict:
    return {"ts": ts, "dir": "out", "event": {"type": "result", "permission_denials": denials, **event}}


def denials(ctx: Context) -> list[dict]:
    return [e.detail for e in ledger.tail(ctx.store, 50, kinds=["permission_denied"])]


def test_a_denial_is_recorded_with_its_turn_its_subtype_and_its_time(tmp_path):
    ctx = load(tmp_path)
    try:
        path = transcript.path_in(ctx.agent_dir)
        long = "error_during_execution\x1b[31m" + "x" * 40
        path.write_bytes(transcript_lines([
            # A result before any line was typed: no origin, no seq.
            result([{"tool_name": "Bash"}, {"tool_name": "Edit"}, {"tool_name": "Bash"}], subtype="success"),
            # A line whose origin and seq are not what the pump writes: read as unknown.
            {"ts": 6.0, "dir": "in", "origin": 7, "seq": "8", "text": "x"},
            result(["Write", {}], ts=6.5, subtype=long),
            # Only a result's denials count: another event carrying the same key is not a turn's end.
            {"ts": 7.0, "dir": "out", "event": {"type": "assistant", "permission_denials": [{"tool_name": "Read"}]}},
            {"ts": 8.0, "dir": "in", "origin": "canary", "seq": 9, "text": "touch"},
            result([{"tool_name": "Glob"}], ts=8.5),
        ]))
        assert record_denials(ctx) == ["permission denied to Bash, Edit", "permission denied to Write, ?",
                                       "permission denied to Glob"]
        assert denials(ctx) == [
            {"tools": ["Bash", "Edit"], "count": 3, "seq": None, "origin": None, "subtype": "success", "ts": 5.0},
            {"tools": ["Write", "?"], "count": 2, "seq": None, "origin": None,
             "subtype": printable(long)[:40], "ts": 6.5},
            {"tools": ["Glob"], "count": 1, "seq": 9, "origin": "canary", "subtype": "", "ts": 8.5},
        ]
        subtype = denials(ctx)[1]["subtype"]
        assert len(subtype) == 40 and "\x1b" not in subtype  # cut, and shown harmless
        assert {e.source for e in ledger.tail(ctx.store, 50, kinds=["permission_denied"])} == {"watchdog"}
    finally:
        ctx.close()


def test_a_line_still_being_written_is_read_once_it_is_complete(tmp_path):
    ctx = load(tmp_path)
    try:
        path = transcript.path_in(ctx.agent_dir)
        whole = transcript_lines([result([{"tool_name": "Bash"}])])
        path.write_bytes(whole[:-10])
        assert record_denials(ctx) == []
        assert record_denials(ctx) == []
        path.write_bytes(whole)
        assert record_denials(ctx) == ["permission denied to Bash"]
        assert record_denials(ctx) == []
    finally:
        ctx.close()


def test_a_transcript_rewritten_in_place_is_read_from_its_start(tmp_path):
    ctx = load(tmp_path)
    try:
        path = transcript.path_in(ctx.agent_dir)
        first = {"ts": 1.0, "dir": "pump", "started": 1}
        path.write_bytes(transcript_lines([first, result([{"tool_name": "Bash"}]), result([{"tool_name": "Edit"}])]))
        assert len(record_denials(ctx)) == 2
        inode = path.stat().st_ino
        # The same inode, as long as before, another first line: another transcript.
        with open(path, "r+b") as fh:
            fh.write(transcript_lines([{**first, "started": 2}, result([{"tool_name": "Grep"}]),
                                       result([{"tool_name": "Glob"}])]))
        assert path.stat().st_ino == inode
        assert record_denials(ctx) == ["permission denied to Grep", "permission denied to Glob"]
        # The same first line and shorter than what was read: cut short, read from its start.
        with open(path, "r+b") as fh:
            fh.truncate(0)
            fh.write(transcript_lines([{**first, "started": 2}, result([{"tool_name": "Task"}])]))
        assert path.stat().st_ino == inode
        assert record_denials(ctx) == ["permission denied to Task"]
        assert record_denials(ctx) == []
    finally:
        ctx.close()


# -- the watchdog against a machine of a few rows --------------------------------------------------
# The fakes stand for the machine around the agent (the ports a Context carries: tmux and its pane,
# the process table, signals), as `loom sim` fills them in; the watchdog, the actions, the store and
# the rules are Loom's own.


class Table:
    """The process table: pid -> (parent, command line, start)."""

    def __init__(self, rows: dict[int, tuple[int, str, float]]) -> None:
        self.rows = dict(rows)
        self.unreadable: set[int] = set()  # pids whose walk or parents cannot be read (Ambiguous)
        self.then: dict[int, tuple[int, str, float]] = {}

    def _read(self, pid: int) -> None:
        if pid in self.unreadable:
            raise proctree.Ambiguous(f"cannot read process {pid}")

    def walk(self, root: int) -> tuple[list[int], dict[int, int]]:
        self._read(root)
        pids, parents, todo = [], {}, [root]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            for child, (parent, _, _) in self.rows.items():
                if parent == pid:
                    parents[child] = pid
                    todo.append(child)
        return pids, parents

    def inspect(self, root: int, process_match: str, poller_match: str = "") -> proctree.Tree:
        pids = self.walk(root)[0]
        agents = [p for p in pids if re.search(process_match, self.cmdline(p))]
        pollers = [p for p in pids if poller_match and re.search(poller_match, self.cmdline(p))]
        return proctree.Tree(root, tuple(pids), PRESENT if agents else MISSING, agents[-1] if agents else None,
                             PRESENT if pollers else MISSING, tuple(pollers))

    def foreign_pollers(self, poller_match: str, tree: set[int]) -> list[tuple[int, str]]:
        found = [(pid, line) for pid, (_, line, _) in self.rows.items()
                 if poller_match and re.search(poller_match, line) and pid not in tree]
        self.rows.update(self.then)  # what changed on the machine while the pass ran
        return found

    def cmdline(self, pid: int) -> str:
        self._read(pid)
        return self.rows[pid][1] if pid in self.rows else ""

    def ancestors(self, pid: int) -> set[int]:
        self._read(pid)
        found, parent = set(), self.rows.get(pid, (0, "", 0.0))[0]
        while parent:
            found.add(parent)
            parent = self.rows.get(parent, (0, "", 0.0))[0]
        return found

    def name(self, pid: int) -> str:
        return self.rows[pid][1].split()[0] if pid in self.rows else "?"

    def start_time(self, pid: int) -> float | None:
        return self.rows[pid][2] if pid in self.rows else None

    def alive_as(self, pid: int | None, started: float | None) -> bool:
        return bool(pid) and started is not None and self.start_time(pid) == started

    def alive_since(self, pid: int | None, started: float | None, wall_started: float) -> bool:
        return self.alive_as(pid, started)


class Signals:
    def __init__(self, table: Table) -> None:
        self.table = table
        self.ended: list[int] = []
        self.recreated: list[int] = []

    def end(self, pids: list[int], grace: float) -> list[int]:
        for pid in pids:
            self.ended.append(pid)
            self.table.rows.pop(pid, None)
        return []

    def recreate_socket(self, server_pid: int) -> None:
        self.recreated.append(server_pid)


SERVER, PANE, AGENT, POLLER = 10, 100, 101, 102


class Tmux:
    """tmux as the tmux driver reads it: one session, one pane, a screen."""

    name = "tmux"
    has_dialogs = True
    owns_turns = False

    def __init__(self, table: Table) -> None:
        self.table = table
        self.info: PaneInfo | None = PaneInfo("%1", PANE, False, None, 200, 50)
        self.answers = True
        self.serving = True  # the server answers on its socket
        self.text = ""
        self.screen_fails = False
        self.captures = True
        self.screens: list[bool | int] = []
        self.pressed: list[list[str]] = []

    def _answer(self) -> None:
        if not self.answers:
            raise TmuxError("tmux did not answer within 5s")

    def pane_info(self) -> PaneInfo | None:
        self._answer()
        return self.info

    def pane_pid(self) -> int | None:
        try:
            info = self.pane_info()
        except TmuxError:
            return None
        return info.pane_pid if info is not None and not info.dead else None

    def observe(self, *, with_screen: bool = False) -> AgentFacts:
        try:
            info = self.pane_info()
        except TmuxError as exc:
            return AgentFacts(UNKNOWN, why=str(exc))
        if info is None:
            return AgentFacts(GONE, why="no tmux session")
        if info.dead:
            return AgentFacts(UP, info, None, why="the pane's process exited")
        tree = self.table.inspect(info.pane_pid, "claude", "poller")
        # tmux's look gives no screen when its capture failed (`AgentPane.look`).
        return AgentFacts(UP, info, tree, tree.why, screen=self.text if with_screen and self.captures else None)

    def screen(self, history: bool | int = False, *, ansi: bool = False, pane_id: str | None = None) -> str:
        self._answer()
        if self.screen_fails:
            raise TmuxError("can't find pane: %1")
        self.screens.append(history)
        return self.text

    def stream_facts(self, pane_pid: int | None) -> None:
        return None

    def server_running(self) -> bool:
        self._answer()
        return self.serving

    def server_pid(self) -> int | None:
        self._answer()
        return SERVER if self.serving else None

    def send_keys(self, keys: list[str], expect_pane_pid: int | None = None) -> None:
        self._answer()
        self.pressed.append(list(keys))

    def stop(self, grace: float, recorded: dict | None = None) -> list[int]:
        self._answer()  # the driver looks at the pane first (a tmux that stopped answering fails it)
        self.info = None
        return []

    def launch(self, command: str, cwd, env: dict[str, str], exit_signal=None) -> PaneInfo:
        raise TmuxError("no server running on the socket")  # the relaunch is recorded, then fails


@pytest.fixture
def virtual():
    """The clock port on virtual time: it moves when a test says."""
    with clock.use(FakeClock()) as fake:
        yield fake


@pytest.fixture
def machine(tmp_path, virtual):
    """A Context on a machine where tmux server 10 runs pane 100, the agent 101 and its poller 102."""
    ctx = load(tmp_path, '[agent]\nprocess_match = "claude"\npoller_match = "poller"\n')
    table = Table({SERVER: (1, "tmux", 1.0), PANE: (SERVER, "bash", 2.0), AGENT: (PANE, "claude --resume", 3.0),
                   POLLER: (AGENT, "poller --bot", 4.0)})
    ctx.processes, ctx.signals, ctx.driver = table, Signals(table), Tmux(table)
    yield ctx
    ctx.close()


def dead(pid: int = PANE, status: int | None = 1, signal: int | None = None) -> PaneInfo:
    return PaneInfo("%1", pid, True, status, 200, 50, signal)


def test_a_fast_tick_looks_fully_only_at_a_dead_pane(machine):
    watchdog = Watchdog(machine)
    assert watchdog.fast_tick() is None
    machine.driver.answers = False
    assert watchdog.fast_tick() is None
    machine.driver.answers = True
    holds.place(machine, by="operator", reason="hands off", until=None, source="cli", now=clock.now())
    machine.driver.info = dead()
    report = watchdog.fast_tick()
    assert report is not None and report.observation.pane_dead and report.observation.dead_status == 1
    assert [step.cause for step in report.steps] == ["crash"] and report.results[0].startswith("crash: held")


def test_an_alert_a_socket_repair_and_a_dismissal_are_the_watchdogs(machine):
    watchdog = Watchdog(machine)
    assert watchdog.act(Step("alert", note="tmux socket gone"), None, None) == "operator alerted: tmux socket gone"
    launches.record_processes(machine, machine.driver, PANE)
    assert watchdog.act(Step("repair_socket"), None, None) == "asked tmux server 10 to recreate its socket"
    assert machine.signals.recreated == [SERVER]
    assert watchdog.act(Step("dismiss_modal", keys=("Down", "Enter"), note="trust"), None, None) == "modal dismissed"
    assert machine.driver.pressed == [["Down", "Enter"]]
    events = ledger.tail(machine.store, 10, kinds=["operator_alert", "tmux_socket_repair", "modal_dismissed"])
    assert [(e.kind, e.source) for e in events] == [
        ("operator_alert", "watchdog"), ("tmux_socket_repair", "watchdog"), ("modal_dismissed", "watchdog")]
    assert events[1].detail == {"server_pid": SERVER}
    assert events[2].detail["keys"] == ["Down", "Enter"] and events[2].detail["match"] == "trust"
    # The watchdog's own actions are counted by its loop, not as an operator's trigger.
    assert counters.read(machine.store, "loom_fire_total") == []


def test_a_dismissal_refused_by_a_hold_or_failed_by_tmux_says_so(machine):
    watchdog = Watchdog(machine)
    machine.driver.answers = False
    said = watchdog.act(Step("dismiss_modal", keys=("Enter",), note="trust"), None, None)
    assert said.startswith("modal dismissal failed: ") and "tmux did not answer" in said
    machine.driver.answers = True
    holds.place(machine, by="operator", reason="hands off", until=None, source="cli", now=clock.now())
    said = watchdog.act(Step("dismiss_modal", keys=("Enter",), note="trust"), None, None)
    assert said.startswith("modal left on screen: refused: ") and "hands off" in said
    assert machine.driver.pressed == []


def test_the_socket_is_lost_only_while_the_recorded_server_runs_and_does_not_answer(machine):
    watchdog = Watchdog(machine)
    assert watchdog.socket_lost() is False  # nothing recorded
    launches.record_processes(machine, machine.driver, PANE)
    assert watchdog.socket_lost() is False  # it answers
    machine.driver.serving = False
    assert watchdog.socket_lost() is True
    machine.driver.answers = False
    assert watchdog.socket_lost() is False  # no answer at all: not known to be lost
    machine.driver.answers = True
    machine.processes.rows[SERVER] = (1, "tmux", 9.0)  # the pid now another process's
    assert watchdog.socket_lost() is False


def test_the_second_look_before_a_relaunch(machine):
    watchdog = Watchdog(machine)
    tmux = machine.driver
    # The agent and its poller run: nothing is failing.
    for cause in ("exit", "crash", "resume_failed", "poller_missing", "tmux_gone", "canary_failed"):
        assert watchdog.still_failing(cause, PANE) is False, cause
    machine.processes.rows.pop(POLLER)
    assert watchdog.still_failing("poller_missing", PANE) is True
    assert watchdog.still_failing("canary_failed", PANE) is False
    machine.processes.rows.pop(AGENT)
    assert watchdog.still_failing("exit", PANE) is True
    assert watchdog.still_failing("poller_missing", PANE) is False
    # The pane dead: the same pane still is, another (someone relaunched) is not.
    tmux.info = dead()
    for cause in ("exit", "crash", "resume_failed"):
        assert watchdog.still_failing(cause, PANE) is True, cause
        assert watchdog.still_failing(cause, PANE + 5) is False, cause
    assert watchdog.still_failing("poller_missing", PANE) is False
    assert watchdog.still_failing("tmux_gone", PANE) is False
    # No session: tmux is gone, unless its socket was lost with the server running.
    tmux.info = None
    assert watchdog.still_failing("tmux_gone", PANE) is True
    assert watchdog.still_failing("crash", PANE) is False
    launches.record_processes(machine, tmux, PANE)
    tmux.serving = False
    assert watchdog.still_failing("tmux_gone", PANE) is False
    tmux.answers = False
    assert watchdog.still_failing("tmux_gone", PANE) is False
    assert watchdog.still_failing("crash", PANE) is False


@pytest.mark.parametrize(("status", "signal", "evidence"), [(1, None, {"status": 1}), (None, 9, {"status": None, "signal": 9})])
def test_a_relaunch_records_what_the_watchdog_saw_of_the_dead_pane(machine, status, signal, evidence):
    machine.driver.info = dead(status=status, signal=signal)
    report = Watchdog(machine).tick()
    assert machine.driver.screens == [True]  # a dead pane's history, for the rules to read
    [step] = report.steps
    [event] = ledger.tail(machine.store, 10, kinds=["relaunch"])
    assert (event.source, event.cause) == ("watchdog", "crash")
    assert event.detail["evidence"] == {"note": step.note, **evidence} and step.note
    [failed] = ledger.tail(machine.store, 10, kinds=["relaunch_failed"])
    assert report.results == [f"crash: relaunch ({failed.detail['mode']}) failed: {failed.detail['error']}"]


def test_the_daemons_watchdog_begins_no_relaunch_once_the_daemon_stops(machine):
    """The daemon stops (its halt is set) as the watchdog finds the pane dead. The daemon's watchdog
    never heard the halt: the relaunch it began (the old agent stopped, a new one launched, its boot
    watched for the boot grace) held up the stop, into the daemon's wait and past it, writing into a
    store about to be closed. The next daemon's first look finds the dead pane."""
    import threading

    from loomtui.daemon.loops import watchdog_tick

    halt = threading.Event()
    machine.driver.info = dead()
    halt.set()
    report = watchdog_tick(machine, halt)()
    assert [step.cause for step in report.steps] == ["crash"]
    assert report.results == ["crash: not relaunched, the daemon is stopping"]
    assert ledger.tail(machine.store, 10, kinds=["relaunch", "relaunch_failed"]) == []
    assert machine.driver.info is not None  # nothing was stopped


def test_a_relaunch_that_stopped_nothing_puts_the_launch_record_back(machine, virtual):
    """tmux stopped answering between the look and the stop: nothing was stopped, the old agent runs
    on. Its launch record stayed the failed relaunch's: a launch that never happened, taken for an
    agent booting (no probes for its grace) and ending the old agent's open turn."""
    from loomtui.agent import launch

    launch.relaunch_locked(machine, "resume", cause="operator_resume", source="cli")  # a launch to keep
    before = launches.last_launch(machine)
    machine.driver.info = PaneInfo("%1", PANE, False, None, 200, 50)
    virtual.advance(3600)
    machine.driver.answers = False
    outcome = launch.relaunch_locked(machine, "resume", cause="crash", source="watchdog")
    assert not outcome.ok and "did not answer" in outcome.error
    assert launches.last_launch(machine) == before and not launches.in_boot_grace(machine)
    [failed] = ledger.tail(machine.store, 10, kinds=["relaunch_failed"])[-1:]
    assert failed.cause == "crash"


def test_a_live_panes_relaunch_records_only_the_note(machine, virtual):
    machine.processes.rows.pop(POLLER)
    watchdog = Watchdog(machine)
    assert watchdog.tick().steps == []
    virtual.advance(machine.config.watchdog.poller_grace)
    report = watchdog.tick()
    [step] = report.steps
    assert step.cause == "poller_missing"
    [event] = ledger.tail(machine.store, 10, kinds=["relaunch"])
    assert event.detail["evidence"] == {"note": step.note}


def test_a_step_the_watchdog_does_not_know_is_never_taken_for_a_relaunch(machine):
    with pytest.raises(AssertionError):
        Watchdog(machine).act(Step("wait", cause="crash", note="?"), Observation(UP), AgentFacts(UP))
    with pytest.raises(AssertionError):
        Watchdog(machine).act(Step("recover", note="no cause"), Observation(UP), AgentFacts(UP))
    assert ledger.tail(machine.store, 10, kinds=["relaunch"]) == []


def test_a_relaunch_someone_else_made_meanwhile_is_not_made_again(machine):
    # The look saw pane 100 dead; under recycle.lock the second look finds a live pane 200.
    seen = dead()
    machine.processes.rows[200] = (SERVER, "claude --resume", 5.0)
    machine.driver.info = PaneInfo("%2", 200, False, None, 200, 50)
    watchdog = Watchdog(machine)
    said = watchdog.act(Step("recover", "crash", note="the pane's process exited"),
                        Observation(UP, pane_dead=True, dead_status=1), AgentFacts(UP, seen))
    assert said == "crash: resolved: the failure was gone on a second look"
    assert ledger.tail(machine.store, 10, kinds=["relaunch"]) == []


def test_the_look_takes_the_screen_with_the_pane_and_knows_the_last_launch(machine, virtual):
    watchdog = Watchdog(machine)
    machine.driver.text = "claude is ready"
    obs, facts = watchdog.observe()
    assert obs.screen == "claude is ready" and machine.driver.screens == []  # one tmux call, not two
    assert (obs.agent, obs.poller, obs.poller_configured) == (PRESENT, PRESENT, True)
    assert (obs.since_launch, obs.last_mode) == (None, None)
    machine.driver.info = dead()
    watchdog.tick()  # a relaunch, recorded (the fake's launch fails after)
    virtual.advance(7.0)
    obs, _ = watchdog.observe()
    assert (obs.since_launch, obs.last_mode) == (7.0, "fresh")


# -- foreign pollers, and the record of our processes ----------------------------------------------

FOREIGN = 300


def reaped(ctx: Context) -> list[dict]:
    return [e.detail for e in ledger.tail(ctx.store, 20, kinds=["foreign_poller_reaped"]) if e.source == "watchdog"]


def test_a_poller_outside_the_agents_tree_is_reaped_once_per_scan(machine, virtual):
    machine.processes.rows[FOREIGN] = (1, "poller --bot", 6.0)
    watchdog = Watchdog(machine)
    report = watchdog.tick()
    assert report.results == [f"reaped foreign poller {FOREIGN}"]
    assert machine.signals.ended == [FOREIGN] and reaped(machine) == [{"pid": FOREIGN, "name": "poller", "ok": True}]
    # Another appears: not looked for again until the scan's interval has passed, to the second.
    machine.processes.rows[FOREIGN + 1] = (1, "poller --bot", 7.0)
    virtual.advance(machine.config.watchdog.foreign_scan - 0.5)
    assert watchdog.tick().results == []
    virtual.advance(0.5)
    assert watchdog.tick().results == [f"reaped foreign poller {FOREIGN + 1}"]
    assert machine.signals.ended == [FOREIGN, FOREIGN + 1]


def test_no_poller_is_reaped_while_the_tree_is_not_plainly_seen(machine):
    machine.processes.rows[FOREIGN] = (1, "poller --bot", 6.0)
    watchdog = Watchdog(machine)
    machine.processes.unreadable.add(PANE)  # the agent's tree cannot be walked
    assert watchdog.reap_foreign() == []
    machine.processes.unreadable.clear()
    with locks.hold(machine.agent_dir, locks.RECYCLE, timeout=0):  # a relaunch under way
        assert watchdog.reap_foreign() == []
    machine.driver.answers = False
    assert watchdog.reap_foreign() == []
    machine.driver.answers = True
    machine.driver.info = None
    assert watchdog.reap_foreign() == []
    # A dead pane: the look relaunches (held here), and the stale tree is not scanned either.
    holds.place(machine, by="operator", reason="hands off", until=None, source="cli", now=clock.now())
    machine.driver.info = dead()
    assert watchdog.reap_foreign() == []
    report = watchdog.tick()
    assert [s.kind for s in report.steps] == ["recover"] and len(report.results) == 1
    assert watchdog.last_foreign_scan is None  # not due: not even counted as a scan
    assert machine.signals.ended == [] and reaped(machine) == []


def test_no_pollers_are_looked_for_without_a_poller_pattern(tmp_path, virtual):
    ctx = load(tmp_path, '[agent]\nprocess_match = "claude"\n')
    table = Table({SERVER: (1, "tmux", 1.0), PANE: (SERVER, "bash", 2.0), AGENT: (PANE, "claude", 3.0),
                   FOREIGN: (1, "poller --bot", 6.0)})
    ctx.processes, ctx.signals, ctx.driver = table, Signals(table), Tmux(table)
    try:
        watchdog = Watchdog(ctx)
        assert watchdog.due_foreign_scan() is False and watchdog.tick().results == []
        assert ctx.signals.ended == []
    finally:
        ctx.close()


def test_the_second_look_before_a_reap(machine):
    machine.processes.rows[FOREIGN] = (1, "poller --bot", 6.0)
    watchdog = Watchdog(machine)
    assert watchdog._confirm_foreign(FOREIGN) is True
    # Now a child of the agent's pane (the scan missed a poller the agent just spawned).
    machine.processes.rows[FOREIGN] = (AGENT, "poller --bot", 6.0)
    assert watchdog._confirm_foreign(FOREIGN) is False
    machine.processes.rows[FOREIGN] = (1, "python other.py", 6.0)  # the pid is no poller now
    assert watchdog._confirm_foreign(FOREIGN) is False
    machine.processes.rows[FOREIGN] = (1, "poller --bot", 6.0)
    machine.processes.unreadable.add(FOREIGN)  # gone, or its parents unreadable
    assert watchdog._confirm_foreign(FOREIGN) is False
    machine.processes.unreadable.clear()
    machine.driver.info = dead()  # no live pane to tell ours from theirs
    assert watchdog._confirm_foreign(FOREIGN) is False
    machine.driver.info = None
    assert watchdog._confirm_foreign(FOREIGN) is False
    machine.driver.answers = False
    assert watchdog._confirm_foreign(FOREIGN) is False


def recorded(ctx: Context) -> dict | None:
    """The record, less the boot it names (this boot's: asserted here)."""
    found = launches.recorded_processes(ctx)
    if found is None:
        return None
    assert found.pop("boot", clock.boot_id()) == clock.boot_id()
    return found


def test_a_record_of_another_boot_names_no_process_of_ours(machine):
    # Linux's process start is clock ticks since boot: a deterministic boot (a Pi, a VM image) can
    # give the same pid the same start again, and a stop would have killed that stranger's tree.
    machine.store.set_meta(machine.store.agent_key(launches.PROCS_KEY), json.dumps(
        {"pane_pid": PANE, "pane_started": 2.0, "server_pid": SERVER, "server_started": 1.0, "boot": "an-old-boot"}))
    assert launches.recorded_processes(machine) is None
    Watchdog(machine).observe()  # kept current: recorded again, on this boot
    assert launches.recorded_processes(machine)["boot"] == clock.boot_id()


def test_the_record_of_our_processes_is_kept_current(machine):
    watchdog = Watchdog(machine)
    watchdog.observe()
    assert recorded(machine) == {"pane_pid": PANE, "pane_started": 2.0, "server_pid": SERVER, "server_started": 1.0}
    # What runs is what is recorded: not written again.
    machine.processes.rows[SERVER] = (1, "tmux", 1.5)
    watchdog.observe()
    assert recorded(machine)["server_started"] == 1.0
    # Another pane process (a relaunch that could not record it): recorded.
    machine.processes.rows[PANE + 50] = (SERVER, "bash", 8.0)
    machine.driver.info = PaneInfo("%2", PANE + 50, False, None, 200, 50)
    watchdog.observe()
    assert recorded(machine) == {"pane_pid": PANE + 50, "pane_started": 8.0, "server_pid": SERVER,
                                 "server_started": 1.5}
    # Recorded while the server could not be told: recorded again once it can.
    machine.store.set_meta(machine.store.agent_key(launches.PROCS_KEY), json.dumps(
        {"pane_pid": PANE + 50, "pane_started": 8.0, "server_pid": None, "server_started": None}))
    watchdog.observe()
    assert recorded(machine)["server_pid"] == SERVER
    # A dead pane is not what runs.
    machine.driver.info = dead(PANE + 60)
    watchdog.observe()
    assert recorded(machine)["pane_pid"] == PANE + 50


def test_a_timed_hold_ends_on_the_watchdogs_look(machine, virtual):
    holds.place(machine, by="operator", reason="a minute", until=clock.now().wall + 60, source="cli", now=clock.now())
    watchdog = Watchdog(machine)
    watchdog.tick()
    assert ledger.tail(machine.store, 10, kinds=["hold_cleared"]) == []
    virtual.advance(61)
    watchdog.tick()
    [cleared] = ledger.tail(machine.store, 10, kinds=["hold_cleared"])
    assert cleared.source == "watchdog"


class Pump(Tmux):
    owns_turns = True
    has_dialogs = False


def test_with_a_pump_each_look_records_the_turns_denials(machine):
    machine.driver = Pump(machine.processes)
    path = transcript.path_in(machine.agent_dir)
    path.write_bytes(transcript_lines([result([{"tool_name": "Bash"}])]))
    watchdog = Watchdog(machine)
    assert watchdog.tick().results == ["permission denied to Bash"]
    assert watchdog.tick().results == []
    with open(path, "ab") as fh:  # the next turn's: read on from where the last look stopped
        fh.write(transcript_lines([result([{"tool_name": "Edit"}])]))
    assert watchdog.tick().results == ["permission denied to Edit"]
    assert [d["tools"] for d in denials(machine)] == [["Bash"], ["Edit"]]
    # The tmux driver records no turns: the transcript is not read.
    machine.driver = Tmux(machine.processes)
    path.write_bytes(transcript_lines([result([{"tool_name": "Grep"}])]))
    assert Watchdog(machine).tick().results == []


def test_what_the_look_sees(machine):
    watchdog = Watchdog(machine)
    tmux = machine.driver
    tmux.text = "Do you trust the files in this folder?"
    live = Observation(UP, agent=PRESENT, poller=PRESENT, poller_configured=True, screen=tmux.text)
    assert watchdog.observe()[0] == live
    # No agent in the pane: its screen is not read for dialogs.
    machine.processes.rows.pop(AGENT)
    assert watchdog.observe()[0] == Observation(UP, agent=MISSING, poller=MISSING, poller_configured=True)
    # A dead pane: its status, its signal and its history.
    tmux.info = dead(status=3, signal=9)
    assert watchdog.observe()[0] == Observation(UP, pane_dead=True, dead_status=3, dead_signal=9,
                                                poller_configured=True, screen=tmux.text,
                                                why="the pane's process exited")
    assert tmux.screens == [True]
    tmux.info = PaneInfo("%1", PANE, False, None, 200, 50)
    machine.processes.rows[AGENT] = (PANE, "claude --resume", 3.0)
    tmux.captures = False  # the look's capture failed: the screen is asked for again
    assert watchdog.observe()[0] == live and tmux.screens == [True, False]
    tmux.info = dead(status=3, signal=9)
    tmux.screen_fails = True  # the pane went between the two calls
    assert watchdog.observe()[0].screen is None
    tmux.info = None
    assert watchdog.observe()[0] == Observation(GONE, poller_configured=True, why="no tmux session")
    tmux.answers = False
    assert watchdog.observe()[0] == Observation(UNKNOWN, poller_configured=True,
                                                why="tmux did not answer within 5s")


def test_without_dialogs_the_look_reads_no_screen(machine):
    machine.driver = Pump(machine.processes)
    machine.driver.text = "Do you trust the files in this folder?"
    obs, facts = Watchdog(machine).observe()
    assert obs == Observation(UP, agent=PRESENT, poller=PRESENT, poller_configured=True)
    assert machine.driver.screens == [] and facts.screen is None


def test_a_dead_pumps_pane_says_a_resume_failed_only_on_the_clis_stderr(machine):
    """A pump's pane echoes what was sent in and answered: a message holding "No conversation found"
    read as the resume's failure, and a resumed conversation was thrown away for a fresh one."""
    machine.driver = pump = Pump(machine.processes)
    pump.info = dead(status=1)
    pump.text = "telegram › saw No conversation found in the cron log\nassistant › looking into it\n"
    obs, _ = Watchdog(machine).observe()
    assert obs.screen == ""  # nothing on stderr
    pump.text += "stderr: No conversation found with session ID: s-1\n"
    obs, _ = Watchdog(machine).observe()
    assert obs.screen == "No conversation found with session ID: s-1"


def test_a_poller_the_agent_spawned_during_the_scan_is_left_alone(machine):
    # Listed as outside the tree, it is under the agent by the second look (it was spawned, then
    # seen, between the walk and the pass over the table).
    machine.processes.rows[FOREIGN] = (1, "poller --bot", 6.0)
    machine.processes.then = {FOREIGN: (AGENT, "poller --bot", 6.0)}
    assert Watchdog(machine).reap_foreign() == []
    assert machine.signals.ended == [] and reaped(machine) == []


def test_a_pane_that_runs_the_poller_itself_is_ours(machine):
    machine.processes.rows[PANE] = (SERVER, "sh -c 'claude --resume & poller --bot'", 2.0)
    assert Watchdog(machine).reap_foreign() == []
    assert machine.signals.ended == []
