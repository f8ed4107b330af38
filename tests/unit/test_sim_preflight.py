"""`loom doctor`'s simulation of the operator's config: fixed seeds, days set by the config alone,
the first broken invariant named with a command that replays it step for step."""

from __future__ import annotations

import shlex

from conftest import REPO

from loomtui.config import load_config
from loomtui.report.doctor import FAIL, OK, WARN, check_simulation, run_checks
from loomtui.sim import preflight
from loomtui.sim.profiles import default_config

from test_sim import loom_sim

FAST = '[canary]\nmisses_to_recycle = 1\nack_timeout = "5s"\n'


def test_the_days_are_the_configs_alone_fewer_when_the_loops_tick_faster():
    assert preflight.days_for(default_config()) == preflight.DAYS == 0.5
    assert preflight.days_for(default_config({"watchdog": {"interval": "1m"}})) == 0.5  # never more
    fast = preflight.days_for(default_config({"watchdog": {"interval": "20s"}}))
    assert 0.1 <= fast < 0.5 and round(fast * 10) == fast * 10  # tenths of a day: a plain --days
    assert preflight.days_for(default_config({"watchdog": {"interval": "1s"}, "canary": {"interval": "1s"}})) == 0.1


def test_a_config_that_recycles_busy_agents_is_named_and_replays_step_for_step(tmp_path, capsys):
    path = tmp_path / "loom.toml"
    path.write_text(FAST)
    config, _ = load_config(str(path), {})
    verdict = preflight.simulate_config(config, str(path))
    assert verdict.seed in preflight.SEEDS and verdict.invariant == "definitive_signal"
    assert verdict.replay == f"loom sim --profile storm --seed {verdict.seed} --days 0.5 --config {path}"
    assert verdict == preflight.simulate_config(config, str(path))  # stable: the same answer each time
    argv = shlex.split(verdict.replay)[2:]
    code, out = loom_sim(capsys, *argv)
    assert code == 1
    assert "VIOLATION definitive_signal at step " in out and f"({verdict.at}): {verdict.message}" in out


def test_designs_config_passes():
    config, _ = load_config(str(REPO / "tests" / "unit" / "data" / "design_config.toml"), {})
    verdict = preflight.simulate_config(config, "design_config.toml")
    assert verdict.seed is None and verdict.steps > 0 and verdict.days == 0.5


def test_readmes_stream_json_config_passes_as_written(tmp_path):
    # README's stream-json config (its hooks too, so the 1-minute wait), simulated with the pump
    # (sim/pump_model.py). Its seed 1 broke `definitive_signal` before canary.rules.ack_deadline:
    # a slow boot the config allows was recycled.
    text = (REPO / "README.md").read_text().split("## The stream-json driver", 1)[1]
    path = tmp_path / "loom.toml"
    path.write_text(text.split("```toml\n", 1)[1].split("```", 1)[0])
    config, _ = load_config(str(path), {})
    assert config.agent.driver == "stream-json" and "{hook_settings}" in config.agent.fresh_command
    verdict = preflight.simulate_config(config, str(path))
    assert verdict.seed is None and verdict.cut_short == {}, verdict


def test_the_doctor_line_names_the_invariant_the_seed_and_the_replay(tmp_path):
    path = tmp_path / "loom.toml"
    path.write_text(FAST)
    config, _ = load_config(str(path), {})
    [check] = check_simulation(config, str(path))
    v = preflight.simulate_config(config, str(path))
    assert check.status == FAIL and check.name == "simulation"
    assert check.detail == (f"invariant definitive_signal broke on seed {v.seed} at {v.at} (storm, 0.5 days): "
                            f"{v.message}; replay with {v.replay}")


def test_several_agents_each_simulated_and_named(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[[agents]]\nname = "alpha"\n[[agents]]\nname = "beta"\n'
                    + FAST.replace("[canary]", "[agents.canary]"))
    checks = {c.name: c for c in run_checks(str(path), str(tmp_path / "state"), {})}
    assert checks["simulation alpha"].status == OK and "every invariant held" in checks["simulation alpha"].detail
    beta = checks["simulation beta"]
    assert beta.status == FAIL and beta.detail.endswith(f"--config {path} --agent beta")
    assert "simulation" not in checks


def test_no_config_file_simulates_loom_sims_defaults(tmp_path):
    [check] = check_simulation(default_config(), None)
    assert check.status == OK and check.detail.startswith("storm, seeds 1..4, 0.5 days each of loom sim's defaults")


QUIET_1M = ('[agent]\nfresh_command = "claude --settings {hook_settings} --session-id {session_id}"\n'
            'resume_command = "claude --settings {hook_settings} --resume {session_id}"\n'
            '[canary]\nturn_quiet = "1m"\n')


def test_a_config_that_takes_ordinary_turns_for_wedges_is_warned_of_with_a_replay(tmp_path, capsys):
    # turn_quiet = 1m with hooks breaks no invariant: Loom is told to take a turn a minute without a
    # hook event for a wedge, and does. But the simulated operator's tool calls run for minutes, and
    # doctor said only "every invariant held" while the agent was recycled at work.
    path = tmp_path / "loom.toml"
    path.write_text(QUIET_1M)
    config, _ = load_config(str(path), {})
    [check] = check_simulation(config, str(path))
    v = preflight.simulate_config(config, str(path))
    assert v.seed is None and v.cut_short.get("turn_quiet", 0) > 0 and v.cut_seed in preflight.SEEDS
    assert check.status == WARN and "every invariant held" in check.detail
    assert f"quiet longer than canary.turn_quiet (1m), where a tool call may run 10m without a word; " \
           f"replay with {v.cut_replay}" in check.detail
    assert v.cut_replay == f"loom sim --profile storm --seed {v.cut_seed} --days 0.5 --config {path}"
    code, out = loom_sim(capsys, *shlex.split(v.cut_replay)[2:])
    assert code == 0 and "  recycled while it could hear, by design: turn quiet " in out


def test_readmes_hooked_config_cuts_no_ordinary_turn_short(tmp_path):
    text = (REPO / "README.md").read_text()
    block = next(b.split("```", 1)[0] for b in text.split("```toml\n")[1:] if "{hook_settings}" in b.split("```", 1)[0])
    path = tmp_path / "loom.toml"
    path.write_text(block)
    config, _ = load_config(str(path), {})
    verdict = preflight.simulate_config(config, str(path))
    assert verdict.seed is None and verdict.cut_short == {}, verdict
