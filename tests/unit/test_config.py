"""Config: defaults, discovery, and one clear line (exit 2) for every kind of bad file."""

from __future__ import annotations

import os
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from loomtui.config import Config, load_config, parse_config
from loomtui.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_no_file_means_defaults(tmp_path):
    config, path = load_config(None, {"XDG_CONFIG_HOME": str(tmp_path / "nothing")})
    assert path is None
    assert config.watchdog.interval == 30
    assert config.canary.ack_timeout == 180
    assert config.agent.modals[0].match == "Yes, I trust this folder"
    assert config.sentinel.patterns == ["Traceback", r"\bERROR\b", r"\bFATAL\b"]


HOOKED = ('fresh_command = "claude --settings {hook_settings} --session-id {session_id}"\n'
          'resume_command = "claude --settings {hook_settings} --resume {session_id}"\n')


def test_ack_timeout_defaults_to_a_minute_where_the_hooks_tell_busy_from_deaf(tmp_path):
    """With {hook_settings} a probe typed into a turn under way is not a miss, so the wait is
    shorter (docs/SIM.md, "Defaults"); a value the file sets is kept, per agent as everywhere."""
    hooked = parse_config({"agent": {"fresh_command": "claude --settings {hook_settings} --session-id {session_id}"}},
                          "x", None)
    assert hooked.canary.ack_timeout == 60
    # `{{hook_settings}}` is the literal text, no settings file passed: no hooks, the longer wait.
    escaped = parse_config({"agent": {"fresh_command": "claude --settings {{hook_settings}} --session-id {session_id}"}},
                           "x", None)
    assert escaped.canary.ack_timeout == 180
    config, _ = load_config(str(write(tmp_path, f"[agent]\n{HOOKED}[canary]\nack_timeout = \"3m\"\n")), {})
    assert config.canary.ack_timeout == 180
    many = write(tmp_path, f'[canary]\ninterval = "5m"\n[[agents]]\nname = "a"\n{HOOKED}'
                           f'[[agents]]\nname = "b"\n[[agents]]\nname = "c"\n{HOOKED}[agents.canary]\nack_timeout = "2m"\n')
    config, _ = load_config(str(many), {})
    assert [(s.name, s.canary.ack_timeout, s.canary.interval) for s in config.agents] == [
        ("a", 60, 300), ("b", 180, 300), ("c", 120, 300)]
    assert config.for_agent("a").canary.ack_timeout == 60


def test_discovery_order(tmp_path):
    a = write(tmp_path, '[canary]\ninterval = "1m"\n')
    b = tmp_path / "b.toml"
    b.write_text('[canary]\ninterval = "2m"\n')
    assert load_config(str(a), {"LOOM_CONFIG": str(b)})[0].canary.interval == 60
    assert load_config(None, {"LOOM_CONFIG": str(b)})[0].canary.interval == 120
    xdg = tmp_path / "xdg"
    (xdg / "loom").mkdir(parents=True)
    (xdg / "loom" / "config.toml").write_text('[canary]\ninterval = "3m"\n')
    os.environ["XDG_CONFIG_HOME"] = str(xdg)
    try:
        assert load_config(None, {})[0].canary.interval == 180
    finally:
        del os.environ["XDG_CONFIG_HOME"]


def test_paths_expand_home_and_relative_to_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", "/home/op")
    path = write(
        tmp_path,
        'state_dir = "~/st"\n[agent]\ncwd = "work"\n[[jobs]]\nname = "n"\nlog = "logs/n.log"\nschedule = "0 7 * * *"\n',
    )
    config, _ = load_config(str(path), {})
    assert config.state_dir == Path("/home/op/st")
    assert config.agent.cwd == tmp_path / "work"
    assert config.jobs[0].log == tmp_path / "logs" / "n.log"


def test_full_documented_example_parses(tmp_path):
    text = (Path(__file__).parent / "data" / "design_config.toml").read_text()
    config, _ = load_config(str(write(tmp_path, text)), {})
    assert config.jobs[0].name == "newsletter"
    assert config.watchdog.ceiling_count == 6


