"""Typed messages workers post back to the app (workers never touch widgets themselves)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from loomtui.tui.snapshot import Snapshot


@dataclass
class Refreshed(Message):
    snapshot: Snapshot


@dataclass
class StateChanged(Message):
    """Something under the state directory changed (debounced by the watcher)."""


@dataclass
class ActionDone(Message):
    action: str
    text: str
    ok: bool


@dataclass
class TimelineLoaded(Message):
    generation: int
    rows: list[Any]
    oldest_id: int | None
    error: str = ""


@dataclass
class DetailLoaded(Message):
    title: str
    body: Any
