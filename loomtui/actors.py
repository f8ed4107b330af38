"""Who acted: the operator (at the console, the CLI or Telegram) or the agent Loom supervises.

The agent runs as the operator's user, so nothing here is a security boundary: it is how a
command the agent runs from its own shell (with the LOOM_SESSION_ID Loom put there) is told
apart from the operator's, recorded as such, refused where the agent may not act, and reported
to the operator. A hold, release, recycle or inject carries its Actor into the ledger's detail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The operator's own hands: where a person typed the command.
# `ssh`: the operator's CLI on another machine, run here through `loom --host` (cli/remote.py).
OPERATOR_KINDS = frozenset(("tui", "cli", "telegram", "ssh"))
AGENT = "agent"
SSH = "ssh"


@dataclass(frozen=True)
class Actor:
    kind: str                    # tui, cli, telegram, agent; or the trigger itself (a loop, demo, test)
    user: int | None = None      # telegram: the sender's user id
    session: str | None = None   # agent: the session id it ran with
    agent: str | None = None     # agent: the agent whose pinned session that is
    origin: str | None = None    # ssh: the machine the command came from, as it names itself
    address: str | None = None   # ssh: the client's address and port, as sshd saw them (SSH_CONNECTION)

    @property
    def is_agent(self) -> bool:
        return self.kind == AGENT

    @property
    def is_operator(self) -> bool:
        return self.kind in OPERATOR_KINDS

    def detail(self) -> dict[str, Any]:
        """The ledger's fields for it: `actor`, and whose (a Telegram user, the agent's session)."""
        out: dict[str, Any] = {"actor": self.kind}
        if self.user is not None:
            out["actor_user"] = self.user
        if self.is_agent:
            out["actor_session"] = self.session
            out["actor_agent"] = self.agent
        if self.kind == SSH:
            out["actor_from"] = self.origin
            out["actor_address"] = self.address
        return out

    def describe(self) -> str:
        """Who, in a few words, for a message to the operator."""
        if self.is_agent:
            return f"the agent {self.agent}" if self.agent else "the agent"
        if self.kind == "telegram":
            return "Telegram" + (f" user {self.user}" if self.user is not None else "")
        if self.kind == "tui":
            return "the console"
        if self.kind == SSH:
            return f"the CLI over ssh from {self.origin}"
        return "the CLI" if self.kind == "cli" else self.kind


def of_source(source: str) -> Actor:
    """The actor a trigger stands for when nobody said more: the console's keys, a loop, a test."""
    return Actor(source)


def agent_session(session: str | None, pinned: dict[str, str | None]) -> Actor | None:
    """The agent, when `session` (the LOOM_SESSION_ID a command ran with) is the pinned session of
    one of the agents (`pinned`: each agent's name and pinned session); None otherwise. Every
    agent's, not only the one acted on: one agent holding another is the agent acting too."""
    if not session:
        return None
    for name, pin in pinned.items():
        if pin is not None and pin == session:
            return Actor(AGENT, session=session, agent=name)
    return None
