"""The outbox: durable, ordered, deduplicated; delivery recorded with its ledger event."""

from __future__ import annotations

import json

import pytest

from loomtui.errors import LoomError
from loomtui.store import ledger, outbox
from loomtui.store.db import Store


@pytest.fixture
def store(state_dir):
    state_dir.mkdir(mode=0o700)
    s = Store.in_dir(state_dir)
    yield s
    s.close()


def test_enqueue_keeps_order_and_dedupes(store):
    a = outbox.enqueue(store, "first", dedupe_key="k1")
    b = outbox.enqueue(store, "second")
    again = outbox.enqueue(store, "first, said again", dedupe_key="k1")
    assert again == a and b > a
    assert [m.text for m in outbox.pending(store)] == ["first", "second"]
    assert outbox.head(store).id == a


def test_dedupe_key_holds_after_delivery(store):
    a = outbox.enqueue(store, "once", dedupe_key="queue:7:backstop")
    outbox.mark_sent(store, a, message_id=11, chat_id=5, length=4, truncated=False)
    assert outbox.enqueue(store, "once", dedupe_key="queue:7:backstop") == a
    assert outbox.pending(store) == []


def test_enqueue_inside_a_callers_transaction_rolls_back_with_it(store):
    with pytest.raises(RuntimeError):
        with store.write() as db:
            outbox.enqueue(db, "tied to a change that failed")
            raise RuntimeError("the change failed")
    assert outbox.recent(store) == []


def test_empty_text_is_refused(store):
    with pytest.raises(LoomError, match="empty"):
        outbox.enqueue(store, "  \n")


def test_mark_sent_records_the_event_without_the_text(store):
    a = outbox.enqueue(store, "operator words stay out of the ledger")
    assert outbox.mark_sent(store, a, message_id=99, chat_id=5, length=37, truncated=False, now=1000.0)
    assert not outbox.mark_sent(store, a, message_id=100, chat_id=5, length=37, truncated=False)
    msg = outbox.get(store, a)
    assert (msg.state, msg.telegram_message_id, msg.sent, msg.attempts) == ("sent", 99, 1000.0, 1)
    events = ledger.tail(store, 10)
    assert [e.kind for e in events] == ["telegram_sent"]
    assert events[0].detail == {"outbox_id": a, "length": 37, "message_id": 99, "truncated": False}
    assert "operator words" not in json.dumps([e.as_dict() for e in events])
    assert ledger.verify(store).ok


def test_defer_counts_attempts_and_fail_gives_up_visibly(store):
    a = outbox.enqueue(store, "x")
    b = outbox.enqueue(store, "y")
    outbox.defer(store, a, until=50.0, error="NetworkError: down")
    m = outbox.get(store, a)
    assert (m.state, m.attempts, m.next_attempt, m.last_error) == ("pending", 1, 50.0, "NetworkError: down")
    outbox.defer(store, a, until=60.0, error="BadRequest: chat not found", fail=True, event="telegram_failed")
    assert outbox.get(store, a).state == "failed"
    assert outbox.head(store).id == b
    s = outbox.summary(store, now=outbox.get(store, b).created + 5)
    assert (s["pending"], s["failed"], s["sent"], round(s["oldest_pending_age"])) == (1, 1, 0, 5)
    assert outbox.requeue_failed(store, source="cli") == [a]
    assert outbox.head(store).id == a
    assert ledger.tail(store, 1)[0].detail == {"outbox_ids": [a]}


def test_status_includes_the_outbox_and_no_conflict(loom):
    result = loom("status", "--json")
    assert result.returncode == 0, result.stderr
    tg = json.loads(result.stdout)["telegram"]
    assert tg["outbox"]["pending"] == 0 and tg["conflict"] is None
    assert "telegram        off (telegram.chat_id = 0): outbox 0 pending" in loom("status").stdout


def test_status_says_telegram_is_off_and_that_the_pending_stay_unsent(loom, store):
    outbox.enqueue(store, "the agent needs you")
    assert ("telegram        off (telegram.chat_id = 0): outbox 1 pending, 0 failed, 0 sent; the pending stay unsent"
            in loom("status").stdout)


