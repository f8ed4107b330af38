"""The stream-json driver: `loom pump` runs in the agent's pane and owns the CLI's stdin and stdout.

Launching starts the pump (which starts the CLI with the stream flags); typing is a request on
the pump's socket, answered `delivered` (written to the CLI between turns) or `queued` (a turn is
running; persisted, written when it ends); observing adds the pump's status file to the pane's
facts. Everything tmux-shaped (the pane, its process tree, stop, the exit hook) is the tmux
driver's, inherited: a dead CLI is a dead pump is a dead pane. There are no dialogs in this mode
(permissions come from flags), so pressing keys is refused. docs/STREAM.md has the protocol.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from loomtui.agent.driver import TmuxDriver
from loomtui.agent.ports import AgentFacts
from loomtui.agent.tmux import TmuxError
from loomtui.errors import AgentNotReading
from loomtui.config import Config
from loomtui.pump import client as pump_client
from loomtui.pump import rules as pump_rules
from loomtui.pump.facts import Delivery, StreamFacts, read_facts

# What print mode needs to be one long-lived process reading one JSON line per user message.
# Each is appended unless the command already says it (in either spelling: `--flag value` or
# `--flag=value`); a command that says something else is `loom doctor`'s to name.
STREAM_FLAGS: tuple[tuple[str, ...], ...] = (
    ("-p",),
    ("--input-format", "stream-json"),
    ("--output-format", "stream-json"),
    ("--verbose",),
)
_ALIASES = {"-p": ("-p", "--print")}
ORIGINS = ("operator", "telegram", "canary", "sentinel")
# The pump answers at once when it queues, and once the line is written when it delivers: it waits
# up to its own SEND_WAIT (30 s, pump/runner.py) for a CLI that is slow to read. Longer than that.
SEND_TIMEOUT = 45.0


class PumpRefused(TmuxError):
    """The pump did not take the line (no socket, the CLI exited, a bad answer). A TmuxError, so
    the injection path handles it like a pane that was not there: recorded, never retried blind."""


def stream_argv(command: str) -> list[str]:
    """The rendered command as argv, with the stream flags it lacks appended."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise TmuxError(f"agent command cannot be split into words: {exc}") from None
    if not argv:
        raise TmuxError("agent command is empty")
    extra: list[str] = []
    for flag in STREAM_FLAGS:
        if not _has_flag(argv, flag[0]):
            extra += list(flag)
    return argv + extra


def _has_flag(argv: list[str], name: str) -> bool:
    spellings = _ALIASES.get(name, (name,))
    return any(word in spellings or any(word.startswith(s + "=") for s in spellings if s.startswith("--"))
               for word in argv[1:])


def pump_command(state_dir: Path, command: str) -> str:
    """The shell line tmux runs in the pane: the pump (this Python, so a venv needs no PATH),
    exec'd so that the pane's process is the pump itself and pump.json's pid names it."""
    argv = [sys.executable, "-m", "loomtui", "pump", "--state-dir", str(state_dir), "--", *stream_argv(command)]
    return "exec " + shlex.join(argv)


def origin_of(kind: str, source: str) -> str:
    """Whose line an injection is, for the pump's `origin`: the bridge answers only `telegram` turns,
    and canary probes and nudges are internal turns whoever asked for them."""
    if kind == "canary_sent":
        return "canary"
    if kind == "queue_nudge":
        return "sentinel"
    if source == "telegram":
        return "telegram"
    return "operator"


class StreamJsonDriver(TmuxDriver):
    name: ClassVar[str] = "stream-json"
    has_dialogs: ClassVar[bool] = False   # print mode: permissions come from the command's flags
    owns_turns: ClassVar[bool] = True     # the pump: turns, queue, receipts, pump.json, the transcript

    def __init__(self, config: Config, state_dir: Path | None = None) -> None:
        super().__init__(config, state_dir)
        self.state_dir = Path(state_dir) if state_dir is not None else None

    def _state_dir(self) -> Path:
        if self.state_dir is None:
            raise PumpRefused("the stream-json driver was made without the state dir: it cannot reach the pump")
        return self.state_dir

    def launch(self, command: str, cwd: Path, env: dict[str, str], exit_signal: Path | None = None):
        return super().launch(pump_command(self._state_dir(), command), cwd, env, exit_signal)

    # Once its CLI is gone, the pump records what it left unread, after its readers saw the pipes
    # close or its DRAIN ran out (a pipe held by a process outside the tree), and exits.
    LAST_GRACE: ClassVar[float] = pump_rules.DRAIN + 3.0

    def _ends_last(self, root: int) -> tuple[int, ...]:
        """The pane's process, when it is the pump (`exec`, pump_command; pump.json names it): it
        sees its CLI end, stopped with the rest of the tree, and records the kept lines it never
        read before it exits. (An agent launched by the tmux driver before a switch has none.)"""
        status = pump_client.status(self.state_dir) if self.state_dir is not None else None
        return (root,) if status is not None and status.get("pid") == root else ()

    def observe(self, *, with_screen: bool = False) -> AgentFacts:
        facts = super().observe(with_screen=with_screen)
        if self.state_dir is None or facts.pane is None:
            return facts
        return replace(facts, stream=self.stream_facts(None if facts.pane.dead else facts.pane.pane_pid))

    def stream_facts(self, pane_pid: int | None) -> StreamFacts | None:
        """pump.json as facts; `pane_pid` (the live pane's process) tells the current pump's from a dead one's."""
        return read_facts(self.state_dir, pane_pid) if self.state_dir is not None else None

    def type_line(self, text: str, expect_pane_pid: int | None = None, *, origin: str = "operator",
                  ref: str = "") -> Delivery:
        """Hand `text` to the pump of the live pane: delivered now, or queued behind a running turn."""
        state_dir = self._state_dir()
        self._live(expect_pane_pid)
        try:
            reply = pump_client.send(state_dir, text, origin=origin if origin in ORIGINS else "operator",
                                     ref=ref, timeout=SEND_TIMEOUT)
        except pump_client.PumpInputClosed as exc:
            raise AgentNotReading(f"the pump did not take the line: {exc}") from None
        except pump_client.PumpError as exc:
            raise PumpRefused(f"the pump did not take the line: {exc}") from None
        if not reply.ok:
            raise PumpRefused(f"the pump refused the line: {reply.error or 'no reason given'}")
        if reply.state not in ("delivered", "queued"):
            raise PumpRefused(f"the pump answered {reply.state!r}, neither delivered nor queued")
        # The pump's answer is the fact: the line reached the CLI's stdin, or its queue. (The
        # agent may exit because of it, e.g. on /exit0: not a failure of the delivery.) Relaunches
        # swap the pane only under inject.lock, which the caller holds, so the pump that answered
        # on this state dir's socket is the pane's that `_live` just saw.
        return Delivery(reply.state, reply.seq, reply.position if reply.state == "queued" else None)

    def send_keys(self, keys: list[str], expect_pane_pid: int | None = None) -> None:
        raise PumpRefused("no keys are pressed with the stream-json driver: it has no dialogs "
                          "(permissions come from the command's flags)")
