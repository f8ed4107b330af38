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
