"""Another host's agent selected in the console (from the hosts view): the header's words for it,
and what its keys run there.

A remote agent's keys run that host's own Loom over ssh (hosts/ssh.py), as `loom --host NAME
canary --agent X` would: its own actions module, locks and ledger, which records the source as
ssh from this machine. Nothing is decided here from what the host sent: its output is untrusted,
shown as its last line made printable. The timeline reads the host's ledger (`RemoteEvents`,
its own `loom ledger tail --json`); the other tabs and the pane read the host's own commands too
(tui/remote_source.py), and so does the Memory tab (tui/memory_source.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text

from loomtui.config import HostConfig
from loomtui.durations import format_duration
from loomtui.errors import LoomError
from loomtui.hosts import ledger_view, ssh
from loomtui.store.ledger import Event
from loomtui.tui.hosts_view import Chosen, canary_level, state_level
from loomtui.tui.tables import shown

LEVELS = {"ok": "bold green", "warn": "bold yellow", "bad": "bold red"}
KEYS = "c r h i d a"  # the console's keys that act on a remote agent: all of them


@dataclass(frozen=True)
class Outcome:
    text: str
    ok: bool


def words(action: str, agent: str, *, mode: str = "", reason: str = "", duration: float | None = None,
          item: int | None = None) -> list[str]:
    """The host's Loom command for one of the console's keys, on its agent `agent`. A line to type
    and a note are never among the words: they go on the command's standard input (`run`), so no
    process list on either machine shows them."""
    if action == "canary":
        return ["canary", "--agent", agent]
    if action == "recycle":
        return ["recycle", f"--{mode}", "--agent", agent, "--reason", "from the console of " + ssh.origin()]
    if action == "hold":
        limit = ["--for", f"{max(1, round(duration))}s"] if duration is not None else []
        # One word with its option: a reason beginning with `-` was read by the host's argparse
        # as an option (exit 2), where the same reason held a local agent.
        return ["hold", *limit, f"--reason={reason}", "--agent", agent]
    if action == "release":
        return ["release", "--agent", agent]
    if action == "inject":
        return ["inject", "--stdin", "--agent", agent]
    if action == "resolve" and item is not None:
        return ["resolve", str(item), "--note-stdin"]  # an item's id is the host's, whatever its agent
    raise ValueError(f"no remote command for {action}")


def run(host: HostConfig, state_dir: Path, command: list[str], stdin: str = "") -> Outcome:
    """`command` run by the host's Loom (`stdin` its standard input); what it said (its last line)
    and whether it succeeded. An unreachable host refuses the action with ssh's reason."""
    return outcome_of(host.name, ssh.run(host, command, state_dir=state_dir, timeout=host.command_timeout,
                                         stdin=stdin.encode()))


def outcome_of(name: str, reply: ssh.Reply) -> Outcome:
    """What the console says of a host's answer: its last line, the error's when it failed (a `loom
    inject` that typed the line but could not record it exits 75 with both: the warning is the news)."""
    if not reply.reached:
        return Outcome(f"host {name} is unreachable: {reply.reason}", False)
    first, second = (reply.stdout, reply.stderr) if reply.code == 0 else (reply.stderr, reply.stdout)
    said = ssh.last_line(first) or ssh.last_line(second) or f"exit {reply.code}"
    return Outcome(f"on host {name}: {said}", reply.code == 0)


class RemoteEvents:
    """The timeline's events of another host, a page at a time through its own `loom ledger tail
    --json` (hosts/ledger_view.py reads them back, field by field). An incident's events are those
    of the pages read, kept by id (its detail asks for them again)."""

    def __init__(self, host: HostConfig, state_dir: Path) -> None:
        self.host = host
        self.state_dir = state_dir
        self.where = f"host {host.name}"
        self._seen: dict[int, Event] = {}
        self._lock = threading.Lock()  # a page and a detail may be read in two workers at once

    def page(self, *, before_id: int | None, limit: int, kinds: list[str] | None, text: str | None,
             agent: str | None) -> list[Event]:
        if agent is None:
            raise LoomError("another host's timeline is of one of its agents")
        words = ledger_view.tail_words(limit=limit, agent=agent, kinds=kinds or (), before_id=before_id, text=text)
        reply = ssh.run(self.host, words, state_dir=self.state_dir, timeout=self.host.timeout)
        if not reply.reached:
            raise LoomError(f"host {self.host.name} is unreachable: {reply.reason}")
        if reply.code != 0:
            raise LoomError(f"host {self.host.name}: loom exited {reply.code}: {ssh.last_line(reply.stderr)}")
        try:
            events = ledger_view.parse_page(reply.stdout)
        except ValueError as exc:
            raise LoomError(f"host {self.host.name}: not the ledger's JSON lines ({str(exc)[:100]})") from None
        with self._lock:
            self._seen.update((e.id, e) for e in events)
        return events

    def by_ids(self, ids: list[int]) -> list[Event]:
        with self._lock:
            return [self._seen[i] for i in ids if i in self._seen]


def header(chosen: Chosen, now: float) -> Text:
    """Three lines, as the local header: which host and agent first and plainly remote, then its
    state, canary, queue and hold as last read (and how long ago), then what the keys do."""
    row = chosen.row
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append(f" host {chosen.host} · agent {chosen.agent} (remote) ", style="bold reverse")
    out.append("  ")
    out.append(row.state, style=LEVELS[state_level(row.state)])
    if not row.supervised:  # the state is what it last saw, and nothing on that host recovers it
        # One word at 80 columns; the hosts view's line for the host says since when (its heartbeat).
        out.append("  unsupervised", style=LEVELS["bad"])
    out.append("  read ", style="dim")
    out.append(f"{format_duration(max(now - chosen.read_at, 0))} ago")
    out.append("\n")
    out.append("canary ", style="dim")
    out.append(row.canary(), style=LEVELS[canary_level(row)])
    out.append("  queue ", style="dim")
    out.append(str(row.queue), style="bold red" if row.queue else "green")
    out.append("  hold ", style="dim")
    out.append(row.hold or "none", style=LEVELS["bad"] if row.hold else "green")
    out.append("\n")
    out.append(f"keys {KEYS} act on {chosen.host} over ssh · every tab is {chosen.host}'s, memory too",
               style="dim")
    return shown(out)  # the host's words are printable already (hosts/view.py); the names too, now
