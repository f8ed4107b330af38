"""The driver `agent.driver` names: the one place that reads the key (config.py checks it).

Knows both drivers, so neither imports the other's maker: the stream driver builds on the tmux
driver, and the tmux driver's module knows nothing of it. Everyone else holds an `AgentDriver`
(agent/ports.py) and asks its capabilities. The stream driver (and the pump's socket client it
brings) is imported only for a config that names it: `loom status`, which every `loom hosts` runs
on each host, then starts without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loomtui.agent.driver import TmuxDriver
from loomtui.agent.ports import AgentDriver
from loomtui.config import Config

if TYPE_CHECKING:
    from loomtui.context import Context

STREAM_JSON = "stream-json"  # StreamJsonDriver.name (tests/unit/test_driver_protocol.py checks it)
DRIVERS = (TmuxDriver.name, STREAM_JSON)  # the names `agent.driver` may take


def driver_class(config: Config) -> type[AgentDriver]:
    """The class `agent.driver` names, for its capabilities where no driver is at hand (a report,
    a metric, a check of the config)."""
    return _named(config)


def capabilities(ctx: Context) -> AgentDriver | type[AgentDriver]:
    """What the context's driver can do (`owns_turns`, `has_dialogs`), without making one: the
    simulator's where it filled one in, else the class the config names."""
    return ctx.driver if ctx.driver is not None else driver_class(ctx.config)


def _named(config: Config) -> type[TmuxDriver]:
    # The stream driver is a TmuxDriver that runs the pump in the pane: both are made alike.
    if config.agent.driver == STREAM_JSON:
        from loomtui.agent.stream_driver import StreamJsonDriver

        return StreamJsonDriver
    return TmuxDriver


def make_driver(config: Config, state_dir: Path | None = None) -> AgentDriver:
    """The driver `agent.driver` names; every part of Loom gets its driver here.

    The stream-json driver reaches its pump through files in the state dir: without `state_dir`
    it still watches the pane, but reports no pump facts and refuses to deliver.
    """
    return _named(config)(config, state_dir)


def of(ctx: Context) -> AgentDriver:
    """The context's driver: the simulator's where it filled one in, else the config's, made now."""
    return ctx.driver if ctx.driver is not None else make_driver(ctx.config, ctx.agent_dir)
