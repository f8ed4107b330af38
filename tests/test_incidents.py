"""Grouping the ledger into incidents: from the first sign of trouble to the first ack after it."""

from loomtui.incidents import HELD, NOTE, ONGOING, RECOVERED, group
from loomtui.ledger import Event


def ev(i, kind, cause=None, **detail):
    return Event(i, 1000.0 + i * 10, kind, "test", cause, detail)


def test_wedge_to_recovery():
    events = [
        ev(1, "canary", result="ok"),
        ev(2, "inject", length=3),
        ev(3, "canary", "miss", result="miss"),
        ev(4, "canary", "miss", result="miss"),
        ev(5, "relaunch", "canary_failed", mode="resume", old_session="a", new_session="a"),
        ev(6, "canary", "miss", result="miss"),
        ev(7, "canary", "miss", result="miss"),
        ev(8, "relaunch", "canary_failed", mode="fresh", old_session="a", new_session="b"),
        ev(9, "canary", result="ok"),
        ev(10, "canary", result="ok"),
    ]
    [inc] = group(events)
    assert inc.status == RECOVERED and inc.first_id == 3
    assert inc.causes == ["canary_failed"] and inc.modes == ["resume", "fresh"]
    assert (inc.old_session, inc.new_session) == ("a", "b")
    assert inc.misses == 4 and inc.relaunches == 2
    assert inc.duration(now=0) == 60  # from the first miss (1030) to the ack (1090)
    assert inc.event_ids == [3, 4, 5, 6, 7, 8, 9]


def test_ongoing_and_held_and_notes():
    events = [
        ev(1, "relaunch", "crash", mode="resume", old_session="a", new_session="a"),
        ev(2, "relaunch", "crash", mode="resume", old_session="a", new_session="a"),
        ev(3, "escalation", "crash", held=True),
        ev(4, "foreign_poller_reaped", pid=77),
    ]
    incidents = group(events)
    # A note while an incident is open stays a row of its own; it is not trouble.
    assert [i.status for i in incidents] == [HELD, NOTE]
    assert incidents[0].escalated and 4 not in incidents[0].event_ids
    events.append(ev(5, "relaunch", "operator_fresh", mode="fresh", old_session="a", new_session="b"))
    events.append(ev(6, "canary", result="ok"))
    incidents = group(events)
    assert incidents[0].status == RECOVERED and incidents[0].relaunches == 3


def test_operator_relaunch_and_reaping_are_notes_when_nothing_is_wrong():
    incidents = group([ev(1, "relaunch", "operator_fresh", mode="fresh", new_session="x"),
                       ev(2, "foreign_poller_reaped", pid=12), ev(3, "canary", result="ok")])
    assert [(i.status, i.title) for i in incidents] == [
        (NOTE, "operator relaunch (fresh)"), (NOTE, "foreign poller 12 reaped")]


def test_no_ack_yet_is_ongoing():
    [inc] = group([ev(1, "relaunch", "exit", mode="resume")])
    assert inc.status == ONGOING and inc.end is None and inc.duration(now=1100) == 90
