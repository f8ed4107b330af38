"""The agent's turns read from its recorded hook events (hook_events), or from the stream-json
pump's transcript where no hooks are configured (hooks.pump_turns), and the canary's runs told
which of their misses a turn excuses (hooks.turn_rules decides, for both sources; this only reads).

One source per agent, never both (a turn counted twice would only ever excuse more): the hooks
where its commands pass `{hook_settings}`, else the pump where the driver has one. With neither
there are no turns and no excuses: the canary counts every miss, as it always did.
"""

from __future__ import annotations

import functools
import json
import threading
import weakref
from collections.abc import Callable
from dataclasses import replace

from loomtui import clock
from loomtui.agent import launches
from loomtui.agent.records import LaunchRecord
from loomtui.canary.rules import MISS, OK, ProbeRun
from loomtui.context import Context
from loomtui.hooks import ingest, pump_turns, source, turn_rules
from loomtui.hooks.settings import events_dir
from loomtui.hooks.turn_rules import Mark, Turn
from loomtui.store import canary_runs, hook_events
from loomtui.store.db import Store
from loomtui.timing import Instant, age, stepped, stored

# The turn events read back: a prompt and a stop per turn, so the last hundred or so turns, far more
# than the misses in one run of them can span.
MARKS = 240
ACKS = 3  # the last acked probes, whose ack may close the turn their own prompt began (turn_rules.closed_by_acks)
# A probe's question (withholds_probe) reads the event files still waiting unread: the newest this
# many (a hooks loop that far behind), and the directory again at most this often when the hooks
# loop recorded some between its read and the store's.
MAX_UNREAD = 2000
UNREAD_TRIES = 3


# Per store connection and agent, the turn marks read last (their ids and marks, oldest first): a
# tick reads only the events written since. Kept by the connection, so a store reopened or replaced
# starts afresh; read whole again when any mark kept was pruned.
_KEPT: weakref.WeakKeyDictionary[Store, dict[str, list[tuple[int, Mark]]]] = weakref.WeakKeyDictionary()


def turn_marks(store: Store, agent: str) -> list[tuple[int, Mark]]:
    """The agent's latest MARKS turn marks with their ids, oldest first: the same as one read of
    hook_events.turn_marks, read whole once and then only as far as the events written since (the
    whole read sorts every turn event the agent has: with the canary asking every tick while it
    misses, it was most of a hooked run's time)."""
    kept = _KEPT.setdefault(store, {})
    marks = kept.get(agent, [])
    if marks and hook_events.turn_marks_kept(store, agent, marks[0][0], marks[-1][0]) != \
            (len(marks), marks[-1][1].at.wall):
        marks = []  # some were pruned since (and the newest one's id maybe given to another): all again
    new = hook_events.turn_marks_after(store, agent, marks[-1][0] if marks else 0, MARKS)
    if marks and not new:
        return marks  # the very list of the last read: nothing came since (read's memo asks `is`)
    fresh = (marks + [(int(r["id"]), _mark(r)) for r in new])[-MARKS:]
    kept[agent] = fresh
    return fresh


def from_pump(ctx: Context) -> bool:
    """The agent's turns are its pump's: a stream-json driver and no hooks configured."""
    return source.of(ctx) == source.PUMP


def read(ctx: Context) -> list[Turn]:
    """The agent's recent turns, oldest first (the last one open while it runs)."""
    if from_pump(ctx):
        return _made(pump_turns.marks(ctx.agent_dir), launches.last_launch(ctx), _acks(ctx))
    kept = turn_marks(ctx.store, ctx.agent)
    tool = hook_events.last_tool_use(ctx.store, ctx.agent)
    launched = launches.last_launch(ctx)
    acks = _acks(ctx)
    # The turns are a pure function of the marks, the latest tool use, the launch and the acks, each
    # read again above (indexed reads); made again only when one of them changed. The canary asks at
    # every look while it misses and the witness at every late line, mostly of the same events.
    key = (_mark(tool) if tool is not None else None, int(tool["id"]) if tool is not None else None,
           launched.at if launched is not None else None, tuple(acks))
    memo = _MADE.setdefault(ctx.store, {})
    last = memo.get(ctx.agent)
    if last is not None and last[0] is kept and last[1] == key:
        return list(last[2])
    made = _made(_hook_marks(kept, tool), launched, acks)
    memo[ctx.agent] = (kept, key, made)
    return list(made)


# Per store connection and agent, the turns read last and what they were made of (read's memo).
_MADE: weakref.WeakKeyDictionary[Store, dict[str, tuple[list[tuple[int, Mark]], tuple, list[Turn]]]] = \
    weakref.WeakKeyDictionary()


