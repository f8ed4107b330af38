"""`loom doctor`'s simulation: the operator's own settings through a few stormy days, before they
run for real. A fixed profile, a fixed list of seeds and a number of days set by the config alone:
the same config gets the same answer, and a failure comes with the command that replays it.

The seeds: the storm's first four, half a day each (Loom's real loops run there, at about five
seconds of CPU a stormy day). On them, without the hooks, `misses_to_recycle = 1` recycles a busy
agent on each of the four within 4.4 h, with `ack_timeout = "5s"` (shorter than the agent's answer)
within minutes, while the defaults, README's Claude Code config and DESIGN.md's pass (docs/SIM.md
has the figures). With README's hooks (`{hook_settings}`) the agent's turns excuse the misses
typed into a busy turn: one miss to recycle passes with a wait that covers the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from loomtui.sim import simulate_many
from loomtui.sim.report import clock, hearing_sum, replay_command

PROFILE = "storm"
SEEDS = (1, 2, 3, 4)
DAYS = 0.5
# Most steps are the loops' ticks. DAYS is sized for the defaults' rate (the watchdog every 30 s,
# the canary every 20 m, the sentinel every 10 m); a config that ticks faster gets fewer days, so
# the simulation costs about the same few seconds whatever the config.
DEFAULT_TICKS = 1 / 30.0 + 1 / 1200.0 + 1 / 600.0


@dataclass(frozen=True)
class Verdict:
    days: float
    steps: int
    seed: int | None            # the first seed of SEEDS that broke an invariant, or None
    invariant: str = ""
    message: str = ""
    at: str = ""                # when, in simulated time (report.clock)
    replay: str = ""
    # The recycles of an agent still at work that the config's own thresholds made, summed over the
    # seeds: an ordinary turn taken for a wedge (report.hearing_recycles: turn_quiet, turn_too_long),
    # and the first seed that had one (its replay shows them).
    cut_short: dict[str, int] = field(default_factory=dict)
    cut_seed: int | None = None
    cut_replay: str = ""


CUT_SHORT = ("turn_quiet", "turn_too_long")


def days_for(config: Any) -> float:
    """DAYS, fewer when the loops tick faster than the defaults' (in tenths of a day: a plain replay)."""
    ticks = 1 / config.watchdog.interval + 1 / config.canary.interval + 1 / config.sentinel.interval
    return max(0.1, math.floor(DAYS * min(1.0, DEFAULT_TICKS / ticks) * 10) / 10)


def simulate_config(config: Any, source: str | None, agent: str | None = None) -> Verdict:
    """Storm on SEEDS for days_for(config) days. `source` is the config's path for the replay
    command (None: `loom sim`'s own defaults); `agent` names the agent whose view `config` is,
    when the file has several."""
    days = days_for(config)
    runs = simulate_many(list(SEEDS), days, PROFILE, config)
    steps = sum(r["steps"] for r in runs)
    broken = next((r for r in runs if r["violation"] is not None), None)
    if broken is None:
        cut = {why: n for why, n in hearing_sum(runs).items() if why in CUT_SHORT}
        first = next((r["seed"] for r in runs if any(why in CUT_SHORT for why in r["hearing_recycles"])), None)
        return Verdict(days, steps, None, cut_short=cut, cut_seed=first,
                       cut_replay="" if first is None else replay_command(PROFILE, first, days, source, agent))
    v = broken["violation"]
    return Verdict(days, steps, broken["seed"], v["invariant"], v["message"], clock(v["t"]),
                   replay_command(PROFILE, broken["seed"], days, source, agent))
