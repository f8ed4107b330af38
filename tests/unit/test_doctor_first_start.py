"""`loom doctor` catches what a first start cannot run (issue 27): the agent's program, its cwd, the
Telegram token and chat, the memory dir, an installed service; and passes on the demo's config."""

from __future__ import annotations

import os
import sys

import pytest

from loomtui.config import load_config
from loomtui.demo.launcher import Demo
from loomtui.report.doctor import FAIL, OK, WARN, run_checks
from loomtui.report.first_start import (check_agent, check_memory, check_metrics, check_service, check_telegram,
                                        program)


def config_of(tmp_path, text: str):
    path = tmp_path / "loom.toml"
    path.write_text(text)
    return load_config(str(path), {})[0]


@pytest.mark.parametrize(("command", "word"), [
    ("claude --session-id {session_id}", "claude"),
    ("claude --settings {hook_settings} --resume {session_id}", "claude"),
    ("/opt/bin/claude --resume {session_id}", "/opt/bin/claude"),
    ("FOO=1 BAR='a b' claude --session-id {session_id}", "claude"),
    ("env -i PATH=/usr/bin claude --session-id {session_id}", "claude"),
    ("exec nice -n 5 timeout 10h claude --resume {session_id}", "claude"),
    ("'my agent' --session-id {session_id}", "my agent"),
    ("claude 'unbalanced --session-id {session_id}", None),
])
def test_the_program_a_command_runs(command, word):
    assert program(command) == word


def test_a_missing_program_and_a_missing_cwd_each_fail_naming_it(tmp_path):
    config = config_of(tmp_path, f"""
[agent]
cwd = "{tmp_path / 'nowhere'}"
fresh_command = "no-such-agent-cli --session-id {{session_id}}"
resume_command = "{tmp_path}/bin/agent --resume {{session_id}}"
""")
    checks = {c.name: c for c in check_agent(config, {"PATH": str(tmp_path)})}
    assert checks["cwd"].status == FAIL and str(tmp_path / "nowhere") in checks["cwd"].detail
    agent = checks["agent"]
    assert agent.status == FAIL
    assert "'no-such-agent-cli', which is not on the agent's PATH" in agent.detail
    assert f"'{tmp_path}/bin/agent', which is not an executable file" in agent.detail


