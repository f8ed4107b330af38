"""What every command starts from: the validated config, the state directory, the store.

A Context is one agent's: its config view (`config.agent`, `.watchdog`, `.canary`, `.memory` are
that agent's), its directory for the files that are its own (acks, locks, the pump, the pinned
session's sidecar: the state dir itself for `main`, `agents/NAME/` under it for another) and a
store whose writes are filed under its name. The store itself is one, shared by every agent.

It also carries the ports to the machine around the agent: its driver (tmux and the pane), the
process table, signals and a directory watch. None, as the daemon and every command leave them,
means the real machine (`drivers.of`, `proctree.of`, `kill.of`, `acks_watch.watch_of`); `loom sim`
fills them with its simulated world, and every copy of a Context (`clone`, `for_agent`) keeps them.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from loomtui.config import Config, load_config
from loomtui.store.db import Store
from loomtui.store.statedir import agent_dir, prepare_agent_dir, prepare_state_dir, resolve_state_dir

if TYPE_CHECKING:
    from loomtui.agent.ports import AgentDriver, DirWatch, Processes, Signals


@dataclass
class Context:
    config: Config
    config_path: Path | None
    state_dir: Path
    _store: Store | None = field(default=None, repr=False)
    # The machine's ports (None: the real one; the simulator's world otherwise).
    driver: AgentDriver | None = field(default=None, repr=False)
    processes: Processes | None = field(default=None, repr=False)
    signals: Signals | None = field(default=None, repr=False)
    watch: DirWatch | None = field(default=None, repr=False)
    # A write waits for a lock another connection holds on loomtui.clock, not in SQLite's busy
    # wait (Store's `waits_on_clock`): the simulator's, whose clock is virtual.
    store_waits_on_clock: bool = field(default=False, repr=False)

    def _ports(self) -> dict:
        return {"processes": self.processes, "signals": self.signals, "watch": self.watch,
                "store_waits_on_clock": self.store_waits_on_clock}

    @property
    def agent(self) -> str:
        return self.config.agent_name

    @property
    def agent_dir(self) -> Path:
        return agent_dir(self.state_dir, self.agent)

    def for_agent(self, name: str) -> Context:
        """The context of agent `name` (KeyError when the config has no such agent), with its own
        store connection; its directory is made when first asked for, private like the state dir."""
        # Another agent's driver is its own pane: the simulated one is filled in per agent by the simulator.
        ctx = Context(self.config.for_agent(name), self.config_path, self.state_dir,
                      driver=self.driver if name == self.agent else None, **self._ports())
        if ctx.agent_dir != self.state_dir:
            prepare_agent_dir(ctx.agent_dir)
        return ctx

    def agents(self) -> list[Context]:
        return [self.for_agent(name) for name in self.config.agent_names]

    @classmethod
    def load(
        cls,
        config_arg: str | None = None,
        state_dir_arg: str | None = None,
        environ: dict[str, str] | None = None,
        *,
        prepare: bool = True,
    ) -> Context:
        """Config errors raise ConfigError; an unusable state dir raises StateDirError."""
        env = dict(os.environ) if environ is None else environ
        config, path = load_config(config_arg, env)
        state_dir = resolve_state_dir(state_dir_arg, config, env)
        if prepare:
            prepare_state_dir(state_dir)
        ctx = cls(config, path, state_dir)
        if prepare and ctx.agent_dir != state_dir:
            prepare_agent_dir(ctx.agent_dir)
        return ctx

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store.in_dir(self.state_dir, agent=self.agent, agent_dir=self.agent_dir,
                                       waits_on_clock=self.store_waits_on_clock)
        return self._store

    def clone(self) -> Context:
        """The same config and state dir with a store connection of its own (one per thread of work)."""
        return Context(self.config, self.config_path, self.state_dir, driver=self.driver, **self._ports())

    @property
    def acks_dir(self) -> Path:
        return _acks_dir(self.agent_dir)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


@functools.lru_cache(maxsize=256)
def _acks_dir(agent_dir: Path) -> Path:
    """Made once per agent directory (the canary asks at every look; a Path is immutable)."""
    return agent_dir / "acks"
