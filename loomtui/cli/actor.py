"""Who runs this `loom` command: the operator at the CLI, or the agent from its own shell.

Loom puts LOOM_SESSION_ID in the agent's pane (agent/launch.py); `loom resolve` already reads it
to name the session of a claim (sentinel/queue.py:claimer_session). A command run with the
pinned session of one of the agents is that agent's, and is recorded and treated as such.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from loomtui.actors import AGENT, SSH, Actor, agent_session

if TYPE_CHECKING:
    from loomtui.context import Context


def source_of(args: argparse.Namespace | None) -> str:
    """The ledger's `source` for this command: `ssh` when another machine's `loom --host` ran it
    (`--via-ssh`, honoured only inside an ssh session: cli.remote.check_via), else `cli`."""
    return SSH if args is not None and getattr(args, "via_ssh", None) else "cli"


def of_cli(ctx: Context, args: argparse.Namespace | None = None, environ: Mapping[str, str] | None = None) -> Actor:
    """The agent whose pinned session this command runs with (or ran once), else the operator over
    ssh (`source_of`), else the operator at the CLI. The agent first: its pane may well hold an
    SSH_CONNECTION (tmux copies it from an operator's ssh session into the panes it starts), and
    `--via-ssh` must not make its command the operator's (`agent.may_hold`)."""
    from loomtui.sentinel.queue import claimer_session
    from loomtui.store.db import agent_key
    from loomtui.store.session import KEY

    session = claimer_session(None if environ is None else dict(environ))
    if session:
        pinned = {name: ctx.store.get_meta(agent_key(KEY, name)) for name in ctx.config.agent_names}
        agent = agent_session(session, pinned) or _once_pinned(ctx, session)
        if agent is not None:
            return agent
    if args is not None and source_of(args) == SSH:
        env = os.environ if environ is None else environ
        client = env.get("SSH_CONNECTION", "").split()
        return Actor(SSH, origin=args.via_ssh, address=" ".join(client[:2]) or None)
    return Actor("cli")


def _once_pinned(ctx: Context, session: str) -> Actor | None:
    """The agent a session belonged to before its pin changed (a fresh relaunch, a salvage that
    found no pin): a session Loom ever launched is an agent's, never the operator's."""
    from loomtui.store import ledger

    agent = ledger.relaunched_agent(ctx.store, session)
    return Actor(AGENT, session=session, agent=agent) if agent is not None else None
