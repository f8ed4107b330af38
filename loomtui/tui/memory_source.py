"""Where the memory panel reads a memory directory from: this machine's own (`LocalMemory`, the
directory itself, watched), or another host's agent's (`RemoteMemory`, that host's own `loom
memory --json`, `memory show --json` and `memory search --json` over ssh, its answers untrusted
and read back field by field in tui/remote_reads.py; no watch reaches there, so the panel reads
it again every REMOTE_EVERY seconds and on `u`). Every method does I/O: the panel calls them
from its thread workers only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from loomtui.config import HostConfig
from loomtui.errors import LoomError
from loomtui.hosts import ssh
from loomtui.memory import index as memory
from loomtui.tui import remote_reads

REMOTE_EVERY = 15.0  # seconds between two reads of another host's memory: one ssh command each


class MemorySource(Protocol):
    key: tuple[str, ...]  # which directory: a panel showing another key is replaced, not reused
    where: str            # "" for this machine's; else whose, for the panel's summary ("host b")
    watched: bool         # a watch on the directory (local), else read again every REMOTE_EVERY s

    def survey(self) -> memory.Report: ...

    def replica(self) -> str | None:
        """The replica's lag in short words; None when the directory is not replicated."""

    def read(self, rel: str, limit: int) -> tuple[str, bool] | None:
        """Up to `limit` characters of a file and whether there was more; None: not a regular file."""

    def search(self, term: str) -> list[memory.Hit]: ...

    def edit_argv(self, rel: str, environ: Mapping[str, str]) -> list[str]:
        """The command that edits `rel` in this terminal."""


class LocalMemory:
    """This machine's memory directory, read as it is on disk."""

    watched = True
    where = ""

    def __init__(self, memory_dir: Path, index_name: str, state_dir: Path | None = None) -> None:
        self.memory_dir = Path(memory_dir)
        self.index_name = index_name
        self.state_dir = state_dir  # where its replica's record is (None: no replica told)
        self.key: tuple[str, ...] = ("", str(self.memory_dir), index_name)

    def survey(self) -> memory.Report:
        return memory.survey(self.memory_dir, self.index_name)

    def replica(self) -> str | None:
        from loomtui.memory import replica

        state = None if self.state_dir is None else replica.state_of(self.state_dir, self.memory_dir)
        return None if state is None else replica.lag_line(state, short=True)

    def read(self, rel: str, limit: int) -> tuple[str, bool] | None:
        # `limit` characters are at most 4 bytes each in UTF-8 (a limit in bytes cut a CJK file at a
        # third, mid-character, and never said there was more).
        data = memory.read_text(self.memory_dir, rel, limit * 4 + 4)
        return None if data is None else (data[:limit], len(data) > limit)

    def search(self, term: str) -> list[memory.Hit]:
        report = self.survey()
        bodies = memory.read_bodies(self.memory_dir, {r.path for r in report.rows if r.path})
        return memory.search(term, report, bodies)

    def edit_argv(self, rel: str, environ: Mapping[str, str]) -> list[str]:
        # The checks `loom memory edit` makes: a link the agent planted to a file outside (a secret),
        # or a named pipe, is refused, never handed to the editor.
        return memory.editor_argv(environ, memory.edit_path(self.memory_dir, rel))


class RemoteMemory:
    """Agent `agent`'s memory directory on `host`, through that host's own Loom."""

    watched = False

    def __init__(self, host: HostConfig, state_dir: Path, agent: str) -> None:
        self.host = host
        self.state_dir = state_dir
        self.agent = agent
        self.key: tuple[str, ...] = (host.name, agent)
        self.where = f"host {host.name}"
        self._replica: str | None = None  # as the last listing said it

    def _ask(self, words: list[str], ok: tuple[int, ...] = (0,)) -> str:
        reply = ssh.run(self.host, words, state_dir=self.state_dir, timeout=self.host.timeout)
        # The panel's summary names the host: the message says only what went wrong there.
        if not reply.reached:
            raise LoomError(f"unreachable: {reply.reason}")
        if reply.code not in ok:
            raise LoomError(ssh.last_line(reply.stderr) or ssh.last_line(reply.stdout) or f"loom exited {reply.code}")
        return reply.stdout

    def _parsed(self, words: list[str], parse, ok: tuple[int, ...] = (0,)):
        out = self._ask(words, ok)
        try:
            return parse(out)
        except ValueError as exc:
            raise LoomError(f"`loom {' '.join(words[:2])}` did not answer with its JSON ({str(exc)[:80]})") from None

    def survey(self) -> memory.Report:
        listing = self._parsed(remote_reads.memory_words(self.agent), remote_reads.parse_memory)
        self._replica = listing.replica
        return listing.report

    def replica(self) -> str | None:
        return self._replica

    def read(self, rel: str, limit: int) -> tuple[str, bool] | None:
        text, clipped = self._parsed(remote_reads.show_words(self.agent, rel), remote_reads.parse_shown)
        return text[:limit], clipped or len(text) > limit

    def search(self, term: str) -> list[memory.Hit]:
        # Exit 1 with an empty list: no hit, not a failure.
        return self._parsed(remote_reads.search_words(self.agent, term), remote_reads.parse_hits, ok=(0, 1))

    def edit_argv(self, rel: str, environ: Mapping[str, str]) -> list[str]:
        # That host's `loom memory edit`: its $VISUAL or $EDITOR, in this terminal over ssh -t.
        return ssh.terminal_argv(self.host, remote_reads.edit_words(self.agent, rel), state_dir=self.state_dir)