BAD = [
    ('[canary]\nack_timeout = 30\n', "canary.ack_timeout"),
    ('[canary]\nack_timeout = "thirty"\n', "canary.ack_timeout"),
    ('[canary]\nack_timeout = "0s"\n', "canary.ack_timeout"),
    ('[watchdog]\nfuse_count = "3"\n', "watchdog.fuse_count"),
    ('[watchdog]\nfuse_count = true\n', "watchdog.fuse_count"),
    ('[watchdog]\nfuse_cuont = 3\n', "watchdog.fuse_cuont"),
    ('bogus = 1\n', "bogus"),
    ('[telegram]\nchat_id = "123"\n', "telegram.chat_id"),
    ('[agent]\nprocess_match = "("\n', "agent.process_match"),
    ('[agent]\nready_match = "[unclosed"\n', "agent.ready_match"),
    ('[agent]\nready_match = "(?m)^.*$"\n', "agent.ready_match"),
    ('[agent]\nready_match = 5\n', "agent.ready_match"),
    ('[agent]\nfresh_command = "claude {sesion_id}"\n', "agent.fresh_command"),
    ('[agent]\nresume_command = "claude --continue"\n', "agent.resume_command"),
    ('[agent]\nfresh_command = "claude"\n', "agent.fresh_command"),
    ('[agent]\nsession = "a:b"\n', "agent.session"),
    ('[[agent.modals]]\nkeys = ["Enter"]\n', "agent.modals[0].match"),
    ('[[jobs]]\nname = "x"\nlog = "x.log"\nschedule = "61 * * * *"\n', "jobs[0].schedule"),
    ('[[jobs]]\nname = "x"\nschedule = "every 10m"\n', "jobs[0].log"),
    # Valid cron, yet no date matches (31 February): every sentinel pass failed on it, every job.
    ('[[jobs]]\nname = "x"\nlog = "x.log"\nschedule = "0 7 31 2 *"\n', "jobs[0].schedule"),
    ('[[jobs]]\nname = "x"\nlog = "x.log"\nschedule = "R R * * *"\n', "jobs[0].schedule"),
    # A pattern that matches every screen: every resume judged failed, Enter sent into a healthy agent.
    ('[agent]\nresume_failed_match = ""\n', "agent.resume_failed_match"),
    ('[agent]\nresume_failed_match = ".*"\n', "agent.resume_failed_match"),
    ('[[agent.modals]]\nmatch = ""\n', "agent.modals[0].match"),
    ('[[jobs]]\nname = "x"\nlog = "a"\n[[jobs]]\nname = "x"\nlog = "b"\n', "jobs"),
    ('[metrics]\nlisten = "nonsense"\n', "metrics.listen"),
    ('[agent]\ndriver = "pipes"\n', "agent.driver"),
    ('[telegram]\nchat_id = 5\nbridge = true\n', "telegram.bridge"),
    ('[agent]\ndriver = "stream-json"\n[telegram]\nbridge = true\n', "telegram.bridge"),
    ('[canary\ninterval = "1m"\n', "TOML syntax error"),
    ('[agent]\nwidth = 5\n', "agent.width"),
    ('[agent.env]\n"1X" = "y"\n', "agent.env"),
    ('[agent]\nenv = { X = 1 }\n', "agent.env.X"),
    # Loom's own: the agent's `loom` commands and a relaunch's stop read them as Loom set them.
    ('[agent.env]\nLOOM_STATE_DIR = "/elsewhere"\n', "agent.env"),
    ('[agent.env]\nLOOM_SESSION_ID = "x"\n', "agent.env"),
    ('[sentinel]\npatterns = "x"\n', "sentinel.patterns"),
    ('[sentinel]\npatterns = ["ok", "("]\n', "sentinel.patterns[1]"),
    ('[memory]\nindex = ""\n', "memory.index"),
    ('[telegram]\ncommands = "yes"\n', "telegram.commands"),
    ('[[agents]]\nname = "Bad"\n', "agents[0].name"),
    ('[[agents]]\nsession = "x"\n', "agents[0].name"),
    ('[[agents]]\nname = "a"\n[[agents]]\nname = "a"\n', "agents[1].name"),
    ('[agent]\n[[agents]]\nname = "a"\n', "agent"),
    ('agents = []\n', "agents"),
    ('[[agents]]\nname = "a"\nbogus = 1\n', "agents[0].bogus"),
    ('[[agents]]\nname = "a"\n[agents.watchdog]\nfuse_count = 0\n', "agents[0].watchdog.fuse_count"),
    ('[[agents]]\nname = "a"\n[agents.canary]\nintervl = "1m"\n', "agents[0].canary.intervl"),
    ('[[agents]]\nname = "a"\ntmux_socket = "t"\nsession = "s"\n[[agents]]\nname = "b"\ntmux_socket = "t"\n'
     'session = "s"\n', "agents[1].session"),
    ('[[agents]]\nname = "a"\n[[jobs]]\nname = "j"\nlog = "x"\nagent = "b"\n', "jobs[0].agent"),
    # One log read for two jobs: each failure line two items, and one job's clean run the other's witness.
    ('[[jobs]]\nname = "a"\nlog = "cron.log"\n[[jobs]]\nname = "b"\nlog = "./x/../cron.log"\n', "jobs[1].log"),
    # An escaped placeholder is the literal text: the pinned id never reached the agent.
    ('[agent]\nresume_command = "claude --resume {{session_id}}"\n', "agent.resume_command"),
    # An attribute or an index of a placeholder raised at every launch (a traceback, exit 1).
    ('[agent]\nfresh_command = "claude --add-dir {state_dir.acks} --session-id {session_id}"\n', "agent.fresh_command"),
    ('[agent]\nfresh_command = "claude --session-id {session_id[0]}"\n', "agent.fresh_command"),
    # U+0000, which TOML allows: no path, argument or environment value can hold it.
    ('state_dir = "/tmp/a\\u0000b"\n', "state_dir"),
    ('[[jobs]]\nname = "x"\nlog = "x\\u0000.log"\n', "jobs[0].log"),
    ('[agent.env]\nX = "a\\u0000"\n', "agent.env.X"),
    ('[agent]\nfresh_command = "claude --session-id {session_id} \\u0000"\n', "agent.fresh_command"),
    # A wait on a command past a day: a hang, and past 24.8 days subprocess's poll overflowed.
    ('[memory]\ngit_timeout = "30d"\n', "memory.git_timeout"),
    ('[[hosts]]\nname = "b"\nssh = "b"\ncommand_timeout = "2d"\n', "hosts[0].command_timeout"),
]


