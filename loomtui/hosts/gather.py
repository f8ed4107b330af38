"""Every host asked at once for its agents, and each answer read as a `HostView`: what `loom hosts`
and the console's hosts view show. This machine's own agents are the caller's (its status model
is an entry point's, above this layer)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from loomtui.errors import LoomError
from loomtui.hosts import reach, ssh, view

if TYPE_CHECKING:
    from loomtui.config import HostConfig
    from loomtui.store.db import Store

MAX_AT_ONCE = 16  # ssh processes at once: twenty hosts cost two round trips of the slowest, not twenty


def ask_all(pool: ThreadPoolExecutor, hosts: Sequence[HostConfig], state_dir: Path) -> list[Future[ssh.Reply]]:
    """Each host's `loom status --json --list`, started in `pool`, each within its host's `timeout`."""
    return [pool.submit(ssh.run, h, view.STATUS_WORDS, state_dir=state_dir, timeout=h.timeout) for h in hosts]


def pool_for(hosts: Sequence[HostConfig]) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=max(1, min(MAX_AT_ONCE, len(hosts))), thread_name_prefix="loom-hosts")


def host_view(store: Store | None, reply: ssh.Reply, now: float) -> view.HostView:
    """A host's answer as its view: unreachable since its first failure in a row (kept in `store`;
    None, or a store that fails: this machine's is unusable, and it is since this look), its Loom's
    failure, or its agents."""
    if not reply.reached:
        since = reach.Unreachable(now, reply.reason)
        if store is not None:
            with contextlib.suppress(LoomError):  # the first failure in a row, where the store can keep it
                since = reach.failed(store, reply.host, reply.reason, now)
        return view.HostView(reply.host, unreachable=since)
    if store is not None:
        with contextlib.suppress(LoomError):  # kept when the store can; the answer is shown either way
            reach.answered(store, reply.host)
    if reply.code != 0:
        return view.HostView(reply.host, error=f"loom exited {reply.code}: {ssh.last_line(reply.stderr)}")
    try:
        return view.HostView(reply.host, view.parse_status(reply.stdout))
    except ValueError as exc:  # json.JSONDecodeError is one
        return view.HostView(reply.host, error=f"not the status JSON expected ({str(exc)[:100]})")
