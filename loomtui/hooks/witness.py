"""The dispatch witness, run by the daemon's hooks loop: the lines Loom typed (the ledger), the
prompts the agent's hook reported (hook_events), matched by witness_rules; a line unmatched past
`agent.dispatch_timeout` is recorded as `dispatch_missing`, once. The caller rings the canary: a
probe at once is all a missing dispatch ever causes (canary.loop asks `line_calling_for_probe`).

A line typed into a turn still busy (or waiting for permission) is queued by the CLI behind it
(hooks.turns.explains): it is not missing while that turn runs, and its timeout starts again when
the turn is seen ended, since the CLI takes the queued line only then (a held line's timeout is
started again at every look while the turn holds it, so it has the whole of it from the turn's end).
A line once dispatched is settled, also while an older one keeps the witness reading from before it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace

from loomtui import clock
from loomtui.canary.runs import last_probe
from loomtui.context import Context
from loomtui.hooks.ingest import SOURCE
from loomtui.hooks import turns
from loomtui.hooks.settings import wanted
from loomtui.hooks.witness_rules import EARLY, Prompt, Typed, probe_now, witness
from loomtui.store import counters, ledger
from loomtui.store import hook_events as table
from loomtui.timing import Instant, age, raw_age, stored

# How far back a witness that just started looks: the ledger's last events, and of those only the
# lines typed within a few timeouts (older ones were judged by the daemon before, or typed before
# the hooks were configured: neither is news).
START_BACK = 5000
HORIZON_TIMEOUTS = 4
# The metrics' counters (daemon/metrics.py): lines never taken, and how long the taken ones took.
MISSING_TOTAL = "loom_dispatch_missing_total"
LATENCY = "loom_dispatch_latency_seconds"


class Witness:
    """The witness's memory between looks (the daemon's hooks loop, one thread per agent): where
    in the ledger to read from, when each unsettled line was first seen, the prompts already used."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.timeout = ctx.config.agent.dispatch_timeout
        self.floor = table.ledger_floor(ctx.store, START_BACK)
        self.first_seen: dict[int, Instant] = {}
        self.typed_at: dict[int, float] = {}  # a held-back line's own typing time (first_seen moved on)
        self.held: set[int] = set()           # lines a busy turn held back at the last look
        self.dispatched: set[int] = set()     # lines matched to their prompt, read again behind an older one
        self.used: set[tuple[int, str]] = set()  # (prompt id, digest) already taken

    def look(self) -> tuple[int, float | None]:
        """Record the lines missing now; (how many, seconds until the next line's timeout or None)."""
        ctx = self.ctx
        now = clock.now()
        rows = table.typed_since(ctx.store, ctx.agent, self.floor)
        read_to = max([self.floor, *(int(r["id"]) for r in rows)])
        # Within the horizon by the monotonic clock from the line's first sighting: measured from
        # the witness's start by wall time, a clock stepped back an hour below it dropped every line
        # typed for that hour, unjudged.
        horizon = HORIZON_TIMEOUTS * self.timeout + EARLY
        self._still_held(now)
        typed = [line for line in self._typed(rows, now) if age(line.at, now) <= horizon and line.id not in self.dispatched]
        if not typed:
            self._advance(read_to, [])
            return 0, None
        oldest = min(line.typed_wall for line in typed)  # a held line's prompt counts from its typing
        reported = table.prompts_since(ctx.store, ctx.agent, oldest - EARLY)
        if reported:  # a prompt older than any read again can never be offered twice
            self.used = {u for u in self.used if u[0] >= reported[0]["id"]}
        prompts = [Prompt(r["id"], stored(r["ts"], r["mono"], r["boot"]), frozenset(_said(r["detail"])))
                   for r in reported]
        recorded = {int(r["typed"]) for r in table.missing_since(ctx.store, ctx.agent, self.floor)
                    if isinstance(r["typed"], int)}
        verdict = witness(typed, prompts, recorded, now, self.timeout, self.used)
        held = self._held_back(verdict.missing, now)
        if held:
            verdict = replace(verdict, missing=[line for line in verdict.missing if line.id not in held],
                              next_due=min(verdict.next_due or self.timeout, self.timeout))
        taken = {p.id: p for p in prompts}
        if verdict.missing or verdict.dispatched:
            with ctx.store.write() as db:
                for line in verdict.missing:
                    ledger.append_in(db, "dispatch_missing", source=SOURCE, detail={
                        "typed": line.id, "kind": line.kind, "typed_at": self.typed_at.get(line.id, line.at.wall),
                        "after": self.timeout})
                    counters.bump_in(db, MISSING_TOTAL, {"agent": ctx.agent})
                by_id = {line.id: line for line in typed}
                for line_id, prompt_id in verdict.dispatched.items():
                    # From its typing (a line held behind a turn waited that turn too); a prompt may
                    # be reported before the line's event was written (EARLY): 0 then.
                    since = clock.at_wall(by_id[line_id].typed_wall, now)
                    latency = max(0.0, raw_age(since, taken[prompt_id].at))
                    counters.observe_in(db, LATENCY, {"agent": ctx.agent}, latency, counters.DISPATCH_BUCKETS)
        said_by = {line.id: line.said for line in typed}
        self.used.update((prompt_id, said_by[line_id]) for line_id, prompt_id in verdict.dispatched.items())
        self.dispatched.update(verdict.dispatched)
        settled = set(verdict.dispatched) | recorded | {line.id for line in verdict.missing}
        self.held -= settled
        self._advance(read_to, [line.id for line in typed if line.id not in settled])
        return len(verdict.missing), verdict.next_due

    def _typed(self, rows: list, now: Instant) -> list[Typed]:
        out = []
        for row in rows:
            detail = _detail(row["detail"])
            said = detail.get("said") or detail.get("digest")
            if not isinstance(said, str) or detail.get("delivery") == "queued":
                continue  # a line the pump holds behind a running turn is not the CLI's yet (issue 26: busy)
            if detail.get("slash"):
                continue  # the CLI's own command: no prompt is owed (agent/inject.py)
            # Its deadline counts on the monotonic clock from the moment its event was written.
            at = self.first_seen.setdefault(int(row["id"]), clock.at_wall(float(row["ts"]), now))
            out.append(Typed(int(row["id"]), at, said, str(row["kind"]), float(row["ts"])))
        return out

    def _held_back(self, late: list[Typed], now: Instant) -> set[int]:
        """Of the lines past their timeout, those a busy turn still holds back: each one's timeout
        starts again now (it is owed a prompt `timeout` after the turn that holds it ends)."""
        if not late:
            return set()
        seen = functools.cache(lambda: turns.read(self.ctx))  # read once, and only if a line is late
        held = set()
        for line in late:
            if turns.explains(self.ctx, self.typed_at.get(line.id, line.at.wall), now, seen):
                self.typed_at.setdefault(line.id, line.at.wall)
                self.first_seen[line.id] = now
                held.add(line.id)
        self.held |= held
        return held

    def _still_held(self, now: Instant) -> None:
        """The lines held back at the last look: each one's timeout starts again now, held or not,
        until a look sees the turn that held it ended; from there it has the whole timeout (started
        again only once it ran out, a line got what was left of the last, 0 to 15 s)."""
        if not self.held:
            return
        seen = functools.cache(lambda: turns.read(self.ctx))
        for line_id in sorted(self.held):
            self.first_seen[line_id] = now
            typed_at = self.typed_at.get(line_id)
            if typed_at is None or not turns.explains(self.ctx, typed_at, now, seen):
                self.held.discard(line_id)

    def _advance(self, read_to: int, unsettled: list[int]) -> None:
        """Read from the first line still unsettled next time, or past the last one read."""
        self.floor = min(unsettled) - 1 if unsettled else read_to
        self.first_seen = {i: at for i, at in self.first_seen.items() if i > self.floor}
        self.typed_at = {i: at for i, at in self.typed_at.items() if i > self.floor}
        self.held = {i for i in self.held if i > self.floor}
        self.dispatched = {i for i in self.dispatched if i > self.floor}


def line_calling_for_probe(ctx: Context) -> float | None:
    """When the missing line that calls for a canary probe now, before the schedule, was typed, or
    None (always None for an agent whose commands do not pass the hooks settings: with no hooks
    there is no witness)."""
    if not wanted(ctx.config.agent):
        return None
    typed_at = table.last_missing_typed_at(ctx.store, ctx.agent)
    if typed_at is None:
        return None
    last = last_probe(ctx)
    if last is None:
        called = probe_now(typed_at, None, None, None)
    else:
        called = probe_now(typed_at, last.sent_at, last.result, last.ack_at)
    return typed_at if called else None


def _detail(raw: object) -> dict:
    try:
        doc = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _said(raw: object) -> list[str]:
    said = _detail(raw).get("said")
    return [s for s in said if isinstance(s, str)] if isinstance(said, list) else []
