"""The state directory: created private, proven writable, and a clear non-zero exit when it is not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, loom_env, run_loom

from loomtui.config import Config, parse_config
from loomtui.errors import StateDirError
from loomtui.store.statedir import prepare_state_dir, resolve_state_dir


def test_created_private_with_acks(tmp_path):
    path = tmp_path / "a" / "b" / "state"
    prepare_state_dir(path)
    assert path.stat().st_mode & 0o777 == 0o700
    assert (path / "acks").is_dir()
    assert not [p for p in path.iterdir() if p.name.startswith(".probe")]


def test_resolution_order(tmp_path):
    config = parse_config({"state_dir": str(tmp_path / "cfg")}, "c.toml", None)
    env = {"LOOM_STATE_DIR": str(tmp_path / "env")}
    assert resolve_state_dir(str(tmp_path / "cli"), config, env) == tmp_path / "cli"
    assert resolve_state_dir(None, config, env) == tmp_path / "env"
    assert resolve_state_dir(None, config, {}) == tmp_path / "cfg"
    assert resolve_state_dir(None, Config(), {"XDG_STATE_HOME": "/x"}).name == "loom"


def test_parent_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StateDirError) as info:
        prepare_state_dir(blocker / "state")
    assert str(blocker / "state") in str(info.value)
    result = run_loom("--state-dir", str(blocker / "state"), "status")
    assert result.returncode != 0
    assert str(blocker / "state") in result.stderr
    assert "Not a directory" in result.stderr


@pytest.mark.incident("exit_zero_is_failure")
def test_unwritable_directory_exits_nonzero_naming_the_path(tmp_path):
    target = tmp_path / "ro"
    target.mkdir(mode=0o500)
    command = [sys.executable, "-m", "loomtui", "--state-dir", str(target), "status"]
    if os.geteuid() == 0:
        # root writes through permission bits; drop the capability that lets it.
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: cannot make a directory unwritable")
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *command]
    proc = subprocess.run(command, capture_output=True, text=True, env=loom_env(), cwd=REPO, timeout=60)
    assert proc.returncode != 0
    assert str(target) in proc.stderr
    assert "Permission denied" in proc.stderr or "Read-only" in proc.stderr


@pytest.mark.incident("exit_zero_is_failure")
@pytest.mark.parametrize("command", [["status"], ["ledger", "verify"], ["doctor"]])
def test_every_command_fails_loudly_on_a_bad_state_dir(tmp_path, command):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_loom("--state-dir", str(blocker / "s"), *command)
    assert result.returncode != 0
    assert str(blocker / "s") in result.stdout + result.stderr
