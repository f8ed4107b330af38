"""Who acted: the agent's own hold, release and recycle through the real `loom` CLI (refused unless
`agent.may_hold`, recorded with the actor, told to the operator), the operator's as before, and
Telegram's sender recorded with what it asked for; on a real store."""

from __future__ import annotations

import asyncio
import time

import pytest
import telegram
from conftest import run_loom

from loomtui import actions
from loomtui.actors import Actor, agent_session
from loomtui.agent import holds
from loomtui.context import Context
from loomtui.store import ledger, outbox, session
from loomtui.telegram.clock import Clock
from loomtui.telegram.commands import OperatorActions, Poller

PINNED = "11111111-2222-4333-8444-555555555555"
OTHER = "99999999-2222-4333-8444-555555555555"
CHAT = 6262


def write_config(tmp_path, agent: str = "", extra: str = ""):
    path = tmp_path / "loom.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\n[agent]\ntmux_socket = "loomtest-actor"\n{agent}{extra}')
    return path


def setup(tmp_path, agent: str = "", extra: str = ""):
    """A config, a store with PINNED pinned, and `loom ARGS` run as the agent (LOOM_SESSION_ID) or not."""
    config = write_config(tmp_path, agent, extra)
    ctx = Context.load(str(config), None, environ={})
    with ctx.store.write() as db:
        session.pin_in(db, PINNED)

    def loom(*args: str, as_session: str | None = PINNED, env: dict | None = None):
        env = {**({"LOOM_SESSION_ID": as_session} if as_session else {}), **(env or {})}
        return run_loom("--config", str(config), *args, env=env)

    return ctx, loom


@pytest.fixture
def refusing(tmp_path):
    ctx, loom = setup(tmp_path)
    yield ctx, loom
    ctx.close()


@pytest.fixture
def allowing(tmp_path):
    ctx, loom = setup(tmp_path, "may_hold = true\n")
    yield ctx, loom
    ctx.close()


def events(ctx: Context, kind: str) -> list[dict]:
    return [e.detail for e in ledger.tail(ctx.store, 200) if e.kind == kind]


def messages(ctx: Context) -> list[str]:
    return [m.text for m in reversed(outbox.recent(ctx.store, 100))]


def one_line(stream: str) -> str:
    lines = stream.strip().splitlines()
    assert len(lines) == 1, stream
    return lines[0]


def test_the_agents_own_hold_is_refused_recorded_and_told(refusing):
    ctx, loom = refusing
    result = loom("hold", "--reason", "x")
    assert result.returncode == 1
    assert "hold refused" in one_line(result.stderr) and "agent.may_hold" in result.stderr
    assert holds.stored(ctx) is None
    [refusal] = events(ctx, "refused")
    assert (refusal["action"], refusal["reason"], refusal["actor"]) == ("hold", "agent", "agent")
    assert (refusal["actor_session"], refusal["actor_agent"]) == (PINNED, "main")
    assert "x" not in refusal.values()  # the agent's text: its length and digest only
    [told] = messages(ctx)
    assert told.startswith("Loom: refused a hold asked for by the agent") and PINNED in told
    assert ledger.verify(ctx.store).ok


def test_the_agents_command_over_via_ssh_is_still_the_agents(refusing):
    # tmux copies an operator's SSH_CONNECTION (its default update-environment) into the panes it
    # starts: the agent's shell has one. `--via-ssh` there must not make its hold the operator's.
    ctx, loom = refusing
    over_ssh = {"SSH_CONNECTION": "10.0.0.5 51000 10.0.0.9 22"}
    for words in (["hold", "--reason", "x"], ["recycle", "--fresh", "--reason", "x"], ["release"]):
        result = loom("--via-ssh", "laptop", *words, env=over_ssh)
        assert result.returncode == 1 and "refused" in one_line(result.stderr), words
    assert holds.stored(ctx) is None and events(ctx, "relaunch") == []
    assert [(d["action"], d["actor"]) for d in events(ctx, "refused")] == \
        [("hold", "agent"), ("recycle", "agent"), ("release", "agent")]
    # The operator's own command from another machine is the operator's, over ssh.
    assert loom("--via-ssh", "laptop", "hold", "--reason", "y", as_session=None, env=over_ssh).returncode == 0
    assert holds.stored(ctx).actor == "ssh"


def test_the_agent_may_not_release_the_operators_hold_nor_recycle_itself(refusing):
    ctx, loom = refusing
    assert loom("hold", "--reason", "upgrading", as_session=None).returncode == 0
    assert holds.stored(ctx).actor == "cli" and messages(ctx) == []  # the operator's own: nobody told

    released = loom("release")
    assert released.returncode == 1 and "release refused" in one_line(released.stderr)
    assert holds.stored(ctx) is not None and holds.stored(ctx).reason == "upgrading"

    recycled = loom("recycle", "--fresh", "--reason", "try again")
    assert recycled.returncode == 1 and "recycle refused" in one_line(recycled.stderr)
    assert session.pinned(ctx.store) == PINNED and events(ctx, "relaunch") == []

    assert [(d["action"], d["actor"]) for d in events(ctx, "refused")] == [("release", "agent"), ("recycle", "agent")]
    told = messages(ctx)
    assert len(told) == 2 and "refused a release" in told[0] and "refused a recycle" in told[1]


