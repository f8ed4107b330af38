"""`loom sim`: days of faults in seconds, against Loom's own daemon code.

A modelled world (world.py: the agent, tmux, jobs, the operator; faults.py, actors.py) on a
virtual clock with one seeded random.Random; Loom's loops, actions and store running against it
in simulated threads (engine.py, scheduler.py) through the Context's ports (machine.py);
invariants (invariants.py) checked after every step. The world lives here, never inside Loom.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from loomtui.sim.engine import Sim
from loomtui.sim.profiles import PROFILES, default_config


def simulate(seed: int, days: float, profile: str = "storm", config: Any = None) -> dict[str, Any]:
    """One seed's run, as the JSON-ready dict report.Collector.as_json gives."""
    cfg = config if config is not None else default_config()
    return Sim(cfg, PROFILES[profile], seed, days).run().report.as_json()


def simulate_many(seeds: list[int], days: float, profile: str = "storm", config: Any = None,
                  workers: int | None = None) -> list[dict[str, Any]]:
    """simulate() for each seed, in seed order, spread over `workers` processes (default: the
    cores, at most one per seed). Seeds share nothing, so the runs are the same as one by one."""
    workers = min(len(seeds), workers or os.cpu_count() or 1)
    if workers <= 1:
        return [simulate(seed, days, profile, config) for seed in seeds]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(simulate, seeds, [days] * len(seeds), [profile] * len(seeds),
                             [config] * len(seeds)))