@pytest.mark.parametrize("text,key", BAD)
def test_bad_config_names_the_key(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    message = str(info.value)
    assert info.value.exit_code == 2
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert key in message


@pytest.mark.parametrize("text,key", BAD[:6])
def test_cli_exits_2_with_one_line(tmp_path, loom, text, key):
    path = write(tmp_path, text)
    result = loom("--config", str(path), "status")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and key in lines[0]


def test_unreadable_and_missing_config(tmp_path, loom):
    directory = tmp_path / "adir.toml"
    directory.mkdir()
    result = loom("--config", str(directory), "status")
    assert result.returncode == 2
    assert str(directory) in result.stderr and "cannot read" in result.stderr
    missing = tmp_path / "missing.toml"
    result = loom("status", env={"LOOM_CONFIG": str(missing)})
    assert result.returncode == 2 and str(missing) in result.stderr
    binary = write(tmp_path, "")
    binary.write_bytes(b"\xff\xfe[agent]\n")
    result = loom("--config", str(binary), "status")
    assert result.returncode == 2 and "UTF-8" in result.stderr


def test_option_after_subcommand_and_before_are_equal(tmp_path, state_dir):
    from conftest import run_loom

    path = write(tmp_path, "bogus = 1\n")
    before = run_loom("--config", str(path), "--state-dir", str(state_dir), "status")
    after = run_loom("status", "--config", str(path), "--state-dir", str(state_dir))
    assert before.returncode == after.returncode == 2
    assert before.stderr == after.stderr


def test_config_is_frozen():
    config = Config()
    with pytest.raises(FrozenInstanceError):
        config.canary.interval = 5  # type: ignore[misc]
    assert config.canary.interval == Config().canary.interval


def test_one_agent_table_is_one_agent_named_main():
    config = parse_config({"agent": {"session": "s"}, "watchdog": {"fuse_count": 4}}, "c.toml", None)
    assert config.agent_names == ["main"] and config.agent_name == "main"
    assert config.agent.session == "s" and config.watchdog.fuse_count == 4
    assert config.for_agent("main") == config
    with pytest.raises(KeyError):
        config.for_agent("other")


def test_agents_tables_each_override_the_top_level_key_by_key(tmp_path):
    path = write(tmp_path, """
[watchdog]
fuse_count = 5
interval = "1m"
[memory]
index = "TOP.md"

[[agents]]
name = "alpha"

[[agents]]
name = "beta-2"
tmux_socket = "other"
cwd = "work"
[agents.watchdog]
fuse_count = 1
[agents.canary]
interval = "5m"
[agents.memory]
dir = "mem-beta"

[[jobs]]
name = "first"
log = "a.log"
[[jobs]]
name = "second"
log = "b.log"
agent = "beta-2"
""")
    config, _ = load_config(str(path), {})
    assert config.agent_names == ["alpha", "beta-2"]
    # The config as loaded is the first agent's view; the top level stands where it has no override.
    assert config.agent_name == "alpha" and (config.agent.tmux_socket, config.agent.session) == ("loomtui-alpha", "alpha")
    assert config.watchdog.fuse_count == 5 and config.canary.interval == 1200
    beta = config.for_agent("beta-2")
    assert beta.agent_name == "beta-2"
    assert (beta.agent.tmux_socket, beta.agent.session, beta.agent.cwd) == ("other", "beta-2", tmp_path / "work")
    assert (beta.watchdog.fuse_count, beta.watchdog.interval) == (1, 60)
    assert beta.canary.interval == 300
    assert (beta.memory.dir, beta.memory.index) == (tmp_path / "mem-beta", "TOP.md")
    assert config.for_agent("alpha").memory.index == "TOP.md"
    assert [(j.name, j.agent) for j in config.jobs] == [("first", "alpha"), ("second", "beta-2")]
    # A view shares the rest: jobs, telegram, the list of agents.
    assert beta.jobs == config.jobs and beta.agents == config.agents


def test_a_job_of_a_single_agent_belongs_to_main():
    config = parse_config({"jobs": [{"name": "j", "log": "/x.log"}]}, "c.toml", None)
    assert config.jobs[0].agent == "main"


def test_sections_built_in_code_are_checked_too():
    from loomtui.config import SentinelConfig

    assert SentinelConfig(renudge="20m").renudge == 1200
    with pytest.raises(ValueError, match="renudge"):
        SentinelConfig(renudge="soon")


def test_an_agent_named_main_keeps_the_single_agent_server_and_session():
    config = parse_config({"agents": [{"name": "main"}, {"name": "b"}]}, "c.toml", None)
    assert (config.agent.tmux_socket, config.agent.session) == ("loomtui", "agent")
    assert (config.for_agent("b").agent.tmux_socket, config.for_agent("b").agent.session) == ("loomtui-b", "b")


# -- who may command Loom over Telegram, where the token may travel, who may read the metrics (issue 24)

REFUSED = [
    ('[telegram]\nchat_id = -1001234567890\ncommands = true\n',
     "telegram.allowed_users: chat_id -1001234567890 is a group chat: list the user ids that may command Loom "
     "(with commands or the bridge on, every member could otherwise)"),
    ('[agent]\ndriver = "stream-json"\n[telegram]\nchat_id = -42\nbridge = true\n',
     "telegram.allowed_users: chat_id -42 is a group chat: list the user ids that may command Loom "
     "(with commands or the bridge on, every member could otherwise)"),
    ('[telegram]\nallowed_users = [0]\n', "telegram.allowed_users[0]: must be at least 1 (got 0)"),
    ('[telegram]\napi_base = "http://botapi.example.com:8081"\n',
     "telegram.api_base: plain http:// to 'botapi.example.com' would send the bot token in clear text; use "
     "https://, or http:// only to a loopback address (127.0.0.0/8, ::1, localhost)"),
    ('[telegram]\napi_base = "http://192.168.1.20:8081/bot"\n',
     "telegram.api_base: plain http:// to '192.168.1.20' would send the bot token in clear text; use "
     "https://, or http:// only to a loopback address (127.0.0.0/8, ::1, localhost)"),
    ('[telegram]\napi_base = "botapi.example.com:8081"\n',
     "telegram.api_base: expected an https:// URL of a Bot API server, e.g. https://botapi.example.com"),
    ('[metrics]\nlisten = "0.0.0.0:19466"\n',
     "metrics.listen: '0.0.0.0' is not a loopback address (127.0.0.0/8, ::1, localhost): anyone who can reach "
     "it could read the metrics; listen on 127.0.0.1 or [::1], or set metrics.allow_remote = true"),
    ('[metrics]\nlisten = "[::]:9464"\n',
     "metrics.listen: '::' is not a loopback address (127.0.0.0/8, ::1, localhost): anyone who can reach "
     "it could read the metrics; listen on 127.0.0.1 or [::1], or set metrics.allow_remote = true"),
    ('[metrics]\nlisten = "192.168.1.20:9464"\n',
     "metrics.listen: '192.168.1.20' is not a loopback address (127.0.0.0/8, ::1, localhost): anyone who can "
     "reach it could read the metrics; listen on 127.0.0.1 or [::1], or set metrics.allow_remote = true"),
    ('[metrics]\nlisten = "prometheus.lan:9464"\n',
     "metrics.listen: 'prometheus.lan' is not a loopback address (127.0.0.0/8, ::1, localhost): anyone who can "
     "reach it could read the metrics; listen on 127.0.0.1 or [::1], or set metrics.allow_remote = true"),
    ('[metrics]\nlisten = "0.0.0.0:19466"\nallow_remote = true\n',
     "metrics.token_file: metrics.allow_remote serves the metrics to the network: set metrics.token_file, a file "
     "of mode 0600 holding the token every scrape must send"),
    ('[metrics]\nlisten = "::1:9464"\n', "metrics.listen: expected HOST:PORT, e.g. 127.0.0.1:9464 or [::1]:9464"),
    ('[metrics]\nlisten = "[nope]:9464"\n', "metrics.listen: 'nope' in brackets is not an IPv6 address"),
    ('[metrics]\nlisten = "127.0.0.1:0"\n', "metrics.listen: port must be 1-65535 (got 0)"),
    ('[metrics]\nlisten = "127.0.0.1:9464"\nallow_remote = "yes"\n',
     "metrics.allow_remote: expected true or false (got 'yes')"),
]


@pytest.mark.parametrize("text,line", REFUSED)
def test_refused_senders_token_routes_and_listen_addresses_are_one_exact_line(tmp_path, text, line):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    assert info.value.exit_code == 2
    assert str(info.value) == f"{path}: {line}"


def test_a_refused_listen_exits_2_from_the_real_cli_and_doctor_fails_it(tmp_path, loom):
    path = write(tmp_path, '[metrics]\nlisten = "0.0.0.0:19466"\n')
    result = loom("--config", str(path), "supervise", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"loom: {path}: {REFUSED[6][1]}"]
    doctor = loom("--config", str(path), "doctor")
    assert doctor.returncode == 2  # a bad config, as every command says it
    [config_line] = [line for line in doctor.stdout.splitlines() if line.split()[1:2] == ["config"]]
    assert config_line.split(None, 2) == ["FAIL", "config", f"{path}: {REFUSED[6][1]}"]


ACCEPTED = [
    ({"metrics": {"listen": "127.0.0.1:9464"}}, "metrics"),
    ({"metrics": {"listen": "127.3.4.5:9464"}}, "metrics"),
    ({"metrics": {"listen": "localhost:9464"}}, "metrics"),
    ({"metrics": {"listen": "[::1]:9464"}}, "metrics"),
    ({"metrics": {"listen": "0.0.0.0:19466", "allow_remote": True, "token_file": Path("/etc/loom/metrics-token")}},
     "metrics"),
    ({"metrics": {"listen": "[::]:19466", "allow_remote": True, "token_file": Path("/etc/loom/metrics-token")}},
     "metrics"),
    ({"metrics": {"listen": "127.0.0.1:9464", "token_file": Path("/etc/loom/metrics-token")}}, "metrics"),
    ({"telegram": {"api_base": "https://botapi.example.com:8443"}}, "telegram"),
    ({"telegram": {"api_base": "http://127.0.0.1:8081/bot"}}, "telegram"),
    ({"telegram": {"api_base": "http://localhost:8081"}}, "telegram"),
    ({"telegram": {"api_base": "http://[::1]:8081/bot{token}/"}}, "telegram"),
    ({"telegram": {"chat_id": -1001234567890}}, "telegram"),  # a group as a notification sink only
    ({"telegram": {"chat_id": -42, "commands": True, "allowed_users": [5151, 6262]}}, "telegram"),
]


@pytest.mark.parametrize("data,section", ACCEPTED)
def test_loopback_https_remote_by_choice_and_listed_groups_are_accepted(data, section):
    config = parse_config(data, "c.toml", None)
    for key, value in data[section].items():
        assert getattr(getattr(config, section), key) == value


def test_who_may_command_loom_defaults_to_the_private_chats_own_user():
    from loomtui.config import TelegramConfig

    assert TelegramConfig(chat_id=5151).senders == {5151}
    assert TelegramConfig(chat_id=5151, allowed_users=[7, 8]).senders == {7, 8}
    assert TelegramConfig(chat_id=-42).senders == frozenset()  # a sink: nobody commands through it
    assert TelegramConfig(chat_id=-42, commands=True, allowed_users=[7]).senders == {7}
    assert TelegramConfig().senders == frozenset()


def test_the_metrics_address_splits_for_binding():
    from loomtui.config import is_loopback, split_listen

    assert split_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert split_listen("[::1]:9464") == ("::1", 9464)
    assert split_listen("localhost:1") == ("localhost", 1)
    assert [is_loopback(h) for h in ("127.0.0.1", "127.255.0.9", "::1", "localhost", "LOCALHOST")] == [True] * 5
    assert [is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "::ffff:8.8.8.8", "localhost.evil.com",
                                     "example.com", "")] == [False] * 7


