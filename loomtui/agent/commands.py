"""The agent's command line, rendered from the operator's template: what a relaunch runs.

Rendering is no action (only launch.py runs the result, under recycle.lock); the simulator renders
the resume template too, to know a resume from a fresh start as the CLI would by its flags.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from loomtui.context import Context
from loomtui.hooks.settings import settings_path


def memory_index_path(ctx: Context) -> Path:
    return ctx.config.memory.dir / ctx.config.memory.index


def render_command(ctx: Context, template: str, session_id: str) -> str:
    # The session id is a uuid we minted or pinned; paths can hold anything, so they are quoted.
    return template.format(
        session_id=session_id,
        memory_index=shlex.quote(str(memory_index_path(ctx))),
        # The agent's own directory: `--add-dir {state_dir}/acks` is its acks dir (the state dir for main).
        state_dir=shlex.quote(str(ctx.agent_dir)),
        # Loom's own hooks settings for this agent (`--settings {hook_settings}`), written before
        # each launch (launch.relaunch_locked): never the operator's own settings file.
        hook_settings=shlex.quote(str(settings_path(ctx.agent_dir))),
    )
