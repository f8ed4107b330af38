"""How often the world goes wrong, and how: `calm` (rare faults), `storm` (faults every few
minutes) and `clockjump` (the storm's faults every quarter of an hour, and the wall clock stepped a
day forward or back every hour or so). The `incident` profile is scripted instead: scenarios.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from loomtui.config import Config, JobConfig, parse_config

WEIGHTS = (
    ("crash", 3.0), ("exit0", 2.0), ("wedge", 2.0), ("sticky_wedge", 1.0), ("busy", 3.0), ("modal", 2.0),
    ("slow_boot", 1.0), ("resume_fails", 1.0), ("crash_loop", 0.3), ("poller_lost", 1.0),
    ("foreign_poller", 1.0), ("store_locked", 1.0), ("load", 1.0), ("tmux_hang", 1.0), ("tmux_vanish", 0.5),
    ("socket_lost", 0.5), ("job_break", 3.0), ("ignore_queue", 0.5), ("operator_recycle", 0.5),
)
JOBS = (("backup", 3600.0), ("newsletter", 1800.0), ("sync", 600.0))


@dataclass(frozen=True)
class Profile:
    name: str
    fault_mean: float | None                 # mean seconds between random faults; None: scripted only
    weights: tuple[tuple[str, float], ...] = WEIGHTS
    operator_delay: tuple[float, float] = (600.0, 4 * 3600.0)
    fix_probability: float = 0.8             # a nudged agent really fixes the job; else it claims falsely
    jobs: tuple[tuple[str, float], ...] = JOBS


# The storm's faults, with the wall clock stepped a day forward or back about every 70 minutes. Apart
# from calm and storm, so that their seeds replay as they always did.
CLOCK_WEIGHTS = (*WEIGHTS, ("clock_forward", 5.0), ("clock_back", 5.0))

PROFILES = {
    "calm": Profile("calm", fault_mean=12 * 3600.0),
    "storm": Profile("storm", fault_mean=5 * 60.0),
    "clockjump": Profile("clockjump", fault_mean=15 * 60.0, weights=CLOCK_WEIGHTS),
    "incident": Profile("incident", fault_mean=None),
}

# The simulated agent has a Telegram poller, so that the poller faults mean something.
SIM_DEFAULTS: dict[str, Any] = {"agent": {"poller_match": "telegram-poller"}}


def default_config(overrides: dict[str, Any] | None = None) -> Config:
    data: dict[str, Any] = {k: dict(v) for k, v in SIM_DEFAULTS.items()}
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update(values)
    return parse_config(data, "<loom sim defaults>", None)


def with_jobs(config: Config, jobs: Iterable[tuple[str, str]], logs: Path) -> Config:
    """The config the run uses: the operator's (or the defaults) with the simulated jobs as its
    [[jobs]], (name, schedule) each, logging into `logs`. The operator's own jobs are dropped: their
    logs are not on the simulated machine."""
    built = [JobConfig.build({"name": name, "log": str(logs / f"{name}.log"), "schedule": schedule,
                              "agent": config.agent_name}, ("jobs", i), None)
             for i, (name, schedule) in enumerate(jobs)]
    return config.replace(jobs=built)