def _made(marks: list[Mark], launched: LaunchRecord | None, acks: list[tuple[Instant, Instant]]) -> list[Turn]:
    if launched is not None:
        # Loom's own launch is a new process, whatever its hooks said (a wedged or slow one says
        # nothing): a turn of the process before it ended with it.
        # Placed by the monotonic clock where it can be: by wall time, a clock stepped back since the
        # launch put it after the new process's own turn, which it then ended.
        at = launched.at  # a property that builds an Instant: once, not once per mark
        place = next((i for i, m in enumerate(marks) if turn_rules.after(m.at, at)), len(marks))
        marks.insert(place, Mark(at, turn_rules.SESSION_START, turn_rules.LAUNCH))
    return turn_rules.closed_by_acks(turn_rules.turns(marks), acks)


def _acks(ctx: Context) -> list[tuple[Instant, Instant]]:
    # The last acked probes, however many missed since: of the last few sends, three misses in a
    # long turn of the operator's forgot the ack that closed the probe's turn before it, and that
    # turn (its Stop lost) was read as open from the probe on, the operator's turn inside it.
    return [_ack(r) for r in canary_runs.recent_with_result(ctx.store, ctx.agent, OK, ACKS)
            if r["ack_at"] is not None]


def _ack(row) -> tuple[Instant, Instant]:
    """A probe's send and its ack as instants: the ack placed on the send's monotonic clock by the
    wall time between them (the few seconds of a probe: only a step in those could mislead it)."""
    sent = stored(row["sent_at"], row["sent_mono"], row["boot"])
    acked_at = float(row["ack_at"])
    mono = None if sent.mono is None else sent.mono + (acked_at - sent.wall)
    return sent, Instant(acked_at, mono, sent.boot)


def _hook_marks(kept: list[tuple[int, Mark]], tool) -> list[Mark]:
    marks = [m for _, m in kept]
    if tool is not None and (not kept or int(tool["id"]) > kept[0][0]):
        # A tool's use is a sign of life inside whatever turn it fell in: the latest one is all the
        # open turn needs (ended turns excuse or not by how they ended, not by their activity).
        at = _mark(tool)
        place = next((i for i, (ident, _) in enumerate(kept) if ident > int(tool["id"])), len(marks))
        marks.insert(place, at)
    return marks


# The turns as one tick read them (a caller that asks several questions reads them once).
Seen = Callable[[], list[Turn]]


def excused(ctx: Context, runs: list[ProbeRun], now: Instant, seen: Seen | None = None) -> list[ProbeRun]:
    """`runs` (oldest first) with each miss since the last ok marked by what excuses it, if anything.
    The turns are read only when there is a miss to excuse."""
    trailing = []
    for i in range(len(runs) - 1, -1, -1):
        if runs[i].result == OK or (runs[i].result == MISS and runs[i].late):
            break  # a run of misses ends here: older ones no longer count
        if runs[i].result == MISS:
            trailing.append(i)
    if not trailing:
        return runs
    cfg = ctx.config.canary
    turns = seen() if seen else read(ctx)
    if not turns:
        return runs
    judged = complete_until(ctx, now, cfg.turn_quiet)
    out = list(runs)
    for i in trailing:
        why = turn_rules.excuse(turns, runs[i].sent, judged, cfg.turn_quiet, cfg.max_turn)
        if why:
            out[i] = _excused(runs[i], why)
    return out


@functools.lru_cache(maxsize=1024)
def _excused(run: ProbeRun, why: str) -> ProbeRun:
    """`run` excused by `why`: built once per run and excuse (both frozen), not at every look of a
    busy turn's misses (dataclasses.replace was most of a hooked canary tick's own time)."""
    return replace(run, excused=why)


def explains(ctx: Context, typed_at: float, now: Instant, seen: Seen | None = None) -> str:
    """Why a line typed at `typed_at` (wall) may not have been dispatched yet: the turn it was
    typed into is still busy or waits for permission (the line is queued behind it), or ""."""
    cfg = ctx.config.canary
    turns = seen() if seen else read(ctx)
    return turn_rules.holds_back(turns, Instant(typed_at), now, cfg.turn_quiet, cfg.max_turn) if turns else ""


def withholds_probe(ctx: Context, now: Instant) -> bool:
    """A probe now would land in an open permission prompt (hooks.turn_rules.withholds_probe), as
    the turns will stand once the hook events still waiting unread in the agent's events directory
    are recorded (the hooks loop is behind: the store was locked, its backoff after). The hooked
    storm, seed 70, day 2.07: the store locked for fifteen minutes, a permission prompt opened in
    them, and a probe was typed into it a minute after the lock, while the hooks loop still backed
    off with the prompt's notification unread. The directory is read before the store (never the
    turns a tick read earlier), and again when the hooks loop recorded events between the two reads
    (an event in both, read last from its file, would be taken for the newest: an answered prompt)."""
    cfg = ctx.config.canary
    # Most looks find nothing waiting: the store is read once then, as before any file waited.
    if not from_pump(ctx) and ingest.pending(events_dir(ctx.agent_dir)):
        for _ in range(UNREAD_TRIES):
            before = _newest(turn_marks(ctx.store, ctx.agent), hook_events.last_tool_use(ctx.store, ctx.agent))
            unread = _unread_marks(ctx, now)
            if not unread:
                break
            kept, tool = turn_marks(ctx.store, ctx.agent), hook_events.last_tool_use(ctx.store, ctx.agent)
            if _newest(kept, tool) == before:
                all_turns = _made(_hook_marks(kept, tool) + unread, launches.last_launch(ctx), _acks(ctx))
                return turn_rules.withholds_probe(all_turns, now, cfg.turn_quiet, cfg.max_turn)
    # Nothing waits (or the hooks loop recorded at every try: the store holds what it took).
    return turn_rules.withholds_probe(read(ctx), now, cfg.turn_quiet, cfg.max_turn)



