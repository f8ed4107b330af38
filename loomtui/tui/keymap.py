"""Every key of the console as data: one Binding with an id each, so the footer, the help screen,
the command palette and a remapping all read the same table."""

from __future__ import annotations

from textual.binding import Binding

TABS = [("agent", "Agent"), ("canary", "Canary"), ("queue", "Queue"), ("fleet", "Fleet"), ("memory", "Memory"),
        ("timeline", "Timeline")]

APP_KEYS: list[Binding] = [
    Binding("c", "canary", "Canary", id="loom.canary", tooltip="Send a liveness probe now (or join the one in flight)"),
    Binding("r", "recycle", "Recycle", id="loom.recycle", tooltip="Relaunch the agent: resume the pinned session or start fresh"),
    Binding("i", "inject", "Inject", id="loom.inject", tooltip="Type one line into the agent's pane"),
    Binding("d", "resolve", "Resolve", id="loom.resolve", tooltip="Resolve the selected queue item with a note"),
    Binding("a", "attach", "Attach", id="loom.attach", tooltip="Attach to the agent's tmux pane (detach to come back)"),
    Binding("h", "hold", "Hold", id="loom.hold",
            tooltip="Hold Loom's own hands (relaunch, reap, modal, nudge) with a reason, or release the hold"),
    Binding("p", "plots", "Plots", id="loom.plots",
            tooltip="The plots (canary latency, relaunches per hour, oldest queue item) and the numbers they draw"),
    Binding("slash", "filter", "Search", id="loom.filter",
            tooltip="Search: the memory when its panel is shown, else filter the timeline (kind:NAME text)"),
    Binding("g", "agents", "Agents", id="loom.agents",
            tooltip="The agents view: every agent at a glance; Enter selects one for every panel and key"),
    Binding("n", "next_agent", "Next agent", id="loom.next_agent",
            tooltip="Select the next agent: every panel and key is then about it"),
    Binding("o", "hosts", "Hosts", id="loom.hosts",
            tooltip="The hosts view ([[hosts]]): every host's agents over ssh; Enter on another host's agent "
                    "makes c, r and h act there"),
    Binding("question_mark", "help", "Help", id="loom.help", tooltip="Every key and what it does"),
    Binding("q", "app.quit", "Quit", id="loom.quit", tooltip="Quit the console (supervision keeps running)"),
] + [
    # "… tab": in the palette the Canary tab is not the canary probe (`c`), both once named "Canary".
    Binding(str(n), f"show_tab('{tab}')", f"{title} tab", id=f"loom.tab.{tab}", show=False,
            tooltip=f"Jump to the {title} panel" + (" (the overview, at 150 columns and more)" if tab == "agent" else ""))
    for n, (tab, title) in enumerate(TABS, start=1)
]
OVERVIEW_TITLE = "Overview"  # tab 1's title from 150 columns on, where the pane moves to the right
OVERVIEW_TAB = (f"{OVERVIEW_TITLE} tab",
                "Jump to the overview: plots, latest incidents, the queue, the fleet (the agent's pane is on the right)")


def described(binding: Binding, wide: bool) -> tuple[str, str]:
    """A key's description and tooltip as the screen is laid out now: tab 1 is the overview when
    wide, so help and the palette say what the tab itself reads."""
    if wide and binding.id == "loom.tab.agent":
        return OVERVIEW_TAB
    return binding.description, binding.tooltip
