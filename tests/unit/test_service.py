"""`loom install-service`: the unit's text, key by key, its escaping read back the way systemd reads
it, the plist, the lingering check, and the tmux server's own unit (argv only; the e2e starts it)."""

from __future__ import annotations

import os
import plistlib
import re
import shutil
import subprocess
import sys

import pytest
from conftest import run_loom

from loomtui.agent import tmux
from loomtui.context import Context
from loomtui.daemon import service
from loomtui.errors import LoomError
from loomtui.report import doctor

# Every awkward character a path may hold for systemd: its specifier, its variable, a space, a quote.
ODD = 'st %h $HOME ${X} a"b'


def service_section(unit: str) -> dict[str, list[str]]:
    """[Service] as KEY -> every value given (a key may be repeated), comments dropped."""
    found: dict[str, list[str]] = {}
    section = None
    for line in unit.splitlines():
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def unquote_words(text: str, *, exec_line: bool) -> list[str]:
    """systemd's reading (systemd.syntax "Quoting", systemd.service "Command lines"): words split
    at spaces, double quotes, C escapes, then %% -> % and, in an Exec line's arguments, $$ -> $."""
    words = []
    for match in re.finditer(r'"((?:[^"\\]|\\.)*)"|(\\;)', text):
        if match[2]:
            words.append(";")
            continue
        raw = re.sub(r"\\x([0-9a-f]{2})|\\(.)", lambda m: chr(int(m[1], 16)) if m[1] else m[2], match[1])
        raw = raw.replace("%%", "%")
        if exec_line and words:  # the program itself is never variable-expanded
            raw = raw.replace("$$", "$")
        words.append(raw)
    return words


@pytest.fixture
def ctx(tmp_path):
    state = tmp_path / ODD.replace('"', "") / "state"
    config = tmp_path / "cfg 100% $X" / "config.toml"
    config.parent.mkdir()
    config.write_text("[telegram]\ntoken_env = 'LOOM_TEST_TOKEN'\n")
    context = Context.load(str(config), str(state), environ={})
    yield context
    context.close()


def test_the_unit_keeps_the_agent_out_of_its_cgroup_and_its_sandbox(ctx):
    keys = service_section(service.systemd_unit(ctx, {"PATH": "/usr/bin:/bin"}))
    # The tmux server starts in a unit of its own; everything else the daemon started dies with it.
    assert keys["KillMode"] == ["control-group"]
    assert f'"{tmux.UNIT_ENV}={tmux.UNIT_ENV_VALUE}"' in keys["Environment"]
    assert keys["Restart"] == ["always"]


def test_the_unit_is_hardened_with_what_fits_a_user_service(ctx):
    keys = service_section(service.systemd_unit(ctx, {"PATH": "/usr/bin:/bin"}))
    for key, value in {"NoNewPrivileges": "yes", "UMask": "0077", "ProtectSystem": "strict",
                       "RestrictSUIDSGID": "yes", "LockPersonality": "yes", "ProtectHome": "read-only",
                       "RestrictNamespaces": "yes", "SystemCallArchitectures": "native"}.items():
        assert keys.get(key) == [value], key
    # PrivateTmp hides tmux's socket; MemoryDenyWriteExecute breaks JITs; an empty capability
    # bounding set fails a user unit at start (218/CAPABILITIES).
    for absent in ("PrivateTmp", "MemoryDenyWriteExecute", "CapabilityBoundingSet", "PrivateUsers"):
        assert absent not in keys, absent
    assert "AF_UNIX" in keys["RestrictAddressFamilies"][0] and "AF_INET6" in keys["RestrictAddressFamilies"][0]


def test_read_write_paths_are_the_state_dir_and_tmux_tmpdir_escaped(ctx, tmp_path):
    tmux_tmp = tmp_path / "tmux 50%"
    tmux_tmp.mkdir()
    keys = service_section(service.systemd_unit(ctx, {"PATH": "/bin", "TMUX_TMPDIR": str(tmux_tmp)}))
    [line] = keys["ReadWritePaths"]
    assert unquote_words(line, exec_line=False) == [f"-{ctx.state_dir}", f"-{tmux_tmp}"]
    assert "%%h" in line and "$HOME" in line and "$$" not in line  # no variables in this directive
    # The daemon looks for the socket where the operator's tmux does.
    assert f'"TMUX_TMPDIR={str(tmux_tmp).replace("%", "%%")}"' in keys["Environment"]
    # And its temporary files there too: /tmp is not writable under ProtectSystem=strict then.
    assert f'"TMPDIR={os.path.realpath(tmux_tmp).replace("%", "%%")}"' in keys["Environment"]
    default = service_section(service.systemd_unit(ctx, {"PATH": "/bin"}))
    assert not any(line.startswith('"TMPDIR=') for line in default["Environment"])
    assert unquote_words(default["ReadWritePaths"][0], exec_line=False)[1] == "-" + os.path.realpath("/tmp")


