"""A loop whose tick never ends (a read of /proc hung on a process in D state, say) leaves its agent
unwatched while the daemon's heartbeat beats on from its own loop. The heartbeat says how long each
tick under way has run (daemon/supervise.py), and `loom check` and the push heartbeats call a
watchdog or canary tick past any tick's time stuck (report/check_rules.py)."""

from __future__ import annotations

import asyncio
import threading

from loomtui import clock
from loomtui.context import Context
from loomtui.daemon.heartbeat_push import health
from loomtui.daemon.supervise import HEARTBEAT, Runtime, TickLoop, run_heartbeat, run_tick_loop
from loomtui.report import check_rules, heartbeat_rules
from loomtui.report import status as status_mod
from loomtui.store import heartbeats


def test_the_heartbeat_says_how_long_the_tick_under_way_has_run_and_nothing_between_ticks(tmp_path):
    ctx = Context.load(None, str(tmp_path / "state"), environ={})
    release = threading.Event()
    entered = threading.Event()
    ticks: list[int] = []

    def make(loop_ctx: Context, halt) -> object:
        def tick() -> None:
            ticks.append(1)
            if len(ticks) == 2:  # the second tick hangs until let go
                entered.set()
                release.wait(120)
        return tick

    spec = TickLoop("watchdog", 0.05, make)
    rt = Runtime(ctx, [spec])
    seen: dict[str, list] = {"busy": [], "after": []}

    def busy_for() -> float | None:
        beat = heartbeats.read(ctx.store).get(HEARTBEAT)
        return beat["detail"]["loops"]["watchdog"]["busy_for"] if beat else "no beat"

    async def run() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(run_tick_loop(rt, spec, stop)), asyncio.create_task(run_heartbeat(rt, stop, 0.02))]
        while not entered.is_set():
            await asyncio.sleep(0.02)
        while len(seen["busy"]) < 2:  # two beats during the hung tick: its time grows
            value = await asyncio.to_thread(busy_for)
            if isinstance(value, float) and (not seen["busy"] or value > seen["busy"][-1]):
                seen["busy"].append(value)
            await asyncio.sleep(0.05)
        status = await asyncio.to_thread(lambda: status_mod.gather(ctx, events=0))
        seen["ran"] = [status.supervisor.ran("watchdog", 15.0) if status.supervisor else None]
        release.set()
        while len(ticks) < 4:
            await asyncio.sleep(0.02)
        while (value := await asyncio.to_thread(busy_for)) is not None:
            await asyncio.sleep(0.02)  # a beat between ticks says none under way
        seen["after"].append(value)
        stop.set()
        await asyncio.gather(*tasks)

    try:
        asyncio.run(asyncio.wait_for(run(), 120))
        assert seen["busy"][0] < seen["busy"][1]
        assert seen["ran"][0] is not None and seen["ran"][0] >= seen["busy"][0]
        assert seen["after"] == [None]
    finally:
        release.set()
        ctx.close()


def write_beat(ctx: Context, busy: dict[str, float | None]) -> None:
    loops = {name: {"ticks": 3, "errors": 0, "restarts": 0, "last_duration": 0.1, "last_tick": None,
                    "last_error": "", "busy_for": seconds} for name, seconds in busy.items()}
    heartbeats.beat(ctx.store, HEARTBEAT, {"pid": 1, "loops": loops})


def test_loom_check_calls_a_watchdog_tick_past_any_tick_s_time_stuck(tmp_path, loom, state_dir):
    ctx = Context.load(None, str(state_dir), environ={})
    bound = check_rules.tick_stuck_after(ctx.config.agent.boot_grace, ctx.config.canary.ack_timeout,
                                         ctx.config.agent.resume_check, ctx.config.agent.stop_grace)
    try:
        sentinel = check_rules.step_stuck_after(ctx.config.sentinel.interval)
        write_beat(ctx, {"watchdog": bound - 60, "canary": None, "sentinel": sentinel - 60})
        calm = loom("check")
        assert "stuck" not in calm.stdout, calm.stdout  # long, not yet stuck
        write_beat(ctx, {"watchdog": bound + 60, "canary": 5.0, "sentinel": None})
        stuck = loom("check")
        assert stuck.returncode == check_rules.CRITICAL
        assert "agent's watchdog tick has run 15m: stuck, nobody is watching it (restart loom supervise)" in \
            stuck.stdout, stuck.stdout
        # The push heartbeat's verdict says the same: a fail, naming the loop.
        [agent] = health(status_mod.gather_all(ctx, events=0), ctx.config)
        assert agent.stuck.startswith("watchdog tick stuck for ")
        verdict = heartbeat_rules.verdict([agent], hold_fails=False, unwitnessed_after=600)
        assert verdict.says == heartbeat_rules.FAIL and "watchdog tick stuck" in verdict.why
    finally:
        ctx.close()


