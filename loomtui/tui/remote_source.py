"""Another host's agent as the console's panels show it: one snapshot read through that host's own
Loom over ssh, never a protocol of the console's making. Six reads, run at once (each over the
host's ControlMaster connection, hosts/ssh.py):

- `loom status --json --list`: the header's row (tui/remote_agent.py says it) and the ledger's size,
  which tells the timeline when to read its page again;
- `loom queue --json --agent X`: the Queue tab and the overview's waiting list;
- `loom jobs --json --agent X`: the Fleet tab;
- `loom canary --history 100 --json --agent X`: the Canary tab and the latency plot;
- `loom ledger tail --json` of the incident kinds: the latest incidents and the relaunch plot;
- `loom pane --json --lines 200 --agent X`: the pane, its screen and some scrollback.

Each answer is untrusted (tui/remote_reads.py makes it typed records). A read that fails (its
command failed, its answer is not what it should be, it timed out) leaves its panel empty and says
why below the pane; a host ssh cannot reach at all is a snapshot with an error, so the panels keep
what they last showed and the header says how old it is. The Memory tab reads that host's memory
directory on its own, every few seconds more (its panel's tui/memory_source.py:RemoteMemory: `loom
memory --json` and friends).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loomtui.config import HostConfig
from loomtui.errors import LoomError
from loomtui.hosts import ledger_view, ssh, view
from loomtui.report import incidents
from loomtui.tui import remote_reads
from loomtui.tui.hosts_view import Chosen, canary_level, state_level
from loomtui.tui.snapshot import DAY, INCIDENT_EVENTS, LATEST_INCIDENTS, REMOTE, Header, Overview, PaneView, Snapshot

PROBES = 100
EVERY = 5.0  # seconds between two loads at least: five ssh commands each, on another machine's CPU


@dataclass(frozen=True)
class RemoteLoad:
    snapshot: Snapshot
    chosen: Chosen | None  # the agent's row read again (None: the host did not answer with it)


def pane_missing(chosen: Chosen, problems: list[str]) -> PaneView:
    """What stands in the pane's place when it could not be read: whose it is, and why not."""
    return PaneView(REMOTE, "", "; ".join([f"agent {chosen.agent}'s pane on host {chosen.host}", *problems]))


def header_of(chosen: Chosen) -> Header:
    """A local-shaped header from the host's row (for what reads one: the plots' numbers); the
    console's header for a remote agent is remote_agent.header."""
    row = chosen.row
    return Header(agent=row.state, agent_level=state_level(row.state), pinned=None, canary=row.canary(),
                  canary_level=canary_level(row), supervisor=f"heartbeat {row.heartbeat()}",
                  supervisor_level="ok" if row.supervised else "bad", open_items=row.queue,
                  held=bool(row.hold), hold=row.hold, name=f"{chosen.agent} on {chosen.host}")


def ledger_events(data: Any, agent: str) -> int:
    """The host's ledger size from its status list, parsed (0 when it does not say): a change means
    new events for the timeline."""
    for doc in data if isinstance(data, list) else []:
        if isinstance(doc, dict) and doc.get("name") == agent:
            ledger = doc.get("ledger")
            count = ledger.get("events") if isinstance(ledger, dict) else None
            if isinstance(count, int) and not isinstance(count, bool):
                return count
    return 0