def test_the_operator_sees_the_refused_messages_and_retries_or_forgets_them(store, loom):
    """`loom check` warns while a refused message is kept: `loom outbox` shows it, and the
    operator's --retry or --forget ends the warning (nothing could before: it warned for good)."""
    kept = outbox.enqueue(store, "job \x1b[31mbackup\x1b[0m failed\nsee the log")
    outbox.defer(store, kept, until=0.0, error="BadRequest: chat not found", rejected=True, fail=True)
    assert outbox.get(store, kept).state == "failed"
    waiting = outbox.enqueue(store, "still to go")

    shown = loom("outbox")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 2 and lines[0].split()[:2] == [str(kept), "failed"] and "chat not found" in lines[0]
    assert "\x1b" not in shown.stdout and "backup" in lines[0]  # the text made printable, one line each
    assert lines[1].split()[:2] == [str(waiting), "pending"]
    assert json.loads(loom("outbox", "--json").stdout)["messages"][0]["text"].startswith("job ")
    assert "refused by Telegram" in loom("check").stdout

    again = loom("outbox", "--retry")
    assert (again.returncode, again.stdout.strip()) == (0, f"1 refused message put back in line: {kept}")
    assert outbox.get(store, kept).state == "pending" and outbox.get(store, kept).attempts == 0
    outbox.defer(store, kept, until=0.0, error="BadRequest: chat not found", rejected=True, fail=True)
    gone = loom("outbox", "--forget", "--json")
    assert json.loads(gone.stdout) == {"action": "forget", "outbox_ids": [kept]}
    assert outbox.get(store, kept) is None and outbox.get(store, waiting).state == "pending"
    assert "refused by Telegram" not in loom("check").stdout
    kinds = [e.kind for e in ledger.tail(store, 5)]
    assert "outbox_requeued" in kinds and "outbox_forgotten" in kinds
    assert ledger.verify(store).ok


def test_with_telegram_off_the_operator_reads_the_pending_messages_and_the_warning_ends(store, loom):
    """With `telegram.chat_id = 0` nothing sends the outbox: `loom check` warned of its pending
    messages for good. `loom outbox` shows them; `--read` deletes them, recorded; a refused one
    is `--forget`'s."""
    first = outbox.enqueue(store, "job backup failed")
    second = outbox.enqueue(store, "the agent is held", dedupe_key="hold:1")
    check = loom("check")
    assert "unsent: Telegram is off" in check.stdout and "loom outbox --read" in check.stdout
    read = loom("outbox", "--read", "--json")
    assert read.returncode == 0, read.stderr
    said = json.loads(read.stdout)
    assert said["action"] == "read" and said["outbox_ids"] == [first, second]
    assert [m["text"] for m in said["messages"]] == ["job backup failed", "the agent is held"]  # read whole
    assert outbox.pending(store) == [] and "unsent" not in loom("check").stdout
    [event] = [e for e in ledger.tail(store, 5) if e.kind == "outbox_forgotten"]
    assert event.detail == {"outbox_ids": [first, second], "read": True}
    assert loom("outbox", "--read").stdout.strip() == "0 pending messages read and deleted"
    long = outbox.enqueue(store, "line one\n" + "x" * 200 + "\x1b[31m")
    shown = loom("outbox", "--read").stdout
    assert "line one" in shown and "x" * 200 in shown and "\x1b" not in shown  # whole, made printable
    assert f"1 pending message read and deleted: {long}" in shown


def test_read_deletes_nothing_while_the_outbox_shows_a_sender_at_work(store, loom):
    # The daemon runs with a config that names a chat; this command read another (or none): the
    # pending messages are on their way, not the operator's to read here.
    sent = outbox.enqueue(store, "delivered")
    outbox.mark_sent(store, sent, message_id=11, chat_id=5, length=9, truncated=False)
    waiting = outbox.enqueue(store, "next in line")
    refused = loom("outbox", "--read")
    assert refused.returncode == 2 and "nothing deleted" in refused.stderr
    assert outbox.get(store, waiting).state == "pending"


def test_read_is_refused_where_a_chat_would_send_them(store, loom, state_dir, tmp_path):
    config = tmp_path / "on.toml"
    config.write_text(f'state_dir = "{state_dir}"\n[telegram]\nchat_id = 5151\n')
    kept = outbox.enqueue(store, "for the chat")
    refused = loom("--config", str(config), "outbox", "--read")
    assert refused.returncode == 2 and "Telegram off" in refused.stderr
    assert outbox.get(store, kept).state == "pending"
