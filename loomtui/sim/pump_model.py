"""The stream-json pump, modelled (for a config whose `agent.driver` is "stream-json"): the pump in
the agent's pane and the CLI behind it, writing what a real `loom pump` writes, where Loom's own
code reads it: the transcript (through pump/transcript.py's real `Writer`, on the installed virtual
clock) and pump.json (the fields pump/runner.py publishes, `rules.status` among them).

The pump's turns and queue are Loom's own pump core, `pump.rules.step`: a line handed over between
turns is written to the CLI at once (`delivered`), one handed over during a turn waits (`queued`,
with its place) and is written when that turn's `result` comes; seqs go on from the last pump's;
a new pump delivers what the last one left queued, except probes (`dropped_probe`), as
runner._load_queue does, and with it what it kept written that its CLI never showed it read (its
first event after the write was an error `result`, or none came: runner._shows_read). Only the CLI is the world's: Claude Code prints nothing until a line
arrives, then `system/init`, the turn's `assistant` events (a tool call for a probe's `touch`, one
every few minutes in a turn of the operator's) and its `result`; and when a background task it ran
ends, a turn of its own, `init` to `result` with no line in it (`own_turn`). A resume of a conversation that is
gone answers an error `result` at once, reading nothing, and exits 1 (the pump has written it the
first line it had queued by then, and the next after that result); any death of the CLI is the
pump's `cli_exit`.

Unlike the hooks, nothing here is lost or late: the pump writes its records itself, in order, as
things happen. A wedged CLI (deaf) reads nothing and says nothing: a line written to it stays an
`in` with no answer (no turn begins, in Loom's eyes or the world's); a dead one ends its pump.
Where the commands also pass `{hook_settings}`, the same CLI runs its hooks at the same moments
(hooks_model.py writes them, lost and late as ever), and those stay Loom's source of turns
(hooks/source.py decides): the world's evidence (`seen_*`) is then the hooks'.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomtui.pump import client as pump_client  # its file names and refusals: the simulator opens no socket
from loomtui.pump import rules, transcript
from loomtui.pump.facts import Delivery
from loomtui.sim.hooks_model import DETAILS, OPERATOR_PROMPT, PROBE_TOOL_AFTER, RETRYING, tool_gap
from loomtui.sim.world import RESUME_FAILED_SCREEN

if TYPE_CHECKING:
    from loomtui.sim.engine import Sim
    from loomtui.sim.world import Agent

PROBE, LINE, OPERATOR = "probe", "line", "operator"
STALE_ORIGIN = "canary"   # runner.STALE_ORIGIN: a queued probe is not carried to the next launch
INIT_AFTER = 0.3          # a CLI that is up prints init this long after it reads a line
RESULT_AFTER = 0.2        # a probe's `result` after its `touch`
DENIED = 0.5              # of the operator's turns, the share whose result says a tool call was denied


@dataclass
class Message:
    text: str
    origin: str
    ref: str
    kind: str                       # probe / line / operator
    until: float | None = None      # an operator's turn: when it ends (None: a `busy` turn, set by its probe)
    unread: int = 0                 # CLIs it was written to that exited before showing they read it


@dataclass
class Pump:
    """One `loom pump` run: the pane's process (pid = the agent's pane pid), its CLI, its state."""

    pid: int
    cli_pid: int
    started: float
    argv: list[str]
    state: rules.State
    messages: dict[int, Message] = field(default_factory=dict)
    written_at: dict[int, float] = field(default_factory=dict)   # seq -> when its `in` was written (t)
    stdin_closed: bool = False      # the CLI no longer reads its stdin: the next write fails
    unread: list[int] = field(default_factory=list)   # lines written the CLI has not shown it read
    unwritten: list[int] = field(default_factory=list)  # queued lines whose write failed: their files stay


class PumpModel:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.pump: Pump | None = None
        self.log: transcript.Writer | None = None
        self.records = 0
        self.last_seq = 0               # the highest seq any pump used (runner._next_seq)
        self.leftover: dict[int, Message] = {}   # what the last pump left queued, by seq
        self.tasks = 0                  # background tasks ended so far: each own turn's token
        self.own: int | None = None     # the own turn running in the world's truth (its token)

    # -- the files ------------------------------------------------------------------------------

    def record(self, dir: str, **data: Any) -> None:
        """One transcript record, now on Loom's clock (the Writer reads loomtui.clock, installed)."""
        assert self.sim.ctx is not None
        if self.log is None:
            self.log = transcript.Writer(transcript.path_in(self.sim.ctx.agent_dir))
        self.log.append(dir, **data)
        self.records += 1

    def publish(self, p: Pump) -> None:
        """pump.json, replaced whole, as runner._publish writes it."""
        assert self.sim.ctx is not None
        status = {"pid": p.pid, "cli_pid": p.cli_pid, "started": p.started,
                  "argv0": os.path.basename(p.argv[0]) if p.argv else "", **rules.status(p.state)}
        path = pump_client.status_path(self.sim.ctx.agent_dir)
        tmp = path.with_name(f".{path.name}.sim.tmp")
        tmp.write_text(json.dumps(status, ensure_ascii=False, indent=1))
        os.replace(tmp, path)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None

    # -- the pump's life --------------------------------------------------------------------------

    def current(self, pid: int) -> Pump | None:
        p = self.pump
        return p if p is not None and p.pid == pid and p.state.cli_exit is None else None

    def started(self, a: Agent, command: str) -> None:
        """A new pump in the pane (the launch): it takes over what the last one kept (not probes):
        lines queued, lines written that its CLI never showed it read, and queued lines whose write
        failed; starts the CLI, and writes the first of them."""
        w = self.sim.world
        pending: list[int] = []
        carried: dict[int, Message] = {}
        for seq in sorted(self.leftover):
            msg = self.leftover[seq]
            if msg.unread >= rules.MAX_UNREAD:  # runner._load_queue sets it aside
                self.record(transcript.PUMP, what="set_aside", seq=seq, unread=msg.unread, name=f"{seq}.json{rules.SET_ASIDE}",
                            origin=msg.origin)
                continue
            if msg.origin == STALE_ORIGIN:
                self.record(transcript.PUMP, what="dropped_probe", seq=seq)
                continue
            if msg.kind == OPERATOR:
                # The operator's message, never read by the CLI it was written to (a wedged or a dead
                # one): this launch answers it as a line of its own, its turn's end (drawn for the
                # last launch, or left to a probe of that one's) no longer anyone's.
                msg.kind, msg.until = LINE, None
            carried[seq] = msg
            pending.append(seq)
        self.leftover = {}
        try:
            argv = shlex.split(command)
        except ValueError:
            argv = [command]
        p = Pump(a.pid, a.pid * 10 + 2, w.wall, argv, rules.start(tuple(pending), self.last_seq + 1), carried)
        self.pump = p
        self.record(transcript.PUMP, what="started", pid=p.pid, cli_pid=p.cli_pid, argv=argv,
                    **({"pending": pending} if pending else {}))
        if pending:
            self.record(transcript.PUMP, what="pending", seqs=pending)
        self.apply(p, rules.Ready(w.wall))  # the first line it kept is written now, as runner._spawn
        if not a.alive:
            # The resume found no conversation (world.launch): Claude Code answers an error result at
            # once, reading nothing, says so on stderr and exits 1 (docs/STREAM.md, "Refusals").
            why = f"{RESUME_FAILED_SCREEN}: {a.session}"
            self.output(p, {"type": "result", "subtype": "error_during_execution", "is_error": True,
                            "num_turns": 0, "session_id": a.session, "errors": [why]})
            self.record(transcript.ERR, line=why)
            self.exited(p, a.exit_status, a.exit_signal)
            return
        self.publish(p)

    def exited(self, p: Pump, status: int | None, signal: int | None) -> None:
        """The CLI died (a crash, an exit, a relaunch's stop, tmux gone): the pump records it and
        ends; what it kept queued waits for the next pump."""
        if p.state.cli_exit is not None:
            return
        p.state, _ = rules.step(p.state, rules.Exited(self.sim.world.wall, status, signal))
        code = status if status is not None else 128 + (signal or 0)
        unread = [seq for seq in p.unread if seq in p.messages]
        if unread:
            for seq in unread:
                p.messages[seq].unread += 1  # runner._count_unread, before the record that names them
            last = [seq for seq in unread if p.messages[seq].unread >= rules.MAX_UNREAD]
            self.record(transcript.PUMP, what="unread", seqs=unread, **({"set_aside": last} if last else {}))
        self.record(transcript.PUMP, what="cli_exit", status=status, signal=signal, exit=code)
        self.publish(p)
        self.leftover = {seq: p.messages[seq] for seq in (*unread, *p.unwritten, *p.state.queue) if seq in p.messages}
        a = self.sim.world.agent
        if a is not None and a.pid == p.pid and not self.sim.hooked:
            a.seen_open = False  # a turn still open ended with its process (pump_marks: SessionEnd)

    def died(self, a: Agent) -> None:
        """world.kill: whatever ended the agent's CLI ended its pump's turn too."""
        p = self.current(a.pid)
        if p is not None:
            self.exited(p, a.exit_status, a.exit_signal)

    # -- lines handed to the pump (the driver's type_line; the operator's turns) -------------------

    def idle(self, a: Agent) -> bool:
        p = self.current(a.pid)
        return p is not None and p.state.ready and not p.state.running and not p.state.queue \
            and not p.state.input_closed

    def send(self, a: Agent, text: str, origin: str, ref: str, kind: str, until: float | None = None) -> Delivery:
        """The pump takes a line (its socket's `send`): written now between turns, else queued."""
        p = self.current(a.pid)
        if p is None:
            raise pump_client.refusal(rules.EXITED, rules.EXITED_CODE)
        w = self.sim.world
        p.state, actions = rules.step(p.state, rules.Send(w.wall))
        delivery = Delivery("delivered")
        for action in actions:
            if isinstance(action, rules.Refused):
                raise pump_client.refusal(action.reason, action.code)
            seq = action.seq
            self.last_seq = max(self.last_seq, seq)
            p.messages[seq] = Message(text, origin, ref, kind, until)  # in a queue file, written or queued
            if isinstance(action, rules.Queued):
                self.record(transcript.PUMP, what="queued", seq=seq, position=action.position, origin=origin, ref=ref)
                delivery = Delivery("queued", seq, action.position)
            elif not self.write(p, seq, direct=True):
                self.publish(p)
                # runner._on_written: the sender hears the failed write, with its code.
                raise pump_client.refusal("could not write to the agent's CLI: Broken pipe", rules.INPUT_CLOSED_CODE)
            else:
                delivery = Delivery("delivered", seq)
        self.publish(p)
        return delivery

    def typed(self, a: Agent, text: str, origin: str, ref: str, is_probe: bool) -> Delivery:
        """A line Loom typed (a probe, a nudge, an operator's inject) handed to the pump. A probe
        that finds a `busy` turn running is the one that turn waited for: it ends after one ack
        timeout, before two (world.busy_end), and the probe is written then."""
        w = self.sim.world
        if is_probe and a.busy_next and self.running_kind(a) == OPERATOR:
            a.busy_next = False
            w.last_disturbance = w.t
            self.end_at(a, w.busy_end(w.t))
        return self.send(a, text, origin, ref, PROBE if is_probe else LINE)

    def running_kind(self, a: Agent) -> str:
        """Whose turn the pump runs now ('' between turns)."""
        p = self.current(a.pid)
        msg = p.messages.get(p.state.turn_seq) if p is not None and p.state.turn_seq is not None else None
        return msg.kind if msg is not None else ""

    def begin_turn(self, a: Agent, until: float | None) -> bool:
        """A turn of the operator's (a line through the Telegram bridge) begins now, if the pump is
        between turns (False otherwise: the fault does not apply)."""
        if not self.idle(a):
            return False
        try:
            self.send(a, OPERATOR_PROMPT, "telegram", "", OPERATOR, until)
        except pump_client.PumpError:
            return False  # its CLI closed its stdin: the line is refused, as the bridge is told
        return True

    def own_turn(self, a: Agent, until: float) -> None:
        """A background task the CLI ran ends (Bash's `run_in_background`, begun in a turn of a line
        written earlier): Claude Code prints the task's events, then tells the model in a turn of
        its own, `init` to `result`, no line of Loom's in it (pinned: tests/e2e/test_claude_code_cli.py).
        Lines handed over meanwhile wait for its `result` (pump.rules: `own_since`); a probe among
        them acks late, inside a turn Loom was shown. Only between turns (a task's end during one is
        told inside it), in a CLI written a line, and not where the hooks are Loom's source of turns
        (print mode's hooks in such a turn are not pinned; the interactive CLI's are a prompt and a
        Stop, as for an operator's turn): `can_take_own_turn`."""
        sim, w = self.sim, self.sim.world
        p = self.current(a.pid)
        assert p is not None and self.can_take_own_turn(a)
        self.tasks += 1
        self.own = self.tasks
        self.out(p, a, {"type": "system", "subtype": "task_notification", "session_id": a.session,
                        "task_id": f"task_{self.tasks}", "status": "completed"})
        a.turn_since, a.turn_until, a.last_event = w.t, until, w.t
        w.turn_began(a.pid)
        self.out(p, a, {"type": "system", "subtype": "init", "session_id": a.session, "model": "sim",
                        "tools": ["Bash"], "permissionMode": "default"}, began=w.t)
        sim.after(tool_gap(w.rng), self.own_tool, a.pid, self.tasks)
        sim.at(until, self.own_end, a.pid, self.tasks)

    def can_take_own_turn(self, a: Agent) -> bool:
        p = self.current(a.pid)
        return p is not None and not self.sim.hooked and p.state.wrote and self.idle(a) and a.hearing() \
            and a.turn_since is None and not self.sim.world.limited()

    def in_own(self, pid: int, task: int) -> tuple[Agent, Pump] | None:
        """The agent `pid` and its pump, while the CLI hears and runs its own turn for `task`."""
        a, p = self.sim.world.agent, self.current(pid)
        if a is None or p is None or a.pid != pid or not a.hearing() or self.own != task or p.state.own_since is None:
            return None
        return a, p

    def own_tool(self, pid: int, task: int) -> None:
        """The CLI's own turn works on: a tool call every few minutes, or it fails under a limit."""
        sim, w = self.sim, self.sim.world
        found = self.in_own(pid, task)
        if found is None:
            return
        a, p = found
        if w.limited():
            self.own_over(a)
            self.refused(p, a)
            return
        a.last_event = w.t
        self.tool_use(p, a, f"toolu_task_{task}_{self.records}", "git status")
        sim.after(tool_gap(w.rng), self.own_tool, pid, task)

    def own_end(self, pid: int, task: int) -> None:
        """The CLI's own turn ends: its `result`, an error one under the account's trouble (its last
        call to the model refused), as the operator's turn's (the world's truth ends it even in a CLI
        that wedged meanwhile, which prints nothing)."""
        w = self.sim.world
        a = w.agent
        if a is None or a.pid != pid or self.own != task:
            return
        found = self.in_own(pid, task)
        self.own_over(a)
        if found is None:
            return
        if w.limited():
            self.refused(found[1], a)
            return
        self.out(found[1], a, {"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
                               "session_id": a.session, "permission_denials": [], "result": "noted."})

    def own_over(self, a: Agent) -> None:
        self.own = None
        self.turn_over(a)

    def end_at(self, a: Agent, until: float) -> None:
        a.turn_until = until
        p = self.current(a.pid)
        if p is not None and p.state.turn_seq is not None:
            msg = p.messages.get(p.state.turn_seq)
            if msg is not None and msg.kind == OPERATOR:
                msg.until = until
        self.sim.at(until, self.end_turn, a.pid)

    # -- the CLI -----------------------------------------------------------------------------

    def apply(self, p: Pump, event: rules.Event) -> None:
        p.state, actions = rules.step(p.state, event)
        for action in actions:
            if isinstance(action, rules.Write):
                self.write(p, action.seq)

    def write(self, p: Pump, seq: int, direct: bool = False) -> bool:
        """The pump writes line `seq` to the CLI's stdin (its `in` first, as runner._write): a CLI
        that hears reads it once booted and opens its turn with init; a wedged one never answers.
        One that closed its stdin breaks the pipe: `write_failed`, and the pump's input is closed
        for good (runner._on_written); False then."""
        msg = p.messages[seq]
        self.record(transcript.IN, seq=seq, origin=msg.origin, ref=msg.ref, text=msg.text)
        w = self.sim.world
        if p.stdin_closed:
            if direct:
                p.messages.pop(seq, None)  # its sender is told: its file goes (runner._on_written)
                self.record(transcript.PUMP, what="write_failed", seq=seq, error="Broken pipe")
            else:
                p.unwritten.append(seq)  # accepted, never delivered: the next pump delivers it
                self.record(transcript.PUMP, what="write_failed", seq=seq, error="Broken pipe", kept=True)
            p.state, _ = rules.step(p.state, rules.InputClosed(w.wall, seq))
            return False
        p.written_at[seq] = w.t
        p.unread.append(seq)  # its file kept until the CLI shows it read the line (runner._write)
        a = w.agent
        if a is None or a.pid != p.pid or not a.hearing():
            return True
        self.sim.at(max(w.t, a.ready_at) + INIT_AFTER, self.turn_begins, p.pid, seq)
        return True

    def close_stdin(self, a: Agent) -> bool:
        """The agent's CLI stops reading its stdin and runs on (False: no pump, or closed already)."""
        p = self.current(a.pid)
        if p is None or p.stdin_closed:
            return False
        p.stdin_closed = True
        return True

    def turn_begins(self, pid: int, seq: int) -> None:
        sim, w = self.sim, self.sim.world
        found = self.in_turn(pid, seq)
        if found is None:
            return
        a, p = found
        msg = p.messages[seq]
        self.out(p, a, {"type": "system", "subtype": "init", "session_id": a.session, "model": "sim",
                        "tools": ["Bash"], "permissionMode": "default"}, began=p.written_at.get(seq, w.t))
        if sim.hooks is not None:
            sim.hooks.fire(pid, "UserPromptSubmit", {"prompt": msg.text})
        if w.limited():
            # The account's trouble (a rate limit, its bill, its login): the line was read, the turn
            # fails once Claude Code's retries are spent; no tool runs, no probe's `touch`.
            sim.at(w.t + w.rng.uniform(*RETRYING), self.failed, pid, seq)
            return
        if msg.kind == OPERATOR:
            a.turn_since, a.turn_until, a.last_event = w.t, msg.until, w.t
            w.turn_began(pid)
            sim.after(tool_gap(w.rng), self.tool, pid, seq)
            if msg.until is not None:
                sim.at(msg.until, self.end_turn, pid)
            return
        done = w.t + w.latency()
        if msg.kind == PROBE:
            path = sim.probe_path(msg.text)
            if path is not None:
                sim.at(done, self.touch, pid, seq, str(path))
        sim.at(done + RESULT_AFTER, self.result, pid, seq)

    def in_turn(self, pid: int, seq: int) -> tuple[Agent, Pump] | None:
        """The agent `pid` and its pump, while the CLI hears and its turn is still line `seq`'s: a
        step scheduled for that turn is dropped otherwise (the turn ended, or the agent with it)."""
        a, p = self.sim.world.agent, self.current(pid)
        if a is None or p is None or a.pid != pid or not a.hearing() or p.state.turn_seq != seq:
            return None
        return a, p

    def touch(self, pid: int, seq: int, path: str) -> None:
        """The probe's `touch`: the tool call printed, the ack file written."""
        found = self.in_turn(pid, seq)
        if found is None:
            return
        a, p = found
        self.tool_use(p, a, f"toolu_{seq}", f"touch {path}")
        self.sim.acked(pid, Path(path))
        if self.sim.hooks is not None:  # its PostToolUse, once the touch ran: after the ack file's time
            self.sim.after(PROBE_TOOL_AFTER, self.sim.hooks.fire, pid, "PostToolUse", {"tool_name": "Bash"})

    def tool(self, pid: int, seq: int) -> None:
        """A turn of the operator's uses a tool every few minutes, while it runs and the CLI hears."""
        sim, w = self.sim, self.sim.world
        found = self.in_turn(pid, seq)
        if found is None:
            return
        a, p = found
        if w.limited():
            self.failed(pid, seq)  # its next call to the model refused: the turn fails
            return
        a.last_event = w.t
        self.tool_use(p, a, f"toolu_{seq}_{self.records}", "make test")
        if sim.hooks is not None:
            sim.hooks.fire(pid, "PostToolUse", {"tool_name": "Bash"})
        sim.after(tool_gap(w.rng), self.tool, pid, seq)

    def end_turn(self, pid: int) -> None:
        """The operator's turn is due to end: its `result` (the world's truth ends it even in a CLI
        that wedged meanwhile, which prints nothing)."""
        w = self.sim.world
        a, p = w.agent, self.current(pid)
        if a is None or a.pid != pid or a.turn_since is None or a.turn_until is None or w.t < a.turn_until:
            return  # ended already, or its end was moved later (a `busy` turn's probe set it)
        self.turn_over(a)
        if p is not None and p.state.turn_seq is not None and a.hearing():
            if w.limited():
                self.failed(pid, p.state.turn_seq)  # its last call to the model refused
            else:
                self.result(pid, p.state.turn_seq)

    def turn_over(self, a: Agent) -> None:
        """The operator's turn of agent `a` is over, in the world's truth."""
        a.turn_since, a.turn_until = None, None
        a.busy_next = False
        self.sim.world.turn_ended(a.pid)

    def failed(self, pid: int, seq: int) -> None:
        """The turn failed for the account's trouble: StopFailure (the hooks) and an error `result`,
        as Claude Code prints one (the bridge tells the operator the error)."""
        sim = self.sim
        found = self.in_turn(pid, seq)
        if found is None:
            return
        a, p = found
        if a.turn_since is not None:  # the operator's turn, now over
            self.turn_over(a)
        if sim.hooks is not None:
            sim.hooks.fire_failure(pid)
        self.refused(p, a)

    def result(self, pid: int, seq: int) -> None:
        """The turn's `result`: the pump writes the next queued line (runner._apply)."""
        sim = self.sim
        found = self.in_turn(pid, seq)
        if found is None:
            return
        a, p = found
        if sim.hooks is not None:
            sim.hooks.fire(pid, "Stop", {"stop_hook_active": False})
        msg = p.messages.get(seq)
        denied = []
        if msg is not None and msg.kind == OPERATOR and sim.rng.random() < DENIED:
            # The CLI's permissions refused a call (print mode asks no one): the result says which.
            denied = [{"tool_name": "Bash", "tool_use_id": f"toolu_{seq}_denied", "tool_input": {"command": "rm -rf build"}}]
        self.out(p, a, {"type": "result", "subtype": "success", "is_error": False, "num_turns": 1,
                        "session_id": a.session, "permission_denials": denied, "result": "done."})
        if denied:
            sim.checker.on_denial_written()

    def out(self, p: Pump, a: Agent, event: dict, began: float | None = None) -> None:
        """One event on the CLI's stdout: into the transcript, then the pump's rules (a `result` ends
        the turn and writes the next queued line at once, as runner._apply does)."""
        self.output(p, event)
        if not self.sim.hooked:  # the pump is Loom's source of turns: what it wrote is the evidence
            w = self.sim.world
            a.seen_last = w.t
            if began is not None and not a.seen_open:
                a.seen_open, a.seen_began = True, began
                w.turn_reported(a.pid)
            if event.get("type") == "result":
                a.seen_open = False
        self.publish(p)

    def tool_use(self, p: Pump, a: Agent, tool_id: str, command: str) -> None:
        """A Bash call the CLI prints (an `assistant` event with its tool_use)."""
        self.out(p, a, {"type": "assistant", "session_id": a.session, "message": {
            "role": "assistant", "content": [{"type": "tool_use", "id": tool_id, "name": "Bash",
                                              "input": {"command": command}}]}})

    def refused(self, p: Pump, a: Agent) -> None:
        """The turn's error `result` when the account's trouble refused its call to the model (the
        bridge tells the operator the error)."""
        w = self.sim.world
        self.out(p, a, {"type": "result", "subtype": "error_during_execution", "is_error": True, "num_turns": 1,
                        "session_id": a.session, "result": f"API Error: {DETAILS.get(w.limit_error, w.limit_error)}"})

    def output(self, p: Pump, event: dict) -> None:
        if not (event.get("type") == "result" and event.get("is_error") is True):
            p.unread = []  # the CLI read what was written (runner._read_through); not its files' end here
        # An error result printed without reading the lines written since says so (runner._on_output).
        self.record(transcript.OUT, event=event, **({"unread": list(p.unread)} if p.unread else {}),
                    **rules.result_turn(p.state, event))
        self.apply(p, rules.Output(self.sim.world.wall, event))
