"""`--agent NAME` on the commands that act on one agent: the only agent by default, LOOM_AGENT in
an agent's own pane, and with several agents and none named a one-line error naming them (exit 2)."""

from __future__ import annotations

import json
import os
import secrets

import psutil
import pytest
from conftest import run_loom

from loomtui.cli.common import choose_agent
from loomtui.errors import LoomError
from loomtui.store import ledger
from loomtui.store.db import Store


@pytest.mark.parametrize("names, named, env, chosen", [
    (["main"], None, {}, "main"),
    (["alpha"], None, {}, "alpha"),
    (["alpha", "beta"], "beta", {}, "beta"),
    (["alpha", "beta"], None, {"LOOM_AGENT": "beta"}, "beta"),
    (["alpha", "beta"], "alpha", {"LOOM_AGENT": "beta"}, "alpha"),  # the flag over the pane's default
    (["alpha", "beta"], None, {"LOOM_AGENT": ""}, None),  # an empty variable names nobody
])
def test_the_agent_chosen(names, named, env, chosen):
    if chosen is None:
        assert choose_agent(names, named, env, required=False) is None
    else:
        assert choose_agent(names, named, env) == chosen


@pytest.mark.parametrize("names, named, env, words", [
    (["alpha", "beta"], None, {}, ["several agents", "alpha, beta", "--agent"]),
    (["alpha", "beta"], "gamma", {}, ["'gamma'", "alpha, beta"]),
    (["alpha", "beta"], None, {"LOOM_AGENT": "gamma"}, ["'gamma'", "alpha, beta"]),
    (["main"], "beta", {}, ["'beta'", "main"]),
])
def test_no_agent_or_an_unknown_one_is_exit_2_naming_them(names, named, env, words):
    with pytest.raises(LoomError) as caught:
        choose_agent(names, named, env)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    assert all(w in str(caught.value) for w in words), str(caught.value)


@pytest.fixture
def two(tmp_path):
    """A config of two agents, each on a tmux socket nobody runs (a look says gone, not someone's server)."""
    tag = secrets.token_hex(4)
    config = tmp_path / "config.toml"
    config.write_text(f"""
state_dir = "{tmp_path / 'state'}"
[[agents]]
name = "alpha"
tmux_socket = "loomtest-none-a-{tag}"
[[agents]]
name = "beta"
tmux_socket = "loomtest-none-b-{tag}"
""")
    env = {"LOOM_CONFIG": str(config)}

    def loom(*args: str, **extra: str):
        return run_loom(*args, env={**env, **extra})

    loom.state_dir = tmp_path / "state"
    yield loom
    # A broken agent choice would launch an agent on these sockets: no server outlives the test.
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []
        if argv and os.path.basename(argv[0]) == "tmux" and any(tag in a for a in argv):
            proc.kill()


def agent_of(state_dir, kind: str) -> list[str]:
    with Store.in_dir(state_dir) as store:
        return [e.agent for e in ledger.tail(store, 1000, kinds=[kind])]


@pytest.mark.parametrize("argv", [
    ["hold", "--reason", "x"], ["release"], ["canary"], ["recycle", "--fresh"], ["inject", "hi"],
    ["tick", "watchdog"], ["tick", "canary"],
])
def test_a_command_on_one_agent_with_several_and_none_named_exits_2_naming_them(two, argv):
    result = two(*argv)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "alpha, beta" in result.stderr, result.stderr
    unknown = two(*argv[:1], "--agent", "gamma", *argv[1:])
    assert unknown.returncode == 2 and "'gamma'" in unknown.stderr and "alpha, beta" in unknown.stderr


def test_the_named_agent_is_the_one_acted_on_by_flag_or_by_its_pane(two):
    held = two("hold", "--agent", "beta", "--reason", "maintenance")
    assert held.returncode == 0, held.stderr
    assert agent_of(two.state_dir, "hold_placed") == ["beta"]
    released = two("release", LOOM_AGENT="beta")  # what the agent's own pane runs
    assert released.returncode == 0, released.stderr
    assert agent_of(two.state_dir, "hold_cleared") == ["beta"]


def test_host_wide_commands_need_no_agent(two):
    assert two("tick", "sentinel").returncode == 0
    assert two("ledger", "verify").returncode == 0
    assert two("queue").returncode == 0
    assert two("memory", "lint").returncode != 2  # one memory shared by both: no question which


def test_memory_asks_which_agent_only_when_they_have_their_own(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f"""
state_dir = "{tmp_path / 'state'}"
[[agents]]
name = "alpha"
[[agents]]
name = "beta"
[agents.memory]
dir = "{tmp_path / 'beta-memory'}"
""")
    (tmp_path / "beta-memory").mkdir()
    env = {"LOOM_CONFIG": str(config)}
    result = run_loom("memory", "lint", env=env)
    assert result.returncode == 2 and "alpha, beta" in result.stderr
    added = run_loom("memory", "add", "Deploys", "--hook", "how we deploy", "--agent", "beta", env=env)
    assert added.returncode == 0, added.stderr
    assert (tmp_path / "beta-memory" / "MEMORY.md").exists() or list((tmp_path / "beta-memory").iterdir())
    assert run_loom("memory", "--agent", "beta", "search", "deploy", env=env).returncode == 0


