"""What the rest of Loom sees of the agent's driver: the look it returns (`AgentFacts`).

The concrete drivers are agent/driver.py (tmux) and agent/stream_driver.py (the pump in the pane);
agent/drivers.py makes one. This module imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from loomtui.agent.proctree import Tree
from loomtui.agent.tmux import PaneInfo
from loomtui.pump.facts import StreamFacts


@dataclass(frozen=True)
class AgentFacts:
    """One bounded-cost look at the agent. tmux is UP, GONE or UNKNOWN (no answer)."""

    tmux: str
    pane: PaneInfo | None = None
    tree: Tree | None = None
    why: str = ""
    stream: StreamFacts | None = None  # stream-json driver only: the pump's own account
    screen: str | None = None          # the live pane's visible screen, asked with the pane (observe(with_screen=True))
