"""The ports to the machine (issue 25): the daemon's code tells time through `loomtui.clock` and reaches
the driver, the process table, signals and the acks watch through its Context, so `loom sim` can run
that same code against a simulated world. The fakes here stand in for the machine (a clock, a process
table, a directory watch), never for a part of Loom; the store, the pane and the probe are real.

The last tests read Loom's source: no module the simulator runs reads the machine behind the ports.
"""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_clock import FakeClock
from harness import toml_value
from loomtui import clock
from loomtui.agent import drivers, kill, proctree
from loomtui.agent.ports import AgentDriver, DirWatch, Processes, Signals
from loomtui.agent.watchdog import Watchdog
from loomtui.canary import acks_watch
from loomtui.canary import runs as canary_runs
from loomtui.canary.rules import MISS, OK, PENDING
from loomtui.context import Context
from loomtui.states import MISSING, PRESENT
from loomtui.timing import Instant

LOOMTUI = Path(__file__).resolve().parents[2] / "loomtui"


class FakeTable:
    """A process table of a few rows: pid -> (parent, command line)."""

    def __init__(self, rows: dict[int, tuple[int, str]]) -> None:
        self.rows = rows
        self.inspected: list[int] = []

    def _children(self, pid: int) -> list[int]:
        return [p for p, (parent, _) in self.rows.items() if parent == pid]

    def walk(self, root: int) -> tuple[list[int], dict[int, int]]:
        pids, parents, todo = [], {}, [root]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            for child in self._children(pid):
                parents[child] = pid
                todo.append(child)
        return pids, parents

    def inspect(self, root: int, process_match: str, poller_match: str = "") -> proctree.Tree:
        self.inspected.append(root)
        pids = self.walk(root)[0]
        agents = [p for p in pids if re.search(process_match, self.cmdline(p))]
        pollers = [p for p in pids if poller_match and re.search(poller_match, self.cmdline(p))]
        return proctree.Tree(root, tuple(pids), PRESENT if agents else MISSING, agents[-1] if agents else None,
                             PRESENT if pollers else MISSING, tuple(pollers))

    def foreign_pollers(self, poller_match: str, tree: set[int]) -> list[tuple[int, str]]:
        return [(p, line) for p, (_, line) in self.rows.items() if p not in tree and re.search(poller_match, line)]

    def cmdline(self, pid: int) -> str:
        return self.rows.get(pid, (0, ""))[1]

    def ancestors(self, pid: int) -> set[int]:
        out = set()
        while pid in self.rows and self.rows[pid][0]:
            pid = self.rows[pid][0]
            out.add(pid)
        return out

    def name(self, pid: int) -> str:
        return self.cmdline(pid).split(" ")[0] or "?"

    def start_time(self, pid: int) -> float | None:
        return 1.0 if pid in self.rows else None

    def alive_as(self, pid: int | None, started: float | None) -> bool:
        return pid in self.rows and started == 1.0

    def alive_since(self, pid: int | None, started: float | None, wall_started: float) -> bool:
        return pid in self.rows


@pytest.fixture
def ctx(tmp_path):
    c = Context.load(None, str(tmp_path / "state"), environ={})
    yield c
    c.close()


# -- the clock --------------------------------------------------------------------------------------


def test_a_clock_in_use_is_the_one_read_and_slept_on_and_the_systems_comes_back():
    fake = FakeClock()
    assert clock.current() is clock.SYSTEM
    with clock.use(fake) as used:
        assert used is fake and clock.current() is fake
        assert clock.now() == Instant(1_000_000.0, 500.0, "sim-boot")
        clock.sleep(90)
        assert (clock.wall(), clock.monotonic(), clock.boot_id()) == (1_000_090.0, 590.0, "sim-boot")
    assert clock.current() is clock.SYSTEM
    assert clock.now().boot == clock.SYSTEM.boot_id() and clock.wall() != 1_000_090.0


def test_the_systems_clock_comes_back_after_an_exception():
    with pytest.raises(KeyError), clock.use(FakeClock()):
        raise KeyError("boom")
    assert clock.current() is clock.SYSTEM


# -- the context's ports ----------------------------------------------------------------------------


def test_a_contexts_ports_survive_its_copies(ctx):
    driver, table, watch = drivers.make_driver(ctx.config, ctx.agent_dir), FakeTable({}), SilentWatch()
    ctx.driver, ctx.processes, ctx.signals, ctx.watch = driver, table, kill.MACHINE, watch
    for copy in (ctx.clone(), ctx.for_agent(ctx.agent)):
        try:
            assert (copy.driver, copy.processes, copy.signals, copy.watch) == (driver, table, kill.MACHINE, watch)
            assert copy.store is not ctx.store  # a connection of its own
        finally:
            copy.close()