def test_loom_check_and_the_push_heartbeat_call_a_host_wide_loop_s_step_past_its_bound_stuck(tmp_path, loom,
                                                                                            state_dir):
    """The sentinel's tick (a job's log opened on a hung NFS mount) and a Telegram service's step are
    no agent's loops: only the watchdog's and the canary's were held to a bound, and a sentinel stuck
    for a day was never reported. Each host-wide step may take its longest wait (the sentinel's
    interval, a poll's long poll) and ten minutes."""
    from push_receiver import Receiver

    from loomtui.daemon.heartbeat_push import heartbeat_tick
    from loomtui.store import heartbeat_pushes

    receiver = Receiver()
    config = tmp_path / "loom.toml"
    config.write_text(f'[[heartbeat]]\nurl = "{receiver.url}/ping/s3cret"\ntimeout = "2s"\n')
    ctx = Context.load(str(config), str(state_dir), environ={})
    halt = threading.Event()
    sentinel = check_rules.step_stuck_after(ctx.config.sentinel.interval)
    telegram = check_rules.step_stuck_after(ctx.config.telegram.long_poll)
    try:
        write_beat(ctx, {"watchdog": 5.0, "sentinel": sentinel - 60, "telegram_sender": telegram - 60})
        assert "stuck" not in loom("--config", str(config), "check").stdout  # long, not yet stuck
        write_beat(ctx, {"watchdog": 5.0, "sentinel": sentinel + 60, "telegram_sender": telegram + 60})
        stuck = loom("--config", str(config), "check")
        assert stuck.returncode == check_rules.CRITICAL
        assert "the sentinel loop's step has run 21m: stuck (restart loom supervise)" in stuck.stdout, stuck.stdout
        assert "the telegram_sender loop's step has run 11m: stuck" in stuck.stdout, stuck.stdout
        # The push heartbeat fails, naming them, whatever the agent's own state.
        heartbeat_tick(ctx, halt)()
        from harness import wait_for

        beat = wait_for(lambda: heartbeat_pushes.last(ctx.store, "heartbeat1"), 30, what="the beat recorded")
        assert beat["says"] == heartbeat_rules.FAIL, beat
        assert "sentinel step stuck for " in beat["why"] and "telegram_sender step stuck for " in beat["why"], beat
    finally:
        halt.set()
        receiver.close()
        ctx.close()


def test_the_heartbeat_says_how_long_a_telegram_step_under_way_has_run(tmp_path):
    """A service's steps were never marked, so a Telegram step that hung (a store that never
    answers, a transcript on a hung mount) read as idle. The poller's long poll is a step under way:
    the heartbeat says how long it has run, and nothing once it is done."""
    import time

    from fakebot import bot_config

    from loomtui.daemon.loops import services
    from loomtui.daemon.supervise import run_service

    fake, config = bot_config(tmp_path, "123456:busy-for-test-token", 'commands = true\nlong_poll = "60s"\n')
    ctx = Context.load(str(config), str(tmp_path / "state"), environ={})
    [poller] = [s for s in services(ctx) if s.name == "telegram_commands"]
    rt = Runtime(ctx, [], [poller])
    seen: dict[str, list] = {"busy": []}

    def busy_for() -> float | None:
        return rt.stats["telegram_commands"].said(time.monotonic())["busy_for"]

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(run_service(rt, poller, stop))
        while not fake.get_updates_offsets and not task.done():
            await asyncio.sleep(0.02)  # its long poll is in flight, and waits for an update
        while len(seen["busy"]) < 2 and not task.done():
            value = busy_for()
            if isinstance(value, float) and (not seen["busy"] or value > seen["busy"][-1]):
                seen["busy"].append(value)
            await asyncio.sleep(0.05)
        stop.set()
        await task
        seen["after"] = [busy_for()]

    try:
        asyncio.run(asyncio.wait_for(run(), 120))
        assert len(seen["busy"]) == 2 and seen["busy"][0] < seen["busy"][1], seen
        assert seen["after"] == [None]
    finally:
        fake.stop()
        ctx.close()


def test_a_daemon_gone_mid_tick_is_no_heartbeat_not_a_stuck_tick(tmp_path, loom, state_dir):
    ctx = Context.load(None, str(state_dir), environ={})
    try:
        heartbeats.beat(ctx.store, HEARTBEAT, {"pid": 1, "loops": {"watchdog": {"busy_for": 5000.0}}},
                        now=clock.wall() - 3600)
        line = loom("check").stdout
        assert "heartbeat" in line and "stuck" not in line, line
    finally:
        ctx.close()


def test_the_bound_is_a_probe_and_two_relaunches_and_ten_minutes():
    bound = check_rules.tick_stuck_after(90, 180, 5, 3)
    assert bound == 90 + 180 + 2 * (3 + 5) + 600
    assert check_rules.stuck({"watchdog": bound, "canary": None}, bound) == ()
    assert check_rules.stuck({"watchdog": bound + 1, "canary": 5.0}, bound) == (("watchdog", bound + 1),)
    code, line = check_rules.verdict([check_rules.AgentFacts("b", "running", stuck=(("canary", 3700.0),)),
                                      check_rules.AgentFacts("c", "running")],
                                     check_rules.HostFacts(3.0, 15.0, True))
    assert code == check_rules.CRITICAL and "agent b's canary tick has run 61m: stuck" in line


def test_a_hostile_or_old_beat_says_no_tick_under_way():
    for detail in ({}, {"loops": []}, {"loops": {"watchdog": "x"}}, {"loops": {"watchdog": {"busy_for": "5"}}},
                   {"loops": {"watchdog": {"busy_for": True}}}, {"loops": {"watchdog": {"busy_for": -1}}},
                   {"loops": {"watchdog": {"busy_for": float("inf")}}}):
        assert status_mod._busy({"detail": detail}) == {}, detail
    assert status_mod._busy({"detail": {"loops": {"watchdog": {"busy_for": 7}}}}) == {"watchdog": 7.0}
    assert status_mod.Heartbeat(3.0, 1, None, {"watchdog": 7.0}).ran("watchdog", 15.0) == 10.0
    assert status_mod.Heartbeat(3.0, 1).ran("watchdog", 15.0) is None
    # A beat no longer fresh (the daemon gone mid-tick, or its beats refused by a locked store)
    # says nothing of a tick now: "no heartbeat" is the news, never a tick stuck for hours.
    assert status_mod.Heartbeat(16.0, 1, None, {"watchdog": 7.0}).ran("watchdog", 15.0) is None
    assert status_mod.Heartbeat(-20.0, 1, None, {"watchdog": 7.0}).ran("watchdog", 15.0) is None
