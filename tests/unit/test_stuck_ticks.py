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
        write_beat(ctx, {"watchdog": bound - 60, "canary": None, "sentinel": 10 * bound})
        calm = loom("check")
        assert "stuck" not in calm.stdout, calm.stdout  # long, not yet stuck; the sentinel is no agent's loop
        write_beat(ctx, {"watchdog": bound + 60, "canary": 5.0, "sentinel": None})
        stuck = loom("check")
        assert stuck.returncode == check_rules.CRITICAL
        assert "agent's watchdog tick has run 15m: stuck, nobody is watching it (restart loom supervise)" in \
            stuck.stdout, stuck.stdout
        # The push heartbeat's verdict says the same: a fail, naming the loop.
        [agent] = health(status_mod.gather_all(ctx, events=0), 0.0, ctx.config)
        assert agent.stuck.startswith("watchdog tick stuck for ")
        verdict = heartbeat_rules.verdict([agent], hold_fails=False, unwitnessed_after=600)
        assert verdict.says == heartbeat_rules.FAIL and "watchdog tick stuck" in verdict.why
    finally:
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
