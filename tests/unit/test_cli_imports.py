"""`loom` imports only what the command being run uses, and `loom --help` still lists every command.

Import facts, not speed: which modules a command has loaded when it is done, read from
sys.modules in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, loom_env

from loomtui import cli, platform

# The order and names of `loom --help`; a new command is added here and to cli.COMMANDS.
ORDER = ["status", "hosts", "prometheus-config", "doctor", "check", "ledger", "inject", "recycle", "pane", "attach", "canary", "supervise", "install-service", "memory",
         "run-job", "queue", "jobs", "resolve", "sentinel", "hold", "release", "outbox", "tick", "sim", "pump"]
HEAVY = {"telegram", "textual"}

LOADED = ("import json, runpy, sys\n"
          "sys.argv = ['loom', *sys.argv[1:]]\n"
          "try:\n"
          "    runpy.run_module('loomtui', run_name='__main__', alter_sys=True)\n"
          "except SystemExit:\n"
          "    pass\n"
          "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n")


def modules_loaded_by(tmp_path, *args: str) -> set[str]:
    """Every module imported by `loom ARGS` run to its end (against an empty state dir)."""
    env = loom_env({"LOOM_STATE_DIR": str(tmp_path / "state")})
    result = subprocess.run([sys.executable, "-c", LOADED, *args], capture_output=True, text=True, env=env,
                            cwd=REPO, timeout=120)
    return set(json.loads(result.stderr.strip().splitlines()[-1]))


def loaded_by(tmp_path, *args: str) -> set[str]:
    """Top-level packages imported by `loom ARGS` run to its end (against an empty state dir)."""
    return {name.split(".")[0] for name in modules_loaded_by(tmp_path, *args)}


def subcommands(parser) -> list[tuple[str, str]]:
    action = next(a for a in parser._actions if a.dest == "command")
    return [(choice.dest, choice.help) for choice in action._choices_actions]


def test_help_lists_every_command_in_order_with_the_help_lines_their_modules_register():
    lazy = cli.build_parser(["--help"])
    full = cli.build_parser(every=True)
    assert [name for name, _ in subcommands(lazy)] == ORDER
    assert subcommands(lazy) == subcommands(full)
    assert lazy.format_help() == full.format_help()


@pytest.mark.parametrize("argv, chosen", [
    (["status"], "status"), (["--config", "x.toml", "status"], "status"), (["--config=x.toml", "queue"], "queue"),
    (["--conf", "x.toml", "--state-dir", "s", "resolve", "3"], "resolve"), (["--help"], None), ([], None),
    (["-h", "ledger", "tail"], "ledger"),
])
def test_the_command_is_the_first_word_that_is_no_option_value(argv, chosen):
    assert cli.command_in(argv) == chosen


def test_the_chosen_command_gets_its_real_parser_and_the_others_stand_ins():
    parser = cli.build_parser(["resolve", "7", "--note", "fixed"])
    args = parser.parse_args(["resolve", "7", "--note", "fixed"])
    assert (args.id, args.note, args.func.__name__) == (7, "fixed", "run_resolve")
    assert [name for name, _ in subcommands(parser)] == ["run-job", "queue", "jobs", "resolve", "sentinel"]  # its module's
    parser = cli.build_parser(["reslove", "7"])  # a typo: every command is offered, none imported
    assert [name for name, _ in subcommands(parser)] == ORDER
    assert not hasattr(parser.parse_args(["status"]), "func")


def test_help_imports_no_command_module(tmp_path):
    loaded = loaded_by(tmp_path, "--help")
    assert not loaded & (HEAVY | {"pydantic", "psutil", "watchfiles"})


def test_resolve_help_and_a_resolve_import_neither_telegram_nor_textual(tmp_path):
    assert not loaded_by(tmp_path, "resolve", "--help") & (HEAVY | {"pydantic", "psutil"})


def test_status_imports_neither_telegram_nor_textual(tmp_path):
    # psutil only where the platform tells the boot by it (the portable module: LOOM_PLATFORM=portable).
    lean = {"telegram", "textual"} | ({"psutil"} if platform.current().name != "portable" else set())
    assert not loaded_by(tmp_path, "status") & lean


def test_the_status_other_hosts_ask_for_loads_no_module_it_does_not_use(tmp_path):
    # `loom hosts` runs `loom status --json --list` on every host at once: what it loads is paid for
    # by every host at every look. These are loaded only by what needs them (a hash, a minted name,
    # the platform's default dirs, a typo's suggestion, several agents' threads, the inotify watch,
    # a host name's socket, a stream-json agent's pump, a relaunch's policy, a warning's logging, the
    # turns' readers for an agent with neither hooks nor a pump). Each dataclass a module
    # defines costs about half a millisecond to make here. A host is asked with its config and state
    # dir named, as here.
    unused = {"hashlib", "_hashlib", "secrets", "random", "platformdirs", "difflib", "concurrent", "ctypes", "socket",
              "logging", "loomtui.pump.facts", "loomtui.agent.policy", "loomtui.agent.recovery", "loomtui.hooks.turns"}
    if platform.current().name == "portable":
        unused.discard("socket")  # psutil's own, which the portable platform loads for the process tree and boot
    config = tmp_path / "config.toml"
    config.write_text('[agent]\ntmux_socket = "loom-test-imports"\n')
    loaded = modules_loaded_by(tmp_path, "--config", str(config), "--state-dir", str(tmp_path / "state"), "status",
                               "--json", "--list")
    assert "loomtui.report.status" in loaded and not loaded & unused
