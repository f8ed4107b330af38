"""`loom sim`: the same seed gives the same bytes; the incident profile ends as DESIGN.md says;
a storm leaves every invariant standing; the command's options and errors."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys

import pytest
from conftest import REPO

from loomtui.cli import common
from loomtui.cli import sim as sim_cmd
from loomtui.errors import ConfigError, LoomError
from loomtui.sim import simulate, simulate_many
from loomtui.sim.report import percentile
from loomtui.sim.scenarios import SCENARIOS

# `loom` with only the sim subcommand: cli/__init__ is not ours to edit.
MAIN = """
import argparse, sys
from loomtui.cli import common, sim
from loomtui.errors import LoomError
parser = argparse.ArgumentParser(prog="loom")
common.add_common_options(parser, top_level=True)
sim.register(parser.add_subparsers(dest="command", required=True))
args = parser.parse_args(sys.argv[1:])
try:
    sys.exit(args.func(args))
except LoomError as exc:
    print(f"loom: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loom")
    common.add_common_options(p, top_level=True)
    sim_cmd.register(p.add_subparsers(dest="command", required=True))
    return p


def loom_sim(capsys, *argv: str) -> tuple[int, str]:
    args = parser().parse_args(["sim", *argv])
    code = args.func(args)
    return code, capsys.readouterr().out


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


@pytest.fixture(autouse=True)
def no_loom_config(monkeypatch):
    monkeypatch.delenv("LOOM_CONFIG", raising=False)


def test_ten_days_same_seed_same_bytes_whatever_the_hash_seed():
    # Two processes with different string hashing: anything that leaned on set or dict-of-str
    # order, the wall clock, the machine or the interleaving of Loom's threads would differ
    # somewhere in ten days of events.
    procs = [subprocess.Popen([sys.executable, "-c", MAIN, "sim", "--days", "10", "--seed", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(PYTHONHASHSEED=h))
             for h in ("1", "2")]
    try:
        outs = [p.communicate(timeout=600) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], outs[0][1].decode()[-2000:]
    first, second = outs[0][0], outs[1][0]
    assert first == second
    text = first.decode()
    assert "seed 1: 10 days" in text and "invariants: all held after every step" in text
    assert "relaunches:" in text and "time to witnessed recovery" in text


def test_json_is_stable_and_documented_keys(capsys):
    code, out = loom_sim(capsys, "--profile", "storm", "--days", "1", "--seed", "3", "--seeds", "2", "--json")
    again = loom_sim(capsys, "--profile", "storm", "--days", "1", "--seed", "3", "--seeds", "2", "--json")
    assert (code, out) == again
    data = json.loads(out)
    assert set(data) == {"schema", "profile", "days", "config", "agent", "seeds", "runs", "summary"}
    assert data["seeds"] == [3, 4] and data["profile"] == "storm" and data["config"] is None and data["agent"] is None
    run = data["runs"][0]
    for key in ("seed", "steps", "faults", "relaunches", "escalations", "recovery_seconds_p50",
                "recovery_seconds_p99", "deaf_minutes_per_month", "false_recycles", "queue", "violation"):
        assert key in run
    assert data["summary"]["runs"] == 2
    assert code == (1 if data["summary"]["violations"] else 0)


# Ten storm seeds of two days each, in two parts of five so that xdist spreads them; each part
# (10 seed-days, Loom's real loops at about 5 s of CPU a stormy day) hits every recovery path on
# its own. The 20 seeds x 30 days take about an hour of CPU: bench/sim.py runs them
# (docs/SIM.md, Speed).
STORM_SEEDS = range(1, 11)
STORM_DAYS = 2
STORM_PARTS = [tuple(STORM_SEEDS[i:i + 5]) for i in range(0, len(STORM_SEEDS), 5)]


@pytest.mark.parametrize("seeds", STORM_PARTS, ids=[f"seeds{p[0]}-{p[-1]}" for p in STORM_PARTS])
def test_ten_storm_seeds_break_no_invariant(seeds):
    runs = [simulate(seed, STORM_DAYS, "storm") for seed in seeds]
    broken = [(r["seed"], r["violation"]["invariant"], r["violation"]["message"]) for r in runs if r["violation"]]
    assert broken == []
    assert [r["simulated_seconds"] for r in runs] == [STORM_DAYS * 86400.0] * len(seeds)  # every seed ran to its end
    relaunched = {cause for r in runs for cause in r["relaunches"]}
    assert {"crash", "exit", "canary_failed", "poller_missing", "tmux_gone", "resume_failed",
            "operator_fresh", "operator_resume"} <= relaunched
    assert sum(r["resume_failed_fallbacks"] for r in runs) > 0
    assert sum(r["escalations"] > 0 for r in runs) >= 3 and all(r["recoveries"] > 0 for r in runs)
    assert sum(r["operator_alerts"] for r in runs) > 0
    assert sum(r["queue"]["witnessed"] for r in runs) > 0 and sum(r["queue"]["reopened"] for r in runs) > 0
    assert sum(r["queue"]["escalated"] for r in runs) > 0
    assert sum(r["foreign_pollers_reaped"] for r in runs) > 0
    assert all(r["false_recycles"] == 0 for r in runs)


def test_seeds_spread_over_processes_run_as_they_do_one_by_one():
    seeds = [4, 5]
    assert simulate_many(seeds, 0.5, "storm", workers=2) == [simulate(seed, 0.5, "storm") for seed in seeds]


def test_the_incident_profile_ends_each_incident_as_the_design_says(capsys):
    code, out = loom_sim(capsys, "--profile", "incident")
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.startswith(("ok", "FAIL"))]
    assert len(lines) == 9 == len(SCENARIOS)
    assert all(line.startswith("ok") for line in lines)
    assert "9 of 9 incidents end as DESIGN.md says" in out
    for sc in SCENARIOS:
        assert sc.name in out


