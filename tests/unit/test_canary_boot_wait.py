"""A probe handed to a stream-json agent's pump while its CLI has said nothing since the launch
waits out the boot grace before its ack timeout (canary.rules.ack_deadline): the tmux driver types
none before then. What the probe reads to know: the launch record, the processes recorded with it,
and pump.json as the pump writes it. A real store in a temporary state dir, on a fixed clock."""

from __future__ import annotations

import json

import pytest

from fake_clock import FakeClock
from loomtui import clock
from loomtui.agent import launches
from loomtui.agent.records import LaunchRecord
from loomtui.canary import probe as canary_probe
from loomtui.canary.rules import ack_deadline
from loomtui.context import Context
from loomtui.pump import client as pump_client

T0 = 1_800_000_000.0
MONO = 9000.0
BOOT = "boot-a"
PANE = 4242


@pytest.fixture(autouse=True)
def fixed_clock():
    with clock.use(FakeClock(T0, MONO, BOOT)) as c:
        yield c


@pytest.fixture
def context(tmp_path):
    """A context of the named driver, in a directory of its own, closed after the test."""
    made: list[Context] = []

    def make(driver: str) -> Context:
        home = tmp_path / driver
        home.mkdir()
        config = home / "config.toml"
        config.write_text(f'[agent]\ndriver = "{driver}"\nboot_grace = "90s"\n[canary]\nack_timeout = "1m"\n')
        made.append(Context.load(str(config), str(home / "state"), environ={}))
        return made[-1]

    yield make
    for ctx in made:
        ctx.close()


def launched(ctx: Context, ago: float, pane_pid: int = PANE) -> None:
    record = LaunchRecord(T0 - ago, MONO - ago, BOOT, "resume", "s-1", "crash")
    ctx.store.set_meta(ctx.store.agent_key(launches.LAUNCH_KEY), record.to_json())
    ctx.store.set_meta(ctx.store.agent_key(launches.PROCS_KEY), json.dumps({"pane_pid": pane_pid}))


def pump_status(ctx: Context, pid: int = PANE, session_id: str | None = None) -> None:
    status = {"pid": pid, "cli_pid": pid + 1, "started": T0 - 5, "turn": "idle", "queue": 0, "turns": 0}
    if session_id is not None:
        status["session_id"] = session_id
    pump_client.status_path(ctx.agent_dir).write_text(json.dumps(status))


def deadline(ctx: Context) -> float:
    """A probe sent now: its deadline as the probe computes it, from now."""
    cfg = ctx.config
    return ack_deadline(T0, cfg.canary.ack_timeout, canary_probe._booting_pump(ctx), cfg.agent.boot_grace) - T0


def test_a_probe_into_a_pump_whose_cli_has_not_spoken_waits_out_the_boot_grace(context):
    ctx = context("stream-json")
    launched(ctx, ago=6)
    pump_status(ctx)  # the pump is up; its CLI has printed nothing (no init, no session)
    assert deadline(ctx) == -6 + 90 + 60


def test_once_the_cli_has_spoken_a_probe_waits_its_ack_timeout(context):
    ctx = context("stream-json")
    launched(ctx, ago=6)
    pump_status(ctx, session_id="s-1")  # its init came: the CLI reads its stdin
    assert deadline(ctx) == 60


def test_another_pumps_status_or_none_says_nothing_yet_so_the_wait_is_the_longer(context):
    ctx = context("stream-json")
    launched(ctx, ago=6)
    assert deadline(ctx) == -6 + 90 + 60  # no pump.json yet
    pump_status(ctx, pid=PANE + 100, session_id="s-0")  # the last pump's, which had spoken
    assert deadline(ctx) == -6 + 90 + 60


def test_past_the_boot_grace_or_with_the_tmux_driver_a_probe_waits_its_ack_timeout(context):
    ctx = context("stream-json")
    launched(ctx, ago=120)
    pump_status(ctx)
    assert deadline(ctx) == 60
    tmux = context("tmux")
    launched(tmux, ago=6)
    assert deadline(tmux) == 60
