"""The overview's plots as plain numbers: pure functions of what the snapshot loaded and `now`.

Kept apart from the widgets so the numbers a plot draws and the numbers its table lists are the
same list, and so they can be tested without a screen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

HOUR = 3600.0
DAY_HOURS = 24
SETTLED = ("ok", "miss", "error", "inject_failed")  # a pending or skipped probe says nothing of latency
MARKS = {"ok": " ", "miss": "✗", "error": "!", "inject_failed": "!"}


@dataclass(frozen=True)
class ProbePoint:
    sent_at: float
    result: str
    latency: float | None   # seconds to the ack; None for a probe that was not acked


@dataclass(frozen=True)
class Latency:
    points: list[ProbePoint]   # oldest first
    values: list[float]        # one per point; a probe that was not acked is drawn as tall as the slowest ack
    marks: str                 # one character per point: blank for an ack, ✗ a miss, ! an error

    @property
    def misses(self) -> int:
        return sum(1 for p in self.points if p.result == "miss")


class Probed(Protocol):
    """A probe as the plot reads it (canary.runs.Probe has these)."""

    @property
    def sent_at(self) -> float: ...

    @property
    def result(self) -> str: ...

    @property
    def latency(self) -> float | None: ...


def latency(probes: Iterable[Probed], last: int = 60) -> Latency:
    """The last `last` settled probes (`probes` newest first, as the canary history is).

    A probe that was not acked is drawn at the top of the scale, as tall as the slowest ack (not at
    the ack timeout, which would flatten every real latency to the floor), and marked under it."""
    points = [ProbePoint(p.sent_at, p.result, p.latency) for p in probes if p.result in SETTLED][:last]
    points.reverse()
    acked = [p.latency for p in points if p.result == "ok" and p.latency is not None]
    top = max(acked, default=1.0)
    values = [p.latency if p.result == "ok" and p.latency is not None else top for p in points]
    return Latency(points, values, "".join(MARKS.get(p.result, "?") for p in points))


def hour_starts(now: float, hours: int = DAY_HOURS) -> list[float]:
    """The start of each of the last `hours` hour-long windows ending at `now`, oldest first."""
    return [now - (hours - i) * HOUR for i in range(hours)]


def relaunches_by_hour(relaunches: Iterable[tuple[float, str]], now: float,
                       hours: int = DAY_HOURS) -> dict[str, list[int]]:
    """Relaunches per hour over the last `hours`, one series per cause (oldest hour first)."""
    out: dict[str, list[int]] = {}
    start = now - hours * HOUR
    for ts, cause in relaunches:
        if not start <= ts <= now:
            continue
        slot = min(int((ts - start) // HOUR), hours - 1)
        out.setdefault(cause or "unknown", [0] * hours)[slot] += 1
    return dict(sorted(out.items(), key=lambda kv: (-sum(kv[1]), kv[0])))


def oldest_waiting(spans: Iterable[tuple[float, float | None]], now: float,
                   hours: int = DAY_HOURS) -> list[float]:
    """The age of the oldest queue item still waiting (not yet witnessed fixed) at the end of each
    of the last `hours` hours; 0 when nothing waited. `spans` are (first seen, witnessed at|None)."""
    spans = list(spans)
    out = []
    for start in hour_starts(now, hours):
        at = start + HOUR
        waiting = [first for first, done in spans if first <= at and (done is None or done > at)]
        out.append(at - min(waiting) if waiting else 0.0)
    return out


def columns(length: int, width: int) -> list[range]:
    """Which data indexes each of `width` columns shows, as Textual's Sparkline spreads them:
    several values share a column when there are more values than columns; a value spans
    several columns when there are fewer."""
    if length == 0 or width <= 0:
        return [range(0) for _ in range(max(width, 0))]
    if length >= width:
        return [range(length * c // width, length * (c + 1) // width) for c in range(width)]
    return [range(int(c * length / width), int(c * length / width) + 1) for c in range(width)]


def mark_row(marks: Sequence[str], width: int) -> str:
    """The marks under a sparkline of len(marks) values drawn `width` columns wide: a column shows
    the worst mark among the values it covers, so a miss is never averaged away."""
    worst = {" ": 0, "!": 1, "✗": 2}
    row = []
    for idx in columns(len(marks), width):
        shown = [marks[i] for i in idx]
        row.append(max(shown, key=lambda m: worst.get(m, 1)) if shown else " ")
    return "".join(row)