def test_incident_json(capsys):
    code, out = loom_sim(capsys, "--profile", "incident", "--json")
    data = json.loads(out)
    assert code == 0 and data["passed"] == 9 and data["failed"] == 0
    outcomes = {s["name"]: s["outcome"] for s in data["scenarios"]}
    assert outcomes["recovery_storm"] == "held"
    assert outcomes["supervisor_blind_spot"] == "escalated"
    assert outcomes["confident_false_detector"] == "undisturbed"
    assert outcomes["silent_deafness"] == "recovered"


# The incident profile's spread: seeds 1..10 and ten more from the date, drawn from 11..200, all of
# which end every incident as DESIGN.md says today (`loom sim --profile incident --seeds 200`).
DATED_SEEDS = random.Random(datetime.date.today().toordinal()).sample(range(11, 201), 10)


def test_the_incident_profile_runs_every_seed_asked_for(capsys):
    code, out = loom_sim(capsys, "--profile", "incident", "--seeds", "10")
    assert code == 0, out
    assert [line for line in out.splitlines() if line.startswith("seed ")] == \
        [f"seed {seed}: 9 of 9 incidents end as DESIGN.md says" for seed in range(1, 11)]
    assert out.splitlines()[-1] == "10 seeds: every incident ended as DESIGN.md says on each"


@pytest.mark.parametrize("seed", DATED_SEEDS)
def test_the_incident_profile_on_a_seed_of_the_date(seed, capsys):
    code, out = loom_sim(capsys, "--profile", "incident", "--seed", str(seed))
    assert code == 0, f"replay with: loom sim --profile incident --seed {seed}\n{out}"


def test_an_incident_that_fails_names_its_first_seed_and_the_replay(monkeypatch, capsys):
    # A canary that recycles on one miss: the busy agent of confident_false_detector is recycled.
    from loomtui.canary import loop as canary_loop
    from loomtui.canary import rules as canary_rules

    monkeypatch.setattr(canary_loop, "should_recycle",
                        lambda runs, launch_seq, misses, *_: canary_rules.consecutive_misses(runs, launch_seq) >= 1)
    code, out = loom_sim(capsys, "--profile", "incident", "--seed", "3", "--seeds", "3")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "loom sim: profile incident, seeds 3..5: the nine incidents of DESIGN.md on each"
    failed = [int(line.split()[1].rstrip(":")) for line in lines if line.startswith("seed ") and line.endswith(":")]
    assert failed and failed[0] == 3 and set(failed) <= {3, 4, 5}
    assert "FAIL 2. confident_false_detector: violation: definitive_signal" in out
    assert "  replay: loom sim --profile incident --seed 3\n" in out  # the seed is all it takes: no --days
    assert lines[-1] == "first failing seed 3: replay with loom sim --profile incident --seed 3"
    code, out = loom_sim(capsys, "--profile", "incident", "--seed", "3", "--seeds", "3", "--json")
    data = json.loads(out)
    assert code == 1 and data["failed_seeds"] == failed and data["seeds"] == [3, 4, 5]
    assert len(data["scenarios"]) == 27 and data["passed"] + data["failed"] == 27
    assert [s["seed"] for s in data["scenarios"] if not s["passed"]][0] == 3


