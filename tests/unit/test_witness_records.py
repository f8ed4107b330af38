"""What the store says about a relaunch's witness, its readiness and the daemon's doorbells:
real SQLite and real asyncio, no tmux."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest

from loomtui.agent import launches
from loomtui.canary import runs
from loomtui.config import AgentConfig
from loomtui.context import Context
from loomtui.daemon.supervise import Doorbell, sleep_stop_or_wake
from loomtui.demo.launcher import DEMO_READY
from loomtui.store import ledger


@pytest.fixture
def ctx(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[agent]\ntmux_socket = "loomtest-witness-{tmp_path.name[-6:]}"\n'
                      'ready_match = "(?m)^> $"\nboot_grace = "1h"\n')
    context = Context.load(str(config), None, environ={})
    yield context
    context.close()


def relaunch(ctx, cause="crash"):
    event = ledger.append(ctx.store, "relaunch", source="watchdog", cause=cause, detail={"mode": "resume"})
    ctx.store.set_meta(launches.LAUNCH_KEY, f'{{"ts": {time.time()}, "mode": "resume", "session_id": "s"}}')
    return event


def probe(ctx, result, ack=True):
    run = runs.insert_run(ctx, f"n{time.monotonic_ns()}", "canary", runs.PENDING, time.time(), time.time() + 60)
    runs.settle_run(ctx, run, result, ack_at=time.time() if ack and result == runs.OK else None)
    return run


def canary_events(ctx):
    return [e.as_dict() for e in ledger.tail(ctx.store, 100, kinds=["canary"])]


def test_the_first_ack_of_a_launch_witnesses_its_relaunch_and_only_that_one(ctx):
    probe(ctx, runs.OK)  # before any relaunch: launch 0, nothing to witness
    first = relaunch(ctx)
    probe(ctx, runs.MISS)
    assert runs.witness_of(ctx, first.id) is None  # a miss witnesses nothing
    probe(ctx, runs.OK)
    probe(ctx, runs.OK)
    events = canary_events(ctx)
    assert [e["detail"].get("witnessed") for e in events] == [None, None, first.id, None]
    assert [e["detail"]["launch"] for e in events] == [0, first.id, first.id, first.id]
    witness = runs.witness_of(ctx, first.id)
    assert witness is not None and witness["event"] == events[2]["id"]
    second = relaunch(ctx)
    assert runs.witness_of(ctx, second.id) is None  # the earlier acks were another agent's
    probe(ctx, runs.OK)
    assert runs.witness_of(ctx, second.id)["event"] == canary_events(ctx)[-1]["id"]


def test_a_probe_typed_before_the_relaunch_is_not_joined_after_it(ctx):
    from loomtui.canary import probe as canary_probe

    ctx.acks_dir.mkdir(exist_ok=True)
    old = runs.insert_run(ctx, "old-nonce", "canary", runs.PENDING, time.time(), time.time() + 60)
    relaunch(ctx)
    typed = []

    def send(_ctx, text, **kwargs):
        typed.append(text)
        nonce = re.search(r"acks/(\w+)", text).group(1)
        (ctx.acks_dir / nonce).touch()  # the new agent acks at once

        class Sent:
            ok, error = True, ""
        return Sent()

    result = canary_probe.probe(ctx, send, source="canary")
    assert result.id != old and not result.joined and result.result == runs.OK and len(typed) == 1
    assert runs.witness_of(ctx, runs.launch_seq(ctx)) is not None


def test_seeing_the_agent_ready_ends_its_boot_grace(ctx):
    relaunch(ctx)
    assert launches.in_boot_grace(ctx) and launches.relaunch_under_way(ctx)
    launched = launches.last_launch(ctx)
    assert not launches.mark_ready(ctx, "another-session", launched.ts)  # not this launch
    assert launches.in_boot_grace(ctx)
    assert launches.mark_ready(ctx, "s", launched.ts)
    assert not launches.in_boot_grace(ctx) and not launches.relaunch_under_way(ctx)
    relaunch(ctx)  # a new launch boots again
    assert launches.in_boot_grace(ctx)


def test_ready_is_the_prompt_and_never_the_resume_failure(ctx):
    assert launches.looks_ready(ctx, "demo agent · session x\n> ")
    assert not launches.looks_ready(ctx, "demo agent · session x\n> hello")
    assert not launches.looks_ready(ctx, "No conversation found with session ID: x\n> ")


def test_the_demo_configs_ready_match_is_the_demo_agents_prompt_alone():
    AgentConfig(ready_match=DEMO_READY)  # valid, and does not match an empty screen
    fresh = "demo agent · session 1234\n> "
    resumed_history_then_wedged = "demo agent · session 1234\nresumed: 2 earlier turns\n> /poison\n\nthinking |"
    typing = "demo agent · session 1234\n> liveness check — run this"
    assert re.search(DEMO_READY, fresh)
    assert not re.search(DEMO_READY, resumed_history_then_wedged)
    assert not re.search(DEMO_READY, typing)


def test_a_doorbell_rung_before_or_during_a_sleep_ends_it_and_a_stop_wins():
    async def scenario():
        bell = Doorbell()
        bell.ring()  # before the loop sleeps: kept
        wake = bell.bind()
        stop = asyncio.Event()
        # Rung before the 600 s sleep: it ends at once (the deadline fails it if it sleeps on).
        assert await asyncio.wait_for(sleep_stop_or_wake(stop, wake, 600), 300) is False
        assert not wake.is_set()
        threading.Timer(0.05, bell.ring).start()  # from another thread, mid-sleep
        assert await sleep_stop_or_wake(stop, wake, 600) is False
        asyncio.get_running_loop().call_later(0.05, stop.set)
        assert await sleep_stop_or_wake(stop, wake, 600) is True
        # Without a ring or a stop, the sleep simply times out.
        assert await sleep_stop_or_wake(asyncio.Event(), wake, 0.01) is False

    asyncio.run(asyncio.wait_for(scenario(), 120))
