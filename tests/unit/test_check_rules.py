"""`loom check`'s verdict (report/check_rules.py): each agent state and host fact to its monitoring
code, the worst finding deciding, and a line a monitoring system can split."""

from __future__ import annotations

import pytest

from loomtui.agent.lifecycle import STATES
from loomtui.report.check_rules import (CRITICAL, OK, UNKNOWN, WARNING, AgentFacts, HostFacts, findings,
                                        supervisor_stale_after, verdict, witness_within)

FRESH = HostFacts(heartbeat_age=3.0, stale_after=15.0, telegram_on=True)
CODE_OF_STATE = {
    "not_looked": UNKNOWN, "unknown": UNKNOWN, "process_unknown": UNKNOWN,
    "gone": CRITICAL, "exited": CRITICAL, "no_process": CRITICAL,
    "held_ceiling": CRITICAL, "held_operator": WARNING,
    "booting": OK, "unwitnessed": OK, "running": OK,
}


def test_every_state_of_the_lifecycle_has_its_code():
    assert set(CODE_OF_STATE) == set(STATES)


@pytest.mark.parametrize("state", STATES)
def test_each_agent_state_alone_gives_its_code(state):
    code, line = verdict([AgentFacts("main", state, hold_reason="maintenance")], FRESH)
    assert code == CODE_OF_STATE[state], line
    assert line.startswith(f"LOOM {['OK', 'WARNING', 'CRITICAL', 'UNKNOWN'][code]} - ")
    assert line.count("|") == 1


def test_all_well_names_each_agent_and_the_heartbeat():
    code, line = verdict([AgentFacts("alpha", "running"), AgentFacts("beta", "booting")], FRESH)
    assert (code, line) == (OK, "LOOM OK - alpha running, beta booting; supervisor heartbeat 3s old | agents=2 "
                                "down=0 held=0 past_backstop=0 pending=0 heartbeat_age=3s")


def test_the_worst_finding_decides_critical_over_warning_over_unknown():
    agents = [AgentFacts("a", "unknown"), AgentFacts("b", "held_operator", hold_reason="upgrading"),
              AgentFacts("c", "exited")]
    code, line = verdict(agents, FRESH)
    assert code == CRITICAL
    assert line.index("agent c down") < line.index("agent b held: upgrading") < line.index("agent a: tmux did not")
    assert verdict(agents[:2], FRESH)[0] == WARNING
    assert verdict(agents[:1], FRESH)[0] == UNKNOWN


def test_one_agent_is_not_named_several_are():
    assert "agent down: its process exited" in verdict([AgentFacts("main", "exited")], FRESH)[1]
    two = verdict([AgentFacts("main", "exited"), AgentFacts("b", "running")], FRESH)[1]
    assert "agent main down: its process exited" in two


def test_no_fresh_heartbeat_is_critical_whatever_the_agent():
    running = [AgentFacts("main", "running")]
    assert verdict(running, HostFacts(None, 15.0, True)) == (
        CRITICAL, "LOOM CRITICAL - no supervisor heartbeat: loom supervise is not running | agents=1 down=0 "
                  "held=0 past_backstop=0 pending=0")
    code, line = verdict(running, HostFacts(16.0, 15.0, True))
    assert code == CRITICAL and "supervisor heartbeat 16s old" in line
    assert verdict(running, HostFacts(15.0, 15.0, True))[0] == OK


def test_an_unwitnessed_relaunch_warns_only_past_the_time_its_witness_may_take():
    within = witness_within(90.0, 180.0, 2, 30.0)
    assert within == 480.0
    on_time = AgentFacts("main", "unwitnessed", unwitnessed_for=within, witness_within=within)
    assert verdict([on_time], FRESH)[0] == OK
    late = AgentFacts("main", "unwitnessed", unwitnessed_for=within + 1, witness_within=within)
    code, line = verdict([late], FRESH)
    assert code == WARNING and "relaunched 8m ago and no canary has acked since" in line


def test_queue_items_past_the_backstop_warn():
    code, line = verdict([AgentFacts("main", "running", past_backstop=1)], FRESH)
    assert code == WARNING and "1 queue item past the backstop" in line and "past_backstop=1" in line
    assert "3 queue items past" in verdict([AgentFacts("main", "running", past_backstop=3)], FRESH)[1]


def test_messages_unsent_warn_when_telegram_is_off_or_they_wait_too_long_or_were_refused():
    running = [AgentFacts("main", "running")]
    off = HostFacts(3.0, 15.0, telegram_on=False, pending=2, oldest_pending_age=5.0)
    assert findings(running, off) == [(WARNING, "2 messages for the operator unsent: Telegram is off "
                                                "(telegram.chat_id = 0); read them with loom outbox, "
                                                "then loom outbox --read")]
    assert findings(running, HostFacts(3.0, 15.0, True, pending=1, oldest_pending_age=30.0)) == []  # on its way
    slow = HostFacts(3.0, 15.0, True, pending=1, oldest_pending_age=3600.0)
    assert findings(running, slow) == [(WARNING, "1 message for the operator unsent for 60m")]
    assert findings(running, HostFacts(3.0, 15.0, True, failed=1)) == [(WARNING, "1 message refused by Telegram (loom outbox: --retry or --forget)")]


def test_the_heartbeat_is_fresh_for_three_beats_and_at_least_15s():
    assert supervisor_stale_after(30.0) == 15.0
    assert supervisor_stale_after(1.0) == 15.0


def test_an_agent_the_running_daemon_does_not_supervise_is_critical():
    # Added to the config after `loom supervise` started (it reads its config once): nothing watches
    # it or probes it, and `loom check` said OK for it.
    code, line = verdict([AgentFacts("main", "running", supervised=True), AgentFacts("beta", "running", supervised=False)],
                         FRESH)
    assert code == CRITICAL and "agent beta is not supervised" in line and "restart loom supervise" in line
    assert verdict([AgentFacts("main", "running", supervised=None)], FRESH)[0] == OK  # an older daemon: says nothing
    stale = HostFacts(heartbeat_age=60.0, stale_after=15.0, telegram_on=True)
    assert "not supervised" not in verdict([AgentFacts("beta", "running", supervised=False)], stale)[1]