def test_storm_seeds_name_the_first_failing_seed_and_the_replay(tmp_path, capsys):
    path = tmp_path / "loom.toml"
    path.write_text('[canary]\nmisses_to_recycle = 1\nack_timeout = "5s"\n')
    code, out = loom_sim(capsys, "--config", str(path), "--profile", "storm", "--days", "1", "--seed", "2",
                         "--seeds", "3")
    assert code == 1
    replay = f"loom sim --profile storm --seed 2 --days 1 --config {path}"
    assert out.splitlines()[-1] == f"first failing seed 2: replay with {replay}"


def test_several_agents_each_simulated_by_name(tmp_path, capsys):
    path = tmp_path / "loom.toml"
    path.write_text('[[agents]]\nname = "alpha"\n[[agents]]\nname = "beta"\n'
                    '[agents.canary]\nmisses_to_recycle = 1\nack_timeout = "5s"\n')
    code, out = loom_sim(capsys, "--config", str(path), "--profile", "storm", "--days", "1", "--agent", "beta")
    assert code == 1 and out.splitlines()[0].endswith(f"config {path}, agent beta")
    assert f"replay: loom sim --profile storm --seed 1 --days 1 --config {path} --agent beta" in out
    code, out = loom_sim(capsys, "--config", str(path), "--profile", "storm", "--days", "1")  # the first: alpha
    assert code == 0 and out.splitlines()[0].endswith(f"config {path}, agent alpha")
    args = parser().parse_args(["sim", "--config", str(path), "--agent", "gamma"])
    with pytest.raises(LoomError) as err:
        args.func(args)
    assert err.value.exit_code == 2 and "no agent named 'gamma' (agents: alpha, beta)" in str(err.value)


def test_seeds_summarise(capsys):
    code, out = loom_sim(capsys, "--profile", "calm", "--days", "3", "--seed", "5", "--seeds", "3")
    assert code == 0
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("seed ")] == \
        ["seed 5", "seed 6", "seed 7"]
    assert "3 seeds" in out and "all invariants held" in out


def test_an_operators_config_drives_the_rules(tmp_path, capsys):
    # An operator who would recycle on one miss sees, before deploying, a busy agent recycled.
    path = tmp_path / "loom.toml"
    path.write_text('[agent]\npoller_match = "telegram-poller"\n[canary]\nmisses_to_recycle = 1\n')
    code, out = loom_sim(capsys, "--config", str(path), "--profile", "storm", "--days", "10", "--seed", "1")
    assert code == 1
    assert f"config {path}" in out
    assert "VIOLATION definitive_signal" in out and "the agent could hear" in out
    assert f"replay: loom sim --profile storm --seed 1 --days 10 --config {path}" in out


def test_a_bad_config_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "loom.toml"
    path.write_text('[canary]\nmisses_to_recycle = "two"\n')
    args = parser().parse_args(["sim", "--config", str(path)])
    with pytest.raises(ConfigError) as err:
        args.func(args)
    assert err.value.exit_code == 2
    assert "canary.misses_to_recycle" in str(err.value) and "\n" not in str(err.value)
    missing = parser().parse_args(["sim", "--config", str(tmp_path / "nope.toml")])
    with pytest.raises(LoomError) as err:
        missing.func(missing)
    assert err.value.exit_code == 2 and "not found" in str(err.value)


