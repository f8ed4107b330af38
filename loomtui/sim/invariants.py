"""The invariants, checked after every step against the world's truth, never through the rules:
a checker that asked policy.counted how many relaunches were in the window would be fooled by
the very bug it exists to catch. Each bound is written out in docs/SIM.md.

Bounds stretch by the time Loom could not see or write (tmux hanging, the store locked, the
machine under load): a probe that cannot be typed says nothing, and waiting is the right thing.

Every bound is measured on the world's monotonic clock `t`, never on its wall clock: a clock fault
steps the wall clock only, and a deadline that followed it would be the bug, not the measure.
"""

from __future__ import annotations

import datetime as dt
import math
from bisect import bisect_left
from dataclasses import replace
from typing import TYPE_CHECKING, NoReturn

from loomtui.hooks.harness_rules import CAUSES as HARNESS_CAUSES
from loomtui.sentinel import cron, schedule
from loomtui.sim import faults
from loomtui.sim.hooks_model import LATE_BY
from loomtui.sim.world import STOP_TIME
from loomtui.store import job_runs

if TYPE_CHECKING:
    from loomtui.sim.engine import Sim

OPERATOR_CAUSES = ("operator_resume", "operator_fresh")
SLACK = 60.0
# How long a hook event may wait to be read: a failed hooks loop's longest backoff, and a look.
PROMPT_READ = 65.0

NAMES = (
    "one_agent", "one_relaunch_at_a_time", "ceiling", "escalate_once_and_hold", "never_silent",
    "no_resume_after_canary_failed", "resume_only_the_pinned", "definitive_signal", "deaf_bound",
    "relaunch_witnessed", "queue_backstop", "backstop_not_early", "witness_is_clean", "no_typing_into_a_booting_agent",
    "foreign_poller_reaped", "poller_restored", "fuse", "backoff", "exit_relaunched", "busy_not_recycled",
    "relaunch_probed", "denials_recorded_once", "conversation_kept", "failure_seen", "harness_hold_kept",
    "no_typing_into_a_permission_prompt", "overrun_seen",
)
# The causes whose relaunch always starts fresh (agent/policy.py: ALWAYS_FRESH).
FRESH_CAUSES = ("preventive", "resume_failed")


