"""Hosts over OpenSSH, the parts that need no sshd: `[[hosts]]` checked like the rest of the
config, the ssh command line Loom builds (its options, its ControlPath, every remote word quoted,
shown through a real shell), what a host's answer may say, since when a host is unreachable, and
the CLI's refusals (an unknown host, a host nobody answers for, `--via-ssh` outside ssh). The real
sshd is tests/e2e/test_hosts_ssh.py's."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_loom
from harness import free_port

from loomtui.cli import remote
from loomtui.config import HostConfig, load_config
from loomtui.errors import ConfigError, LoomError
from loomtui.hosts import reach, ssh, view
from loomtui.store import ledger
from loomtui.store.db import Store
from loomtui.text import printable


def config_file(tmp_path: Path, hosts: str) -> Path:
    path = tmp_path / "loom.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\n{hosts}[agent]\ntmux_socket = "loomtest-hosts"\n')
    return path


def host(**keys) -> HostConfig:
    return HostConfig.build({"name": "b", "ssh": "op@box", **keys}, ("hosts", 0), None)


# -- [[hosts]] in the config ----------------------------------------------------------------------

def test_a_host_with_only_name_and_ssh_takes_the_defaults(tmp_path):
    config, _ = load_config(str(config_file(tmp_path, '[[hosts]]\nname = "b"\nssh = "op@box.tailnet"\n')), {})
    (b,) = config.hosts
    assert (b.name, b.ssh, b.ssh_options, b.loom, b.config, b.state_dir) == ("b", "op@box.tailnet", [], ["loom"], "", "")
    assert (b.connect_timeout, b.timeout, b.command_timeout) == (10.0, 30.0, 600.0)
    assert config.host("b") is b and config.host("c") is None
    assert load_config(str(config_file(tmp_path, "")), {})[0].hosts == []


def test_the_remote_command_is_an_argv_or_a_string_split_as_a_shell_would():
    assert host(loom=["/opt/loom venv/bin/loom"]).loom == ["/opt/loom venv/bin/loom"]
    assert host(loom='python3 -m loomtui --x "a b"').loom == ["python3", "-m", "loomtui", "--x", "a b"]
    # Remote paths are the remote Loom's to expand: kept exactly as written.
    b = host(config="~/.config/loom/config.toml", state_dir="~/st")
    assert (b.config, b.state_dir) == ("~/.config/loom/config.toml", "~/st")


BAD = [
    ('[[hosts]]\nname = "b"\n', "hosts[0].ssh", "required key is missing"),
    ('[[hosts]]\nssh = "x"\n', "hosts[0].name", "required key is missing"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nbogus = 1\n', "hosts[0].bogus", "unknown key"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nssh_option = []\n', "hosts[0].ssh_option", "did you mean 'ssh_options'"),
    ('[[hosts]]\nname = "b"\nssh = "x"\n[[hosts]]\nname = "b"\nssh = "y"\n', "hosts[1].name", "duplicate host name 'b'"),
    ('[[hosts]]\nname = "local"\nssh = "x"\n', "hosts[0].name", "this machine's own name"),
    ('[[hosts]]\nname = "B c"\nssh = "x"\n', "hosts[0].name", "must be 1-32 of a-z"),
    ('[[hosts]]\nname = "b"\nssh = "-oProxyCommand=touch /tmp/x"\n', "hosts[0].ssh", "must not start with '-'"),
    ('[[hosts]]\nname = "b"\nssh = "box rm"\n', "hosts[0].ssh", "one word"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nssh_options = ["-o", "StrictHostKeyChecking=no"]\n',
     "hosts[0].ssh_options[1]", "host key checking off"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nssh_options = ["-oStrictHostKeyChecking off"]\n',
     "hosts[0].ssh_options[0]", "host key checking off"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nssh_options = ["-o", "StrictHostKeyChecking=false"]\n',
     "hosts[0].ssh_options[1]", "host key checking off"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nssh_options = ["-oStrictHostKeyChecking=\\"no\\""]\n',
     "hosts[0].ssh_options[0]", "host key checking off"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nssh_options = ["-o", "StrictHostKeyChecking=accept-new", "-o", '
     '"UserKnownHostsFile=/dev/null"]\n', "hosts[0].ssh_options[1]", "trusts every host key"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nssh_options = ["-oUserKnownHostsFile none", '
     '"-oStrictHostKeyChecking=accept-new"]\n', "hosts[0].ssh_options[1]", "trusts every host key"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nssh_options = "-F x"\n', "hosts[0].ssh_options", "expected a list"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nloom = ""\n', "hosts[0].loom", "must name a command"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nloom = "loom \\"unclosed"\n', "hosts[0].loom", "cannot split"),
    ('[[hosts]]\nname = "b"\nssh = "x"\ntimeout = "0s"\n', "hosts[0].timeout", "longer than 0s"),
    ('[[hosts]]\nname = "b"\nssh = "x"\nstate_dir = "a\\nb"\n', "hosts[0].state_dir", "control characters"),
    ('hosts = "b"\n', "hosts", "expected a list"),
]


@pytest.mark.parametrize("text,key,why", BAD)
def test_a_bad_host_is_one_line_naming_the_file_and_key(tmp_path, text, key, why):
    path = config_file(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    message = str(info.value)
    assert info.value.exit_code == 2 and "\n" not in message
    assert message.startswith(f"{path}: {key}: ") and why in message


def test_the_cli_refuses_a_bad_host_with_exit_2(tmp_path):
    path = config_file(tmp_path, BAD[4][0])
    result = run_loom("--config", str(path), "hosts")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"loom: {path}: hosts[1].name: duplicate host name 'b'"]


# -- the ssh command line -------------------------------------------------------------------------

HOSTILE = ["recycle", "--reason", "it's; rm -rf ~ && $(touch pwned) `id` \"q\" \\ *", "--", "-x", "", "a\nb", "é ✓"]


def test_every_remote_word_reaches_the_remote_shell_as_one_word(tmp_path):
    """The remote side is a shell: what it runs is exactly the words, whatever they hold."""
    echo = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
    b = host(loom=echo, config="/srv/my loom/config.toml", state_dir="~/state $HOME")
    line = ssh.remote_command(b, HOSTILE, "laptop")
    for shell in ("sh", "bash"):
        done = subprocess.run([shell, "-c", line], capture_output=True, text=True, timeout=30, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == ["--config", "/srv/my loom/config.toml", "--state-dir", "~/state $HOME",
                                           "--via-ssh", "laptop", *HOSTILE]
    assert not (tmp_path / "pwned").exists()


def test_a_remote_loom_under_the_home_directory_is_found_by_the_remote_shell(tmp_path):
    """README's `loom = "~/.local/bin/loom"`: every word quoted, the remote shell looked for a file
    named `~/.local/bin/loom` in the directory it started in, and every call exited 127."""
    home = tmp_path / "home"
    program = home / ".local" / "bin" / "loom it"
    program.parent.mkdir(parents=True)
    program.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    program.chmod(0o755)
    b = host(loom=["~/.local/bin/loom it", "~/not-a-path-here"], config="~/.config/loom/config.toml")
    line = ssh.remote_command(b, HOSTILE, "laptop")
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                          env={"HOME": str(home), "PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [f"{home}/not-a-path-here", "--config", "~/.config/loom/config.toml",
                                       "--via-ssh", "laptop", *HOSTILE]


def test_loom_own_options_come_first_then_the_hosts_then_the_destination(tmp_path):
    b = host(ssh_options=["-F", "/etc/op/ssh_config", "-o", "BatchMode=no"], connect_timeout="2500ms")
    argv = ssh.ssh_argv(b, ["status", "--json"], control="/st/ssh/b", via="laptop")
    assert argv[0] == "ssh"
    opts = [argv[i + 1] for i, word in enumerate(argv) if word == "-o"]
    # ssh keeps the first value given for an option: the host's BatchMode=no comes too late to count.
    assert opts.index("BatchMode=yes") < opts.index("BatchMode=no")
    assert {"BatchMode=yes", "ConnectTimeout=3", "ControlMaster=auto", "ControlPath=/st/ssh/b",
            "ControlPersist=10m"} <= set(opts)
    assert not any(o.lower().startswith("stricthostkeychecking") for o in opts)
    cut = argv.index("--")
    assert argv[cut - 4:cut] == ["-F", "/etc/op/ssh_config", "-o", "BatchMode=no"]
    assert argv[cut + 1:] == ["op@box", "loom --via-ssh laptop status --json"]


def test_without_a_usable_control_path_each_call_connects_on_its_own():
    argv = ssh.ssh_argv(host(), ["status"], control=None, via="laptop")
    opts = [argv[i + 1] for i, word in enumerate(argv) if word == "-o"]
    assert "ControlMaster=no" in opts and "ControlPath=none" in opts
    assert not any(o.startswith("ControlPersist") for o in opts)


def test_the_control_path_is_in_a_private_directory_under_the_state_dir(tmp_path):
    state = tmp_path / "st"
    state.mkdir()
    made = ssh.control_dir(state)
    assert made == state / "ssh" and stat.S_IMODE(made.stat().st_mode) == 0o700
    short = Path("/tmp") / "s%t"
    b = host()
    path = ssh.control_path(short, b)
    assert path is not None and path.startswith("/tmp/s%%t/ssh/b-")  # ssh expands % tokens there
    assert ssh.control_path(Path("/tmp/a b"), b) is None
    deep = Path("/tmp") / ("d" * 80)
    assert ssh.control_path(deep, b) is None  # past a unix socket's length, with ssh's temporary suffix
    # Deep enough that the host's name would not fit: the route alone names it.
    named = host(name="a-rather-long-host-name-of-32-ch")
    fits = Path("/tmp") / ("d" * (ssh.MAX_CONTROL_PATH - len("/tmp/") - len("/ssh/") - 10))
    path = ssh.control_path(fits, named)
    assert path is not None and path.startswith(str(fits / "ssh") + "/")
    assert re.fullmatch(r"[0-9a-f]{10}", path.rsplit("/", 1)[1])
    assert ssh.control_path(Path("/tmp/s"), named).endswith("/ssh/a-rather-long-host-name-of-32-ch-" + path[-10:])


def test_a_host_reached_another_way_has_a_master_connection_of_its_own():
    """ssh's client uses whatever master listens at the ControlPath: keyed by the host's name alone,
    a destination or options edited while the master lived (the console reads every few seconds)
    still went to the old machine."""
    at = Path("/st")
    same = ssh.control_path(at, host())
    assert same == ssh.control_path(at, host())
    assert ssh.control_path(at, host(ssh="op@new-box")) != same
    assert ssh.control_path(at, host(ssh_options=["-p", "2222"])) != same
    assert ssh.control_path(at, host(ssh_options=["-p", "2222"])) != ssh.control_path(at, host(ssh_options=["-p2222"]))


def test_the_origin_is_a_plain_machine_name():
    assert ssh.valid_origin(ssh.origin())
    assert not ssh.valid_origin("laptop; rm") and not ssh.valid_origin("") and not ssh.valid_origin("x" * 65)


# -- what a host's answer may say -----------------------------------------------------------------

def test_a_hosts_status_is_parsed_field_by_field_and_made_printable():
    answer = json.dumps([
        {"name": "main", "state": "running", "canary": {"result": "ok", "age": 120.5},
         "queue": {"open": 2, "claimed": 1, "witnessed": 9}, "hold": None, "supervisor": {"heartbeat_age": 4}},
        {"name": "ops\x1b[2J", "state": "held", "canary": {"result": "miss", "age": "soon"},
         "queue": {"open": True}, "hold": {"by": "operator", "reason": "deploy\x07"}, "supervisor": "x"},
    ])
    first, second = view.parse_status(answer)
    assert (first.name, first.state, first.canary(), first.queue, first.hold, first.heartbeat()) == \
        ("main", "running", "ok 2m ago", 3, "", "4s ago")
    assert "\x1b" not in second.name and "\x07" not in second.hold and second.hold.startswith("operator: deploy")
    assert (second.canary_age, second.queue, second.heartbeat_age) == (None, 0, None)
    for bad in ("", "{}", '{"name": "main"}', "[1]", '[{"name": 1, "state": "x"}]', "not json"):
        with pytest.raises(ValueError):
            view.parse_status(bad)


def test_a_host_whose_supervisor_no_longer_beats_says_so_by_its_own_rule():
    # Its agents' states are what its supervisor last saw; nothing there recovers them now. The host
    # says how old a beat may be (`stale_after`, its own `loom check` rule); an older Loom does not,
    # and a beat older than 15 s (that rule's value for any watchdog interval) is stale.
    def row(supervisor):
        return view.parse_status(json.dumps([{"name": "main", "state": "running", "supervisor": supervisor}]))[0]

    fresh, stale = row({"heartbeat_age": 4, "stale_after": 15}), row({"heartbeat_age": 40, "stale_after": 15})
    assert (fresh.supervised, fresh.heartbeat()) == (True, "4s ago")
    assert (stale.supervised, stale.heartbeat()) == (False, "STALE 40s ago")
    assert row({"heartbeat_age": 40, "stale_after": 60}).supervised  # that host's own rule
    for said in ({"heartbeat_age": 16}, {"heartbeat_age": 16, "stale_after": -1},
                 {"heartbeat_age": 16, "stale_after": "soon"}, {"heartbeat_age": 16, "stale_after": None}):
        assert not row(said).supervised, said
    assert row({"heartbeat_age": 14}).supervised
    assert (row({}).supervised, row({}).heartbeat()) == (False, "none")
    lines = view.lines([view.HostView("b", (stale,))], time.time())
    assert lines[1].split()[-3:] == ["STALE", "40s", "ago"]
    assert view.HostView("b", (stale,)).as_json()["agents"][0]["supervised"] is False


def test_the_table_says_an_unreachable_host_in_place_of_its_agents():
    now = time.time()
    up = view.HostView("local", (view.AgentRow("main", "running", "ok", 5.0, 0, "", 3.0),))
    down = view.HostView("b", unreachable=reach.Unreachable(now - 300, "ssh: connect to host x: Connection refused"))
    lines = view.lines([up, down], now)
    assert lines[0].split() == ["HOST", "AGENT", "STATE", "LAST", "CANARY", "QUEUE", "HOLD", "HEARTBEAT"]
    assert lines[1].split()[:3] == ["local", "main", "running"]
    assert lines[2].startswith("b  unreachable since ") and "(5m ago): ssh: connect to host x" in lines[2]
    assert "running" not in lines[2] and "gone" not in lines[2]
    assert down.as_json() == {"host": "b", "reachable": False, "unreachable_since": now - 300,
                              "why": "ssh: connect to host x: Connection refused", "agents": []}


def test_a_hosts_push_heartbeats_are_read_field_by_field_and_shown_under_its_agents():
    # As a host's status says them: an age by its own clock, what the beat said, whether it went.
    answer = json.dumps([{"name": "main", "state": "running", "heartbeat_push": {
        "hc": {"url": "https://hc-ping.com/…", "at": 1.0, "age": 120, "says": "ok", "sent": True},
        "kuma\x1b[2J": {"age": 30, "says": "fail", "sent": False, "error": "HTTP 404\x07", "why": "main exited"},
        "never": {},
        "odd": {"age": "soon", "says": 3, "sent": "yes"},
    }}])
    (row,) = view.parse_status(answer)
    words = {p.name: p.words() for p in row.pushes}
    assert words["hc"] == "ok sent 2m ago"
    kuma = words[printable("kuma\x1b[2J")]
    assert "\x1b" not in "".join(words) and "\x07" not in kuma
    assert kuma.startswith("fail NOT sent 30s ago (HTTP 404") and kuma.endswith(": main exited")
    assert (words["never"], words["odd"]) == ("no beat yet", "no beat yet")
    host = view.HostView("b", (row,))
    lines = view.lines([host], time.time())
    assert "b  heartbeat push hc: ok sent 2m ago" in lines
    assert host.as_json()["agents"][0]["heartbeat_push"]["hc"] == {"age": 120.0, "says": "ok", "sent": True,
                                                                     "error": None, "why": None}
    # Bounded: a host's answer is untrusted.
    many = json.dumps([{"name": "m", "state": "running", "heartbeat_push": {f"p{i}": {} for i in range(100)}}])
    assert len(view.parse_status(many)[0].pushes) == view.MAX_PUSHES
    assert view.HostView("c").pushes == ()
    # A host's numbers that are no numbers to show (infinite, not a number, too large for a float),
    # an older Loom's beat with its time but no age, and an agent named twice.
    hostile = ('[{"name": "m", "state": "running", "canary": {"result": "ok", "age": Infinity}, '
               '"supervisor": {"heartbeat_age": NaN}, "heartbeat_push": {"big": {"age": 1' + "0" * 400 + ', "says": "ok", '
               '"sent": true}, "old": {"at": 1.0, "says": "ok", "sent": true}, "inf": {"age": 1e400}}}, '
               '{"name": "m", "state": "exited"}]')
    (odd,) = view.parse_status(hostile)
    assert (odd.state, odd.canary_age, odd.heartbeat_age, odd.canary(), odd.heartbeat()) == \
        ("running", None, None, "ok 0s ago", "none")
    assert {p.name: p.words() for p in odd.pushes} == {"big": "no beat yet", "old": "ok sent (age unknown)",
                                                       "inf": "no beat yet"}
    assert view.lines([view.HostView("h", (odd,))], time.time())  # drawn, not raised
    # This machine's own `loom status` shows every one of its heartbeats, past the bound.
    assert len(view.push_beats({f"p{i}": {} for i in range(40)}, limit=None)) == 40


def test_a_host_is_unreachable_since_its_first_failure_until_it_answers(tmp_path):
    with Store.in_dir(tmp_path) as store:
        assert reach.read(store, "b") is None
        assert reach.failed(store, "b", "refused", 1000.0) == reach.Unreachable(1000.0, "refused")
        assert reach.failed(store, "b", "timed out", 1060.0) == reach.Unreachable(1000.0, "timed out")
        assert reach.read(store, "c") is None
        reach.answered(store, "b")
        assert reach.read(store, "b") is None
        assert reach.failed(store, "b", "refused", 2000.0).since == 2000.0


# -- the command line -----------------------------------------------------------------------------

def test_host_is_read_before_the_command_and_only_there():
    valued = ("--config", "--state-dir", "--host", "--via-ssh")
    assert remote.split(["--config", "c.toml", "--host", "b", "recycle", "--fresh"], valued) == \
        ("b", ["--config", "c.toml"], ["recycle", "--fresh"])
    assert remote.split(["--host=b", "--", "status"], valued) == ("b", [], ["status"])
    assert remote.split(["inject", "--host", "b"], valued) is None  # the agent's words, not Loom's option
    assert remote.split(["status"], valued) is None
    with pytest.raises(LoomError):
        remote.split(["--host"], valued)


def unreachable_config(tmp_path: Path, port: int) -> Path:
    known = tmp_path / "known_hosts"
    known.write_text("")
    return config_file(tmp_path, f'[[hosts]]\nname = "b"\nssh = "127.0.0.1"\nconnect_timeout = "5s"\n'
                                 f'ssh_options = ["-F", "/dev/null", "-p", "{port}", '
                                 f'"-o", "UserKnownHostsFile={known}", '
                                 f'"-o", "GlobalKnownHostsFile=none"]\n')


def test_an_unknown_host_is_one_line_and_exit_2(tmp_path):
    path = unreachable_config(tmp_path, free_port())
    result = run_loom("--config", str(path), "--host", "c", "status")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["loom: no host named 'c' (hosts: b)"]
    result = run_loom("--config", str(path), "--host", "b", "status", "--state-dir", "/x")
    assert result.returncode == 2 and "--state-dir after the command would name a file on host b" in result.stderr
    result = run_loom("--config", str(path), "--host", "b")
    assert result.returncode == 2 and "name the command to run there" in result.stderr


def test_an_abbreviated_host_option_is_refused_never_run_here(tmp_path):
    # argparse took `--ho b` for --host; the split before it did not, and ran the command here.
    path = unreachable_config(tmp_path, free_port())
    for words in (["--ho", "nope"], ["--hos=nope"], ["--conf", str(path)]):
        result = run_loom("--config", str(path), *words, "hold", "--reason", "x")
        assert result.returncode == 2 and "loom: error:" in result.stderr, words
    listed = run_loom("--config", str(path), "ledger", "tail", "--json")
    assert listed.returncode == 0 and "hold_placed" not in listed.stdout
    # A command's own options too: `--conf` after a command sent to another host was read there as
    # --config, past the check that refuses it by its exact name.
    for words in (["hold", "--conf", "/x", "--reason", "y"], ["hold", "--reas", "y"]):
        result = run_loom("--config", str(path), *words)
        assert result.returncode == 2 and "error:" in result.stderr, (words, result.stderr)


def test_this_machines_store_unreadable_still_shows_every_other_host(tmp_path):
    # The local read raised, and every host's answer, already in, was thrown away with it.
    path = unreachable_config(tmp_path, free_port())
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "loom.db").write_bytes(b"garbage" * 500)
    result = run_loom("--config", str(path), "hosts", "--json")
    assert result.returncode == 1, result.stderr  # not one host read: no answer a script may take
    local, b = json.loads(result.stdout)
    assert local["host"] == "local" and local["agents"] == [] and "loom.db" in local["why"]
    assert not b["reachable"] and "Connection refused" in b["why"]
    lines = run_loom("--config", str(path), "hosts").stdout.splitlines()
    assert any(line.startswith("local  this machine's agents could not be read: ") for line in lines), lines
    assert any(line.startswith("b  unreachable since ") for line in lines), lines


def test_a_host_nobody_answers_for_is_refused_with_ssh_s_reason(tmp_path):
    """A real ssh client to a loopback port nothing listens on."""
    path = unreachable_config(tmp_path, free_port())
    result = run_loom("--config", str(path), "--host", "b", "recycle", "--fresh")
    assert result.returncode == remote.UNREACHABLE, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("loom: host b (127.0.0.1) is unreachable: ssh: connect to host")
    assert "Connection refused" in line


def test_loom_hosts_keeps_the_first_failure_and_still_shows_this_machine(tmp_path):
    path = unreachable_config(tmp_path, free_port())
    first = run_loom("--config", str(path), "hosts", "--json")
    assert first.returncode == 0, first.stderr
    local, b = json.loads(first.stdout)
    assert local["host"] == "local" and local["reachable"] and [a["name"] for a in local["agents"]] == ["main"]
    assert not b["reachable"] and b["agents"] == [] and "Connection refused" in b["why"]
    again = json.loads(run_loom("--config", str(path), "hosts", "--json").stdout)[1]
    assert again["unreachable_since"] == b["unreachable_since"]
    text = run_loom("--config", str(path), "hosts")
    assert text.returncode == 0
    assert any(line.startswith("b  unreachable since ") for line in text.stdout.splitlines()), text.stdout


def test_a_hold_from_the_console_whose_reason_begins_with_a_dash_is_taken_by_the_hosts_loom(tmp_path):
    # The console sent `--reason REASON`: the host's argparse read `--no-restarts` as an option
    # and exited 2. The words it sends, run by a real Loom as the host runs them.
    from loomtui.tui import remote_agent

    path = config_file(tmp_path, "")
    words = remote_agent.words("hold", "main", reason="--no-restarts-during-the-migration", duration=None)
    held = run_loom("--config", str(path), *words)
    assert held.returncode == 0, held.stderr
    status = json.loads(run_loom("--config", str(path), "status", "--json").stdout)
    assert status["hold"]["reason"] == "--no-restarts-during-the-migration"


def test_via_ssh_is_honoured_only_inside_an_ssh_session(tmp_path):
    path = config_file(tmp_path, "")
    refused = run_loom("--config", str(path), "--via-ssh", "laptop", "hold", "--reason", "r")
    assert refused.returncode == 2 and "no SSH_CONNECTION here" in refused.stderr
    bad = run_loom("--config", str(path), "--via-ssh", "lap top", "hold", "--reason", "r",
                   env={"SSH_CONNECTION": "10.0.0.5 50022 10.0.0.9 22"})
    assert bad.returncode == 2 and "a machine name" in bad.stderr
    done = run_loom("--config", str(path), "--via-ssh", "laptop", "hold", "--reason", "deploy",
                    env={"SSH_CONNECTION": "10.0.0.5 50022 10.0.0.9 22"})
    assert done.returncode == 0, done.stderr
    with Store.in_dir(tmp_path / "state") as store:
        (placed,) = ledger.tail(store, 10, kinds=["hold_placed"])
    assert placed.source == "ssh"
    assert placed.detail["actor"] == "ssh"
    assert (placed.detail["actor_from"], placed.detail["actor_address"]) == ("laptop", "10.0.0.5 50022")


def test_status_list_is_a_list_of_agents_whatever_their_number(tmp_path):
    path = config_file(tmp_path, "")
    done = run_loom("--config", str(path), "status", "--json", "--list")
    assert done.returncode == 0, done.stderr
    (main,) = json.loads(done.stdout)
    assert (main["name"], main["state"]) == ("main", "tmux gone")
    assert view.parse_status(done.stdout)[0].name == "main"
    assert shlex.join(view.STATUS_WORDS) == "status --json --list"


def test_a_host_that_never_answers_is_cut_off_at_its_timeout(tmp_path):
    """A loopback listener that takes the connection and never says a word (a hung box): each
    host's call ends at its own `timeout`, and `loom hosts` still reports this machine."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        known = tmp_path / "known_hosts"
        known.write_text("")
        entries = "".join(
            f'[[hosts]]\nname = "{name}"\nssh = "127.0.0.1"\nconnect_timeout = "5m"\ntimeout = "2s"\ncommand_timeout = "3s"\n'
            f'ssh_options = ["-F", "/dev/null", "-p", "{port}", "-o", "UserKnownHostsFile={known}", '
            f'"-o", "GlobalKnownHostsFile=none"]\n'
            for name in ("b", "c"))
        path = config_file(tmp_path, entries)
        done = run_loom("--config", str(path), "hosts", "--json", timeout=120)
        assert done.returncode == 0, done.stderr
        local, b, c = json.loads(done.stdout)
        assert local["reachable"] and [a["name"] for a in local["agents"]] == ["main"]
        for far in (b, c):
            assert not far["reachable"] and far["why"] == "no answer within 2s" and far["agents"] == []
        refused = run_loom("--config", str(path), "--host", "b", "status", timeout=120)
        assert refused.returncode == remote.UNREACHABLE
        assert refused.stderr.strip() == "loom: host b (127.0.0.1) is unreachable: no answer within 3s"


@pytest.mark.parametrize("words, terminal", [
    (["attach"], True),
    (["memory", "edit", "notes/a.md"], True),   # an editor there: without a terminal vi exited 1
    (["memory", "show", "edit"], False),          # the host's words, made printable here
    (["memory", "search", "edit"], False),
    (["memory"], False),
    (["status", "--json"], False),
])
def test_only_what_needs_a_terminal_there_gets_one(words, terminal):
    from loomtui.cli.remote import in_a_terminal

    assert in_a_terminal(words) is terminal
