"""Simulated time and simulated threads: Loom's own loops run as they do in the daemon, one at a time.

The daemon runs its watchdog, canary and sentinel in threads that sleep, wait for locks and poll a
booting agent. Here each is a real thread too, but only one runs at a time: a thread runs until it
sleeps on the virtual clock (`SimClock.sleep`, which every wait in Loom's code reaches through
loomtui.clock), then hands the baton back, and the scheduler wakes whatever is due next, a thread or
one of the world's own events. Which thread runs next is decided by the heap alone (time, then the
order things were scheduled), so the same seed gives the same interleaving, to the byte, while
Loom's threads still overlap as they do on a machine: a relaunch holding recycle.lock through its
boot watch while the canary loop looks, finds the lock held and waits.
"""

from __future__ import annotations

import _thread
import heapq
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loomtui.sim.world import World

# A thread asked to sleep less than this sleeps this long: a poll loop on the virtual clock must
# move time forward, or it would spin at one instant for ever.
MIN_SLEEP = 1e-3
# How long (real seconds) the scheduler waits for a slice to end: one that takes longer is blocked on
# something real (a lock's blocking wait, a socket), which would hang the run for ever.
REAL_WAIT = 120.0


class Deadlock(RuntimeError):
    """A simulated thread blocked outside the virtual clock (a real wait): the run cannot go on."""


class _Exit(BaseException):
    """Raised inside a simulated thread to end it when the run is over (not an error of its code)."""


def _baton() -> Any:
    """A binary semaphore, taken: released by the one handing the baton over, acquired by the one
    waiting for it. A bare lock, not threading.Semaphore (a Condition in Python): a run hands the
    baton over twice a step, and this costs a fifth as much."""
    lock = _thread.allocate_lock()
    lock.acquire()
    return lock


class SimThread:
    def __init__(self, scheduler: Scheduler, name: str, body: Callable[[], None]) -> None:
        self.scheduler = scheduler
        self.name = name
        self.body = body
        self.go = _baton()
        self.done = False
        self.error: BaseException | None = None
        self.wake_token = 0
        self.thread = threading.Thread(target=self._run, name=f"sim-{name}", daemon=True)

    def _run(self) -> None:
        self.go.acquire()
        try:
            if not self.scheduler.stopping:
                self.body()
        except _Exit:
            pass
        except BaseException as exc:  # handed to the scheduler's thread, which raises it
            self.error = exc
        finally:
            self.done = True
            self.scheduler.returned = self
            self.scheduler.back.release()


