"""The `incident` profile: the nine incidents of DESIGN.md replayed as scripted scenarios, each
with the ending DESIGN.md asks for (recovered, escalated or held) checked on top of the invariants."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from loomtui.sim.engine import Sim
from loomtui.sim.profiles import PROFILES, default_config

H = 3600.0


@dataclass(frozen=True)
class Scenario:
    name: str           # the incident's marker name (tests/unit/test_incident_markers.py)
    expect: str
    hours: float
    faults: tuple[tuple[float, str], ...]
    check: Callable[[Sim], str]            # '' when the ending is the expected one, else what went wrong
    overrides: dict[str, Any] = field(default_factory=dict)
    operator_delay: tuple[float, float] = (1800.0, 3600.0)


def automatic(sim: Sim) -> dict[str, dict[str, int]]:
    return {c: m for c, m in sim.report.relaunches.items() if not c.startswith("operator_")}


def count(sim: Sim, cause: str | None = None, mode: str | None = None) -> int:
    return sum(n for c, modes in automatic(sim).items() if cause in (None, c)
               for m, n in modes.items() if mode in (None, m))


def hearing_and_witnessed(sim: Sim) -> str:
    a = sim.world.agent
    if a is None or not a.hearing():
        return "the agent does not hear at the end"
    if sim.checker.trouble_since is not None:
        return "the last recovery was never witnessed by an ack"
    return ""


def _silent(sim: Sim) -> str:
    if count(sim) != 1 or count(sim, "canary_failed") != 1:
        return f"expected one canary_failed relaunch, got {automatic(sim)}"
    return hearing_and_witnessed(sim)


def _false_detector(sim: Sim) -> str:
    return f"a busy, unclear but healthy agent was relaunched: {automatic(sim)}" if count(sim) else ""


def _storm(sim: Sim) -> str:
    if sim.report.escalations != 1:
        return f"expected exactly one escalation, got {sim.report.escalations}"
    if sim.report.max_in_window > sim.config.watchdog.ceiling_count + sim.report.fallbacks:
        return f"{sim.report.max_in_window} automatic relaunches in one ceiling window"
    if sum(sim.report.relaunches.get("operator_fresh", {}).values()) < 2:  # the first one started the agent
        return "the operator never relaunched after the hold"
    return hearing_and_witnessed(sim)


def _correct_and_wrong(sim: Sim) -> str:
    modes = sim.report.relaunches.get("canary_failed", {})
    if modes != {"fresh": 1, "resume": 1}:
        return f"expected the wedged session resumed once, then fresh; got canary_failed {modes}"
    return hearing_and_witnessed(sim)


def _stranger(sim: Sim) -> str:
    if sim.report.relaunches.get("resume_failed", {}) != {"fresh": 1}:
        return f"expected one fresh fallback after the failed resume, got {automatic(sim)}"
    return hearing_and_witnessed(sim)


def _poller(sim: Sim) -> str:
    if sim.world.foreign_poller_since is not None or sim.report.reaped != 1:
        return "the foreign poller was not reaped"
    if count(sim, "poller_missing") != 1 or count(sim) != 1:
        return f"expected one poller_missing relaunch, got {automatic(sim)}"
    return hearing_and_witnessed(sim)


def _exit0(sim: Sim) -> str:
    if count(sim, "exit") != 1 or count(sim) != 1:
        return f"expected one relaunch for the exit, got {automatic(sim)}"
    return hearing_and_witnessed(sim)


def _blind_spot(sim: Sim) -> str:
    if count(sim):
        return f"the canary-healthy agent was relaunched: {automatic(sim)}"
    if sim.report.queue_escalations < 1:
        return "no queue item reached the operator"
    return ""


def _replay(sim: Sim) -> str:
    # A crash by status is labelled `exit` when tmux lost the status (the world's 3.3a race, one look
    # in ten): the rules call an unreported status an exit, and relaunch both alike.
    if count(sim) != 1 or count(sim, "crash") + count(sim, "exit") != 1:
        return f"expected one relaunch for the crash, got {automatic(sim)}"
    return hearing_and_witnessed(sim)


SCENARIOS = (
    Scenario("silent_deafness", "recovered: only the canary declares the agent deaf", 6,
             ((2 * H, "wedge"),), _silent),
    Scenario("confident_false_detector", "undisturbed: busy, slow, unclear but healthy is never recycled", 12,
             ((1 * H, "busy"), (2 * H, "load"), (3 * H, "busy"), (5 * H, "tmux_hang"), (7 * H, "modal"),
              (9 * H, "busy"), (10 * H, "store_locked")), _false_detector),
    Scenario("recovery_storm", "held: relaunches back off, the ceiling escalates once and holds until "
             "the operator acts, then recovered", 10,
             ((0.5 * H, "load"), (1 * H, "crash_loop")), _storm, operator_delay=(2 * H, 2 * H)),
    Scenario("correct_and_wrong_together", "recovered: the wedged session is resumed once, then fresh "
             "(fuse window 15m shorter than a 23m canary period)", 8,
             ((1 * H, "sticky_wedge"),), _correct_and_wrong,
             overrides={"canary": {"interval": "23m"}, "watchdog": {"fuse_window": "15m"}}),
    Scenario("resuming_a_stranger", "recovered: only the pinned session is resumed; a failed resume "
             "falls back to fresh", 6, ((1 * H, "resume_fails"),), _stranger),
    Scenario("one_bot_one_poller", "recovered: the foreign poller reaped, the lost poller relaunched", 8,
             ((1 * H, "foreign_poller"), (3 * H, "poller_lost")), _poller),
    Scenario("exit_zero_is_failure", "recovered: an exit 0 is relaunched like any exit", 4,
             ((1 * H, "exit0"),), _exit0),
    Scenario("supervisor_blind_spot", "escalated: an agent that acks but ignores its queue; the item "
             "reaches the operator by the backstop", 8,
             ((0.1 * H, "ignore_queue"), (1 * H, "job_break")), _blind_spot),
    Scenario("garbled_replay", "recovered: nothing typed into a booting agent, nothing replayed", 6,
             ((0.5 * H, "job_break"), (1 * H, "slow_boot"), (1.2 * H, "crash")), _replay),
)


def run_scenario(sc: Scenario, seed: int = 1) -> dict[str, Any]:
    config = default_config(sc.overrides)
    profile = replace(PROFILES["incident"], operator_delay=sc.operator_delay)
    sim = Sim(config, profile, seed, sc.hours / 24.0)
    for at, kind in sc.faults:
        sim.at(at, sim.fault, kind)
    sim.run()
    run = sim.report.as_json()
    problem = "" if sim.violation is not None else sc.check(sim)
    outcome = (f"violation: {sim.violation.name}" if sim.violation is not None else problem or sc.expect.split(":")[0])
    return {"name": sc.name, "expect": sc.expect, "outcome": outcome,
            "passed": sim.violation is None and not problem, "run": run}