def test_status_shows_every_agent_or_the_one_named(two):
    assert two("hold", "--agent", "alpha", "--reason", "upgrade").returncode == 0
    listed = two("status", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert [a["name"] for a in data] == ["alpha", "beta"]
    assert [bool(a["hold"]) for a in data] == [True, False]
    assert all(a["agent"]["tmux"] == "gone" for a in data)
    one = json.loads(two("status", "--agent", "beta", "--json").stdout)
    assert one["name"] == "beta" and one["hold"] is None
    text = two("status").stdout
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith(("alpha ", "beta "))}
    assert set(lines) == {"alpha", "beta"} and "upgrade" in lines["alpha"] and "upgrade" not in lines["beta"]
    assert "tmux gone" in lines["beta"]


def test_ledger_tail_filters_by_agent_and_names_them_when_several(two):
    assert two("hold", "--agent", "alpha", "--reason", "a").returncode == 0
    assert two("hold", "--agent", "beta", "--reason", "b").returncode == 0
    only = [json.loads(line) for line in two("ledger", "tail", "--agent", "beta", "--json").stdout.splitlines()]
    assert only and {e["agent"] for e in only} == {"beta"}
    text = two("ledger", "tail", "--kind", "hold_placed").stdout.splitlines()
    assert [line.split()[3] for line in text] == ["alpha", "beta"]
    assert two("ledger", "tail", "--agent", "gamma").returncode == 2


def test_a_single_agent_setup_needs_no_name_and_keeps_its_status_object(loom):
    assert loom("hold", "--reason", "x").returncode == 0
    data = json.loads(loom("status", "--json").stdout)
    assert isinstance(data, dict) and data["hold"] and "name" not in data
    assert loom("release", "--agent", "main").returncode == 0
    assert loom("release", "--agent", "beta").returncode == 2


def test_queue_shows_whose_items_and_filters_by_agent(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(f"""
state_dir = "{tmp_path / 'state'}"
[[agents]]
name = "alpha"
tmux_socket = "loomtest-none-q-{secrets.token_hex(4)}"
[[agents]]
name = "beta"
tmux_socket = "loomtest-none-q-{secrets.token_hex(4)}"
[[jobs]]
name = "backup"
log = "{logs / 'backup.log'}"
[[jobs]]
name = "report"
log = "{logs / 'report.log'}"
agent = "beta"
""")
    (logs / "backup.log").write_text("ERROR disk full\n")
    (logs / "report.log").write_text("Traceback (most recent call last)\nERROR report failed\n")
    env = {"LOOM_CONFIG": str(config)}
    assert run_loom("sentinel", "scan", "--no-nudge", env=env).returncode == 0
    beta = json.loads(run_loom("queue", "--agent", "beta", "--json", env=env).stdout)
    assert beta["items"] and {i["job"] for i in beta["items"]} == {"report"}
    assert beta["counts"]["open"] == len(beta["items"])
    every = json.loads(run_loom("queue", "--json", env=env).stdout)
    assert {i["agent"] for i in every["items"]} == {"alpha", "beta"}
    lines = run_loom("queue", env=env).stdout.splitlines()[1:]
    assert {line.split()[2] for line in lines if line.strip()[:1].isdigit()} == {"alpha", "beta"}
    assert run_loom("queue", "--agent", "gamma", env=env).returncode == 2


def test_loom_tick_of_one_agent_keeps_its_lock_and_looks_as_that_agents(two):
    # Held: a look that finds no tmux server must not start the agent (this test runs no tmux).
    assert two("hold", "--agent", "beta", "--reason", "no tmux here").returncode == 0
    ticked = two("tick", "watchdog", "--agent", "beta", "--json")
    assert ticked.returncode == 0, ticked.stderr
    assert (two.state_dir / "agents" / "beta" / "tick-watchdog.lock").exists()
    assert not (two.state_dir / "tick-watchdog.lock").exists()
    with Store.in_dir(two.state_dir) as store:
        assert store.get_meta("watchdog_looks@beta") is not None and store.get_meta("watchdog_looks") is None
    assert two("tick", "sentinel").returncode == 0 and (two.state_dir / "tick-sentinel.lock").exists()


def test_a_watchdog_memory_that_is_no_json_object_is_forgotten_not_every_tick_failed(two):
    # The store is writable by the agent's user: a JSON list where the watchdog keeps what its last
    # tick saw raised AttributeError, and every `loom tick watchdog` after it failed (exit 1).
    assert two("hold", "--agent", "beta", "--reason", "no tmux here").returncode == 0
    with Store.in_dir(two.state_dir) as store:
        store.set_meta("watchdog_looks@beta", "[1, 2]")
    ticked = two("tick", "watchdog", "--agent", "beta", "--json")
    assert ticked.returncode == 0, ticked.stdout + ticked.stderr
    with Store.in_dir(two.state_dir) as store:
        assert json.loads(store.get_meta("watchdog_looks@beta") or "null")["alerted"] == []
