"""`loom doctor` with several agents: each agent's canary check, named, against its own commands."""

from __future__ import annotations

from loomtui.report.doctor import FAIL, OK, run_checks

GOOD = "claude --add-dir {state_dir}/acks --allowedTools 'Bash(touch:*)' "


def test_each_agent_is_checked_and_named(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f"""
[[agents]]
name = "alpha"
fresh_command = "{GOOD}--session-id {{session_id}}"
resume_command = "{GOOD}--resume {{session_id}}"
[[agents]]
name = "beta"
""")
    checks = {c.name: c for c in run_checks(str(config), str(tmp_path / "state"), {})}
    assert checks["canary alpha"].status == OK
    assert checks["canary beta"].status == FAIL and "--allowedTools" in checks["canary beta"].detail
    assert "canary" not in checks


def test_one_agent_keeps_its_plain_check_name(tmp_path):
    checks = {c.name for c in run_checks(None, str(tmp_path / "state"), {"XDG_CONFIG_HOME": str(tmp_path)})}
    assert "canary" in checks


def test_a_config_that_does_not_load_stops_doctor_there_and_makes_nothing(tmp_path):
    # It went on with the defaults: a store made in a state dir the operator never named, checks
    # of a setup that is not theirs.
    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{tmp_path / "mine"}"\n[agent]\nboot_grace = 90\n')
    home = tmp_path / "home"
    env = {"HOME": str(home), "XDG_STATE_HOME": str(home / ".local" / "state")}
    checks = run_checks(str(config), None, env)
    assert [c.name for c in checks] == ["tmux", "config"] and checks[-1].status == FAIL
    assert "agent.boot_grace" in checks[-1].detail
    assert not home.exists() and not (tmp_path / "mine").exists()


def test_each_agents_own_memory_dir_is_checked_once_and_named(tmp_path):
    from loomtui.config import load_config
    from loomtui.report.first_start import check_memory

    shared = tmp_path / "shared"
    shared.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(f"""
[memory]
dir = "{shared}"
[[agents]]
name = "alpha"
[[agents]]
name = "beta"
[[agents]]
name = "research"
fresh_command = "claude --append-system-prompt-file {{memory_index}} --session-id {{session_id}}"
resume_command = "claude --resume {{session_id}}"
[agents.memory]
dir = "{tmp_path / 'nope'}"
""")
    loaded, _ = load_config(str(config), {})
    found = {c.name: c for c in check_memory(loaded)}
    assert found["memory alpha, beta"].status == OK
    assert found["memory research"].status == FAIL and "nope" in found["memory research"].detail
