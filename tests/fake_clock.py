"""The clock port (loomtui.clock) on virtual time, for tests: it moves only when slept on or told
to, and `clock.use(FakeClock(...))` puts it in place."""

from __future__ import annotations


class FakeClock:
    def __init__(self, wall: float = 1_000_000.0, mono: float = 500.0, boot: str | None = "sim-boot") -> None:
        self.at_wall, self.at_mono, self.boot = wall, mono, boot

    def wall(self) -> float:
        return self.at_wall

    def monotonic(self) -> float:
        return self.at_mono

    def boot_id(self) -> str | None:
        return self.boot

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))

    def advance(self, seconds: float) -> None:
        """Both clocks move on together (a test steps one alone through at_wall or at_mono)."""
        self.at_wall += seconds
        self.at_mono += seconds
