"""The agent's pane as a look sees it: whether tmux has it, its screen (with its scrollback), and
why not. What the console's pane shows and what `loom pane --json` prints (another host's console
reads that). The text is untrusted: whoever shows it makes it safe for a terminal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loomtui.agent.driver import UNKNOWN, UP  # noqa: F401  (UP: callers say pane.UP)
from loomtui.agent.ports import AgentDriver
from loomtui.agent.proctree import PRESENT
from loomtui.agent.tmux import TmuxError

DEAD = "dead"
STATES = (UP, "gone", UNKNOWN, DEAD)


@dataclass(frozen=True)
class PaneLook:
    state: str      # up / gone / unknown / dead
    text: str = ""  # the captured screen (with its ANSI escapes where asked)
    why: str = ""   # why there is no pane, how its process ended, or what is odd about it

    def as_json(self) -> dict[str, Any]:
        return {"state": self.state, "text": self.text, "why": self.why}


def look(driver: AgentDriver, history: int, *, ansi: bool = True, capture: bool = True) -> PaneLook:
    """One look at the pane, its screen and `history` lines above it (joined where tmux wrapped
    them) unless `capture` is false."""
    try:
        facts = driver.observe()
    except TmuxError as exc:
        return PaneLook(UNKNOWN, why=str(exc))
    if facts.tmux != UP or facts.pane is None:
        return PaneLook(facts.tmux, why=facts.why or "no tmux session")
    try:
        screen = driver.screen(history, ansi=ansi, pane_id=facts.pane.pane_id) if capture else ""
    except TmuxError as exc:
        return PaneLook(UNKNOWN, why=str(exc))
    if facts.pane.dead:
        return PaneLook(DEAD, screen, facts.why)
    agent = facts.tree.agent if facts.tree else UNKNOWN
    return PaneLook(UP, screen, "" if agent == PRESENT else f"agent process {agent}")