class RemoteSource:
    """The chosen remote agent's snapshots, read afresh at each load."""

    def __init__(self, host: HostConfig, state_dir: Path, chosen: Chosen) -> None:
        self.host = host
        self.state_dir = state_dir
        self.chosen = chosen

    @property
    def key(self) -> tuple[str, str]:
        return self.chosen.host, self.chosen.agent

    def _ask(self, words: list[str]) -> str:
        """The host's Loom's standard output for `words`; LoomError saying why when it has none."""
        reply = ssh.run(self.host, words, state_dir=self.state_dir, timeout=self.host.timeout)
        if reply.timed_out:  # this read only: the others may have come back
            raise LoomError(f"`loom {words[0]}` on host {self.host.name}: {reply.reason}")
        if not reply.reached:
            raise Unreached(f"host {self.host.name} is unreachable: {reply.reason}")
        if reply.code != 0:
            raise LoomError(f"`loom {words[0]}` on host {self.host.name} exited {reply.code}: "
                            f"{ssh.last_line(reply.stderr) or ssh.last_line(reply.stdout)}")
        return reply.stdout

    def load(self, now: float) -> RemoteLoad:
        agent = self.chosen.agent
        reads: dict[str, tuple[list[str], Callable[[str], Any]]] = {
            "status": (view.STATUS_WORDS, lambda out: status_of(view.loads(out), agent)),
            "queue": (remote_reads.queue_words(agent), remote_reads.parse_queue),
            "jobs": (remote_reads.jobs_words(agent), remote_reads.parse_jobs),
            "canary": (remote_reads.canary_words(agent, PROBES), remote_reads.parse_probes),
            "ledger": (ledger_view.tail_words(limit=INCIDENT_EVENTS, agent=agent, kinds=incidents.KINDS),
                       ledger_view.parse_page),
            "pane": (remote_reads.pane_words(agent), remote_reads.parse_pane),
        }
        with ThreadPoolExecutor(len(reads)) as pool:
            futures = {name: pool.submit(self._read, words, parse) for name, (words, parse) in reads.items()}
            got = {name: future.result() for name, future in futures.items()}
        unreached = [v for v in got.values() if isinstance(v, Unreached)]
        if unreached:
            return self._failed(now, str(unreached[0]))
        if all(isinstance(v, Exception) for v in got.values()):  # nothing came back: keep what is shown
            return self._failed(now, str(got["status"]))
        problems = [str(v) for v in got.values() if isinstance(v, Exception)]
        status = got["status"]
        chosen = None
        if not isinstance(status, Exception):
            row, ledger_count = status
            if row is None:
                problems.append(f"host {self.host.name} no longer has an agent {agent}")
            else:
                chosen = replace(self.chosen, row=row, read_at=now)
                self.chosen = chosen
        events = _or_empty(got["ledger"])
        relaunches = [(e.ts, e.cause or "") for e in events if e.kind == "relaunch" and e.ts >= now - DAY]
        try:
            latest = list(reversed(incidents.group(list(reversed(events)))))[:LATEST_INCIDENTS]
        except Exception as exc:  # noqa: BLE001 - the host's events are anyone's: say so, show the rest
            latest, problems = [], [*problems, f"host {self.host.name}'s incidents: {type(exc).__name__}"]
        queue = _or_empty(got["queue"])
        spans = [(i.first_seen, i.witnessed_at) for i in queue if i.witnessed_at is None or i.witnessed_at >= now - DAY]
        pane = got["pane"]
        if isinstance(pane, Exception):
            pane = pane_missing(self.chosen, problems)
        elif problems:  # what else could not be read, below the pane
            pane = replace(pane, why="; ".join(w for w in (pane.why, *problems) if w))
        unread = {name: str(got[name]) for name in ("queue", "jobs", "canary", "ledger")
                  if isinstance(got[name], Exception)}
        snapshot = Snapshot(now, header_of(self.chosen), pane, _or_empty(got["canary"]),
                            queue, _or_empty(got["jobs"]),
                            0 if isinstance(status, Exception) else ledger_count,
                            overview=Overview(relaunches, spans, latest), agent=agent, host=self.chosen.host,
                            unread=unread)
        return RemoteLoad(snapshot, chosen)

    def _read(self, words: list[str], parse: Callable[[str], Any]) -> Any:
        """One read's records, or the exception that says why there are none."""
        try:
            out = self._ask(words)
        except LoomError as exc:
            return exc
        try:
            return parse(out)
        except Exception as exc:  # noqa: BLE001 - ValueError mostly; a hostile answer may raise anything
            return LoomError(f"`loom {words[0]}` on host {self.host.name}: not its JSON ({str(exc)[:80]})")

    def waiting(self, now: float) -> Snapshot:
        """What the panels show until the first load comes back: nothing of this machine's."""
        return Snapshot(now, header_of(self.chosen), pane_missing(self.chosen, [f"reading host {self.host.name}…"]),
                        agent=self.chosen.agent, host=self.chosen.host)

    def _failed(self, now: float, why: str) -> RemoteLoad:
        return RemoteLoad(Snapshot(now, header_of(self.chosen), pane_missing(self.chosen, [why]), store_error=why,
                                   agent=self.chosen.agent, host=self.chosen.host), None)


class Unreached(LoomError):
    """ssh did not reach the host: nothing of this load can be shown."""


def status_of(data: Any, agent: str) -> tuple[view.AgentRow | None, int]:
    """The agent's row of the host's status list (None: the host has no such agent) and the ledger's
    size, from the one parse of its answer; ValueError when it is not that list."""
    return next((r for r in view.status_rows(data) if r.name == agent), None), ledger_events(data, agent)


def _or_empty(value: Any) -> list[Any]:
    return [] if isinstance(value, Exception) else value