def test_a_program_found_on_the_agents_own_path_and_a_cwd_that_exists_pass(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / "agent-cli"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    config = config_of(tmp_path, f"""
[agent]
cwd = "{tmp_path}"
fresh_command = "agent-cli --session-id {{session_id}}"
resume_command = "agent-cli --resume {{session_id}}"
env = {{ PATH = "{bin_dir}" }}
""")
    checks = {c.name: c for c in check_agent(config, {"PATH": "/nonexistent"})}
    assert checks["cwd"].status == OK
    assert checks["agent"].status == OK and str(cli) in checks["agent"].detail
    cli.chmod(0o644)  # not executable: a shell would refuse it too
    assert {c.name: c for c in check_agent(config, {})}["agent"].status == FAIL


def telegram(tmp_path, token_mode: int | None, extra: str = ""):
    token = tmp_path / "token"
    if token_mode is not None:
        token.write_text("123456:secret-token-value\n")
        token.chmod(token_mode)
    config = config_of(tmp_path, f'[telegram]\nchat_id = 42\ntoken_file = "{token}"\n{extra}')
    [check] = check_telegram(config, {})
    return check


def test_the_token_file_must_be_readable_and_private(tmp_path):
    missing = telegram(tmp_path, None)
    assert missing.status == FAIL and "cannot read" in missing.detail
    open_file = telegram(tmp_path, 0o644)
    assert open_file.status == FAIL and "mode 0644 is too open; run: chmod 600" in open_file.detail
    private = telegram(tmp_path, 0o600)
    assert private.status == OK and "chat 42" in private.detail
    assert all("secret-token-value" not in c.detail for c in (missing, open_file, private))


def test_a_token_from_the_environment_must_be_set(tmp_path):
    config = config_of(tmp_path, '[telegram]\nchat_id = 42\ntoken_env = "TOKEN"\n')
    assert [c.status for c in check_telegram(config, {"TOKEN": "123456:abcdefgh"})] == [OK]
    [unset] = check_telegram(config, {})
    assert unset.status == FAIL and "set TOKEN" in unset.detail
    off = config_of(tmp_path, "[telegram]\nchat_id = 0\n")
    assert [c.status for c in check_telegram(off, {})] == [OK]


def test_with_a_service_installed_the_token_is_looked_for_where_the_service_has_it(tmp_path):
    # The daemon runs under the unit, which reads its variables from its EnvironmentFile: a token
    # in the doctor's shell alone said ok, and the service ran without Telegram; one only in the
    # file was reported missing.
    config = config_of(tmp_path, '[telegram]\nchat_id = 42\ntoken_env = "TOKEN"\n')
    unit, env_file = tmp_path / "loom.service", tmp_path / "env"
    unit.write_text("[Service]\nEnvironmentFile=-%h/.config/loom/env\n")
    shell = {"TOKEN": "123456:from-the-shell"}
    [absent] = check_telegram(config, shell, unit, env_file)
    assert absent.status == WARN and f"reads its secrets from {env_file}, which does not set TOKEN" in absent.detail
    env_file.write_text("# the service's secrets\nOTHER=1\nTOKEN='123456:from-the-file'\n")
    env_file.chmod(0o644)
    [too_open] = check_telegram(config, {}, unit, env_file)
    assert too_open.status == FAIL and f"mode 0644 is too open; run: chmod 600 {env_file}" in too_open.detail
    env_file.chmod(0o600)
    [there] = check_telegram(config, {}, unit, env_file)
    assert there.status == OK and there.detail == f"chat 42, token from $TOKEN in {env_file} (the service's)"
    env_file.write_text("TOKEN=\n")
    [empty] = check_telegram(config, shell, unit, env_file)
    assert empty.status == FAIL and "no bot token" in empty.detail and str(env_file) in empty.detail
    assert all("from-the" not in c.detail for c in (absent, too_open, there, empty))
    # launchd passes the agent's plist variables only: a token variable never reaches the daemon.
    import plistlib

    plist = tmp_path / "dev.loom.supervise.plist"
    plist.write_bytes(plistlib.dumps({"Label": "dev.loom.supervise", "EnvironmentVariables": {"PATH": "/usr/bin"}}))
    [launchd] = check_telegram(config, shell, plist, env_file)
    assert launchd.status == WARN and "sets no TOKEN" in launchd.detail and "set telegram.token_file" in launchd.detail
    plist.write_bytes(plistlib.dumps({"EnvironmentVariables": {"TOKEN": "123456:from-the-plist"}}))
    [in_plist] = check_telegram(config, {}, plist, env_file)
    assert in_plist.status == OK and in_plist.detail == f"chat 42, token from $TOKEN in {plist} (the launchd agent's)"
    # A token file is the same for every service; no service: the shell's variable, as before.
    assert [c.status for c in check_telegram(config, shell, tmp_path / "absent.service", env_file)] == [OK]


def test_the_memory_dir_is_required_only_when_the_command_passes_its_index(tmp_path):
    plain = config_of(tmp_path, f'[memory]\ndir = "{tmp_path / "mem"}"\n')
    assert [c.status for c in check_memory(plain)] == [OK]  # nothing needs it
    indexed = config_of(tmp_path, f"""
[agent]
fresh_command = "claude --append-system-prompt {{memory_index}} --session-id {{session_id}}"
[memory]
dir = "{tmp_path / 'mem'}"
""")
    assert [c.status for c in check_memory(indexed)] == [FAIL]
    (tmp_path / "mem").mkdir()
    assert [c.status for c in check_memory(indexed)] == [OK]


def test_an_installed_service_must_start_this_loom(tmp_path):
    unit = tmp_path / "loom.service"
    assert list(check_service(unit)) == []  # none installed: nothing to say
    unit.write_text('[Service]\nExecStart="/usr/bin/python3" "-m" "loomtui" "supervise"\n')
    [other] = check_service(unit)
    assert other.status == FAIL and "install-service" in other.detail
    unit.write_text(f'[Service]\nExecStart="{sys.executable}" "-m" "loomtui" "supervise"\n')
    assert [c.status for c in check_service(unit)] == [OK]


def test_the_demos_config_passes_every_check(tmp_path):
    demo = Demo(tmp_path / "demo")
    path = demo.write()
    checks = run_checks(str(path), None, {"PATH": os.environ.get("PATH", "")}, unit=tmp_path / "none")
    failed = [c.line() for c in checks if c.status == FAIL]
    assert failed == []
    names = {c.name for c in checks}
    assert {"agent", "cwd", "telegram", "memory", "simulation"} <= names


def test_the_metrics_token_file_must_be_readable_and_private(tmp_path):
    token = tmp_path / "metrics-token"
    config = config_of(tmp_path, f'[metrics]\nlisten = "127.0.0.1:9464"\ntoken_file = "{token}"\n')
    [missing] = check_metrics(config)
    assert missing.status == FAIL and f"metrics.token_file {token}: cannot read" in missing.detail
    token.write_text("scrape-token-value\n")
    token.chmod(0o640)
    [open_file] = check_metrics(config)
    assert open_file.status == FAIL and "mode 0640 is too open" in open_file.detail
    token.chmod(0o600)
    [ok] = check_metrics(config)
    assert ok.status == OK and "scrape-token-value" not in ok.detail
    assert list(check_metrics(config_of(tmp_path, '[metrics]\nlisten = "127.0.0.1:9464"\n'))) == []
