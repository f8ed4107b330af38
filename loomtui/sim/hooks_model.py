"""The agent CLI's hooks, modelled (only for a config whose commands pass `{hook_settings}`): the
simulated agent writes its hook events as Claude Code's hook command does, one JSON file each in
the agent's events directory, and Loom's own hooks loop (`loops.hooks_look`: ingest, the dispatch
witness) reads them on the virtual clock.

What the agent reports: SessionStart when it starts; UserPromptSubmit when it takes a typed line
(a probe, a nudge) and Stop once that turn ends; and the turns the operator gives it, which Loom
never typed: a `busy` fault is such a turn, in progress when the next probe arrives (which queues
behind it and acks late), a `long_turn` fault a longer one (up to 100 minutes, or now and then
one that runs away for hours, past `canary.max_turn`: faults.LONG_TURN), using a tool
(PostToolUse) every few minutes, and now and then after a long call, silent up to the 10 minutes
Claude Code lets a command run, or compacting its context (PreCompact, then a SessionStart of
source `compact`). A probe's `touch` reports its PostToolUse after the ack file is written; a
prompt idle for a minute after a turn says so (Notification `idle_prompt`). The world's lengths, not drawn from Loom's thresholds: a config
whose own cut the operator's ordinary turns short shows in a report (`hearing_recycles`). One turn at a time, as Claude Code runs them: a probe or a
line typed while a turn runs (the operator's, or another line's) is queued and taken when that turn
ends, the lines queued together as one prompt; an operator's prompt waits for the running line's
turn to end. A wedged agent (deaf) reports nothing, a dialog eats what is typed. While the
account is rate-limited (the `rate_limit` fault; one in five is its bill or its login instead,
faults.LIMIT_ERRORS) every turn the CLI takes fails after its retries with StopFailure of that type
(a rate limit's reset time in the payload when the world gives one), and no probe's `touch` runs.

Hook events are sometimes lost (HOOK_LOST) or late (HOOK_LATE, by up to LATE_BY): the witness and
the turns must cope with both. The world keeps what Loom could have seen of the events it reads as
turn marks (READ_AS_TURNS: not PreCompact) (`seen_open`, `seen_last`)
beside the truth (`turn_since`), so an invariant can tell a recycle Loom had the evidence against
from one whose evidence was lost.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING

from loomtui.hooks import settings, turn_rules
from loomtui.store import hook_events

if TYPE_CHECKING:
    from loomtui.sim.engine import Sim
    from loomtui.sim.world import Agent

HOOK_LOST = 0.01
HOOK_LATE = 0.02
LATE_BY = 60.0
TOOL_EVERY = (30.0, 240.0)   # seconds between a working turn's tool uses, most of the time
# A tool call that runs long (a build, a test suite): Claude Code's Bash runs up to 10 minutes and
# reports only when done. The world's, not Loom's: a gap drawn from `canary.turn_quiet` (as it was,
# three minutes short of it) could never show a config whose turn_quiet is too short. With every
# gap inside four minutes, a Loom that took a turn for quiet after five went unseen in every storm.
LONG_CALL = 0.2              # the share of tool calls that do
LONG_CALL_MAX = 600.0
COMPACT = 0.02               # the share of a working turn's steps that compact its context instead
COMPACT_TAKES = (20.0, 120.0)
# The events Loom reads as turn marks (hook_events.TURN_EVENTS, and the latest tool use): what the
# checker's `seen_*` follow. The others are recorded and never move a turn (PreCompact).
READ_AS_TURNS = (*hook_events.TURN_EVENTS, hook_events.TOOL, hook_events.TOOL_FAILED)
PROBE_TOOL_AFTER = 0.05      # the probe's `touch` reported (PostToolUse) after the ack file was written
LOST, LATE, WRITTEN = "lost", "late", "written"
# A failed turn's error_details, per error type (Claude Code's words for the API's answer).
DETAILS = {"rate_limit": "429 rate_limit_error", "billing_error": "400 credit balance is too low",
           "authentication_failed": "401 authentication_error"}
RETRYING = (5.0, 60.0)       # a rate-limited turn: Claude Code retries the model this long, then fails
TAKE_GAP = 0.5               # between queued lines taken one after another at a turn's end
OPERATOR_PROMPT = "work through the backlog in notes/todo.md"


def tool_gap(rng: random.Random) -> float:
    """Seconds to a working turn's next tool use: a few minutes, or now and then a long call, silent
    up to the ten minutes Claude Code lets a command run."""
    if rng.random() < LONG_CALL:
        return rng.uniform(TOOL_EVERY[1], LONG_CALL_MAX)
    return rng.uniform(*TOOL_EVERY)


class HookModel:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.written = 0
        self.queued: dict[int, list[tuple[str, str]]] = {}   # agent pid -> lines typed into its running turn
        # agent pid -> when the lines it is taking end (their Stop): one turn at a time, as Claude
        # Code runs them; a line typed meanwhile waits, and an operator's prompt too.
        self.line_until: dict[int, float] = {}
        self.probe_sent: dict[str, float] = {}   # a probe's text -> when Loom typed it
        self.closed_by_ack = False  # the turn Loom saw last was closed by a probe's ack, not a Stop
        # agent pid -> when its last turn ended (Stop) and its prompt has waited for input since:
        # Claude Code's `idle_prompt` notification comes IDLE_WAIT later, if nothing was taken meanwhile.
        self.idle_since: dict[int, float] = {}

    # -- the hook command ---------------------------------------------------------------------

    def fire(self, pid: int, event: str, fields: dict | None = None) -> None:
        """The agent's hook for `event` runs now (with the payload's `fields`): written, late, or
        (rarely) lost."""
        self.fired(pid, event, fields)

    def fired(self, pid: int, event: str, fields: dict | None = None) -> str:
        """`fire`, saying what became of the event (LOST, LATE, WRITTEN; "" when no hook ran)."""
        fields = fields or {}
        sim = self.sim
        a = sim.world.agent
        if a is None or a.pid != pid or not a.hearing():
            return ""  # a dead or wedged CLI runs no hooks
        r = sim.rng.random()
        if r < HOOK_LOST:
            sim.event("hook_lost", hook=event)
            return LOST
        if r < HOOK_LOST + HOOK_LATE:
            sim.after(sim.rng.uniform(1.0, LATE_BY), self.write, pid, event, fields, True)
            return LATE
        self.write(pid, event, fields)
        return WRITTEN

    def fire_failure(self, pid: int) -> None:
        """The turn failed: the account's rate limit, bill or login (faults.LIMIT_FOR), Claude Code's
        retries spent. StopFailure with its error type, a rate limit's with the reset time when the
        world gives one."""
        w = self.sim.world
        fields: dict = {"error": w.limit_error, "error_details": DETAILS.get(w.limit_error, w.limit_error)}
        if w.limit_resets:
            fields["resets_at"] = w.wall + (w.limited_until - w.t)
        if self.fired(pid, "StopFailure", fields) in (LOST, LATE):
            w.limit_unreported = w.t

    def write(self, pid: int, event: str, fields: dict, late: bool = False) -> None:
        sim, w = self.sim, self.sim.world
        a = w.agent
        if a is None or a.pid != pid:
            return
        if event == "Stop":
            w.last_stop = w.t
        elif event == "StopFailure":
            w.failures_written.append((w.wall, w.t))
            del w.failures_written[:-64]
        if event == "StopFailure" and w.limited() and w.limit_told > w.t:
            w.limit_told = w.t
        assert sim.ctx is not None
        directory = settings.events_dir(sim.ctx.agent_dir)
        self.written += 1
        path = directory / f"ev.{self.written}.json"
        try:
            path.write_text(json.dumps({"hook_event_name": event, "session_id": a.session, **fields}))
            os.utime(path, (w.wall, w.wall))
        except OSError:
            return
        if event not in READ_AS_TURNS:
            sim.wake("hooks")  # recorded, never a turn mark (PreCompact): nothing Loom's turns see
            return
        if event == "Notification" and fields.get("notification_type") == turn_rules.IDLE:
            # Loom ends the open turn at it, unless the turn had an event inside the idle minute it
            # tells of (turn_rules.turns): not a sign of the turn's life either way. A probe's turn
            # closed at its ack (closed_by_ack) is open until then in Loom's turns, and ends here
            # too: an event after it no longer opens it again.
            if (a.seen_open or self.closed_by_ack) and w.t - a.seen_last >= turn_rules.IDLE_WAIT:
                a.seen_open, self.closed_by_ack = False, False
            sim.wake("hooks")
            return
        a.seen_last = w.t
        # Loom's turns: a permission prompt's notification leaves the turn waiting until its next mark.
        permission = event == "Notification" and fields.get("notification_type") == turn_rules.PERMISSION
        if event != "SessionStart":  # a compaction's goes by a waiting turn (turn_rules.turns)
            a.seen_waiting = w.t if permission else None
        if event == "UserPromptSubmit":
            if not a.seen_open or self.closed_by_ack:
                # A late prompt says the turn began when it was written; and a prompt after the ack
                # that closed the probe's turn begins one of its own (turn_rules.closed_by_acks),
                # though an event since had opened that turn again in Loom's eyes.
                a.seen_began = w.t
            a.seen_open, self.closed_by_ack = True, False
            w.turn_reported(a.pid)
        elif event in ("Stop", "StopFailure"):
            a.seen_open, self.closed_by_ack = False, False
        elif self.closed_by_ack and not a.seen_open:
            # An event after the ack that closed the turn: Loom's turn is open again (closed_by_acks
            # needs the turn's last event no later than the ack), its Stop never came.
            a.seen_open = True
        sim.wake("hooks")  # inotify on the events directory

    # -- the agent's moments --------------------------------------------------------------------

    def started(self, a: Agent) -> None:
        self.closed_by_ack = False  # a new process: Loom's launch mark ends every turn before it
        self.sim.at(max(a.started, self.sim.world.t) + 0.1, self.fire, a.pid, "SessionStart",
                    {"source": "resume" if a.mode == "resume" else "startup"})

    def typed(self, a: Agent, text: str, is_probe: bool) -> None:
        """A line typed into the agent: taken now, after its boot, or queued behind its turn; a
        probe's ack and its turn's Stop follow."""
        w = self.sim.world
        if not a.alive or a.deaf_since is not None or a.modal:
            return  # never taken: no UserPromptSubmit, no ack
        if is_probe:
            self.probe_sent[text] = w.t  # as Loom's canary_sent says it
        if a.turn_since is not None:
            if is_probe and a.busy_next:
                # The probe a `busy` turn was waiting for: the turn ends after one ack timeout, before two.
                a.busy_next = False
                w.last_disturbance = w.t
                self.end_at(a, w.busy_end(w.t))
            self.queued.setdefault(a.pid, []).append((text, "probe" if is_probe else "line"))
            return
        if self.in_line(a.pid):  # another line's turn runs: this one waits for its end
            self.queued.setdefault(a.pid, []).append((text, "probe" if is_probe else "line"))
            return
        self.take(a.pid, [(text, "probe" if is_probe else "line")], max(w.t, a.ready_at))

    def in_line(self, pid: int) -> bool:
        return self.line_until.get(pid, float("-inf")) > self.sim.world.t

    def take(self, pid: int, lines: list[tuple[str, str]], when: float) -> None:
        """The CLI takes the lines at `when`, as one prompt (Claude Code joins the lines queued
        behind a turn into one message): its prompt, each probe's `touch` a moment later, one Stop;
        what is typed meanwhile waits for that Stop."""
        sim, w = self.sim, self.sim.world
        self.idle_since.pop(pid, None)
        sim.at(when, self.fire, pid, "UserPromptSubmit", {"prompt": "\n".join(text for text, _ in lines)})
        if w.limited():
            # The account is rate-limited: the prompt is taken, the turn fails, no probe's `touch` runs.
            for text, _ in lines:
                self.probe_sent.pop(text, None)
            fails = max(when, w.t) + w.rng.uniform(*RETRYING)
            self.line_until[pid] = fails
            sim.at(fails, self.line_failed, pid)
            return
        done = when + w.latency()
        for text, kind in lines:
            path = sim.probe_path(text) if kind == "probe" else None
            if path is not None:
                sim.at(done, self.acked, pid, path, self.probe_sent.pop(text, when))
                # The `touch` is a Bash call: its PostToolUse is written once it ran, after the ack
                # file's time, so Loom reads the probe's turn as going on past its ack.
                sim.at(done + PROBE_TOOL_AFTER, self.fire, pid, "PostToolUse", {"tool_name": "Bash"})
        self.line_until[pid] = done + 0.2
        sim.at(done + 0.2, self.line_done, pid)

    def acked(self, pid: int, path: Path, sent: float) -> None:
        """The probe's `touch`; and what Loom could see follows Loom's rule for it: a turn that
        began with the probe, or after it was typed, is done once the probe's ack is written
        (hooks.turn_rules.closed_by_acks: a Stop lost leaves no idle agent looking busy). Without
        it, a lost Stop and then a long turn whose prompt was lost read as a busy turn Loom had
        evidence of, and its recycle as a false one (hooked seed 12, day 16.3)."""
        sim = self.sim
        sim.acked(pid, path)
        a = sim.world.agent
        if a is None or a.pid != pid or not a.hearing() or not path.exists():
            return
        if a.seen_open and a.seen_began >= sent:
            a.seen_open, self.closed_by_ack = False, True

    def line_done(self, pid: int) -> None:
        """The lines' turn ends (Stop); what was typed meanwhile is taken next, as one prompt."""
        self.fire(pid, "Stop", {"stop_hook_active": False})
        self.line_until.pop(pid, None)
        self.idle_from(pid)
        self.take_queued(pid)

    def line_failed(self, pid: int) -> None:
        """The lines' turn failed (StopFailure); what was typed meanwhile is taken next."""
        self.fire_failure(pid)
        self.line_until.pop(pid, None)
        self.idle_from(pid)
        self.take_queued(pid)

    def take_queued(self, pid: int) -> None:
        w = self.sim.world
        a = w.agent
        queued = self.queued.pop(pid, [])
        if queued and a is not None and a.pid == pid:
            self.take(pid, queued, w.t + TAKE_GAP)

    def idle_from(self, pid: int) -> None:
        """A turn ended: the prompt waits for input from now; `idle_prompt` once it has waited
        IDLE_WAIT with nothing taken."""
        t = self.sim.world.t
        self.idle_since[pid] = t
        self.sim.after(turn_rules.IDLE_WAIT, self.idle, pid, t)

    def idle(self, pid: int, since: float) -> None:
        a = self.sim.world.agent
        if self.idle_since.get(pid) != since or a is None or a.pid != pid or a.turn_since is not None \
                or self.in_line(pid):
            return  # something was taken since, or the agent is gone
        self.idle_since.pop(pid, None)
        self.fire(pid, "Notification", {"notification_type": turn_rules.IDLE,
                                        "message": "Claude is waiting for your input"})

    # -- turns the operator gave it ------------------------------------------------------------

    def begin_turn(self, a: Agent, until: float | None) -> None:
        """A turn of the operator's begins now (its prompt), using tools until it ends (`until`, or
        when the probe a `busy` turn waits for sets its end); after the running line's turn, if
        one runs (Claude Code runs one turn at a time)."""
        w = self.sim.world
        if self.in_line(a.pid):
            self.sim.at(self.line_until[a.pid] + TAKE_GAP, self.begin_later, a.pid, until)
            return
        a.turn_since = a.last_event = w.t
        a.turn_until = until
        self.idle_since.pop(a.pid, None)
        w.turn_began(a.pid)
        self.fire(a.pid, "UserPromptSubmit", {"prompt": OPERATOR_PROMPT})
        a.chain += 1
        self.sim.after(self.tool_gap(), self.tool, a.pid, a.chain)
        if until is not None:
            self.end_at(a, until)

    def begin_later(self, pid: int, until: float | None) -> None:
        a = self.sim.world.agent
        if a is None or a.pid != pid or not a.alive or a.turn_since is not None:
            return  # gone since, or another turn of the operator's began
        self.begin_turn(a, None if until is None else max(until, self.sim.world.t + 1.0))

    def end_at(self, a: Agent, until: float) -> None:
        a.turn_until = until
        self.sim.at(until, self.end_turn, a.pid)

    def ask_permission(self, a: Agent, answer_at: float) -> None:
        """The running turn's next tool call waits for the operator's yes: Notification
        `permission_prompt` now, nothing more of the turn until `answer_at`, then the call runs."""
        w = self.sim.world
        a.waiting_since, a.answer_at = w.t, answer_at
        a.chain += 1  # the call waiting is the turn's: the one scheduled (a call, a compaction) never runs
        self.fire(a.pid, "Notification", {"notification_type": turn_rules.PERMISSION,
                                          "message": "Claude needs your permission to use Bash"})
        self.sim.at(answer_at, self.answered, a.pid)

    def answered(self, pid: int) -> None:
        w = self.sim.world
        a = w.agent
        if a is None or a.pid != pid or a.waiting_since is None:
            return
        a.waiting_since = None
        if a.turn_since is None or not a.hearing():
            return
        a.last_event = w.t
        self.fire(pid, "PostToolUse", {"tool_name": "Bash"})  # the call ran
        a.chain += 1
        self.sim.after(self.tool_gap(), self.tool, pid, a.chain)

    def tool(self, pid: int, chain: int) -> None:
        w = self.sim.world
        a = w.agent
        if a is None or a.pid != pid or a.turn_since is None or not a.hearing() or a.chain != chain:
            return  # the turn ended, or the agent with it; a wedged one uses no tools; a stale chain
        if w.limited():
            self.end_turn(pid, failed=True)  # its next call to the model is refused: the turn fails
            return
        a.last_event = w.t
        self.fire(pid, "PostToolUse", {"tool_name": "Bash"})
        if w.rng.random() < COMPACT:
            # Its context full after the call, Claude Code compacts it inside the turn: PreCompact,
            # silence while it summarises, then a SessionStart of source `compact` (the same
            # process), and work on.
            self.fire(pid, "PreCompact", {"trigger": "auto"})
            self.sim.after(w.rng.uniform(*COMPACT_TAKES), self.compacted, pid, chain)
            return
        self.sim.after(self.tool_gap(), self.tool, pid, chain)

    def compacted(self, pid: int, chain: int) -> None:
        w = self.sim.world
        a = w.agent
        if a is None or a.pid != pid or a.turn_since is None or not a.hearing() or a.chain != chain:
            return
        a.last_event = w.t
        self.fire(pid, "SessionStart", {"source": "compact"})
        self.sim.after(self.tool_gap(), self.tool, pid, chain)

    def tool_gap(self) -> float:
        return tool_gap(self.sim.world.rng)

    def end_turn(self, pid: int, failed: bool = False) -> None:
        """The turn ends (Stop, or StopFailure when the rate limit failed it), and the lines queued
        behind it are taken, one after another."""
        w = self.sim.world
        a = w.agent
        if a is None or a.pid != pid or a.turn_since is None:
            return
        if a.waiting_since is not None:  # it cannot end before its call ran: a little after the answer
            self.sim.at(a.answer_at + self.tool_gap(), self.end_turn, pid, failed)
            return
        a.turn_since, a.turn_until = None, None
        a.busy_next = False
        w.turn_ended(pid)
        if failed or w.limited():  # its last call to the model refused
            self.fire_failure(pid)
        else:
            self.fire(pid, "Stop", {"stop_hook_active": False})
        self.idle_from(pid)
        self.take_queued(pid)  # the lines typed into it, as one prompt