def test_each_resolver_returns_the_filled_port_else_the_machines(ctx):
    assert isinstance(drivers.of(ctx), AgentDriver) and drivers.of(ctx) is not drivers.of(ctx)  # made each time
    assert proctree.of(ctx) is proctree.MACHINE
    assert kill.of(ctx) is kill.MACHINE
    assert acks_watch.watch_of(ctx) is acks_watch.MACHINE
    driver, table, watch = drivers.make_driver(ctx.config, ctx.agent_dir), FakeTable({}), SilentWatch()
    signals = kill.MachineSignals()
    ctx.driver, ctx.processes, ctx.signals, ctx.watch = driver, table, signals, watch
    assert (drivers.of(ctx), proctree.of(ctx), kill.of(ctx), acks_watch.watch_of(ctx)) == (driver, table, signals, watch)


def test_the_machines_ports_and_the_fakes_satisfy_the_protocols():
    assert isinstance(proctree.MACHINE, Processes) and isinstance(FakeTable({}), Processes)
    assert isinstance(kill.MACHINE, Signals)
    assert isinstance(acks_watch.MACHINE, DirWatch) and isinstance(SilentWatch(), DirWatch)


# -- the watchdog reads the table it is given --------------------------------------------------------


def test_the_watchdogs_second_look_reads_the_contexts_process_table(tmp_path, make_pane):
    pane = make_pane()
    config = tmp_path / "loom.toml"
    keys = {**pane.agent_keys(), "process_match": "claude", "poller_match": "poller"}
    config.write_text("[agent]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items()))
    ctx = Context.load(str(config), str(tmp_path / "state"), environ={})
    try:
        machine = Watchdog(ctx)
        pane_pid = machine.driver.pane_info().pane_pid
        # The machine's table: the pane runs a line reader, no agent, no poller.
        assert machine.still_failing("exit", pane_pid) is True
        assert machine.still_failing("poller_missing", pane_pid) is False
        # A table with the agent under the pane and no poller: the same second look, its answers.
        table = FakeTable({pane_pid: (1, "python reader"), pane_pid + 1: (pane_pid, "claude --resume")})
        ctx.processes = table
        watchdog = Watchdog(ctx)
        assert watchdog.still_failing("exit", pane_pid) is False
        assert watchdog.still_failing("poller_missing", pane_pid) is True
        assert table.inspected == [pane_pid, pane_pid]
    finally:
        ctx.close()


# -- the probe waits on the watch it is given --------------------------------------------------------


class SilentWatch:
    """A directory where nothing happens: it wakes its watcher every virtual second, a bounded number
    of times (so a wait that ignores its deadline ends, pending, instead of hanging the test)."""

    def __init__(self, fake: FakeClock | None = None, wakes: int = 1000) -> None:
        self.fake, self.wakes = fake, wakes

    def changes(self, directory: Path, stop: threading.Event, until: float) -> Iterator[None]:
        for _ in range(self.wakes):
            if self.fake is not None:
                self.fake.sleep(1.0)
            yield None
            if stop.is_set() or clock.monotonic() >= until:
                return


class AckingWatch:
    """The agent acks: the nonce's file appears in the directory, and the watch wakes for it."""

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        self.watched: list[Path] = []

    def changes(self, directory: Path, stop: threading.Event, until: float) -> Iterator[None]:
        self.watched.append(directory)
        (directory / self.nonce).touch()
        yield None


def pending_probe(ctx: Context, nonce: str, timeout: float) -> canary_runs.Probe:
    sent = clock.now()
    ctx.acks_dir.mkdir(mode=0o700, exist_ok=True)
    run_id = canary_runs.insert_run(ctx, nonce, "canary", PENDING, sent.wall, sent.wall + timeout, sent=sent)
    return canary_runs.probe_from(ctx.store.query_one("SELECT * FROM canary_runs WHERE id = ?", (run_id,)))


def test_the_probe_settles_ok_when_its_watch_sees_the_ack(ctx):
    from loomtui.canary import probe

    run = pending_probe(ctx, "n-watched-ack", 60.0)
    watch = AckingWatch("n-watched-ack")
    ctx.watch = watch
    settled = probe.wait(ctx, run)
    assert settled.result == OK and settled.ack_at is not None
    assert watch.watched == [ctx.acks_dir]
    assert not (ctx.acks_dir / "n-watched-ack").exists()  # the ack is forgotten once counted
    assert canary_runs.last_probe(ctx).result == OK


def test_the_probe_misses_on_virtual_time_when_its_watch_stays_silent(ctx):
    from loomtui.canary import probe

    fake = FakeClock()
    with clock.use(fake):
        run = pending_probe(ctx, "n-silent", 180.0)
        ctx.watch = SilentWatch(fake)
        settled = probe.wait(ctx, run)
        assert settled.result == MISS
        assert fake.monotonic() == 500.0 + 180.0  # woke each virtual second until the deadline
    assert canary_runs.last_probe(ctx).result == MISS


# -- no module the simulator runs reads the machine behind the ports ---------------------------------

TIMED = [f"{p}.py" for p in (
    "actions", "agent/holds", "agent/launch", "agent/launches", "agent/recovery", "agent/watchdog", "agent/inject",
    "agent/hold_rules", "canary/loop", "canary/probe", "canary/runs", "sentinel/claims", "sentinel/tick",
    "sentinel/queue", "sentinel/jobscan", "store/db", "store/ledger", "store/outbox", "store/locks",
    "store/counters", "store/session", "store/meta", "store/heartbeats", "store/canary_runs", "store/job_runs",
    "store/queue_items", "store/scan_offsets")]
CLOCK_READS = {"time", "monotonic", "sleep", "perf_counter"}
PROCESS_TABLE_READERS = {"actions.py", "agent/watchdog.py", "agent/launches.py", "sentinel/tick.py"}


def machine_reads(rel: str, source: str) -> list[str]:
    """What in one module (`rel`: its path under loomtui/) goes around a port."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and node.module == "time" and rel in TIMED:
            bad.append(f"{where}: from time import")
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and rel == "canary/probe.py":
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n.split(".")[0] == "watchfiles" for n in names):
                bad.append(f"{where}: imports watchfiles")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner, attr = node.value.id, node.attr
            if owner == "time" and attr in CLOCK_READS and rel in TIMED:
                bad.append(f"{where}: time.{attr}")
            elif owner == "kill" and attr in ("end_processes", "recreate_socket") and rel == "actions.py":
                bad.append(f"{where}: kill.{attr}")
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id == "make_driver" or isinstance(func, ast.Attribute)
                    and func.attr == "make_driver") and rel != "agent/drivers.py":
                bad.append(f"{where}: make_driver(")
            if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "proctree"
                    and func.attr != "of" and rel in PROCESS_TABLE_READERS):
                bad.append(f"{where}: proctree.{func.attr}(")
    return bad


def test_the_daemons_code_reaches_the_machine_only_through_its_ports():
    assert all((LOOMTUI / rel).is_file() for rel in TIMED)
    bad = [line for path in sorted(LOOMTUI.rglob("*.py"))
           for line in machine_reads(path.relative_to(LOOMTUI).as_posix(), path.read_text(encoding="utf-8"))]
    assert bad == [], "through clock, drivers.of, proctree.of, kill.of, acks_watch.watch_of:\n" + "\n".join(bad)


def test_the_ports_scan_sees_each_way_around_them():
    source = """
import time
from time import monotonic
import watchfiles
from loomtui.agent.drivers import make_driver
def f(ctx):
    time.sleep(1); time.time(); time.monotonic(); time.perf_counter(); time.strftime("%H")
    proctree.alive_as(1, 2); proctree.of(ctx).alive_as(1, 2); proctree.Ambiguous
    kill.end_processes([1], grace=1); kill.of(ctx).end([1], 1); kill.recreate_socket(1)
    make_driver(ctx.config); drivers.make_driver(ctx.config)
"""
    found = sorted(line.split(": ", 1)[1] for line in machine_reads("actions.py", source))
    assert found == ["from time import", "kill.end_processes", "kill.recreate_socket", "make_driver(", "make_driver(",
                     "proctree.alive_as(", "time.monotonic", "time.perf_counter", "time.sleep", "time.time"]
    assert [line.split(": ", 1)[1] for line in machine_reads("canary/probe.py", source)
            if "watchfiles" in line] == ["imports watchfiles"]
    # Elsewhere only a driver made around drivers.of counts; the maker itself makes.
    assert machine_reads("agent/tmux.py", source) == ["agent/tmux.py:10: make_driver(", "agent/tmux.py:10: make_driver("]
    assert machine_reads("agent/drivers.py", "make_driver(c)\n") == []