def test_the_error_reaches_the_terminal_as_loom_prints_it(tmp_path):
    path = tmp_path / "loom.toml"
    path.write_text("[canary]\nack_timeout = 5\n")
    proc = subprocess.run([sys.executable, "-c", MAIN, "sim", "--config", str(path)], capture_output=True,
                          text=True, env=clean_env(), timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("loom: ") and "canary.ack_timeout" in proc.stderr


@pytest.mark.parametrize("argv", [["--days", "0"], ["--days", "x"], ["--seeds", "0"], ["--seed", "1.5"],
                                  ["--profile", "chaos"]])
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(["sim", *argv])
    assert exc.value.code == 2


def test_percentile_is_nearest_rank():
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([float(i) for i in range(1, 101)], 100) == 100.0


# -- a wall clock stepped a day forward and a day back ------------------------------------------

CLOCK_SEEDS = (1, 2, 3)


def test_the_wall_clock_stepped_a_day_each_way_breaks_no_invariant(capsys):
    # The real `loom sim` engine with the clock faults forced (the clockjump profile: the storm's
    # faults, and the wall clock stepped a day forward or back about every 70 minutes, some 40
    # times in two days); only the wall clock moves.
    code, out = loom_sim(capsys, "--profile", "clockjump", "--days", "2", "--seed", str(CLOCK_SEEDS[0]),
                         "--seeds", str(len(CLOCK_SEEDS)), "--json")
    data = json.loads(out)
    broken = [(r["seed"], r["violation"]["invariant"], r["violation"]["message"]) for r in data["runs"]
              if r["violation"]]
    assert code == 0 and broken == [] and data["seeds"] == list(CLOCK_SEEDS)
    for run in data["runs"]:
        assert run["faults"].get("clock_forward", 0) > 10 and run["faults"].get("clock_back", 0) > 10
        assert run["simulated_seconds"] == 2 * 86400.0
    # The steps met every deadline the invariants judge: probes that witnessed relaunches, queue
    # items that reached the operator by their backstop (and not before), deafness caught.
    assert sum(r["queue"]["escalated"] for r in data["runs"]) > 0
    assert all(r["recoveries"] > 0 and r["probes"].get("ok", 0) > 0 for r in data["runs"])
    assert {"canary_failed", "crash"} <= {cause for r in data["runs"] for cause in r["relaunches"]}


def test_deadlines_kept_on_the_wall_clock_are_caught_by_the_clock_faults(monkeypatch):
    # The bug this fault exists for: the canary's next probe measured by wall time waits a day
    # after a step back (deaf and undetected); the backstop measured by wall time reports every open
    # item at once after a step forward.
    from dataclasses import replace

    from loomtui import timing
    from loomtui.canary import rules as canary_rules
    from loomtui.sentinel import queue_rules

    real_due_in, real_decide = canary_rules.due_in, queue_rules.decide

    def due_in_by_wall(last, now, interval, ack_timeout):
        wall_only = None if last is None else replace(last, sent_mono=None, boot=None)
        return real_due_in(wall_only, timing.as_instant(now).wall, interval, ack_timeout)

    from loomtui.canary import loop as canary_loop

    monkeypatch.setattr(canary_loop, "due_in", due_in_by_wall)  # where the canary loop calls it
    # Not every seed steps the clock back while a probe is due within three days: most do.
    caught = [v for v in (simulate(seed, 3, "clockjump")["violation"] for seed in (1, 2, 3)) if v is not None]
    assert len(caught) >= 2 and all(v["invariant"] in ("deaf_bound", "never_silent") for v in caught)
    assert any(v["invariant"] == "deaf_bound" for v in caught)

    def decide_by_wall(item, cfg, now, **kw):
        wall_only = replace(item, first_seen_mono=None, claimed_mono=None)
        return real_decide(wall_only, cfg, timing.as_instant(now).wall, **kw)

    monkeypatch.setattr(canary_loop, "due_in", real_due_in)
    from loomtui.sentinel import tick as sentinel_tick

    monkeypatch.setattr(sentinel_tick, "decide", decide_by_wall)  # where the sentinel's tick calls it
    caught = [simulate(seed, 3, "clockjump")["violation"] for seed in (1, 2, 3)]
    assert all(v is not None and v["invariant"] in ("backstop_not_early", "queue_backstop") for v in caught)
    assert any(v["invariant"] == "backstop_not_early" for v in caught)


def test_the_config_loom_would_read_is_the_one_simulated(capsys, monkeypatch, tmp_path):
    """No --config: the default file `loom` reads (here under XDG_CONFIG_HOME) is simulated and named,
    not loom sim's own defaults; without one, the defaults, said as such."""
    monkeypatch.delenv("LOOM_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    code, out = loom_sim(capsys, "--days", "0.05", "--json")
    assert code == 0 and json.loads(out)["config"] is None
    path = tmp_path / "loom" / "config.toml"
    path.parent.mkdir()
    path.write_text("[canary]\nmisses_to_recycle = 3\n")
    code, out = loom_sim(capsys, "--days", "0.05", "--json")
    assert code == 0 and json.loads(out)["config"] == str(path)
    path.write_text("[canary]\nmises_to_recycle = 3\n")  # a bad one is the operator's error, named
    with pytest.raises(ConfigError, match="canary.mises_to_recycle: unknown key"):
        loom_sim(capsys, "--days", "0.05")


def test_skipping_the_canary_looks_that_would_give_a_quiet_answer_again_changes_nothing_but_the_steps(monkeypatch):
    """The simulator sleeps the canary loop through a hold until the store changes (the daemon looks
    every CANARY_PERIOD); every look it skips would have given the same answer, so a stormy day reads
    the same with every look taken, to the byte, in fewer steps."""
    from dataclasses import replace

    from loomtui.canary import loop as canary_loop

    skipped = simulate(1, 1.0, "storm")
    every_look = canary_loop.next_step
    monkeypatch.setattr(canary_loop, "next_step", lambda facts: replace(every_look(facts), quiet=False))
    taken = simulate(1, 1.0, "storm")
    assert skipped["escalations"] > 0  # the day has holds to sleep through
    assert taken["steps"] > skipped["steps"]
    assert {**taken, "steps": 0} == {**skipped, "steps": 0}


def test_the_booting_check_counts_the_grace_from_the_record_loom_put_back_after_a_stubborn_stop():
    """`no_typing_into_a_booting_agent` counts the boot grace as Loom does, from its launch record.
    A relaunch whose stop left the old agent running puts the record before it back
    (launch._nothing_launched): the old agent's grace runs from that one, not from the failed
    relaunch (storm seed 3, day 29.7, README's hooked config: a probe typed as that grace ended
    was taken for one typed into a booting agent)."""
    from loomtui.sim.engine import Sim
    from loomtui.sim.profiles import PROFILES, default_config
    from loomtui.sim.world import Agent

    checker = Sim(default_config(), PROFILES["incident"], 1, 0.01).checker
    grace = default_config().agent.boot_grace
    slow = Agent(7, "s", "resume", started=101.0, ready_at=101.0 + 2 * grace)  # a slow boot
    checker.recorded_launch = 100.0      # its relaunch, recorded before the old tree was ended
    assert checker.booting(slow, 100.0 + grace - 0.5) and not checker.booting(slow, 100.0 + grace)
    checker.recorded_launch = 150.0      # the operator's relaunch, whose stop would not end it...
    checker.on_launch_failed(100.0)      # ...and the record Loom holds again
    assert checker.recorded_launch == 100.0 and not checker.booting(slow, 100.0 + grace)
    checker.on_launch_failed(None)       # no record at all: the last one stays
    assert checker.recorded_launch == 100.0


def test_a_config_of_several_agents_is_simulated_without_the_machine_s_tmux(monkeypatch):
    # The foreign-poller scan looks at every configured agent's pane; in the simulator only the
    # simulated agent's driver is the world's, and the others were asked of the machine's own
    # tmux (a host's real agent then steered the run, or no tmux left every stranger unreaped).
    from loomtui.agent.driver import TmuxDriver
    from loomtui.config import parse_config

    asked: list[str] = []

    def machine_tmux(self):
        asked.append(self.agent.session)
        return None

    monkeypatch.setattr(TmuxDriver, "pane_info", machine_tmux)
    config = parse_config({"agents": [{"name": "main", "poller_match": "telegram-poller"},
                                      {"name": "research", "poller_match": "telegram-poller"}]}, "c.toml", None)
    report = simulate(1, 0.3, "storm", config)
    assert asked == [] and report["violation"] is None
    assert report["foreign_pollers_reaped"] > 0