class Scheduler:
    """The heap of timed steps and the baton. `t` is the monotonic clock of the run's one boot."""

    def __init__(self) -> None:
        self.t = 0.0
        self.heap: list[tuple[float, int, Callable[..., None] | None, Any]] = []
        self.seq = 0
        self.back = _baton()
        self.current: SimThread | None = None
        self.threads: list[SimThread] = []
        self.stopping = False
        self.after_slice: Callable[[SimThread], None] | None = None
        self.on_time: Callable[[float], None] | None = None
        # While run_until runs: its end and its after_step, for a thread that ends its own slice
        # (_run_on); `booked` tells the scheduler's thread that the slice it handed over was ended
        # so (True), or raised this from its after_slice or after_step.
        self.end: float | None = None
        self.after_step: Callable[[], None] | None = None
        self.booked: bool | BaseException | None = None
        # The thread that handed the baton back (the last of a chain of direct handovers), and the
        # slices begun so far: the scheduler's real-time guard asks whether any began meanwhile.
        self.returned: SimThread | None = None
        self.slices = 0

    # -- scheduling -------------------------------------------------------------------------

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn(*args)` on the scheduler's thread at `when` (the world's events)."""
        self.seq += 1
        heapq.heappush(self.heap, (max(when, self.t), self.seq, fn, args))

    def spawn(self, name: str, body: Callable[[], None], when: float | None = None) -> SimThread:
        """A simulated thread running `body` from `when` (now by default), one slice at a time."""
        th = SimThread(self, name, body)
        self.threads.append(th)
        th.thread.start()
        self._wake_at(th, self.t if when is None else when)
        return th

    def _wake_at(self, th: SimThread, when: float) -> None:
        th.wake_token += 1
        self.seq += 1
        heapq.heappush(self.heap, (max(when, self.t), self.seq, None, (th, th.wake_token)))

    def wake(self, th: SimThread, when: float | None = None) -> None:
        """Bring a sleeping thread's wake forward to `when` (now by default); a later one is dropped."""
        self._wake_at(th, self.t if when is None else when)

    # -- from inside a simulated thread ------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        self.sleep_until(self.t + seconds)

    def sleep_until(self, when: float) -> None:
        """Sleep until `when`, or until someone calls wake() for this thread sooner."""
        th = self.current
        if th is None or threading.current_thread() is not th.thread:
            raise Deadlock("the virtual clock's sleep was called outside a simulated thread")
        self._wake_at(th, max(when, self.t + MIN_SLEEP))
        self._yield(th)

    def _yield(self, th: SimThread) -> None:
        after = self._run_on(th)
        if after is th:
            return
        if after is not None:
            after.go.release()  # straight to the next thread: one switch, not two through the scheduler's
        else:
            self.back.release()
        th.go.acquire()
        if self.stopping:
            raise _Exit()

    def _run_on(self, th: SimThread) -> SimThread | None:
        """End this slice here as run_until would (after_slice, after_step, the stale wakes it skips)
        and, when the heap's next step is a thread's wake, take it: this thread's own (it runs on),
        or another's (the baton goes to it directly). Each saves the two thread switches of a trip
        through the scheduler's thread (a quarter of a run's CPU), and everything happens in the same
        order as through run_until. None: the baton goes back to the scheduler's thread (a world's
        event is next, the run's end, or a violation), `booked` says the slice is ended."""
        end, after_step = self.end, self.after_step
        if end is None or after_step is None:
            self.returned = th
            return None
        heap = self.heap
        self.returned = th
        try:
            self.current = None
            if self.after_slice is not None:
                self.after_slice(th)
            after_step()
        except BaseException as exc:  # a violation: the scheduler's thread raises it, as its own
            self.booked = exc
            return None
        self.booked = True
        while heap and heap[0][0] <= end:
            when, _, fn, args = heap[0]
            if fn is not None:
                return None  # a world's event: the scheduler's thread runs it
            after = args[0]
            if args[1] != after.wake_token or after.done:
                heapq.heappop(heap)  # skipped as run_until skips it
                continue
            heapq.heappop(heap)
            self.booked = None
            self.t = when
            if self.on_time is not None:
                self.on_time(when)
            self.current = after
            self.slices += 1
            return after
        return None

    # -- the run ----------------------------------------------------------------------------

    def run_until(self, end: float, after_step: Callable[[], None]) -> None:
        self.end, self.after_step = end, after_step
        try:
            self._run_until(end, after_step)
        finally:
            self.end = self.after_step = None

    def _run_until(self, end: float, after_step: Callable[[], None]) -> None:
        heap = self.heap
        while heap and heap[0][0] <= end:
            when, _, fn, args = heapq.heappop(heap)
            if fn is None and (args[1] != args[0].wake_token or args[0].done):
                continue  # a thread's wake superseded by an earlier one, or the thread has ended
            self.t = when
            if self.on_time is not None:
                self.on_time(when)
            if fn is None:
                th = args[0]
                self.current = th
                self.booked = None
                self.slices += 1
                th.go.release()
                self._wait_back()
                th = self.returned or th  # the chain of handovers may have ended in another thread
                self.current = None
                if th.error is not None:
                    raise th.error
                booked, self.booked = self.booked, None
                if isinstance(booked, BaseException):
                    raise booked
                if booked:
                    continue  # the thread ended its last slice itself (_run_on), after_step included
                if self.after_slice is not None:
                    self.after_slice(th)
            else:
                fn(*args)
            after_step()

    def _wait_back(self) -> None:
        """Until a thread hands the baton back: a chain of handovers may run long, but a slice that
        begins no other for REAL_WAIT is blocked on something real (a lock's blocking wait, a socket)."""
        seen = self.slices
        while not self.back.acquire(timeout=REAL_WAIT):
            if self.slices == seen:
                name = self.current.name if self.current is not None else "?"
                raise Deadlock(f"simulated thread {name} blocked outside the virtual clock")
            seen = self.slices

    def stop(self) -> None:
        """End every thread still parked or sleeping (each raises _Exit where it waits)."""
        self.stopping = True
        for th in self.threads:
            if not th.done:
                th.go.release()
                self.back.acquire()
        self.threads.clear()


class SimClock:
    """loomtui.clock's port on the scheduler: the world's two clocks (its monotonic `t`, the heap's
    time; its wall clock, which only the clock faults step), one boot; sleeping yields the baton."""

    def __init__(self, scheduler: Scheduler, world: World, boot: str) -> None:
        self.scheduler = scheduler
        self.world = world
        self.boot = boot

    def wall(self) -> float:
        return self.world.wall

    def monotonic(self) -> float:
        return self.world.mono

    def boot_id(self) -> str | None:
        return self.boot

    def sleep(self, seconds: float) -> None:
        self.scheduler.sleep(seconds)
