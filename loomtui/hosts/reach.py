"""Since when a host has not answered: its first failure kept in this machine's store (a meta
key per host), so `loom hosts` says `unreachable since …` across runs, and forgets it at the
first answer. A host that does not answer is not a dead agent: nothing here says anything of its
agents."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loomtui.store import meta

if TYPE_CHECKING:
    from loomtui.store.db import Store

KEY = "host_unreachable:"


@dataclass(frozen=True)
class Unreachable:
    since: float   # wall time of the first failure in a row
    why: str       # the latest failure's reason (ssh's words, made printable)


def read(store: Store, host: str) -> Unreachable | None:
    raw = store.get_meta(KEY + host)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return Unreachable(float(data["since"]), str(data["why"]))
    except (ValueError, KeyError, TypeError):
        return None


def failed(store: Store, host: str, why: str, now: float) -> Unreachable:
    """Record a failure: the first in a row keeps its time, the reason is the latest."""
    with store.write() as db:
        before = meta.get_in(db, KEY + host)
        since = now
        if before:
            try:
                since = float(json.loads(before)["since"])
            except (ValueError, KeyError, TypeError):
                since = now
        meta.set_in(db, KEY + host, json.dumps({"since": since, "why": why}))
    return Unreachable(since, why)


def answered(store: Store, host: str) -> None:
    if store.get_meta(KEY + host) is not None:
        with store.write() as db:
            meta.delete_in(db, KEY + host)