def _newest(kept: list[tuple[int, Mark]], tool) -> tuple[int, int]:
    """The ids of the newest turn mark and tool use recorded: what the turns are made of moved if either did."""
    return (kept[-1][0] if kept else 0, int(tool["id"]) if tool is not None else 0)


def _unread_marks(ctx: Context, now: Instant) -> list[Mark]:
    """The turn marks of the event files waiting unread in the agent's events directory (the newest
    MAX_UNREAD, oldest first), dated as ingest will date them (a file dated ahead of now, from when a
    look first saw it waiting: a wall clock stepped back, or a forged mtime, must not keep a prompt
    young); none for a file already recorded that could not be removed (the store's marks hold it),
    one vanished since the listing or still being written, or one that is no turn's mark (the turn
    events and tool uses the store reads them from)."""
    directory = events_dir(ctx.agent_dir)
    waiting = ingest.pending(directory)
    if not waiting:
        return []
    seen = _waiting_seen(directory, waiting, now)
    recorded = ingest.unremoved(directory)
    out = []
    for mtime, name in waiting[-MAX_UNREAD:]:
        if (name, mtime) in recorded:
            continue
        got = ingest.read_event(directory / name)
        if got is None:
            continue
        event, wall = got
        if event.event not in hook_events.TURN_EVENTS and event.event not in (hook_events.TOOL, hook_events.TOOL_FAILED):
            continue
        at = clock.at_wall(wall, now) if wall <= now.wall else seen[(name, mtime)]
        message = event.detail.get("message") if event.event == turn_rules.NOTIFICATION else ""
        out.append(Mark(at, event.event, event.source, message if isinstance(message, str) else ""))
    return out


def _mark(row) -> Mark:
    message = ""
    if row["event"] == turn_rules.NOTIFICATION:
        try:
            detail = json.loads(row["detail"] or "{}")
        except ValueError:
            detail = {}
        message = detail.get("message", "") if isinstance(detail, dict) and isinstance(detail.get("message"), str) \
            else ""
    return Mark(stored(row["ts"], row["mono"], row["boot"]), str(row["event"]), str(row["source"] or ""), message)


def complete_until(ctx: Context, now: Instant, bound: float) -> Instant:
    """The instant up to which the recorded turns are the whole story: `now`, unless event files
    still wait in the agent's events directory (the hooks loop is behind: the store was locked, say).
    Then the turns are judged as they stood when the oldest of them was written (or, once the wall
    clock was stepped while they waited, when a look first saw them): a turn is not taken for quiet
    on the events read so far while newer ones wait. Files waiting longer than `bound`
    (turn_quiet) no longer hold the judgement back: one that cannot be read or removed must not
    excuse a wedge for ever."""
    directory = events_dir(ctx.agent_dir)
    waiting = ingest.pending(directory)
    seen = _waiting_seen(directory, waiting, now)
    if not waiting:
        return now
    oldest = waiting[0][0] / 1e9
    first = min(seen.values(), key=lambda at: at.mono if at.mono is not None else at.wall)
    if not stepped(first, now) and now.wall >= oldest:
        return clock.at_wall(oldest, now) if now.wall - oldest < bound else now
    # The wall clock was stepped while they waited (or since one was written: it reads as written
    # later than now): their mtimes cannot say how long. From when a look first saw them waiting,
    # on the monotonic clock, for `bound` at most.
    return now if age(first, now) >= bound else first


# Per events directory, when a look first saw each file still waiting there (name and mtime): the
# waiting time the mtime cannot tell once the wall clock was stepped.
_SEEN: dict[str, dict[tuple[str, int], Instant]] = {}
_SEEN_LOCK = threading.Lock()  # the canary's thread and the sentinel's (actions.nudge) both look


def _waiting_seen(directory, waiting: list[tuple[int, str]], now: Instant) -> dict[tuple[str, int], Instant]:
    with _SEEN_LOCK:
        kept = _SEEN.pop(str(directory), {})
        seen = {(name, mtime): kept.get((name, mtime), now) for mtime, name in waiting}
        if seen:
            _SEEN[str(directory)] = seen
    return seen
