"""What Loom creates is the operator's alone (files 0600, directories 0700, job logs included), and
a state dir or acks dir that another user could write is refused with the path, not used."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, loom_env

from loomtui.errors import StateDirError
from loomtui.store.db import DB_NAME
from loomtui.store.statedir import prepare_agent_dir, prepare_state_dir, private_dir

PY = sys.executable


def loom(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`loom` under the usual umask of 022: a mode that is private is Loom's doing, not the umask's."""
    return subprocess.run([PY, "-m", "loomtui", *args], capture_output=True, text=True, env=loom_env(env),
                          cwd=REPO, timeout=120, umask=0o022)


def modes(root: Path) -> dict[str, int]:
    found = {}
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
            found[str(path.relative_to(root.parent))] = st.st_mode & 0o777
    return found


def test_what_the_commands_create_is_private(tmp_path):
    state, log = tmp_path / "state", tmp_path / "logs" / "nightly" / "job.log"
    config = tmp_path / "config.toml"
    config.write_text(f"state_dir = '{state}'\n[[agents]]\nname = 'main'\n[[agents]]\nname = 'second'\n"
                      f"[[jobs]]\nname = 'nightly'\nlog = '{log}'\n")
    env = {"LOOM_CONFIG": str(config)}
    for command in (["status"], ["hold", "--agent", "main", "--reason", "maintenance"], ["release", "--agent", "main"], ["ledger", "verify"],
                    ["status", "--agent", "second"], ["run-job", "nightly", "--", PY, "-c", "print('pw=hunter2')"]):
        result = loom(*command, env=env)
        assert result.returncode == 0, (command, result.stdout + result.stderr)
    found = modes(state)
    assert f"state/{DB_NAME}" in found and "state/acks" in found and "state/agents/second/acks" in found
    wrong = {p: f"{m:o}" for p, m in found.items() if m != (0o700 if (tmp_path / p).is_dir() else 0o600)}
    assert not wrong, wrong
    # The job log (its output may hold a secret) and the directories run-job made for it.
    assert log.stat().st_mode & 0o777 == 0o600
    assert (log.parent.stat().st_mode & 0o777, log.parent.parent.stat().st_mode & 0o777) == (0o700, 0o700)


def test_an_existing_job_log_keeps_its_mode(tmp_path):
    state, log = tmp_path / "state", tmp_path / "job.log"
    log.write_text("")
    log.chmod(0o640)
    config = tmp_path / "config.toml"
    config.write_text(f"state_dir = '{state}'\n[[jobs]]\nname = 'j'\nlog = '{log}'\n")
    assert loom("run-job", "j", "--", PY, "-c", "print(1)", env={"LOOM_CONFIG": str(config)}).returncode == 0
    assert log.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("shared", ["state", "state/acks"])
def test_a_dir_others_can_write_is_refused_naming_it(tmp_path, shared):
    state = tmp_path / "state"
    (state / "acks").mkdir(parents=True, mode=0o700)
    (tmp_path / shared).chmod(0o770)
    result = loom("--state-dir", str(state), "status")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"{tmp_path / shared} is writable by others (mode 770)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (state / DB_NAME).exists()  # refused before anything is written there
    doctor = loom("--state-dir", str(state), "doctor")
    assert doctor.returncode == 1 and "FAIL  state dir    " in doctor.stdout and str(tmp_path / shared) in doctor.stdout


def test_world_writable_is_refused_and_readable_is_accepted(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    state.chmod(0o757)
    with pytest.raises(StateDirError, match="writable by others"):
        prepare_state_dir(state)
    state.chmod(0o755)  # what a umask of 022 makes: others may read, not write; doctor warns of it
    prepare_state_dir(state)


def test_another_agents_shared_acks_dir_is_refused(tmp_path):
    prepare_state_dir(tmp_path / "state")
    agent = prepare_agent_dir(tmp_path / "state" / "agents" / "second")
    (agent / "acks").chmod(0o730)
    with pytest.raises(StateDirError, match=f"acks dir {agent / 'acks'} is writable by others"):
        prepare_agent_dir(agent)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another user")
def test_a_state_dir_owned_by_another_user_is_refused(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, 65534, 65534)
    with pytest.raises(StateDirError, match="owned by uid 65534"):
        prepare_state_dir(state)


def test_private_dir_makes_every_missing_parent_0700(tmp_path):
    old = os.umask(0o022)
    try:
        private_dir(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    assert [(tmp_path / p).stat().st_mode & 0o777 for p in ("a", "a/b", "a/b/c")] == [0o700] * 3
