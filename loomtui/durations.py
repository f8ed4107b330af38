"""Durations as operators write them: `30s`, `3m`, `1h`, `1h30m`, `250ms`."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
MAX_SECONDS = 100 * 365 * 86400.0


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError with a hint when it is not a duration."""
    if not isinstance(text, str):
        raise ValueError(f"expected a duration string like 30s, 3m, 1h, got {text!r}")
    compact = text.strip().lower()
    if not compact or not _WHOLE.fullmatch(compact):
        raise ValueError(f"invalid duration {text!r} (write like 30s, 3m, 1h)")
    seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(compact))
    if not seconds <= MAX_SECONDS:  # a 400-digit number is inf, which no JSON and no clock can hold
        raise ValueError(f"duration {text[:40]!r}{'...' if len(text) > 40 else ''} is longer than 100 years")
    return seconds


def format_duration(seconds: float) -> str:
    """Short human form: 45s, 3m, 1h5m, 2d3h. Negative values get a leading '-'."""
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return "?"  # not a span of time (a number from elsewhere): shown, never raised
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 1:
        return f"{int(round(seconds * 1000))}ms" if seconds > 0 else "0s"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        m, sec = divmod(s, 60)
        return f"{m}m{sec}s" if sec else f"{m}m"
    if s < 86400:
        h, rem = divmod(s, 3600)
        m = rem // 60
        return f"{h}h{m}m" if m else f"{h}h"
    d, rem = divmod(s, 86400)
    h = rem // 3600
    return f"{d}d{h}h" if h else f"{d}d"
