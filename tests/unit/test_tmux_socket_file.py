"""Which tmux socket the agent is looked for on (agent.driver.socket_in_use): its directory's socket
file, else the configured socket, else, for an agent an older Loom launched, the old default."""

from __future__ import annotations

import os

import pytest

from loomtui.agent.driver import SOCKET_FILE, record_socket, socket_in_use
from loomtui.config import DEFAULT_SOCKET, LEGACY_SOCKET, default_socket, legacy_socket
from loomtui.errors import LoomError
from loomtui.store.session import SIDECAR


def test_the_default_names_are_loom_s_own_and_map_back_to_the_old_ones():
    assert (default_socket("main"), default_socket("beta")) == ("loomtui", "loomtui-beta")
    assert (legacy_socket("loomtui"), legacy_socket("loomtui-beta")) == ("loom", "loom-beta")
    assert legacy_socket("mine") == "mine"  # a name the operator chose was the name then too
    assert (DEFAULT_SOCKET, LEGACY_SOCKET) == ("loomtui", "loom")


def test_a_new_install_uses_the_configured_socket(tmp_path):
    assert socket_in_use(tmp_path, "loomtui") == "loomtui"
    assert socket_in_use(None, "loomtui") == "loomtui"  # a driver made without its directory


def test_an_older_loom_s_agent_is_looked_for_where_it_launched_it(tmp_path):
    (tmp_path / SIDECAR).write_text("session\n")  # launched (a session pinned), no socket file
    assert socket_in_use(tmp_path, "loomtui") == "loom"
    assert socket_in_use(tmp_path, "loomtui-beta") == "loom-beta"
    assert socket_in_use(tmp_path, "mine") == "mine"


def test_the_socket_file_wins_and_is_written_whole(tmp_path):
    (tmp_path / SIDECAR).write_text("session\n")
    record_socket(tmp_path, "loomtui")
    assert (tmp_path / SOCKET_FILE).read_text() == "loomtui\n"
    assert socket_in_use(tmp_path, "other") == "loomtui"  # until the next launch moves it
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary file left


@pytest.mark.parametrize("junk", ["", "two words", "../x", "a;b", "\xff"])
def test_a_damaged_socket_file_reads_as_none(tmp_path, junk):
    (tmp_path / SOCKET_FILE).write_text(junk, encoding="utf-8", errors="surrogateescape")
    assert socket_in_use(tmp_path, "loomtui") == "loomtui"
    (tmp_path / SIDECAR).write_text("session\n")
    assert socket_in_use(tmp_path, "loomtui") == "loom"


def test_an_unwritable_directory_is_named(tmp_path):
    with pytest.raises(LoomError) as info:
        record_socket(tmp_path / "missing", "loomtui")
    assert str(tmp_path / "missing" / SOCKET_FILE) in str(info.value)
