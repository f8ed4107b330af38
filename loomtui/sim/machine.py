"""The machine around the agent, simulated: the ports a Context carries, filled with the world.

`SimDriver` is an `AgentDriver` over the world's pane and tmux server; `SimProcesses` its process
table, `SimSignals` the kills, `SimWatch` the acks directory's watch. Loom's real code (the
watchdog, the canary loop and probe, actions.recover and launch.relaunch_locked) calls these as it
calls tmux, /proc, psutil and watchfiles on a machine, and sees only what those would show: a
hanging tmux raises TmuxTimeout, a loaded machine makes a walk ambiguous, a dead pane sometimes
lost its exit status (tmux 3.3a). The world's truth stays in world.py, for the invariants.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from loomtui import clock, states
from loomtui.agent.ports import AgentFacts, PaneInfo, Tree
from loomtui.errors import AgentNotReading, Ambiguous, TmuxError, TmuxTimeout
from loomtui.pump.facts import Delivery, StreamFacts, read_facts
from loomtui.pump import client as pump_client
from loomtui.sim.world import STOP_TIME, Agent

if TYPE_CHECKING:
    from loomtui.sim.engine import Sim
    from loomtui.sim.scheduler import SimThread

FOREIGN_PID = 700_000      # a foreign poller's pid (never one of the agent's)
SERVER_PID = 500_000       # the tmux server's pids: one per server started
DIALOG_ANSWERS = ("Enter", "1")  # the keys that answer the simulated trust dialog (world.MODAL_SCREEN)


def pane(agent: Agent, *, status: int | None = None) -> PaneInfo:
    """The agent's pane as tmux lists it: its id and process, dead or not (with what tmux kept)."""
    if agent.alive:
        return PaneInfo(f"%{agent.pid}", agent.pid, False, None, 80, 24)
    return PaneInfo(f"%{agent.pid}", agent.pid, True, status, 80, 24, agent.exit_signal)


def poller_pid(agent_pid: int) -> int:
    """The agent's Telegram poller, its one child."""
    return agent_pid * 10 + 1


class SimDriver:
    """The tmux driver's part, against the world: the pane, its screen, typing, stop and launch."""

    name: ClassVar[str] = "tmux"
    has_dialogs: ClassVar[bool] = True
    owns_turns: ClassVar[bool] = False

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    # -- looks -------------------------------------------------------------------------------

    def _answers(self) -> None:
        w = self.sim.world
        if w.tmux_hangs():
            raise TmuxTimeout("tmux did not answer within 5s")

    def pane_info(self) -> PaneInfo | None:
        self._answers()
        w = self.sim.world
        a = w.agent
        if not w.tmux_session or w.socket_lost or a is None:
            return None
        if a.alive:
            return pane(a)
        # tmux 3.3a sometimes loses the exit status in a race: Loom must cope without it.
        return pane(a, status=None if w.rng.random() < 0.1 else a.exit_status)

    def pane_pid(self) -> int | None:
        """As the tmux driver's: None when tmux does not answer (it never raises)."""
        try:
            info = self.pane_info()
        except TmuxError:
            return None
        return info.pane_pid if info is not None and not info.dead else None

    def observe(self, *, with_screen: bool = False) -> AgentFacts:
        try:
            info = self.pane_info()
        except TmuxError as exc:
            return AgentFacts(states.UNKNOWN, why=str(exc))
        if info is None:
            return AgentFacts(states.GONE, why="no tmux session")
        if info.dead:
            how = f"signal {info.dead_signal}" if info.dead_signal else f"status {info.dead_status}"
            return AgentFacts(states.UP, info, None, why=f"the pane's process exited ({how})")
        tree = self.sim.processes.inspect(info.pane_pid, "", "")
        return AgentFacts(states.UP, info, tree, tree.why, screen=self.sim.world_screen() if with_screen else None)

    def screen(self, history: bool | int = False, *, ansi: bool = False, pane_id: str | None = None) -> str:
        self._answers()
        w = self.sim.world
        if not w.tmux_session or w.socket_lost or w.agent is None:
            raise TmuxError("can't find pane")
        return self.sim.world_screen()

    def stream_facts(self, pane_pid: int | None) -> StreamFacts | None:
        return None

    def server_running(self) -> bool:
        self._answers()
        w = self.sim.world
        return w.tmux_session and not w.socket_lost

    def server_pid(self) -> int | None:
        return self.sim.server_pid if self.server_running() else None

    def attach_argv(self) -> list[str]:
        return []

    def restore_size(self) -> None:
        return None  # the world's pane has no size

    # -- typing ------------------------------------------------------------------------------

    def _typable(self, expect_pane_pid: int | None) -> Agent:
        w = self.sim.world
        why = w.can_type()
        if why:
            raise TmuxTimeout(why) if "answer" in why or "timed out" in why else TmuxError(why)
        a = w.agent
        assert a is not None
        if expect_pane_pid is not None and a.pid != expect_pane_pid:
            raise TmuxError("the pane's process changed: not typed into a new agent")
        return a

    def type_line(self, text: str, expect_pane_pid: int | None = None, *, origin: str = "operator",
                  ref: str = "") -> Delivery | None:
        a = self._typable(expect_pane_pid)
        return self.sim.typed_into(a, text, origin=origin, ref=ref)

    def send_keys(self, keys: list[str], expect_pane_pid: int | None = None) -> None:
        a = self._typable(expect_pane_pid)
        # The trust dialog closes on a key that chooses its first option (Enter on the highlighted
        # "Yes", or 1), as the CLI's does; any other key leaves it on the screen.
        if a.modal and keys and keys[0] in DIALOG_ANSWERS:
            a.modal = False
            self.sim.event("modal_dismissed_in_world")

    # -- stop and launch ---------------------------------------------------------------------

    def stop(self, grace: float, recorded: dict | None = None) -> list[int]:
        """End the agent's tree (from the pane, or the pane process recorded at launch when tmux lost
        it); a loaded machine sometimes leaves a process that would not die."""
        w = self.sim.world
        a = w.agent
        clock.sleep(STOP_TIME)  # the virtual clock: ending a tree takes its time
        if a is None or not a.alive:
            return []
        if w.loaded() and w.rng.random() < 0.2:
            return [a.pid]  # it ignored SIGTERM and SIGKILL did not reach it in time
        w.stop_current()
        return []

    def launch(self, command: str, cwd: Path, env: dict[str, str], exit_signal: Path | None = None) -> PaneInfo:
        self._answers()
        session = env.get("LOOM_SESSION_ID", "")
        mode = "resume" if command == self.sim.resume_command(session) else "fresh"
        return pane(self.sim.launch_agent(session, mode, command))