def test_a_replicated_memory_dir_is_writable_to_the_daemon(tmp_path):
    """The replica loop commits, pulls and checks out in the memory dir: with the home read-only
    (ProtectHome) and the dir not in ReadWritePaths, every sync failed, a loop_error a minute."""
    mem, plain = tmp_path / "mem", tmp_path / "plain"
    config = tmp_path / "config.toml"
    config.write_text(f'[memory]\ndir = "{mem}"\nremote = "{tmp_path / "remote.git"}"\n'
                      f'[[agents]]\nname = "a"\n[[agents]]\nname = "b"\n[agents.memory]\ndir = "{plain}"\nremote = ""\n')
    replicated = Context.load(str(config), str(tmp_path / "state"), environ={})
    try:
        keys = service_section(service.systemd_unit(replicated, {"PATH": "/bin"}))
        paths = unquote_words(keys["ReadWritePaths"][0], exec_line=False)
        assert f"-{mem}" in paths and f"-{plain}" not in paths  # only what the daemon writes
    finally:
        replicated.close()


def test_exec_start_reads_back_as_the_command(ctx):
    keys = service_section(service.systemd_unit(ctx, {"PATH": "/bin"}))
    [line] = keys["ExecStart"]
    assert unquote_words(line, exec_line=True) == service.command(ctx)
    assert "%%h" in line and "$$HOME" in line and "$${X}" in line and "100%%" in line
    assert str(ctx.config_path).replace("%", "%%").replace("$", "$$") in line


def test_environment_lines_escape_specifiers_and_quotes(ctx):
    keys = service_section(service.systemd_unit(ctx, {"PATH": '/opt/50% "x"/bin:$HOME/bin'}))
    path_line = next(v for v in keys["Environment"] if v.startswith('"PATH='))
    assert unquote_words(path_line, exec_line=False) == ['PATH=/opt/50% "x"/bin:$HOME/bin']


def test_a_program_systemd_cannot_name_is_refused_with_the_path(ctx, monkeypatch):
    monkeypatch.setattr(sys, "executable", '/opt/a"b/python')
    with pytest.raises(LoomError, match=r"a\\?\"b"):
        service.systemd_unit(ctx, {"PATH": "/bin"})
    with pytest.raises(LoomError, match="line break"):
        service.systemd_unit(ctx, {"PATH": "/bin\n/x"})


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed here")
def test_systemd_reads_the_program_path_back_exactly(ctx, tmp_path, monkeypatch):
    """systemd's own parser: a program that does not exist is named in the error, unescaped."""
    program = tmp_path / "py 100% $HOME" / "python"
    monkeypatch.setattr(sys, "executable", str(program))
    unit = tmp_path / "loom-check.service"
    unit.write_text(service.systemd_unit(ctx, {"PATH": "/bin"}))
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    out = subprocess.run(["systemd-analyze", "verify", "--user", str(unit)], capture_output=True, text=True,
                         env=env, timeout=60)
    assert f"Command {program} is not executable" in out.stdout + out.stderr, out.stdout + out.stderr


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed here")
def test_systemd_analyze_security_no_longer_says_unsafe(ctx, tmp_path):
    unit = tmp_path / "loom.service"
    unit.write_text(service.systemd_unit(ctx, {"PATH": "/bin"}))
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", "--user", str(unit)],
                         capture_output=True, text=True, env=env, timeout=60)
    if "--offline" in out.stderr and "unrecognized" in out.stderr:
        pytest.skip("this systemd-analyze has no --offline")
    level = re.search(r"Overall exposure level for loom\.service: ([\d.]+) (\w+)", out.stdout)
    assert level, out.stdout + out.stderr
    assert level[2] != "UNSAFE" and float(level[1]) < 5.0, level[0]
    for key in ("NoNewPrivileges=", "RestrictSUIDSGID=", "LockPersonality=", "UMask="):
        assert re.search(rf"✓ {key}", out.stdout), key


def test_the_plist_abandons_its_process_group_and_sets_the_umask(ctx):
    plist = plistlib.loads(service.launchd_plist(ctx).encode())
    assert plist["AbandonProcessGroup"] is True
    assert plist["Umask"] == 0o077
    assert plist["ProgramArguments"] == service.command(ctx)
    assert plist["KeepAlive"] is True


