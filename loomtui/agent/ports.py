"""What the rest of Loom sees of the agent's driver: `AgentDriver`, and the look it returns.

Callers hold an `AgentDriver` and decide by its capabilities, never by which class or name it is
(tests/unit/test_architecture.py greps for that). The concrete drivers are agent/driver.py (tmux)
and agent/stream_driver.py (the pump in the pane); agent/drivers.py makes one. This module
imports neither.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from loomtui.agent.proctree import Tree
from loomtui.agent.tmux import PaneInfo

if TYPE_CHECKING:  # annotations only: the tmux driver's users never load the pump's types
    from loomtui.pump.facts import Delivery, StreamFacts


@dataclass(frozen=True)
class AgentFacts:
    """One bounded-cost look at the agent. tmux is UP, GONE or UNKNOWN (no answer)."""

    tmux: str
    pane: PaneInfo | None = None
    tree: Tree | None = None
    why: str = ""
    stream: StreamFacts | None = None  # stream-json driver only: the pump's own account
    screen: str | None = None          # the live pane's visible screen, asked with the pane (observe(with_screen=True))


# What `type_line` and `send_keys` are told to expect when the agent had no live pane as the asker
# looked (dead, gone, or tmux not answering): nothing is typed, whatever pane is there by the
# time the line's turn comes (a relaunch meanwhile: the new agent, perhaps booting, is not the one
# the line was meant for). None would skip that check, and the line went into the new agent.
NOT_LIVE = -1


@runtime_checkable
class AgentDriver(Protocol):
    """The agent as its callers use it: exactly the members they call, and two capabilities.

    Capabilities are class attributes, so a caller with only a config asks
    `drivers.driver_class(config)` without making a driver.
    """

    # The config's spelling (`agent.driver`): said in `loom status`, never decided on.
    name: ClassVar[str]
    # The CLI draws its dialogs on the screen (modals, permission prompts): the watchdog looks for
    # them and presses keys. Without: no dialog exists (permissions come from the command's
    # flags), the screen may quote a dialog's words harmlessly, and `send_keys` refuses.
    has_dialogs: ClassVar[bool]
    # A pump stands between Loom and the CLI: it knows when a turn runs, queues a line behind it
    # and answers each with a `Delivery`, writes pump.json (`stream_facts`) and a transcript, and
    # records each turn's result, denied tool calls among them. Without: the screen is all there is.
    owns_turns: ClassVar[bool]

    def observe(self, *, with_screen: bool = False) -> AgentFacts: ...

    def stream_facts(self, pane_pid: int | None) -> StreamFacts | None: ...

    def screen(self, history: bool | int = False, *, ansi: bool = False, pane_id: str | None = None) -> str: ...

    def pane_info(self) -> PaneInfo | None: ...

    def pane_pid(self) -> int | None:
        """The live pane's process, or None: no pane, a dead pane, or tmux not answering (never raises:
        inject reads it before its lock, outside the typing's own error handling)."""
        ...

    def type_line(self, text: str, expect_pane_pid: int | None = None, *, origin: str = "operator",
                  ref: str = "") -> Delivery | None: ...

    def send_keys(self, keys: list[str], expect_pane_pid: int | None = None) -> None: ...

    def stop(self, grace: float, recorded: dict | None = None) -> list[int]: ...

    def server_running(self) -> bool: ...

    def server_pid(self) -> int | None: ...

    def launch(self, command: str, cwd: Path, env: dict[str, str], exit_signal: Path | None = None) -> PaneInfo: ...

    def attach_argv(self) -> list[str]: ...

    def restore_size(self) -> None:
        """The agent's window back at its configured size (after an operator's attach)."""
        ...


# -- the machine around the agent: ports the daemon leaves to the real thing (a Context's field
# None) and the simulator fills with its world -----------------------------------------------


@runtime_checkable
class Processes(Protocol):
    """The process table, read: what agent/proctree.py does on the machine (`proctree.MACHINE`)."""

    def inspect(self, root: int, process_match: str, poller_match: str = "") -> Tree: ...

    def walk(self, root: int) -> tuple[list[int], dict[int, int]]: ...

    def foreign_pollers(self, poller_match: str, tree: set[int]) -> list[tuple[int, str]]: ...

    def cmdline(self, pid: int) -> str: ...

    def ancestors(self, pid: int) -> set[int]: ...

    def name(self, pid: int) -> str: ...

    def start_time(self, pid: int) -> float | None: ...

    def alive_as(self, pid: int | None, started: float | None) -> bool: ...

    def alive_since(self, pid: int | None, started: float | None, wall_started: float) -> bool: ...


@runtime_checkable
class Signals(Protocol):
    """Ending processes and asking tmux for its socket: agent/kill.py on the machine (`kill.MACHINE`),
    reached only through the actions module."""

    def end(self, pids: list[int], grace: float) -> list[int]: ...

    def recreate_socket(self, server_pid: int) -> None: ...


@runtime_checkable
class DirWatch(Protocol):
    """A directory watched for new files (the canary's acks): watchfiles on the machine."""

    def changes(self, directory: Path, stop: threading.Event, until: float) -> Iterator[None]:
        """Yield when something in `directory` changes, and at `until` (clock.monotonic) at the latest;
        raise OSError or RuntimeError when it cannot be watched. The caller breaks out when done."""
        ...