def test_with_may_hold_the_agents_hold_and_release_are_done_recorded_and_told(allowing):
    ctx, loom = allowing
    placed = loom("hold", "--for", "30m", "--reason", "long migration", "--json")
    assert placed.returncode == 0, placed.stderr
    hold = holds.stored(ctx)
    assert hold is not None and hold.actor == "agent" and hold.reason == "long migration"
    [detail] = events(ctx, "hold_placed")
    assert (detail["actor"], detail["actor_session"], detail["actor_agent"]) == ("agent", PINNED, "main")
    assert loom("status").returncode == 0
    assert messages(ctx)[-1].startswith("Loom: the agent main placed a hold: held by the agent: long migration")

    released = loom("release")
    assert released.returncode == 0 and "released the agent's hold" in released.stdout
    assert holds.stored(ctx) is None
    [cleared] = events(ctx, "hold_cleared")
    assert (cleared["actor"], cleared["how"]) == ("agent", "release")
    assert "the agent main released the hold" in messages(ctx)[-1]
    assert events(ctx, "refused") == []


def test_a_session_that_is_not_pinned_is_the_operator_at_the_cli(refusing):
    ctx, loom = refusing
    assert loom("hold", "--reason", "mine", as_session=OTHER).returncode == 0
    assert holds.stored(ctx).actor == "cli" and events(ctx, "hold_placed")[0]["actor"] == "cli"
    assert messages(ctx) == []


def test_a_session_loom_launched_before_its_pin_changed_is_still_the_agent(refusing):
    # A fresh relaunch pinned a new session; a shell of the old one (or a salvage that lost the
    # pin) still runs with the old id: it is the agent's, never the operator's.
    ctx, loom = refusing
    ledger.append(ctx.store, "relaunch", source="watchdog", cause="crash",
                  detail={"mode": "fresh", "old_session": OTHER, "new_session": PINNED})
    other = ledger.append(ctx.store, "relaunch", source="watchdog", cause="crash", detail={"mode": "resume"})
    with ctx.store.write() as db:  # a detail that is not JSON (written by hand) is skipped, not an error
        db.execute("UPDATE ledger SET detail = 'not json' WHERE id = ?", (other.id,))
    result = loom("hold", "--reason", "x", as_session=OTHER)
    assert result.returncode == 1 and "hold refused" in result.stderr
    assert holds.stored(ctx) is None
    assert events(ctx, "refused")[0]["actor"] == "agent"


def test_the_agents_inject_records_who_typed_it(refusing):
    ctx, loom = refusing
    assert loom("inject", "hello").returncode == 1  # no pane here; the attempt is recorded all the same
    [typed] = events(ctx, "inject")
    assert (typed["actor"], typed["actor_session"]) == ("agent", PINNED) and "hello" not in typed.values()


def test_one_agent_acting_on_another_is_the_agent_too():
    assert agent_session(PINNED, {"alpha": OTHER, "beta": PINNED}) == Actor("agent", session=PINNED, agent="beta")
    assert agent_session(PINNED, {"alpha": None}) is None
    assert agent_session(None, {"alpha": PINNED}) is None and agent_session("", {"alpha": ""}) is None


def test_an_unknown_trigger_holding_is_told_too(tmp_path):
    ctx, _ = setup(tmp_path)
    try:
        actions.hold(ctx, "from a script", None, source="demo")
        assert holds.stored(ctx).actor == "demo"
        assert messages(ctx) == ["Loom: demo placed a hold: held by the operator: from a script (until released)"]
        actions.release(ctx, source="tui")
        assert len(messages(ctx)) == 1  # the console's release is the operator's own
    finally:
        ctx.close()


def test_telegrams_sender_is_recorded_with_the_hold(tmp_path):
    ctx, _ = setup(tmp_path, extra=f"[telegram]\nchat_id = {CHAT}\ncommands = true\n")
    bot = telegram.Bot("123456:actor-unit-test-token")
    ops = OperatorActions(ctx)
    try:
        poller = Poller(ctx.store, ctx.config.telegram, bot, ops, Clock(), username="loom_bot")
        message = {"message_id": 70, "date": int(time.time()), "text": "/hold 30m swapping disks",
                   "chat": {"id": CHAT, "type": "private"}, "from": {"id": CHAT, "is_bot": False, "first_name": "o"}}
        asyncio.run(poller.handle(telegram.Update.de_json({"update_id": 7, "message": message}, bot)))
        hold = holds.stored(ctx)
        assert hold is not None and hold.actor == "telegram"
        [detail] = events(ctx, "hold_placed")
        assert (detail["actor"], detail["actor_user"]) == ("telegram", CHAT)
    finally:
        ops.close()
        ctx.close()