class SimStreamDriver(SimDriver):
    """The stream-json driver's part (agent/stream_driver.py), against the world: `loom pump` in the
    pane (sim/pump_model.py), lines handed to it and answered `delivered` or `queued`, its
    pump.json read as facts by Loom's own reader. Everything tmux-shaped is SimDriver's, as the real
    driver's is the tmux driver's: a dead CLI is a dead pump is a dead pane."""

    name: ClassVar[str] = "stream-json"
    has_dialogs: ClassVar[bool] = False   # print mode: permissions come from the command's flags
    owns_turns: ClassVar[bool] = True     # the pump: turns, queue, receipts, pump.json, the transcript

    def observe(self, *, with_screen: bool = False) -> AgentFacts:
        facts = super().observe(with_screen=with_screen)
        if facts.pane is None:
            return facts
        return replace(facts, stream=self.stream_facts(None if facts.pane.dead else facts.pane.pane_pid))

    def stream_facts(self, pane_pid: int | None) -> StreamFacts | None:
        """pump.json as facts, read as the real driver reads it (a file: the socket is never opened)."""
        assert self.sim.ctx is not None
        return read_facts(self.sim.ctx.agent_dir, pane_pid)

    def type_line(self, text: str, expect_pane_pid: int | None = None, *, origin: str = "operator",
                  ref: str = "") -> Delivery:
        a = self._typable(expect_pane_pid)  # the real driver's `_live`: a tmux look at the pane first
        try:
            delivery = self.sim.typed_into(a, text, origin=origin, ref=ref)
        except pump_client.PumpInputClosed as exc:  # as the real driver's type_line maps the pump's refusals
            raise AgentNotReading(f"the pump did not take the line: {exc}") from None
        except (pump_client.PumpError, OSError) as exc:  # the real PumpRefused is a TmuxError
            raise TmuxError(f"the pump did not take the line: {exc}") from None
        assert delivery is not None
        return delivery

    def send_keys(self, keys: list[str], expect_pane_pid: int | None = None) -> None:
        raise TmuxError("no keys are pressed with the stream-json driver: it has no dialogs "
                        "(permissions come from the command's flags)")


def simulated_driver(sim: Sim) -> SimDriver:
    """The simulated driver `agent.driver` names: the simulator's agent/drivers.py (it imports no
    real driver), the one place here that reads the key; the rest asks the driver's capabilities."""
    return SimStreamDriver(sim) if sim.config.agent.driver == SimStreamDriver.name else SimDriver(sim)


