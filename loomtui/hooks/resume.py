"""A resume proven, or failed, by the session the agent CLI says started (the daemon's hooks loop).

After a relaunch that resumed the pinned session, the first SessionStart hook event within the
boot grace that speaks of this boot is judged (harness_rules.resume_verdict; one of another boot,
told late, is passed over): `resume` with the pinned id is the proof
(a `resume_proven` event naming the relaunch); `startup` or another id is a `resume_failed`
(source hooks), and the relaunch that follows goes through actions.recover with that cause, which
the policy always starts fresh: the one case where a hook alone leads to a destructive action,
because the harness itself says the conversation did not come back. No SessionStart (no
`{hook_settings}`, or none within the boot grace) leaves the screen match, in the launch's boot
watch and the watchdog, as before. A verdict is given once per relaunch; a failed one is acted on
again at later looks until a relaunch, a hold or another launch settles it (the policy may ask
to wait its backoff first): a hold in force refuses the relaunch, and once a hold has been placed
or released after the verdict it is never acted on (it was, at the release, days later maybe).
"""

from __future__ import annotations

import json
import logging

from loomtui import actions
from loomtui.agent import launches
from loomtui.context import Context
from loomtui.hooks import harness_rules as rules
from loomtui.store import hook_events as table
from loomtui.store import ledger

SOURCE = "hooks"
STARTS = 8  # the SessionStarts after a launch looked at for the one that speaks of its boot
log = logging.getLogger("loom.hooks")


def look(ctx: Context) -> float | None:
    """Judge the last relaunch's resume by its SessionStart, and act on a failed one; seconds
    until a look is due again (the policy's backoff), or None."""
    launch = launches.last_launch(ctx)
    relaunch = table.last_relaunch(ctx.store, ctx.agent)
    if launch is None or relaunch is None or launch.mode != rules.RESUME:
        return None
    detail = _detail(relaunch["detail"])
    if detail.get("new_session") != launch.session_id or detail.get("mono", launch.mono) != launch.mono:
        # The record and the ledger disagree on which launch this is (a relaunch whose stop left the
        # old agent running put the older record back): judge nothing.
        return None
    verdict = table.resume_judged(ctx.store, ctx.agent, int(relaunch["id"]))
    if verdict is None:
        judged, started = None, None
        for started in table.session_starts(ctx.store, ctx.agent, launch.ts, STARTS):
            if float(started["ts"]) - launch.ts > ctx.config.agent.boot_grace:
                break
            judged = rules.resume_verdict(mode=launch.mode, pinned=launch.session_id,
                                          source=started["source"] or "", session_id=started["session_id"] or "")
            if judged is not None:
                break
        if judged is None or started is None:
            return None  # no word from the hooks on this boot (yet, or in time): the screen match decides
        said, why = judged
        facts = {"relaunch": int(relaunch["id"]), "session": launch.session_id, "hook_event": int(started["id"]),
                 "started": {"source": started["source"] or "", "session_id": started["session_id"] or ""}}
        if said == rules.PROVEN:
            ledger.append(ctx.store, "resume_proven", source=SOURCE, detail=facts)
            return None
        ledger.append(ctx.store, "resume_failed", source=SOURCE, cause="resume_failed", detail={**facts, "why": why})
    elif verdict["kind"] != "resume_failed" or verdict["source"] != SOURCE:
        return None  # proven, or failed by the screen (the launch's own fallback acts on it)
    elif table.hold_since(ctx.store, ctx.agent, int(verdict["id"])):
        # A hold placed or released since settles it: the agent held on meanwhile (hours, maybe) in
        # the conversation its CLI started, and a fresh start after the release would wipe that.
        return None
    return _start_fresh(ctx, launch.ts)


def _start_fresh(ctx: Context, launched: float) -> float | None:
    def still_failing() -> bool:  # the second look, under recycle.lock: the same launch, not yet replaced
        now = launches.last_launch(ctx)
        return now is not None and now.ts == launched and now.mode == rules.RESUME

    # The launch's boot watch may still hold recycle.lock: wait for it, as long as its check lasts.
    result = actions.recover(ctx, "resume_failed", source=SOURCE, still_failing=still_failing,
                             evidence={"by": "SessionStart"}, lock_wait=ctx.config.agent.resume_check + 30.0)
    log.info("resume failed by its SessionStart: %s", result.describe())
    if result.status == "waiting" and result.decision is not None:
        return max(result.decision.wait, 0.5)
    return None


def _detail(raw: str | None) -> dict:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