class Violation(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


class Checker:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        cfg = sim.config
        wd, canary, agent = cfg.watchdog, cfg.canary, cfg.agent
        relaunch_time = STOP_TIME + agent.resume_check
        # The span of the misses that recycle: their timeouts, a second apart.
        self.misses_span = canary.misses_to_recycle * (canary.ack_timeout + 1.0)
        # A backoff the recycle waited out may leave its misses stale: one look more (an ack
        # timeout and a second) before it acts (canary.rules.should_recycle).
        self.detect = (max(canary.interval, agent.boot_grace) + self.misses_span
                       + wd.backoff_max + relaunch_time + canary.ack_timeout + 1.0)
        # With turns told (hooks, or the stream-json pump), a wedge inside a turn looks busy until the
        # turn has been quiet for turn_quiet.
        self.deaf_bound = self.detect + 5.0 + (canary.turn_quiet if sim.turns_told else 0.0)
        self.silent_bound = (self.detect + 3 * wd.interval + wd.poller_grace + wd.ambiguous_alert
                             + agent.boot_grace + SLACK + (canary.turn_quiet if sim.turns_told else 0.0))
        # A relaunch's witness may be a wedge's to find first, and one that takes the agent just after
        # it took a probe hides in that probe's own turn: its misses count once the turn has been
        # quiet for turn_quiet, at the first probe after that, whole intervals later (hooked storm
        # seed 102, day 6.97: a probe the operator's turn held, then the next one's turn wedged).
        hidden = math.ceil(canary.turn_quiet / canary.interval) * canary.interval if sim.turns_told else 0.0
        self.witness_bound = self.detect + SLACK + hidden
        # A relaunch's own probe goes out once the agent is ready, or its boot grace is over, and
        # recycle.lock is free: a probe of the old launch may still wait out its deadline first, its
        # ack timeout, or for one handed to a pump whose CLI had not yet spoken, the boot grace and
        # then its ack timeout (canary.rules.ack_deadline).
        waiting = min(1.0, canary.ack_timeout / 4)  # how often the canary loop looks while it waits
        old_wait = canary.ack_timeout + (agent.boot_grace if sim.pumped else 0.0)
        self.probe_bound = relaunch_time + max(agent.boot_grace, old_wait + 1.0) + 2 * waiting + SLACK
        # From the moment the agent is plainly seen (alive, booted, no relaunch under way, tmux answering).
        self.foreign_bound = wd.foreign_scan + wd.interval + SLACK
        self.poller_bound = wd.poller_grace + 3 * wd.interval + wd.backoff_max + relaunch_time + SLACK
        self.stable_since: float | None = None
        self.automatic: list[float] = []            # times of automatic relaunch decisions since the last operator one
        self.relaunch_active = False
        self.held = False
        # The harness's hold (a rate limit the CLI reported: hooks/harness.py) in force until then
        # (t), by its own end; and when the last hold of any kind ended: bounds count from there.
        self.harness_until = -math.inf
        # When the failure the harness's hold is for (placed or renewed) was written: only a turn
        # that succeeded after it ends the hold.
        self.harness_since = -math.inf
        self.hold_end = -1e18
        # The sessions relaunched for canary_failed, each with the relaunches (ledger ids) that did it;
        # one that launched nothing resumed nothing, and is taken out (on_nothing_launched).
        self.canary_recycled: dict[str, set[int]] = {}
        self.pending_witness: tuple[int, float] | None = None
        # The last relaunch (seq, t, the newest canary run then) no probe was sent to yet. A probe is
        # any run Loom recorded after it (the world cannot tell a run's launch; relaunch_witnessed judges that).
        self.unprobed: tuple[int, float, int] | None = None
        self.newest_run = 0
        self.recorded_launch: float | None = None   # the monotonic instant Loom recorded its last relaunch at
        self.trouble_since: float | None = None
        self.last_attempt = -1e18
        self.last_notice = -1e18
        self.unresolved: set[int] = set()           # queue items not yet witnessed (sorted when iterated)
        # Sentinel ticks the locked store made fail: when each began (t), and what it cost the queue
        # (to the next tick's start: the busy wait, the daemon's backoff).
        self.sentinel_failures: list[float] = []
        self.sentinel_costs: list[float] = []
        # Jobs whose failed run (the world's truth: its end recorded at t) no unresolved item of
        # Loom's stands for yet: failure_seen.
        self.unseen_failures: dict[str, float] = {}
        # The world's runs hanging: run id -> (job, started on `t`, its allowance): overrun_seen.
        self.hung: dict[int, tuple[str, float, float]] = {}
        self.queue_calm_until = -math.inf           # check_queue: nothing late before this (see there)
        self.queue_calm_store = -1                  # ... while sim.store_changes is this
        # Automatic relaunch decisions (fallbacks included, as Loom's own history holds them) since the
        # last operator relaunch, at the monotonic instant Loom recorded each: the fuse and the backoff.
        self.decisions: list[float] = []
        self.exit_since: float | None = None          # the agent died (crash or exit, 0 included) at
        # The stream-json pump's results that denied a tool call (when each was written, t), and the
        # permission_denied events Loom recorded of them (the watchdog's record_denials, each tick).
        self.denials_written: list[float] = []
        self.denials_recorded = 0
        self.denial_bound = wd.interval + relaunch_time + agent.stop_grace + SLACK

    def fail(self, name: str, message: str) -> NoReturn:
        raise Violation(name, message)

    # -- events -----------------------------------------------------------------------------

    def on_relaunch(self, d: dict) -> None:
        sim, w = self.sim, self.sim.world
        t, cause, mode = w.t, d["cause"], d["mode"]
        operator = cause in OPERATOR_CAUSES
        if self.relaunch_active and not d["fallback"]:
            self.fail("one_relaunch_at_a_time", "a relaunch started while another was under way")
        self.relaunch_active = True
        if mode == "resume":
            # An operator may ask to resume any session of ours; Loom on its own never revives a wedge.
            if not operator and d["old"] in self.canary_recycled:
                self.fail("no_resume_after_canary_failed",
                          f"session {d['old']} was recycled for canary_failed and is resumed again ({cause})")
        if not operator and not d["fallback"]:
            self.check_conversation_kept(d, d.get("at", t))  # before this relaunch's own recycle counts
        if cause == "canary_failed" and d["old"] is not None:
            self.canary_recycled.setdefault(d["old"], set()).add(d["seq"])
        self.check_fuse_and_backoff(d, operator)
        if operator:
            self.automatic.clear()
            self.held = False
        else:
            if self.held:
                self.fail("escalate_once_and_hold", f"automatic relaunch ({cause}) while held at the ceiling")
            if t < self.harness_until and not d["fallback"]:  # a fallback goes on with a relaunch let through
                self.fail("harness_hold_kept", f"automatic relaunch ({cause}) while the harness's hold is in "
                                               f"force ({self.harness_until - t:.0f}s left): a restart cannot fix a quota")
            if not d["fallback"]:
                window = sim.config.watchdog.ceiling_window
                self.automatic = [x for x in self.automatic if t - x < window]
                self.automatic.append(t)
                if len(self.automatic) > sim.config.watchdog.ceiling_count:
                    self.fail("ceiling", f"{len(self.automatic)} automatic relaunches within {window:g}s "
                                         f"(ceiling {sim.config.watchdog.ceiling_count})")
                if cause == "canary_failed":
                    self.check_busy_not_recycled()
                why = self.unjustified(cause)
                if why:
                    sim.report.false_recycles += 1
                    self.fail("definitive_signal", f"{cause} relaunch without a definitive signal: {why}")
                misses = sim.config.canary.misses_to_recycle
                if cause == "canary_failed" and d.get("evidence") != {"misses": misses}:
                    # The ledger must say what proved the agent deaf, not only that it was recycled.
                    self.fail("definitive_signal", f"canary_failed relaunch records {d.get('evidence')!r} as its "
                                                   f"evidence, not the {misses} misses that decided it")
        self.last_attempt = t
        self.pending_witness = (d["seq"], t)
        self.unprobed = (d["seq"], t, self.newest_run)
        self.recorded_launch = d.get("at", t)

    def unjustified(self, cause: str) -> str:
        """Why the world did not warrant this cause ('' when it did)."""
        w = self.sim.world
        a = w.agent
        if cause in ("crash", "exit", "resume_failed"):
            return "" if a is not None and not a.alive else "the agent was running"
        if cause == "tmux_gone":
            if w.socket_lost:
                return "the tmux server still ran the agent (its socket was deleted)"
            return "" if not w.tmux_session else "the tmux session was there"
        if cause == "poller_missing":
            if a is None or not a.alive:
                # Gone since the looks that decided (the hooked storm, seed 187, day 8.17: the poller
                # lost, then a store locked past the watchdog's bound, and the agent exited (0) a
                # second before the tick that could act): a relaunch was due for its exit anyway.
                return ""
            return "the poller was there" if a.poller or w.poller_lost_at is None else ""
        if cause == "canary_failed":
            if a is None or not a.alive or a.deaf_since is not None or a.modal or not w.tmux_session:
                return ""
            if w.t - w.limited_until <= self.misses_span + SLACK and w.limit_told <= w.t - self.misses_span:
                # Rate-limited (or just now), its probes' turns failed, and told so before the misses
                # that decided: Loom must hold, not recycle, unless a later report was lost or late.
                # (Told of it only since, the recycle is judged as any other: a turn past max_turn.)
                eaten = sum(1 for at in a.probes_eaten if w.t - at <= self.misses_span + SLACK)
                if eaten >= self.sim.config.canary.misses_to_recycle:
                    # The probes that missed never reached the CLI to fail: a dialog ate them, closed
                    # since (the hooked storm, seeds 89 and 145: the hold ran out under a dialog Loom
                    # had stopped pressing, the operator closed it between the misses and the
                    # recycle). One the limit failed is Loom's to excuse: fewer eaten, no excuse.
                    excuse = "dialog_closed"
                elif w.t - w.limit_unreported > self.misses_span + LATE_BY + SLACK:
                    return ("the agent was rate-limited (or its bill or login refused), its CLI reporting each "
                            "failed turn, and was recycled")
                else:
                    excuse = "events_lost"
            else:
                excuse = self.hearing_excuse(a)
            if excuse:
                self.sim.report.hearing_recycles[excuse] = self.sim.report.hearing_recycles.get(excuse, 0) + 1
                return ""
            return "the agent could hear (busy or healthy) and was recycled"
        return ""

    def hearing_excuse(self, a) -> str:
        """Why recycling agent `a`, which the world says could hear, was by design ('' when nothing
        made it so). Counted apart in a report (`hearing_recycles`), so that "no violation" is not
        read as "no agent that could hear was recycled":
        - dialog_closed: a dialog ate the probes it missed, and was closed since;
        - runaway_turn: a turn past `max_turn` that the world made run away (faults.RUNAWAY_TURN);
        - turn_too_long: an ordinary turn past `max_turn` (the config cuts the operator's turns short);
        - turn_quiet: a turn truly quiet for `turn_quiet` (the config's is shorter than a tool call);
        - events_lost: a turn Loom saw quiet, or never saw begun, because its hook events were lost
          or late; or the misses fell in such a turn, ended since."""
        w, cfg = self.sim.world, self.sim.config.canary
        t = w.t
        # The config's own thresholds first, on the world's truth without slack (a turn truly quiet
        # for turn_quiet, truly older than max_turn): what doctor warns of must be the config's doing.
        # A turn the world runs that Loom could not see busy (its events lost or late, or truly over
        # its thresholds).
        unseen = self.sim.turns_told and a.turn_since is not None and not self.turn_in_evidence(a)
        if unseen:
            if a.waiting_since is not None:
                # Waiting on the operator's permission: past max_turn the config's doing; sooner,
                # Loom saw a quiet turn because the prompt's notification was lost or late.
                return "turn_too_long" if t - a.waiting_since >= cfg.max_turn else "events_lost"
            if t - a.turn_since >= cfg.max_turn:
                runaway = a.turn_until is not None and a.turn_until - a.turn_since > faults.LONG_TURN
                return "runaway_turn" if runaway else "turn_too_long"
            if t - max(a.last_event, a.turn_since) >= cfg.turn_quiet:
                return "turn_quiet"
        if t - a.eaten_at <= self.misses_span + SLACK:
            return "dialog_closed"
        if unseen or (self.sim.turns_told and self.unreported_turn_just_ended(a)):
            return "events_lost"
        return ""

    def unreported_turn_just_ended(self, a) -> bool:
        """The misses that recycled agent `a` (its last `misses_to_recycle` timeouts) fell in a turn
        of the operator's that has ended since, and whose start Loom was not told of before them (its
        prompt hook lost, or come after them): a wedge to Loom, by design, as while it runs; its
        queued probes are taken when it ends, their acks late (seed 30, day 2.76, README's hooked
        config: the turn ended seconds before the second miss's deadline)."""
        t, window = self.sim.world.t, self.misses_span
        return any(pid == a.pid and end is not None and end >= t - window - SLACK
                   and (reported is None or t - reported < window)
                   for _, end, pid, reported in self.sim.world.turns)

    def turn_in_evidence(self, a) -> bool:
        """The agent's running turn is busy as Loom could have seen it: its start reported long
        enough before now that the probes which recycled it came after; begun less than
        `canary.max_turn` ago with a hook event of it within `canary.turn_quiet`, or waiting on a
        permission prompt whose notification Loom got, for less than `canary.max_turn`."""
        cfg, t = self.sim.config.canary, self.sim.world.t
        # The misses that recycle were typed after the turn was reported begun: a prompt hook that
        # came late (or was lost) left Loom no evidence that they fell in a turn.
        reported = t - a.seen_began >= self.misses_span
        if a.turn_since is None or not a.seen_open or not reported:
            return False
        # Waiting on a permission prompt Loom was told of: busy for max_turn from the prompt, however
        # old the turn (turn_rules.state); else younger than max_turn and an event within turn_quiet.
        if self.prompt_told(a) is not None:
            return True
        return t - a.turn_since < cfg.max_turn - SLACK and t - a.seen_last < cfg.turn_quiet - SLACK

    def check_busy_not_recycled(self) -> None:
        """With its turns told (hooks, or the stream-json pump's transcript, which is never lost or
        late), an agent busy with a turn (its events reported, younger than max_turn) is never
        recycled for canary_failed, however many probes it missed."""
        a = self.sim.world.agent
        if not self.sim.turns_told or a is None or not a.hearing() or a.modal or not self.turn_in_evidence(a):
            return
        assert a.turn_since is not None  # turn_in_evidence: a turn is open
        t = self.sim.world.t
        self.fail("busy_not_recycled", f"recycled for canary_failed {t - a.turn_since:.0f}s into a busy turn "
                                       f"(its last hook event {t - a.seen_last:.0f}s ago)")

    def check_conversation_kept(self, d: dict, at: float) -> None:
        """An automatic relaunch starts fresh, wiping the conversation, only when something asks for
        it: a cause that always does, no session pinned, a session already recycled for
        canary_failed (resumed, it revived its wedge), or the fuse (`fuse_count` automatic relaunches
        inside `fuse_window`, counted here with SLACK toward allowing it: the policy decides before
        the relaunch is recorded, and a locked store, the second look and the lock come between;
        hooked seed 9, day 13.7, decided 7 s before its record, with a relaunch 906 s back). The
        `fuse` invariant checks only the other way: a fresh start when the fuse asked for one."""
        if d["mode"] != "fresh" or d["cause"] in FRESH_CAUSES or d["old"] is None \
                or d["old"] in self.canary_recycled:
            return
        wd = self.sim.config.watchdog
        if len([x for x in self.decisions if at - x < wd.fuse_window + SLACK]) >= wd.fuse_count:
            return
        self.fail("conversation_kept", f"{d['cause']} relaunch started fresh, wiping session {d['old']}'s "
                                       f"conversation, with nothing that asks for it (its resume was due)")

    def check_fuse_and_backoff(self, d: dict, operator: bool) -> None:
        """The thrash fuse: with `fuse_count` automatic relaunches inside `fuse_window` before it, an
        automatic relaunch starts fresh. The backoff: an automatic relaunch comes no sooner after the
        last one than base x 2^(n-1) (capped), n the automatic relaunches inside the ceiling window.
        Both measured on the monotonic instant Loom recorded with each relaunch (`at`)."""
        wd = self.sim.config.watchdog
        at = d.get("at", self.sim.world.t)
        if operator:
            self.decisions.clear()
            return
        if not d["fallback"]:
            in_fuse = [x for x in self.decisions if at - x < wd.fuse_window - 1e-6]
            if len(in_fuse) >= wd.fuse_count and d["mode"] != "fresh":
                self.fail("fuse", f"{d['cause']} relaunch {d['mode']} after {len(in_fuse)} automatic relaunches "
                                  f"within {wd.fuse_window:g}s (fuse {wd.fuse_count}: fresh)")
            in_ceiling = [x for x in self.decisions if at - x < wd.ceiling_window - 1e-6]
            if in_ceiling:
                needed = min(wd.backoff_base * 2 ** min(len(in_ceiling) - 1, 30), wd.backoff_max)
                gap = at - max(in_ceiling)
                if gap < needed - 1e-3:
                    self.fail("backoff", f"{d['cause']} relaunch {gap:.1f}s after the last one; the backoff "
                                         f"after {len(in_ceiling)} is {needed:g}s")
        self.decisions.append(at)

    def on_relaunch_done(self) -> None:
        self.relaunch_active = False

    def on_escalation(self) -> None:
        if self.held:
            self.fail("escalate_once_and_hold", "escalated again while already held")
        self.held = True
        self.pending_witness = None
        self.unprobed = None
        self.last_notice = self.sim.world.t

    def on_hold_cleared(self, cause: str, how: str = "") -> None:
        w = self.sim.world
        until, self.harness_until = self.harness_until, -math.inf  # one hold at a time: it ended
        self.hold_end = w.t
        if cause in HARNESS_CAUSES and not self.held:
            # The harness's own hold ends by itself at its end, or by a turn that succeeded.
            if how == "expired" and w.t < until - 1.0:
                self.fail("harness_hold_kept", f"the harness's hold taken for run out {until - w.t:.0f}s early")
            # The CLI's turns all fail under a limit, but one taken before it began succeeds (its
            # model call was answered), and a Stop may be written late: either is a success that
            # ends the hold. None written since the failure the hold is for is a hold ended by a
            # success that never came. Until 2026-12-08 counted from a Stop written late only: a line
            # taken in the minute between two limits, done 1.8 s into the second, was taken for none
            # (hooked storm seed 69, day 28.4).
            if how == "succeeded" and w.limited() and w.last_stop < self.harness_since - 1e-3:
                self.fail("harness_hold_kept", "the harness's hold ended by a turn that succeeded, while every "
                                               "turn the CLI took since it was placed failed")
            return
        if cause not in OPERATOR_CAUSES:
            self.fail("escalate_once_and_hold", f"the hold was cleared by {cause}, not an operator")

    def on_sentinel_failed(self, began: float, cost: float) -> None:
        self.queue_calm_until = -math.inf  # `missed` changes (a failure more, or old ones dropped)
        self.sentinel_failures.append(began)
        self.sentinel_costs.append(cost)
        if len(self.sentinel_failures) > 200:
            del self.sentinel_failures[:100]
            del self.sentinel_costs[:100]

    def sentinel_missed(self, since: float) -> float:
        """The time the sentinel's failed ticks since `since` cost (each until the next try). Until
        2026-12-07 a whole interval each, when a failed tick waited for the next one; the daemon
        tries again within a minute, and counted so a lock of two minutes allowed an hour."""
        i = bisect_left(self.sentinel_failures, since)
        return sum(self.sentinel_costs[i:])

    def on_notice(self) -> None:
        self.last_notice = self.sim.world.t

    def on_witness(self, seq: int) -> None:
        if self.pending_witness is not None and self.pending_witness[0] <= seq:
            self.pending_witness = None
        a = self.sim.world.agent
        if a is not None and a.hearing():
            self.trouble_since = None

    def on_run(self, run_id: int, result: str) -> None:
        """A canary run Loom recorded: a probe sent, or tried (a pane gone fails the typing, a store
        that refused the probe leaves an `error` run, which Loom tries again after an ack timeout),
        unless Loom chose not to send it (`skipped`)."""
        self.newest_run = max(self.newest_run, run_id)
        if self.unprobed is not None and run_id > self.unprobed[2] and result != "skipped":
            self.unprobed = None

    def on_denial_written(self) -> None:
        self.denials_written.append(self.sim.world.t)

    def on_denial_recorded(self) -> None:
        """A permission_denied event: one per result that denied a call, never one more."""
        self.denials_recorded += 1
        if self.denials_recorded > len(self.denials_written):
            self.fail("denials_recorded_once", f"{self.denials_recorded} permission_denied events for "
                                               f"{len(self.denials_written)} results that denied a call")

    def on_nothing_launched(self, relaunch: int) -> None:
        """Relaunch `relaunch` failed before it launched anything: its session was never relaunched
        off (a later recovery resumes it: no wedge was revived; the old agent may run on in it)."""
        for session, relaunches in list(self.canary_recycled.items()):
            relaunches.discard(relaunch)
            if not relaunches:
                del self.canary_recycled[session]

    def on_launch_failed(self, recorded: float | None) -> None:
        """The last relaunch started no agent (relaunch_failed, launch_died): nothing to probe, and
        the canary is not rung for it; the watchdog's next look finds the agent missing. The boot
        grace counts from the launch record Loom holds now (`recorded`): one whose stop left the old
        agent running put the record before it back, and the old agent's grace runs from that."""
        self.unprobed = None
        if recorded is not None:
            self.recorded_launch = recorded

    def on_hold_placed(self, by: str = "", until: float | None = None, ts: float | None = None) -> None:
        """Held (the ceiling, an operator's `loom hold`, the harness's): no probe is due until the
        hold ends. The harness's ends by itself at `until` (wall), or sooner by a turn that succeeds
        after the failure it is for: the StopFailure written at `ts` (wall, the ledger event's time;
        the world's time of it found among the failures written, else a minute before now)."""
        self.unprobed = None
        if by == "harness":
            w = self.sim.world
            self.harness_since = next((t for wall, t in reversed(w.failures_written)
                                       if ts is not None and abs(wall - ts) < 1e-3), w.t - SLACK)
            self.harness_until = math.inf if until is None else w.t + (until - w.wall)
            if w.limited() and w.limit_resets and self.harness_until < w.limited_until - 1.0:
                # The CLI said when the limit resets (harness_rules.hold_seconds: at most MAX_AHEAD,
                # and the world's limits are shorter): a hold that ends sooner lets a crash be
                # relaunched into the limit, and the canary's probes fail on.
                self.fail("harness_hold_kept", f"the harness's hold ends {w.limited_until - self.harness_until:.0f}s "
                                               "before the reset time the CLI gave")

    def on_typed(self, text: str) -> None:
        """Typed into the pane (machine.SimDriver): never while a relaunch holds the pane, nor into an
        agent still booting (launched less than boot_grace ago and not yet ready, in the world's truth)."""
        w = self.sim.world
        a = w.agent
        what = "a probe" if "touch" in text else "a line"
        if self.relaunch_active:
            self.fail("no_typing_into_a_booting_agent", f"{what} was typed while a relaunch was under way")
        # A line handed to a stream-json pump is kept until the CLI reads it (pump.json says the pump
        # is up, which is what Loom waits for): typed into a booting CLI, it is not lost.
        if a is not None and self.sim.pump is None and self.booting(a, w.t):
            self.fail("no_typing_into_a_booting_agent", f"{what} was typed into an agent still booting "
                                                        f"({w.t - a.started:.1f}s after its launch)")
        # Nor into a permission prompt Loom was told of (its notification written a read ago; a
        # locked store or a failed hooks loop's backoff can keep it unread a while): its Enter could
        # answer the operator's dialog (turn_rules.withholds_probe, actions.nudge).
        told = self.prompt_told(a)
        if told is not None and self.late(w.t - told, PROMPT_READ, told):
            self.fail("no_typing_into_a_permission_prompt", f"{what} was typed into a permission prompt Loom was "
                                                            f"told of {w.t - told:.0f}s before")

    def booting(self, a, t: float) -> bool:
        """Not yet ready (the world's truth) and launched less than `boot_grace` ago, counted as Loom
        counts it: from its relaunch record, made before the old tree is ended."""
        # The record's own instant: the stop and the launch can take longer than STOP_TIME (a tmux
        # server started again, say), and the grace then ends less than boot_grace after the start.
        recorded = self.recorded_launch
        since = recorded if recorded is not None and recorded <= a.started else a.started - STOP_TIME
        return t < a.ready_at and t - since < self.sim.config.agent.boot_grace - 1e-6

    def on_queue_witness(self, item_id: int, run_id: int) -> None:
        item = self.sim.item(item_id)
        assert item is not None
        run = self.sim.run_truth.get(run_id)
        if run is None or not run[1]:
            self.fail("witness_is_clean", f"item {item_id} witnessed by run {run_id}, which was not clean")
        if item.claimed_mono is None or run[0] <= item.claimed_mono:
            self.fail("witness_is_clean", f"item {item_id} witnessed by run {run_id}, started before the claim")

    def on_job_failed(self, job: str) -> None:
        """A run of `job` failed (the world broke it) and its end is recorded: unless an item of
        Loom's still stands for that job, one must come of it (failure_seen)."""
        if job in self.unseen_failures:
            return
        for item_id in sorted(self.unresolved):
            item = self.sim.item(item_id)
            if item is not None and item.job == job and item.state != "witnessed":
                return
        self.unseen_failures[job] = self.sim.world.t

    def on_item_sighted(self, job: str) -> None:
        """A queue item of `job` made or reopened: its failures are Loom's to follow now."""
        self.unseen_failures.pop(job, None)

    def check_failures_seen(self) -> None:
        """Every failed run of a job becomes Loom's queue item (or reopens one) within one sentinel
        interval, plus one per tick the locked store made fail: judged on the world's runs, not on
        the items Loom made (a sentinel that scanned nothing made none, and the queue invariants,
        which follow only the items there are, passed a storm)."""
        cfg = self.sim.config.sentinel
        t = self.sim.world.t
        for job, since in sorted(self.unseen_failures.items()):
            missed = self.sentinel_missed(since)
            if self.late(t - since, cfg.interval + missed + SLACK, since):
                self.fail("failure_seen", f"job {job}'s run failed {t - since:.0f}s ago and no queue item "
                                          f"stands for it (sentinel interval {cfg.interval:g}s)")

    def backstop_window(self, item) -> tuple[float, float] | None:
        """(start on `t`, window) of an item's backstop: from its first sighting (or a later reopen), or
        from its claim."""
        cfg = self.sim.config.sentinel
        if item.state == "open" and item.first_seen_mono is not None:
            # From its first sighting, or its last reopen when the claim it ended had held for a
            # backstop (queue_rules.Item.open_since).
            start = item.first_seen_mono
            if item.reopened_mono is not None and item.claimed_mono is not None and item.reopened_mono > start \
                    and item.reopened_mono - item.claimed_mono >= cfg.backstop:
                start = item.reopened_mono
            return start, cfg.backstop
        if item.state == "claimed" and item.claimed_mono is not None:
            return item.claimed_mono, max(cfg.backstop, self.witness_window(item) or 0.0)
        return None

    def witness_held(self, item, owed_by: float) -> tuple[float, float | None]:
        """How long (on `t`) Loom may hold a claim's message for a witness run in the world: to the
        end of the first run of its job that started after the claim, by `owed_by`, or its allowance
        (its period and the grace), whichever came first (0 when there is none); and, while it still
        runs within its allowance, when that allowance ends (else None)."""
        job = self.sim.world.job(item.job)
        if job is None or item.claimed_mono is None:
            return 0.0, None
        allowance = job.period + self.sim.config.sentinel.missed_grace
        after = sorted((started, ended) for started, ended in self.sim.run_spans.get(item.job, {}).values()
                       if item.claimed_mono < started <= owed_by)
        if not after:
            return 0.0, None
        # The first run after the claim decides: its end witnesses the claim or reopens it, and past
        # its allowance no later run holds the message either (tick.witness_going).
        started, ended = after[0]
        if ended is None:
            return started + allowance, (started + allowance if self.sim.world.t <= started + allowance else None)
        return min(ended, started + allowance), None

    def witness_window(self, item) -> float | None:
        """How long a claim may wait for its witness: to the job's next run after the claim (its
        schedule in the world), and the missed-run grace."""
        job = self.sim.world.job(item.job)
        if job is None or item.claimed_at is None:
            return None
        due = schedule.next_due(job.schedule, item.claimed_at, cron=cron.in_zone(dt.timezone.utc))
        return due - item.claimed_at + self.sim.config.sentinel.missed_grace

    def on_queue_escalate(self, item_id: int, state: str) -> None:
        """The operator hears of an item no sooner than its backstop: a wall clock stepped forward
        must not bring every open item to the operator at once."""
        item = self.sim.item(item_id)
        assert item is not None
        span = self.backstop_window(replace(item, state=state))
        if span is not None and self.sim.world.t - span[0] < span[1] - 1e-6:
            self.fail("backstop_not_early", f"item {item_id} ({state}) reached the operator "
                                            f"{self.sim.world.t - span[0]:.0f}s after its start; its backstop is "
                                            f"{span[1]:.0f}s")

    # -- after every step -------------------------------------------------------------------

    def waited(self, a) -> float:
        """Until when a permission prompt Loom was told of keeps it from seeing a wedge: the
        prompt's max_turn (the probes are withheld from the dialog meanwhile: turn_rules.state)."""
        if a is None or a.seen_waiting is None or not a.seen_open:
            return -math.inf
        return a.seen_waiting + self.sim.config.canary.max_turn

    def prompt_told(self, a) -> float | None:
        """When Loom was told of the permission prompt agent `a` waits on (the world's truth), if it
        was, less than the prompt's max_turn ago (less SLACK); else None."""
        if a is None or a.waiting_since is None or self.sim.world.t >= self.waited(a) - SLACK:
            return None
        return a.seen_waiting

    def late(self, elapsed: float, bound: float, since: float) -> bool:
        """Past `bound`, stretched by the time Loom was impaired since `since` (summed only when needed)."""
        w = self.sim.world
        return elapsed > bound and elapsed > bound + w.impaired_between(since, w.t)

    def after_step(self) -> None:
        sim, w = self.sim, self.sim.world
        t = w.t
        a = w.agent
        alive = a is not None and a.alive
        if w.stray and w.running_agents() > 1:
            self.fail("one_agent", f"{w.running_agents()} agents running")
        if len(self.denials_written) > self.denials_recorded:
            since = self.denials_written[self.denials_recorded]
            if self.late(t - since, self.denial_bound, since):
                self.fail("denials_recorded_once", f"a result that denied a call {t - since:.0f}s ago is not in "
                                                   f"the ledger (bound {self.denial_bound:.0f}s)")
        if t < self.harness_until:
            # The harness holds (the operator was told): no relaunch is due, nor a witness, nor a word
            # more; each bound counts from the hold's end.
            self.hold_end = t
            if self.pending_witness is not None:
                self.pending_witness = (self.pending_witness[0], t)
            if self.unprobed is not None:  # an operator's relaunch under the hold keeps it: no probe yet
                self.unprobed = (self.unprobed[0], t, self.unprobed[2])
            self.last_notice = t
            self.stable_since = None
        held = self.held or t < self.harness_until
        tmux_seen = w.tmux_session and not w.socket_lost
        if self.trouble_since is None and (a is None or not alive or a.deaf_since is not None or a.modal
                                           or not tmux_seen):
            self.trouble_since = t
        if held:
            self.exit_since = None
            if not self.held:  # the harness's hold guards no escalation: the queue's go on
                self.check_queue_and_failures()
            return
        self.check_exit_relaunched(a, alive)
        waited = self.waited(a)
        if self.trouble_since is not None:
            quiet_since = max(self.trouble_since, self.last_attempt, self.last_notice, waited)
            # Trouble ends with a witness, and a turn of the operator's keeps the probes behind it
            # (the agent hears; it is busy): the time in turns is not silence, as for relaunch_witnessed.
            # (busy_between, a scan of the world's turns, only once past the bound it can only stretch)
            if t - quiet_since > self.silent_bound and \
                    self.late(t - quiet_since, self.silent_bound + w.busy_between(quiet_since, t), quiet_since):
                self.fail("never_silent", f"in trouble since {self.trouble_since:.0f}s; no relaunch and no word to "
                                          f"the operator for {t - quiet_since:.0f}s")
        if a is not None and alive and a.deaf_since is not None:
            since = max(a.deaf_since, self.hold_end, waited)
            if self.late(t - since, self.deaf_bound, since):
                self.fail("deaf_bound", f"deaf for {t - since:.0f}s (bound {self.deaf_bound:.0f}s)")
        if self.pending_witness is not None:
            seq, at = self.pending_witness
            at = max(at, waited)
            if t - at > self.witness_bound and self.late(t - at, self.witness_bound + w.busy_between(at, t), at):
                self.fail("relaunch_witnessed", f"relaunch {seq} at {at:.0f}s neither witnessed by an ack nor "
                                                f"followed by a relaunch or an escalation")
        if self.unprobed is not None:
            seq, at, newest = self.unprobed
            if t < self.waited(a):
                # A permission prompt Loom was told of is open: the witness waits for it to close
                # (canary.rules.next_step), at most its max_turn; the bound counts from then.
                self.unprobed = (seq, t, newest)
                at = t
            if self.late(t - at, self.probe_bound, at):
                self.fail("relaunch_probed", f"relaunch {seq} at {at:.0f}s: no probe sent since, in "
                                             f"{t - at:.0f}s (bound {self.probe_bound:.0f}s: ready or its boot grace)")
        booting = alive and self.booting(a, t)
        stable = alive and tmux_seen and t >= w.tmux_hang_until and not self.relaunch_active and not booting
        if not stable:
            self.stable_since = None
        elif self.stable_since is None:
            self.stable_since = t
        if self.stable_since is not None:
            if w.foreign_poller_since is not None:
                since = max(w.foreign_poller_since, self.stable_since)
                if self.late(t - since, self.foreign_bound, since):
                    self.fail("foreign_poller_reaped", f"a foreign poller has run for {t - since:.0f}s "
                                                       f"beside an agent plainly seen")
            if w.poller_lost_at is not None:
                since = max(w.poller_lost_at, self.stable_since)
                if self.late(t - since, self.poller_bound, since):
                    self.fail("poller_restored", f"the poller has been missing for {t - since:.0f}s "
                                                 f"from an agent plainly seen")
        self.check_queue_and_failures()

    def check_queue_and_failures(self) -> None:
        if self.unresolved:
            self.check_queue()
        if self.unseen_failures:
            self.check_failures_seen()
        if self.hung:
            self.check_overruns_seen()

    def on_run_hung(self, run_id: int, job: str, started: float, allowance: float) -> None:
        self.hung[run_id] = (job, started, allowance)

    def on_run_ended(self, run_id: int) -> None:
        self.hung.pop(run_id, None)

    def check_overruns_seen(self) -> None:
        """A run still going past its allowance (its period and the grace, schedule.run_allowance) is
        told, once, within one sentinel interval more, plus what the locked store's failed ticks
        cost: Loom's store marks it told (`job_runs.overrun_at`) with the item it made."""
        cfg = self.sim.config.sentinel
        t = self.sim.world.t
        for run_id, (job, started, allowance) in sorted(self.hung.items()):
            missed = self.sentinel_missed(started)
            if not self.late(t - started, allowance + cfg.interval + missed + SLACK, started):
                continue
            assert self.sim.observer is not None
            with self.sim.observer.read() as db:
                row = job_runs.get_in(db, run_id)
            if row is not None and row["overrun_at"] is not None:
                del self.hung[run_id]  # told: nothing more to wait for
                continue
            self.fail("overrun_seen", f"job {job}'s run {run_id} has run {t - started:.0f}s, past its allowance "
                                      f"of {allowance:.0f}s, and was never told of")

    def check_exit_relaunched(self, a, alive: bool) -> None:
        """A dead agent (a crash, an exit with any status, 0 included) is relaunched within the exit
        check, a full tick, the longest backoff and a stop, once Loom can see (`late`)."""
        w = self.sim.world
        if alive or a is None or not w.tmux_session or w.socket_lost:
            self.exit_since = None
            return
        if self.exit_since is None:
            # From the death, or from the end of the hold it was left dead through.
            self.exit_since = max(a.died_at if a.died_at is not None else w.t, self.hold_end)
        wd = self.sim.config.watchdog
        bound = wd.exit_check + wd.interval + wd.backoff_max + STOP_TIME + SLACK
        if self.late(w.t - self.exit_since, bound, self.exit_since):
            self.fail("exit_relaunched", f"the agent exited (status {a.exit_status}, signal {a.exit_signal}) "
                                         f"{w.t - self.exit_since:.0f}s ago and was not relaunched")

    def check_queue(self) -> None:
        sim, w = self.sim, self.sim.world
        # No item can be late before `queue_calm_until` while the store (the items, and which are
        # unresolved: both move only with it) and the failed ticks stay as the last full look saw them.
        if w.t < self.queue_calm_until and self.queue_calm_store == sim.store_changes:
            return
        cfg = sim.config.sentinel
        calm = math.inf
        for item_id in sorted(self.unresolved):
            item = sim.item(item_id)
            if item is None or item.escalated_at is not None:
                continue
            span = self.backstop_window(item)
            if span is None:
                continue
            start, window = span
            due = start + window
            missed = self.sentinel_missed(start)  # the failed ticks' time, since the item's start
            if item.state == "claimed":
                # A run that started once the message was owed holds nothing: Loom told it by then
                # (later by as long as Loom could not see or write).
                owed_by = due + cfg.interval + missed + 1.0 + w.impaired_between(start, w.t)
                held, running_to = self.witness_held(item, owed_by)
                if running_to is not None:
                    # Its witness still runs: looked at again at Loom's next write after its end (the
                    # world records the end on its own connection; every sentinel pass writes), or
                    # when it runs past its allowance.
                    calm = min(calm, running_to + 1e-3)
                    continue
                due = max(due, held)
            late = w.t - due - cfg.interval - missed
            if self.late(late, 1.0, start):
                self.fail("queue_backstop", f"item {item_id} ({item.state}) has not reached the operator "
                                            f"{late:.0f}s after its backstop")
            # `late` stays at most 1 until then (a millisecond short: no rounding decides it).
            calm = min(calm, due + cfg.interval + missed + 1.0 - 1e-3)
        self.queue_calm_until, self.queue_calm_store = calm, sim.store_changes
