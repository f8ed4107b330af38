"""Time for the Telegram loops, replaceable in tests; every wait ends early when `stop` is set."""

from __future__ import annotations

import asyncio
import time

from loomtui import clock
from loomtui.timing import Instant, age, stepped


class Clock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return clock.monotonic()

    def now(self) -> Instant:
        return Instant(self.time(), self.monotonic(), clock.boot_id())

    async def sleep(self, seconds: float, stop: asyncio.Event) -> bool:
        """Wait `seconds` or until `stop`; True when stopped."""
        if stop.is_set():
            return True
        if seconds <= 0:
            await asyncio.sleep(0)
            return stop.is_set()
        try:
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True


def command_age(sent: float, started: Instant | None, listened: Instant | None, now: Instant) -> float:
    """How old a command is: `sent` is Telegram's date for it, `started` the clocks when this poller
    began, `listened` when its previous getUpdates returned (None: none yet), `now` when handled.

    Telegram's date is its own wall clock. While ours has not been stepped since the poller began,
    the two agree and the wall clocks decide (a message Telegram held back for an hour is an hour
    old). Once ours has been stepped, its wall time says nothing about Telegram's: a message that
    came after an answered getUpdates was sent after that answer (it would have come with it
    otherwise), so it is no older than the monotonic time since. A clock stepped forward a day then
    does not make every command a day old, and one stepped back does not make one sent during an
    outage look new. Without that answer (the first batch) the wall clocks are all there is."""
    by_wall = now.wall - sent
    if listened is None or not stepped(started, now):
        return max(0.0, by_wall)
    bound = age(listened, now)
    # Our wall clock behind Telegram's says nothing: as old as the silence allows.
    return bound if by_wall < 0 else min(by_wall, bound)


SYSTEM = Clock()
