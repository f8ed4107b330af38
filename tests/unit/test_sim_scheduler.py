"""The simulator's scheduler: real threads, one at a time, in the heap's order; the baton handed
straight from a slice that ends to the next thread due; a thread blocked on something real named."""

from __future__ import annotations

import threading
import time

import pytest

from loomtui.sim import scheduler as sched_module
from loomtui.sim.scheduler import Deadlock, Scheduler


def run(s: Scheduler, end: float, steps: list[float] | None = None) -> None:
    try:
        s.run_until(end, (lambda: steps.append(s.t)) if steps is not None else (lambda: None))
    finally:
        s.stop()


def test_threads_and_events_run_one_at_a_time_in_the_heaps_order():
    s = Scheduler()
    seen: list[tuple[float, str]] = []
    running = [0]

    def ticker(name: str, period: float):
        def body():
            while True:
                running[0] += 1
                assert running[0] == 1, "two simulated threads ran at once"
                seen.append((s.t, name))
                running[0] -= 1
                s.sleep(period)
        return body

    s.spawn("a", ticker("a", 2.0))
    s.spawn("b", ticker("b", 3.0), when=0.5)
    s.at(4.2, lambda: seen.append((s.t, "event")))
    steps: list[float] = []
    run(s, 7.0, steps)
    assert seen == [(0.0, "a"), (0.5, "b"), (2.0, "a"), (3.5, "b"), (4.0, "a"), (4.2, "event"),
                    (6.0, "a"), (6.5, "b")]
    assert steps == [t for t, _ in seen]  # after_step once per step, whichever thread ended it


def test_a_wake_brings_a_sleeper_forward():
    s = Scheduler()
    seen: list[float] = []
    sleeper = s.spawn("sleeper", lambda: [seen.append(s.t), s.sleep(100.0), seen.append(s.t)])
    s.at(5.0, s.wake, sleeper)
    run(s, 50.0)
    assert seen == [0.0, 5.0]


def test_a_chain_of_handovers_longer_than_the_real_wait_is_no_deadlock(monkeypatch):
    # Two threads hand the baton to each other, never back to the scheduler's thread (no world
    # event comes between), for longer in real time than the guard waits: progress, not a hang.
    monkeypatch.setattr(sched_module, "REAL_WAIT", 1.0)
    s = Scheduler()
    count = [0]

    def body():
        while True:
            count[0] += 1
            time.sleep(0.01)
            s.sleep(1.0)

    s.spawn("a", body)
    s.spawn("b", body, when=0.5)
    run(s, 100.0)  # 201 slices of 10 ms each: over 2 s of real time, twice the guard's wait
    assert count[0] == 101 + 100


def test_a_thread_blocked_outside_the_virtual_clock_is_named(monkeypatch):
    monkeypatch.setattr(sched_module, "REAL_WAIT", 0.5)
    s = Scheduler()
    held = threading.Lock()
    held.acquire()

    def stuck():
        s.sleep(1.0)
        held.acquire()  # a real blocking wait: nothing on the virtual clock will ever end it

    s.spawn("ticker", lambda: [s.sleep(0.5) for _ in range(3)])
    s.spawn("stuck", stuck)
    with pytest.raises(Deadlock, match="simulated thread stuck blocked outside the virtual clock"):
        s.run_until(10.0, lambda: None)
    # A run that deadlocked is over: the stuck thread is let go (it hands the baton back as it
    # ends) and the parked one stays parked (a daemon thread), as after a real deadlock.
    held.release()
    stuck = next(th for th in s.threads if th.name == "stuck")
    stuck.thread.join(10)
    assert stuck.done


def test_an_error_in_a_thread_reached_by_a_handover_is_raised_by_the_run():
    s = Scheduler()

    def failing():
        s.sleep(2.0)
        raise ValueError("the loop's own bug")

    s.spawn("a", lambda: [s.sleep(1.0) for _ in range(10)])
    s.spawn("b", failing)
    with pytest.raises(ValueError, match="the loop's own bug"):
        s.run_until(10.0, lambda: None)
    s.stop()


def test_a_violation_in_after_step_ends_the_run_from_any_thread():
    s = Scheduler()
    s.spawn("a", lambda: [s.sleep(1.0) for _ in range(10)])
    s.spawn("b", lambda: [s.sleep(1.5) for _ in range(10)])

    def after_step():
        if s.t >= 3.0:
            raise AssertionError(f"invariant broke at {s.t}")

    with pytest.raises(AssertionError, match="invariant broke at 3.0"):
        s.run_until(10.0, after_step)
    s.stop()
