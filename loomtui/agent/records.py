"""The agent's launch as stored: one typed record instead of a JSON dict (sealed: the standard
library and timing only, so the lifecycle's rules can read it).

The stored JSON keeps the bytes `launch.relaunch` has always written (ts, mono, boot, mode,
session_id, cause, then `ready` once the agent was seen ready); records written before Loom kept
both clocks (no mono/boot) or before it marked readiness (no ready) still read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from loomtui.timing import Instant, stored


@dataclass(frozen=True)
class LaunchRecord:
    """The last launch of the agent: when (both clocks), how, which session, why, and when it
    was first seen ready (None: not yet, so it may still be booting)."""

    ts: float
    mono: float | None = None
    boot: str | None = None
    mode: str = ""
    session_id: str = ""
    cause: str = ""
    ready: Instant | None = None

    @property
    def at(self) -> Instant:
        return Instant(self.ts, self.mono, self.boot)

    @property
    def seen_ready(self) -> bool:
        return self.ready is not None

    def readied(self, at: Instant) -> LaunchRecord:
        """This launch, seen ready at `at` (the first sighting stays)."""
        return self if self.ready is not None else replace(self, ready=at)

    @classmethod
    def from_json(cls, raw: str) -> LaunchRecord:
        return cls.from_dict(json.loads(raw))

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> LaunchRecord:
        at = stored(float(record["ts"]), record.get("mono"), record.get("boot"))
        ready = record.get("ready")
        if isinstance(ready, dict):
            seen: Instant | None = stored(float(ready.get("ts", at.wall)), ready.get("mono"), ready.get("boot"))
        else:
            seen = Instant(at.wall) if ready else None  # a bare truthy mark: ready, when unknown
        return cls(at.wall, at.mono, at.boot, str(record.get("mode") or ""),
                   str(record.get("session_id") or ""), str(record.get("cause") or ""), seen)

    def as_dict(self) -> dict[str, Any]:
        """The stored record's keys, in the order they have always been written."""
        out: dict[str, Any] = {"ts": self.ts, "mono": self.mono, "boot": self.boot, "mode": self.mode,
                               "session_id": self.session_id, "cause": self.cause}
        if self.ready is not None:
            out["ready"] = {"ts": self.ready.wall, "mono": self.ready.mono, "boot": self.ready.boot}
        return out

    def to_json(self) -> str:
        return json.dumps(self.as_dict())

