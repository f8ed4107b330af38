"""Which source tells an agent's turns: its hooks, its stream-json pump, or none (one per agent,
never both: docs/HOOKS.md). Apart from hooks/turns, which reads them, so that a caller that only
asks whether any turn is known (`loom status`, which `loom hosts` runs on every host) loads none
of the readers for an agent that has neither."""

from __future__ import annotations

from loomtui.agent.drivers import capabilities
from loomtui.context import Context
from loomtui.states import passes_hook_settings

HOOKS, PUMP = "hooks", "pump"


def of(ctx: Context) -> str | None:
    """The hooks where the agent's commands pass `{hook_settings}`; else the pump where its driver
    runs one (the simulator's driver, where it filled one in, has none); else None."""
    agent = ctx.config.agent
    if passes_hook_settings(agent.fresh_command, agent.resume_command):
        return HOOKS
    return PUMP if capabilities(ctx).owns_turns else None
