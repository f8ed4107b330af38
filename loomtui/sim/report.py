"""What a run shows: counts gathered from its events, as text for people and JSON for machines.

Everything printed is a function of the seed, the profile and the config: no wall clock, no
machine, no hash order (nothing here iterates a set), floats rounded before they are shown.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from loomtui.durations import format_duration
from loomtui.text import counted

if TYPE_CHECKING:
    from loomtui.sim.engine import Sim

SCHEMA = 1
MONTH = 30 * 86400.0


class Collector:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.faults: dict[str, int] = {}
        self.relaunches: dict[str, dict[str, int]] = {}
        self.fallbacks = 0
        self.escalations = 0
        self.alerts = 0
        self.probes: dict[str, int] = {}
        self.items = 0
        self.witnessed = 0
        self.reopened = 0
        self.queue_escalations = 0
        self.nudges: dict[int, int] = {}
        self.false_recycles = 0
        self.hearing_recycles: dict[str, int] = {}  # by design: invariants.hearing_excuse's names
        self.reaped = 0
        self.second_looks = 0   # recoveries the second look under recycle.lock found unneeded
        self.recoveries: list[float] = []
        self.deaf = 0.0
        self.trouble = 0.0
        self.recent: list[float] = []   # automatic relaunch events in the last ceiling window
        self.max_in_window = 0
        self.prev_t = 0.0

    def on_event(self, kind: str, d: dict) -> None:
        if kind == "fault":
            self.faults[d["kind"]] = self.faults.get(d["kind"], 0) + 1
        elif kind == "fault_skipped":
            self.faults[d["kind"]] -= 1
        elif kind == "relaunch":
            by_mode = self.relaunches.setdefault(d["cause"], {})
            by_mode[d["mode"]] = by_mode.get(d["mode"], 0) + 1
            self.fallbacks += bool(d["fallback"])
            if not d["cause"].startswith("operator_"):
                t, window = self.sim.world.t, self.sim.config.watchdog.ceiling_window
                self.recent = [x for x in self.recent if t - x < window] + [t]
                self.max_in_window = max(self.max_in_window, len(self.recent))
            else:
                self.recent = []
        elif kind == "escalation":
            self.escalations += 1
        elif kind == "operator_alert":
            self.alerts += 1
        elif kind == "canary":
            self.probes[d["result"]] = self.probes.get(d["result"], 0) + 1
        elif kind == "queue_new":
            self.items += 1
        elif kind == "queue_witness":
            self.witnessed += 1
        elif kind == "queue_reopen":
            self.reopened += 1
        elif kind == "queue_escalate":
            self.queue_escalations += 1
        elif kind == "recover_resolved":
            self.second_looks += 1
        elif kind == "foreign_poller_reaped":
            self.reaped += 1
        elif kind == "queue_nudge":
            self.nudges[d["item"]] = d["nudge"]

    def on_witness(self, trouble_since: float | None) -> None:
        a = self.sim.world.agent
        if trouble_since is not None and a is not None and a.hearing():
            self.recoveries.append(self.sim.world.t - trouble_since)

    def after_step(self) -> None:
        w = self.sim.world
        dt = w.t - self.prev_t
        self.prev_t = w.t
        a = w.agent
        if a is not None and a.alive and a.deaf_since is not None:
            self.deaf += min(dt, w.t - a.deaf_since)
        if self.sim.checker.trouble_since is not None:
            self.trouble += min(dt, w.t - self.sim.checker.trouble_since)

    # -- the result -------------------------------------------------------------------------

    def as_json(self) -> dict[str, Any]:
        sim = self.sim
        months = max(sim.world.t, 1.0) / MONTH
        nudged = sorted(self.nudges.values())
        v = sim.violation
        return {
            "seed": sim.seed,
            "steps": sim.step,
            "simulated_seconds": round(sim.world.t, 3),
            "faults": {k: n for k, n in sorted(self.faults.items()) if n},
            "relaunches": {c: dict(sorted(m.items())) for c, m in sorted(self.relaunches.items())},
            "resume_failed_fallbacks": self.fallbacks,
            "max_automatic_relaunches_in_ceiling_window": self.max_in_window,
            "escalations": self.escalations,
            "operator_alerts": self.alerts,
            "foreign_pollers_reaped": self.reaped,
            "resolved_on_second_look": self.second_looks,
            "false_recycles": self.false_recycles,
            "hearing_recycles": dict(sorted(self.hearing_recycles.items())),
            "recoveries": len(self.recoveries),
            "recovery_seconds_p50": round(percentile(self.recoveries, 50), 3),
            "recovery_seconds_p99": round(percentile(self.recoveries, 99), 3),
            "recovery_seconds_max": round(max(self.recoveries, default=0.0), 3),
            "deaf_minutes_per_month": round(self.deaf / 60.0 / months, 3),
            "trouble_minutes_per_month": round(self.trouble / 60.0 / months, 3),
            "probes": dict(sorted(self.probes.items())),
            "queue": {"items": self.items, "witnessed": self.witnessed, "reopened": self.reopened,
                      "escalated": self.queue_escalations, "nudges": sum(nudged),
                      "nudges_per_item_max": nudged[-1] if nudged else 0},
            "violation": None if v is None else {
                "invariant": v.name, "message": v.message, "step": sim.step, "t": round(sim.world.t, 3),
                "trace": [trace_line(e) for e in sim.trace],
            },
        }


def percentile(values: list[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def clock(t: float) -> str:
    days, rest = divmod(t, 86400.0)
    hours, rest = divmod(rest, 3600.0)
    minutes, seconds = divmod(rest, 60.0)
    return f"{int(days)}d{int(hours):02d}:{int(minutes):02d}:{seconds:06.3f}"


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def trace_line(entry: tuple[int, float, str, dict]) -> str:
    step, t, kind, detail = entry
    parts = " ".join(f"{k}={_value(v)}" for k, v in detail.items() if v not in (None, "", False))
    return f"step {step} {clock(t)} {kind} {parts}".rstrip()


def replay_command(profile: str, seed: int, days: float, config: str | None, agent: str | None = None) -> str:
    """The command that gives this run again, step for step (the incident profile's scenarios have
    their own lengths and configs: its seed is all it takes)."""
    cmd = f"loom sim --profile {profile} --seed {seed}" + (f" --days {days:g}" if profile != "incident" else "")
    cmd += f" --config {shlex.quote(config)}" if config else ""
    return cmd + (f" --agent {shlex.quote(agent)}" if agent else "")


def text(run: dict[str, Any], *, profile: str, days: float, config: str | None,
         agent: str | None = None) -> list[str]:
    months = run["simulated_seconds"] / MONTH
    lines = [f"seed {run['seed']}: {days:g} days ({months:.2f} months), {run['steps']} steps"]
    faults = ", ".join(f"{k} {n}" for k, n in run["faults"].items()) or "none"
    lines.append(f"  faults: {faults}")
    auto = sum(n for c, m in run["relaunches"].items() if not c.startswith("operator_") for n in m.values())
    oper = sum(n for c, m in run["relaunches"].items() if c.startswith("operator_") for n in m.values())
    lines.append(f"  relaunches: {auto} automatic ({run['resume_failed_fallbacks']} resume-failed fallbacks), "
                 f"{oper} by the operator; most automatic in one ceiling window: "
                 f"{run['max_automatic_relaunches_in_ceiling_window']}")
    for cause, modes in run["relaunches"].items():
        lines.append(f"    {cause}: " + ", ".join(f"{m} {n}" for m, n in modes.items()))
    lines.append(f"  escalations: {counted(run['escalations'], 'hold')} at the ceiling, "
                 f"{counted(run['operator_alerts'], 'operator alert')}, "
                 f"{counted(run['queue']['escalated'], 'queue item')} past the backstop")
    lines.append(f"  recovery: {counted(run['recoveries'], 'trouble')} witnessed recovered; time to witnessed recovery "
                 f"p50 {format_duration(run['recovery_seconds_p50'])}, p99 {format_duration(run['recovery_seconds_p99'])}, "
                 f"max {format_duration(run['recovery_seconds_max'])}")
    lines.append(f"  deaf {run['deaf_minutes_per_month']:.1f} min/month; in trouble until witnessed "
                 f"{run['trouble_minutes_per_month']:.1f} min/month; false recycles {run['false_recycles']}")
    lines.append(f"  recycled while it could hear, by design: {hearing_text(run['hearing_recycles'])}")
    probes = ", ".join(f"{k} {n}" for k, n in run["probes"].items()) or "none"
    lines.append(f"  canary: {probes}")
    q = run["queue"]
    per = q["nudges"] / q["items"] if q["items"] else 0.0
    lines.append(f"  queue: {counted(q['items'], 'item')}, {q['witnessed']} witnessed, {q['reopened']} reopened, "
                 f"{q['escalated']} escalated; nudges {q['nudges']} ({per:.1f} per item, max {q['nudges_per_item_max']})")
    v = run["violation"]
    if v is None:
        lines.append("  invariants: all held after every step")
    else:
        lines.append(f"  VIOLATION {v['invariant']} at step {v['step']} ({clock(v['t'])}): {v['message']}")
        lines.append(f"  replay: {replay_command(profile, run['seed'], days, config, agent)}")
        lines.append(f"  trace (last {len(v['trace'])} events):")
        lines += [f"    {line}" for line in v["trace"]]
    return lines


def hearing_text(hearing: dict[str, int]) -> str:
    """The recycles of an agent the world says could hear, by why Loom was let do it."""
    return ", ".join(f"{why.replace('_', ' ')} {n}" for why, n in hearing.items()) or "none"


def one_line(run: dict[str, Any]) -> str:
    auto = sum(n for c, m in run["relaunches"].items() if not c.startswith("operator_") for n in m.values())
    return (f"seed {run['seed']}: {run['steps']} steps, {auto} automatic relaunches, {run['escalations']} holds, "
            f"recovery p99 {format_duration(run['recovery_seconds_p99'])}, "
            f"deaf {run['deaf_minutes_per_month']:.1f} min/month, invariants held")


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    recoveries = [r["recovery_seconds_p99"] for r in runs]
    return {
        "runs": len(runs),
        "violations": sum(r["violation"] is not None for r in runs),
        "violated_seeds": [r["seed"] for r in runs if r["violation"] is not None],
        "steps": sum(r["steps"] for r in runs),
        "automatic_relaunches": sum(n for r in runs for c, m in r["relaunches"].items()
                                    if not c.startswith("operator_") for n in m.values()),
        "escalations": sum(r["escalations"] for r in runs),
        "false_recycles": sum(r["false_recycles"] for r in runs),
        "hearing_recycles": hearing_sum(runs),
        "worst_recovery_seconds_p99": round(max(recoveries, default=0.0), 3),
        "worst_deaf_minutes_per_month": round(max((r["deaf_minutes_per_month"] for r in runs), default=0.0), 3),
    }


def hearing_sum(runs: list[dict[str, Any]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for r in runs:
        for why, n in r.get("hearing_recycles", {}).items():
            total[why] = total.get(why, 0) + n
    return dict(sorted(total.items()))


def summary_text(s: dict[str, Any]) -> list[str]:
    verdict = ("all invariants held" if not s["violations"]
               else f"{s['violations']} with a violation (seeds {', '.join(map(str, s['violated_seeds']))})")
    return [f"{s['runs']} seeds, {s['steps']} steps: {verdict}",
            f"  {counted(s['automatic_relaunches'], 'automatic relaunch', 'automatic relaunches')}, "
            f"{counted(s['escalations'], 'hold')} at the ceiling, "
            f"{counted(s['false_recycles'], 'false recycle')}; worst p99 time to witnessed recovery "
            f"{format_duration(s['worst_recovery_seconds_p99'])}; worst deaf "
            f"{s['worst_deaf_minutes_per_month']:.1f} min/month",
            f"  recycled while it could hear, by design: {hearing_text(s['hearing_recycles'])}"]