class SimProcesses:
    """The process table: the agent in its pane, its poller, a foreign poller, the tmux server."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def _agent(self, pid: int) -> Agent | None:
        a = self.sim.world.agent
        return a if a is not None and a.pid == pid and a.alive else None

    def inspect(self, root: int, process_match: str = "", poller_match: str = "") -> Tree:
        w = self.sim.world
        a = self._agent(root)
        if a is None:
            return Tree(root, agent=states.MISSING, poller=states.MISSING if w.poller_configured else states.UNKNOWN)
        agent, why = states.PRESENT, ""
        poller = (states.PRESENT if a.poller else states.MISSING) if w.poller_configured else states.UNKNOWN
        if w.loaded():
            if w.rng.random() < 0.15:
                agent, why = states.UNKNOWN, "the process tree walk timed out under load"
            if w.poller_configured and w.rng.random() < 0.3:
                poller, why = states.UNKNOWN, "the poller could not be told under load"
        pollers = (poller_pid(root),) if a.poller else ()
        return Tree(root, (root, *pollers), agent, root if agent == states.PRESENT else None, poller, pollers, why)

    def walk(self, root: int) -> tuple[list[int], dict[int, int]]:
        w = self.sim.world
        if w.loaded() and w.rng.random() < 0.3:
            raise Ambiguous(f"the tree under {root} changed while it was walked")
        a = self._agent(root)
        if a is None:
            return [root], {}
        return ([root, poller_pid(root)], {poller_pid(root): root}) if a.poller else ([root], {})

    def foreign_pollers(self, poller_match: str, tree: set[int]) -> list[tuple[int, str]]:
        w = self.sim.world
        if w.foreign_poller_since is None or FOREIGN_PID in tree:
            return []
        return [(FOREIGN_PID, self.sim.poller_line)]

    def cmdline(self, pid: int) -> str:
        w = self.sim.world
        if pid == FOREIGN_PID and w.foreign_poller_since is not None:
            return self.sim.poller_line
        a = w.agent
        if a is not None and a.alive:
            if pid == a.pid:
                return self.sim.commands.get(a.pid, "")
            if pid == poller_pid(a.pid) and a.poller:
                return self.sim.poller_line
        raise Ambiguous(f"process {pid} has ended")

    def ancestors(self, pid: int) -> set[int]:
        if pid == FOREIGN_PID:
            return {1}
        a = self.sim.world.agent
        if a is not None and pid == poller_pid(a.pid):
            return {a.pid, 1}
        return {1}

    def name(self, pid: int) -> str:
        try:
            return self.cmdline(pid).split(" ", 1)[0]
        except Ambiguous:
            return ""

    def start_time(self, pid: int) -> float | None:
        a = self._agent(pid)
        if a is not None:
            return a.started
        if pid == self.sim.server_pid:
            return float(pid)
        return self.sim.jobs.running.get(pid)

    def alive_as(self, pid: int | None, started: float | None) -> bool:
        if not isinstance(pid, int):
            return False
        w = self.sim.world
        if pid == self.sim.server_pid:
            return (w.tmux_session or w.socket_lost) and started in (None, float(pid))
        a = self._agent(pid)
        return a is not None and (started is None or started == a.started)

    def alive_since(self, pid: int | None, started: float | None, wall_started: float) -> bool:
        if isinstance(pid, int) and pid in self.sim.jobs.running:
            return started is None or started == self.sim.jobs.running[pid]  # a job's run-job, still running
        return self.alive_as(pid, started)


class SimSignals:
    """The kills: a foreign poller reaped, tmux asked for its socket."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def end(self, pids: list[int], grace: float) -> list[int]:
        w = self.sim.world
        for pid in pids:
            if pid == FOREIGN_PID and w.foreign_poller_since is not None:
                self.sim.event("foreign_poller_ended", age=round(w.t - w.foreign_poller_since, 3))
                w.foreign_poller_since = None
        return []

    def recreate_socket(self, server_pid: int) -> None:
        w = self.sim.world
        if server_pid != self.sim.server_pid or not w.socket_lost:
            raise OSError(3, "No such process")
        w.socket_lost = False


class SimWatch:
    """The acks directory's watch: the thread waiting in it sleeps on the virtual clock until a file
    is written there (the world's ack) or its `until`."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.waiting: dict[str, SimThread | None] = {}

    def changes(self, directory: Path, stop, until: float):
        sched = self.sim.scheduler
        key = os.fspath(directory)
        while True:
            th = sched.current
            self.waiting[key] = th
            try:
                sched.sleep_until(until)
            finally:
                self.waiting.pop(key, None)
            yield

    def written(self, directory: Path) -> None:
        th = self.waiting.get(os.fspath(directory))
        if th is not None:
            self.sim.scheduler.wake(th)
