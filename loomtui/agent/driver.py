"""The agent behind a driver interface: launch, type, observe, stop.

`TmuxDriver` wraps an interactive CLI in a tmux pane; all tmux specifics stay inside it.
`StreamJsonDriver` (agent/stream_driver.py) builds on it: it runs `loom pump` in the same pane and
owns the CLI's message pump instead. `agent/drivers.py:make_driver` picks one from `agent.driver`;
this module never imports the stream driver (it imports this one).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from loomtui.agent import kill, proctree
from loomtui.agent.ports import NOT_LIVE, AgentFacts
from loomtui.agent.tmux import AgentPane, PaneInfo, TmuxError, TmuxGone, TmuxTimeout
from loomtui.config import AgentConfig, Config, legacy_socket
from loomtui.errors import LoomError
from loomtui.states import GONE, MAIN_AGENT, UNKNOWN, UP  # noqa: F401  (re-exported: callers say driver.UP)
from loomtui.store.session import SIDECAR
from loomtui.store.statedir import agent_dir as agent_dir_of

if TYPE_CHECKING:  # annotations only (the stream driver, which returns them, loads them)
    from loomtui.pump.facts import Delivery, StreamFacts


SOCKET_FILE = "tmux-socket"  # in the agent's directory: the socket of its last launch


def socket_in_use(agent_dir: Path | None, configured: str) -> str:
    """The socket the agent was last launched on (its directory's socket file); with none, the
    configured one, or, where an older Loom launched it (a pinned session and no socket file), the
    socket that Loom used (config.legacy_socket). Every process reads the same file, so a daemon
    follows a relaunch that another process made onto a new socket."""
    if agent_dir is None:
        return configured
    try:
        name = (agent_dir / SOCKET_FILE).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        name = ""
    except (OSError, UnicodeDecodeError):
        name = ""  # unreadable: as if there were none (the next launch writes it again)
    if name and re.fullmatch(r"[A-Za-z0-9_-]+", name):
        return name
    if (agent_dir / SIDECAR).exists():
        return legacy_socket(configured)
    return configured


def record_socket(agent_dir: Path | None, socket: str) -> None:
    """Say which socket the agent now runs on (atomically: a reader sees the old name or the new)."""
    if agent_dir is None:
        return
    path = agent_dir / SOCKET_FILE
    tmp = path.with_name(f".{SOCKET_FILE}.{os.getpid()}")
    try:
        tmp.write_text(socket + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise LoomError(f"cannot record the agent's tmux socket in {path}: {exc.strerror or exc}") from None


class TmuxDriver:
    """An interactive CLI on a screen: it draws dialogs, and nothing but the screen tells its turns."""

    name: ClassVar[str] = "tmux"
    has_dialogs: ClassVar[bool] = True
    owns_turns: ClassVar[bool] = False

    def __init__(self, config: Config, agent_dir: Path | None = None) -> None:
        self.agent: AgentConfig = config.agent
        token_env = config.telegram.token_env
        self._env_drop: tuple[str, ...] = (token_env,) if token_env else ()
        self.agent_dir = agent_dir
        self._panes: dict[str, AgentPane] = {}

    @property
    def socket(self) -> str:
        """The tmux socket the agent runs on now (socket_in_use): every look and key goes there."""
        return socket_in_use(self.agent_dir, self.agent.tmux_socket)

    @property
    def pane(self) -> AgentPane:
        return self._pane_on(self.socket)

    def _pane_on(self, socket: str) -> AgentPane:
        pane = self._panes.get(socket)
        if pane is None:
            pane = self._panes[socket] = AgentPane(socket, self.agent.session, width=self.agent.width,
                                                   height=self.agent.height, env_drop=self._env_drop)
        return pane

    def observe(self, *, with_screen: bool = False) -> AgentFacts:
        """One look. `with_screen`: the live pane's visible screen too (what `screen()` gives), in the
        same tmux call: where each call is a process, a look that reads the screen costs one, not two."""
        pane = self.pane  # one socket for the whole look, even if a relaunch moves the agent meanwhile
        try:
            info, screen = pane.look() if with_screen else (pane.info(), None)
        except TmuxTimeout as exc:
            return AgentFacts(UNKNOWN, why=str(exc))
        except TmuxError as exc:
            return AgentFacts(UNKNOWN, why=str(exc))
        if info is None:
            return AgentFacts(GONE, why="no tmux session")
        if info.dead:
            info = self._settled(pane, info)
            how = f"signal {info.dead_signal}" if info.dead_signal else f"status {info.dead_status}"
            return AgentFacts(UP, info, None, why=f"the pane's process exited ({how})")
        tree = proctree.inspect(info.pane_pid, self.agent.process_match, self.agent.poller_match)
        return AgentFacts(UP, info, tree, tree.why, screen=screen)

    def _settled(self, pane: AgentPane, info: PaneInfo, wait: float = 0.3) -> PaneInfo:
        # tmux marks a pane dead when its pty closes and learns the exit status when it reaps
        # the process, a moment later (and tmux 3.3a sometimes never does); ask again briefly.
        deadline = time.monotonic() + wait
        while info.dead_status is None and info.dead_signal is None and time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                again = pane.info()
            except TmuxError:
                break
            if again is None or again.pane_id != info.pane_id or not again.dead:
                break
            info = again
        return info

    def stream_facts(self, pane_pid: int | None) -> StreamFacts | None:
        """What a pump knows about the CLI: nothing here, a screen has no pump."""
        return None

    def screen(self, history: bool | int = False, *, ansi: bool = False, pane_id: str | None = None) -> str:
        return self.pane.capture(history=history, ansi=ansi, pane_id=pane_id)

    def pane_info(self) -> PaneInfo | None:
        """The agent's pane as tmux reports it now (None: no such pane); raises TmuxError if tmux does not answer."""
        return self.pane.info()

    def pane_pid(self) -> int | None:
        """The live pane's process now, or None (no pane, dead pane, or tmux not answering)."""
        try:
            info = self.pane.info()
        except TmuxError:
            return None
        return info.pane_pid if info is not None and not info.dead else None

    def _live(self, expect_pane_pid: int | None) -> tuple[AgentPane, PaneInfo]:
        """The live pane and the socket it was found on: what follows acts there (a pane id names a
        pane on one server only)."""
        pane = self.pane
        info = pane.info()
        if info is None:
            raise TmuxGone("the agent's pane does not exist")
        if info.dead:
            raise TmuxGone("the agent's pane is dead (its process exited)")
        if expect_pane_pid == NOT_LIVE:
            raise TmuxGone("the agent's pane was not live when this was asked (dead, or tmux did not answer); "
                           "not typed into the one there now")
        if expect_pane_pid is not None and info.pane_pid != expect_pane_pid:
            # Meant for the agent that was there when asked; this one is new and may be booting.
            raise TmuxGone("the agent was relaunched while this waited for its turn; not typed")
        return pane, info

    def type_line(self, text: str, expect_pane_pid: int | None = None, *, origin: str = "operator",
                  ref: str = "") -> Delivery | None:
        """Paste `text` and press Enter in the live pane; raises TmuxError if it is not there throughout.
        (`origin` and `ref` matter to the pump only: a screen cannot tell whose line it was.)"""
        pane, before = self._live(expect_pane_pid)
        buffer = f"loom-{os.getpid()}-{os.urandom(4).hex()}"
        pane.paste(before.pane_id, text, buffer)
        # A pane that died or was replaced while the text went in may have swallowed it: say so,
        # do not guess. (After Enter the agent may exit on purpose, e.g. on /exit0: not a failure.)
        mid = pane.info()
        if mid is None or mid.dead or (mid.pane_id, mid.pane_pid) != (before.pane_id, before.pane_pid):
            raise TmuxGone("the agent's pane died or was replaced during the injection")
        pane.send_key(before.pane_id, "Enter")
        return None  # a screen has no delivery to report (the pump's driver does)

    def send_keys(self, keys: list[str], expect_pane_pid: int | None = None) -> None:
        pane, info = self._live(expect_pane_pid)
        for key in keys:
            pane.send_key(info.pane_id, key)

    def stop(self, grace: float, recorded: dict | None = None) -> list[int]:
        """End the pane's whole process tree; returns pids that would not die.

        With no pane to ask (tmux gone), the pane process we recorded at launch is ended if it
        still runs: a new agent must never start beside an old one that lost its terminal.
        """
        info = self.pane.info()
        if info is not None and info.dead:
            # The pane's process is gone, what it left in its session may not be: a pump SIGKILLed
            # leaves its CLI running the turn on (a new one resuming the conversation beside it),
            # a CLI the plugins that poll its bot. Ended as the tree is, children first.
            left = self._left_by(info.pane_pid)
            return kill.end_processes(list(reversed(left)), grace) if left else []
        if info is not None:
            root = info.pane_pid
        elif recorded and proctree.alive_as(recorded.get("pane_pid"), recorded.get("pane_started")):
            # tmux lost the pane (or its server), but the agent it ran may live on: end it first.
            root = int(recorded["pane_pid"])
        else:
            return []
        pids = None
        for _ in range(3):
            try:
                pids, _ = proctree.walk(root)
                break
            except proctree.Ambiguous:
                time.sleep(0.05)  # a child that vanished mid-walk: look again
        if pids is None:
            pids = proctree.session_members(root)
        # Children first, so a shell does not respawn or reap-and-restart what we just killed.
        return kill.end_processes(list(reversed(pids)), grace, last=self._ends_last(root),
                                  last_grace=self.LAST_GRACE)

    def _left_by(self, pane_pid: int) -> list[int]:
        """What the dead pane's process left in its session that is this agent's: a process in the
        environment Loom launched the agent with, and what it started there (an MCP server or a
        plugin started with a pared-down environment), in pid order."""
        left = proctree.left_in_session(pane_pid)
        ours = {pid for pid in left if self._launched_here(pid)}
        for pid in sorted(ours):
            try:
                tree, _ = proctree.walk(pid)
            except proctree.Ambiguous:
                continue
            ours.update(tree)
        return [pid for pid in left if pid in ours]

    def _launched_here(self, pid: int) -> bool:
        """Whether the process runs in the environment Loom launched this agent with (its state
        dir and agent name, launch.agent_env): a pane's leftover, not a stranger that came to share
        its session's number. (A pane launched before agents had names has no LOOM_AGENT: main.)"""
        env = proctree.environ(pid)
        if env is None or self.agent_dir is None:
            return False
        state = env.get("LOOM_STATE_DIR")
        if not state:
            return False
        mine = agent_dir_of(Path(state), env.get("LOOM_AGENT") or MAIN_AGENT)
        try:
            return os.path.samefile(mine, self.agent_dir)  # however each spelled it (a symlink, `..`)
        except OSError:
            return os.path.normpath(mine) == os.path.normpath(self.agent_dir)

    LAST_GRACE: ClassVar[float] = 0.0

    def _ends_last(self, root: int) -> tuple[int, ...]:
        """The processes of the tree at `root` that end by themselves once the rest have (none
        here: the stream-json driver's pump)."""
        return ()

    def server_running(self) -> bool:
        """Whether Loom's tmux server answers on its socket."""
        return self.pane.server_running()

    def server_pid(self) -> int | None:
        pane = self.pane
        result = pane.server.cmd("display-message", "-p", "#{pid}", target=pane.target)
        text = result.stdout[0].strip() if result.returncode == 0 and result.stdout else ""
        return int(text) if text.isdigit() else None

    def launch(self, command: str, cwd: Path, env: dict[str, str], exit_signal: Path | None = None) -> PaneInfo:
        """Start `command` in the pane on the configured socket; with `exit_signal`, tmux writes that
        file when it exits. An agent that ran on another socket (an older Loom's default, or before
        the operator changed it) was stopped by the relaunch: its session there is closed, and the
        socket file says where the agent runs from now on."""
        before, pane = self.pane, self._pane_on(self.agent.tmux_socket)
        if before is not pane:
            try:
                before.end_session()
            except TmuxError:
                pass  # a server that does not answer keeps a dead session at worst: never a second agent
        if not pane.ensure_session(cwd):
            try:
                pane.restore_size()  # someone's attach may have left it at their terminal's size
            except TmuxError:
                pass  # drawn at the size it has: never a reason not to launch
        if exit_signal is not None:
            try:
                pane.watch_exit(exit_signal)
            except TmuxError:
                pass  # the exit poll still notices; the hook only makes it sooner
        info = pane.respawn(command, cwd, env)
        record_socket(self.agent_dir, pane.socket)
        return info

    def attach_argv(self) -> list[str]:
        return self.pane.attach_argv()

    def restore_size(self) -> None:
        self.pane.restore_size()
