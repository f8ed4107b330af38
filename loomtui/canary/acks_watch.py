"""The canary's acks directory, watched: the `DirWatch` port on this machine (watchfiles, inotify on
Linux). A probe reaches it through `watch_of(ctx)`, so `loom sim` can fill `ctx.watch` with its own
world's directory and the probe's real wait runs there on virtual time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import watchfiles

from loomtui import clock

if TYPE_CHECKING:
    from loomtui.agent.ports import DirWatch
    from loomtui.context import Context


class Watchfiles:
    """Wakes on a change in the directory and at least every 250 ms (the probe's deadline and the
    store are looked at then, an ack missed by the watch too), until `until` on clock.monotonic."""

    def changes(self, directory: Path, stop: threading.Event, until: float) -> Iterator[None]:
        events = watchfiles.watch(directory, stop_event=stop, rust_timeout=250, yield_on_timeout=True,
                                  debounce=20, step=10, raise_interrupt=False)
        with closing(events):
            for _ in events:
                yield None
                if clock.monotonic() >= until:
                    return


MACHINE = Watchfiles()


def watch_of(ctx: Context) -> DirWatch:
    """The context's directory watch: the simulator's where it filled one in, else this machine's."""
    return ctx.watch if ctx.watch is not None else MACHINE