def test_the_plist_carries_the_install_s_path_config_and_state_dir(ctx):
    """launchd's own PATH finds neither Homebrew's tmux nor claude: the install's goes in, read back."""
    env = {"PATH": "/opt/homebrew/bin:/usr/bin:/bin", "TMUX_TMPDIR": "/tmp/t <&> \"q\""}
    plist = plistlib.loads(service.launchd_plist(ctx, env).encode())
    variables = plist["EnvironmentVariables"]
    assert variables["PATH"] == "/opt/homebrew/bin:/usr/bin:/bin"
    assert variables["LOOM_STATE_DIR"] == str(ctx.state_dir)
    assert variables.get("LOOM_CONFIG") == (str(ctx.config_path) if ctx.config_path else None)
    assert variables["TMUX_TMPDIR"] == env["TMUX_TMPDIR"]  # XML's specials, escaped and read back whole
    assert plist["StandardErrorPath"] == str(ctx.state_dir / "supervise.log")


def test_install_writes_a_private_file(ctx, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    old = os.umask(0o022)
    try:
        path, how, _ = service.install(ctx, "systemd")
    finally:
        os.umask(old)
    assert path == tmp_path / "xdg" / "systemd" / "user" / "loom.service" and how == "written"
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert service_section(path.read_text())["ExecStart"]
    assert service.install(ctx, "systemd") == (path, "unchanged", None)


def test_a_unit_already_there_that_says_something_else_is_replaced_only_when_forced(ctx, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    path = service.target_path("systemd")
    path.parent.mkdir(parents=True)
    mine = "[Service]\nExecStart=/opt/other-loom/bin/loom supervise  # edited by hand\n"
    path.write_text(mine)
    with pytest.raises(LoomError, match=r"loom.service exists and says something else .*--force replaces it"):
        service.install(ctx, "systemd")
    assert path.read_text() == mine  # nothing lost
    backup = path.with_suffix(".service.bak")
    assert service.install(ctx, "systemd", force=True) == (path, "replaced", backup)
    assert backup.read_text() == mine
    assert service_section(path.read_text())["ExecStart"] != mine
    assert (backup.stat().st_mode & 0o777) == 0o600
    # Edited again and forced again: the first backup (the hand-edited unit) is kept, not replaced.
    edited = "[Service]\nExecStart=/opt/third/bin/loom supervise\n"
    path.write_text(edited)
    second = path.with_suffix(".service.bak.1")
    assert service.install(ctx, "systemd", force=True) == (path, "replaced", second)
    assert backup.read_text() == mine and second.read_text() == edited


def test_install_service_print_from_the_command_line(tmp_path):
    result = run_loom("install-service", "--systemd", "--print", "--state-dir", str(tmp_path / "s %x"))
    assert result.returncode == 0, result.stderr
    assert '"--state-dir" "' + str(tmp_path / "s %%x") + '"' in result.stdout


# -- the tmux server's own unit ----------------------------------------------------------------

def test_the_tmux_server_unit_gets_names_never_values():
    env = {"PATH": "/bin", "SECRET_ISH": "value", "INVOCATION_ID": "x", "BASH_FUNC_f%%": "() {}",
           tmux.UNIT_ENV: tmux.UNIT_ENV_VALUE}
    argv = tmux.systemd_run_argv("loom sock", ["tmux", "-Lloom sock", "new-session"], env)
    head, tail = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    assert head[:2] == ["systemd-run", "--user"] and "--property=Type=forking" in head and "--collect" in head
    assert r"--unit=loom-tmux-loom\x20sock.service" in head
    setenv = [a for a in head if a.startswith("--setenv")]
    assert setenv == ["--setenv=PATH", "--setenv=SECRET_ISH"]  # values come from systemd-run's environment
    assert "value" not in " ".join(argv)
    assert tail == ["tmux", "-Lloom sock", "new-session"]


# -- lingering ---------------------------------------------------------------------------------

def test_lingering_off_is_a_warning_naming_the_fix(tmp_path):
    booted, linger = tmp_path / "run-systemd-system", tmp_path / "linger"
    booted.mkdir()
    linger.mkdir()
    check = doctor.check_linger("alice", booted=booted, linger_dir=linger, loginctl=None)
    assert check.status == doctor.WARN and "loginctl enable-linger alice" in check.detail
    (linger / "alice").touch()
    assert doctor.check_linger("alice", booted=booted, linger_dir=linger, loginctl=None).status == doctor.OK


def test_no_word_on_lingering_without_systemd(tmp_path):
    assert doctor.check_linger("alice", booted=tmp_path / "absent", linger_dir=tmp_path, loginctl=None) is None


@pytest.mark.skipif(not os.path.isdir("/run/systemd/system"), reason="not booted with systemd: no linger line")
def test_doctor_on_this_systemd_machine_says_something_of_lingering(tmp_path):
    result = run_loom("doctor", "--state-dir", str(tmp_path / "state"))
    assert re.search(r"^(ok|warn)\s+linger", result.stdout, re.M), result.stdout
