"""Time for the Telegram loops, replaceable in tests; every wait ends early when `stop` is set."""

from __future__ import annotations

import asyncio
import time


class Clock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

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


SYSTEM = Clock()