@pytest.mark.parametrize(("text", "line"), [
    ("[agnet]\ncwd = '/tmp'\n", "agnet: unknown key (did you mean 'agent'?)"),
    ("[agent]\nfresh_comand = 'x'\n", "agent.fresh_comand: unknown key (did you mean 'fresh_command'?)"),
    ("[canary]\nack_timout = '5s'\n", "canary.ack_timout: unknown key (did you mean 'ack_timeout'?)"),
    ("[[agents]]\nname = 'a'\nprocess_mach = 'x'\n", "agents[0].process_mach: unknown key (did you mean 'process_match'?)"),
    ("zzz = 1\n", "zzz: unknown key"),
])
def test_an_unknown_key_names_the_known_one_it_is_closest_to(tmp_path, text, line):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(str(path), {})
    assert str(err.value) == f"{path}: {line}"


def test_a_job_may_not_take_the_memory_replica_s_queue_name(tmp_path):
    job = '[[jobs]]\nname = "memory"\nlog = "x.log"\n'
    config, _ = load_config(str(write(tmp_path, job)), {})  # no replica: the name is free
    assert config.jobs[0].name == "memory"
    with pytest.raises(ConfigError) as info:
        load_config(str(write(tmp_path, '[memory]\nremote = "/srv/memory.git"\n' + job)), {})
    assert info.value.exit_code == 2 and "jobs[0].name" in str(info.value) and "memory replica" in str(info.value)
