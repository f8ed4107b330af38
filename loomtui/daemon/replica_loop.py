"""The replica's loop in the daemon: one per replicated work tree (memory/replica.py `targets`).

Each tick looks at the tree (git status: local, milliseconds) and does what `replica_rules` says is
due: a commit once the directory has been still for `sync_quiet`, a pull with rebase at start and
every `pull_interval`, a push of what the remote has not got, the ledger's head checkpointed every
`ledger.checkpoint_interval` and at once after an escalation. Every git call ends within
`memory.git_timeout`; a remote that hangs costs this loop's tick that long, never another loop's.
A conflict becomes a queue item for the agent; a claimed one is witnessed once its copy is gone
and pushed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from loomtui.context import Context
from loomtui.errors import LockHeld
from loomtui.memory import replica as rep

log = logging.getLogger("loom.replica")

PERIOD_MAX = 10.0


def period(target: rep.Target) -> float:
    """How often the loop looks: often enough that a quiet period ends on time, at most PERIOD_MAX."""
    return max(min(target.memory.sync_quiet / 2, PERIOD_MAX), 0.5)


def replica_tick(target: rep.Target) -> Callable[[Context, threading.Event], Callable[[], object]]:
    def make(ctx: Context, halt: threading.Event) -> Callable[[], object]:
        first = [True]

        def step() -> object:
            try:
                outcome, _ = rep.sync_once(ctx.store, target, starting=bool(first), lock_timeout=0)
            except LockHeld:
                return None  # `loom memory sync` is at it: the next tick looks again
            first.clear()
            for line in outcome.lines():
                log.info("%s: %s", target.name, line)
            return outcome

        return step

    return make
