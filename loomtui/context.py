"""What every command starts from: the validated config, the state directory, the store."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from loomtui.config import Config, load_config
from loomtui.store.db import Store
from loomtui.store.statedir import prepare_state_dir, resolve_state_dir


@dataclass
class Context:
    config: Config
    config_path: Path | None
    state_dir: Path
    _store: Store | None = field(default=None, repr=False)

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
        return cls(config, path, state_dir)

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store.in_dir(self.state_dir)
        return self._store

    def clone(self) -> Context:
        """The same config and state dir with a store connection of its own (one per thread of work)."""
        return Context(self.config, self.config_path, self.state_dir)

    @property
    def acks_dir(self) -> Path:
        return self.state_dir / "acks"

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
