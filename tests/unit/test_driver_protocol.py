"""Both drivers are an `AgentDriver`: every member the port names, with the port's signature, and
capabilities that say what each can do (callers decide by them, never by class or name)."""

from __future__ import annotations

import inspect
import re

import pytest

from loomtui.agent.driver import TmuxDriver
from loomtui.agent.drivers import DRIVERS, driver_class, make_driver
from loomtui.agent.ports import AgentDriver
from loomtui.agent.stream_driver import StreamJsonDriver
from loomtui.config import parse_config
from loomtui.errors import ConfigError

CAPABILITIES = ("has_dialogs", "owns_turns")


def members() -> tuple[set[str], set[str]]:
    """The port's attributes (annotated) and its methods, as the Protocol declares them."""
    attributes = set(AgentDriver.__annotations__)
    methods = {n for n, v in vars(AgentDriver).items() if callable(v) and not n.startswith("_")}
    return attributes, methods


def config_for(name: str):
    return parse_config({"agent": {"driver": name}}, "test", None)


def test_the_port_names_what_callers_use():
    attributes, methods = members()
    assert attributes == {"name", *CAPABILITIES}
    assert {"observe", "screen", "type_line", "send_keys", "stop", "launch", "pane_info", "stream_facts"} <= methods


@pytest.mark.parametrize("cls", [TmuxDriver, StreamJsonDriver])
def test_each_driver_implements_every_member_with_the_ports_signature(cls):
    attributes, methods = members()
    for name in attributes:
        assert name in vars(cls) or any(name in vars(base) for base in cls.__mro__[1:-1]), f"{cls.__name__}.{name}"
    assert isinstance(cls.name, str) and all(isinstance(getattr(cls, c), bool) for c in CAPABILITIES)
    for name in methods:
        wanted = inspect.signature(getattr(AgentDriver, name))
        got = inspect.signature(getattr(cls, name))
        shape = [(p.name, p.kind, p.default) for p in got.parameters.values()]
        assert shape == [(p.name, p.kind, p.default) for p in wanted.parameters.values()], f"{cls.__name__}.{name}{got}"


@pytest.mark.parametrize("name, dialogs, turns", [("tmux", True, False), ("stream-json", False, True)])
def test_make_driver_gives_an_agent_driver_whose_capabilities_its_class_states(tmp_path, name, dialogs, turns):
    config = config_for(name)
    driver = make_driver(config, tmp_path)
    assert isinstance(driver, AgentDriver) and type(driver) is driver_class(config)
    assert driver.name == name and (driver.has_dialogs, driver.owns_turns) == (dialogs, turns)


def test_the_drivers_are_exactly_the_ones_the_config_accepts():
    # config.py's one_of for agent.driver and the maker's table say the same names.
    with pytest.raises(ConfigError) as refused:
        config_for("screen")
    accepted = set(re.findall(r"'([^']+)'", str(refused.value).partition("expected one of")[2].partition("(got")[0]))
    assert accepted == set(DRIVERS)
    for name in accepted:
        assert driver_class(config_for(name)).name == name
