"""Every host's agents at once, this machine's own first (`local`): what `loom hosts` prints and
the console's hosts view shows. The hosts are asked in threads (hosts/gather.py) while this
machine's agents are read, as a host's would be, from the one status model."""

from __future__ import annotations

from collections.abc import Callable

from loomtui.config import LOCAL_HOST
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.hosts import gather, view
from loomtui.report import status as status_mod


def views(ctx: Context, now: Callable[[], float]) -> list[view.HostView]:
    hosts = ctx.config.hosts
    with gather.pool_for(hosts) as pool:
        asked = gather.ask_all(pool, hosts, ctx.state_dir)
        try:
            local = view.HostView(LOCAL_HOST, tuple(view.agent_row(s.as_agent_json())
                                                    for s in status_mod.gather_all(ctx, events=0, now=now())))
        except LoomError as exc:  # this machine's store locked or damaged: its own line says so, the hosts still show
            local = view.HostView(LOCAL_HOST, error=" ".join(str(exc).split()))
        replies = [f.result() for f in asked]
    at = now()
    try:
        store = ctx.store
    except LoomError:  # said on this machine's own line; the hosts are shown all the same
        store = None
    return [local, *(gather.host_view(store, reply, at) for reply in replies)]
