"""The bridge's reply side against hand-written transcripts: real files, a real SQLite store."""

from __future__ import annotations

import logging
import os
import time

import pytest

from loomtui import redact
from loomtui.pump import transcript
from loomtui.store import outbox
from loomtui.store.db import Store
from loomtui.telegram import bridge
from loomtui.telegram.bridge import AGAIN, LOST, NO_TEXT, UNRECORDED, Bridge, Cursor, advance

CHAT = 5151


class Script:
    """Writes a transcript the way the pump does: `in` records, the CLI's events, the pump's own."""

    def __init__(self, path) -> None:
        self.path = path
        self.writer = transcript.Writer(path)
        self.seq = 0
        self.ts = 1_764_576_000.0

    def _tick(self) -> float:
        self.ts += 1.25
        return self.ts

    def started(self, pending: list[int] | None = None) -> None:
        kept = {"pending": pending} if pending else {}
        self.writer.append(transcript.PUMP, ts=self._tick(), what="started", pid=123, **kept)

    def again(self, seq: int, origin: str = "telegram", text: str = "hello agent") -> None:
        """A kept line written again by the next pump: its own seq, a new `in`."""
        self.writer.append(transcript.IN, ts=self._tick(), seq=seq, origin=origin, ref=None, text=text)

    def unread(self, seqs: list[int]) -> None:
        self.writer.append(transcript.PUMP, ts=self._tick(), what="unread", seqs=seqs)

    def kept_through_a_relaunch(self, seq: int, answer: str) -> None:
        """Line `seq` never read: the CLI exits, the next pump writes it again and it is answered."""
        self.unread([seq])
        self.cli_exit()
        self.started(pending=[seq])
        self.again(seq)
        self.result(answer)

    def send(self, origin: str, text: str = "hello agent") -> int:
        self.seq += 1
        self.writer.append(transcript.IN, ts=self._tick(), seq=self.seq, origin=origin, ref=None, text=text)
        return self.seq

    def assistant(self, text: str) -> None:
        event = {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}}
        self.writer.append(transcript.OUT, ts=self._tick(), event=event)

    def result(self, text: str | None, *, is_error: bool = False, subtype: str = "success",
               turn: object = None) -> None:
        """`turn`: the line whose turn it ends, as the pump names it (None: a record without it)."""
        event = {"type": "result", "subtype": subtype, "is_error": is_error, "session_id": "s-1"}
        if text is not None:
            event["result"] = text
        self.writer.append(transcript.OUT, ts=self._tick(), event=event, **({} if turn is None else {"turn": turn}))

    def turn(self, origin: str, answer: str, text: str = "hello agent") -> int:
        seq = self.send(origin, text)
        self.assistant(answer)
        self.result(answer)
        return seq

    def cli_exit(self) -> None:
        self.writer.append(transcript.PUMP, ts=self._tick(), what="cli_exit", status=1, signal=None)

    def raw(self, data: bytes) -> None:
        with open(self.path, "ab") as fh:
            fh.write(data)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


@pytest.fixture
def store(tmp_path):
    with Store.in_dir(tmp_path) as s:
        yield s


@pytest.fixture
def script(tmp_path):
    s = Script(transcript.path_in(tmp_path))
    s.started()
    yield s
    s.close()


def sent(store: Store) -> list[tuple[int | None, str]]:
    return [(m.chat_id, m.text) for m in reversed(outbox.recent(store, 1000))]


def records(path, offset=0):
    return list(transcript.read(path, offset))


# -- the pure matching --------------------------------------------------------------------


def test_only_the_turns_that_answer_telegram_are_echoed(script):
    script.turn("canary", "touched the file")
    script.turn("telegram", "the build is green")
    script.turn("sentinel", "looking at the nightly job")
    script.turn("operator", "done")
    script.turn("telegram", "second answer")
    cursor, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == ["the build is green", "second answer"]
    assert [a.what for a in answers] == ["answer", "answer"]
    assert cursor.open == () and cursor.offset == os.path.getsize(script.path)
    assert len({a.key for a in answers}) == 2


def test_a_turn_the_cli_took_by_itself_answers_no_line(script):
    """A background task's end, told to the model in a turn no line began: its result was taken for
    the answer of a Telegram line still open (one whose own result the bridge never read)."""
    seq = script.send("telegram", "is it green?")
    event = {"type": "result", "subtype": "success", "is_error": False, "result": "noted: the task ended"}
    script.writer.append(transcript.OUT, ts=script._tick(), event=event, own_turn=True)
    cursor, answers = advance(Cursor(), records(script.path))
    assert answers == [] and [t.seq for t in cursor.open] == [seq]
    script.result("it is green", turn=seq)
    cursor, answers = advance(cursor, records(script.path, cursor.offset))
    assert [a.text for a in answers] == ["it is green"]
    # A line an error came before, read by the CLI after all: its turn looked like one of the CLI's
    # own to the pump (no line of its running), and its result is that line's answer, by order.
    late = script.send("telegram", "and the tests?")
    error = {"type": "result", "subtype": "error_during_execution", "is_error": True}
    script.writer.append(transcript.OUT, ts=script._tick(), event=error, unread=[late])
    answer = {"type": "result", "subtype": "success", "is_error": False, "result": "the tests pass"}
    script.writer.append(transcript.OUT, ts=script._tick(), event=answer, own_turn=True)
    _, answers = advance(cursor, records(script.path, cursor.offset))
    assert [a.text for a in answers] == ["the tests pass"]


def system(script, subtype: str, **fields) -> None:
    script.writer.append(transcript.OUT, ts=script._tick(), event={"type": "system", "subtype": subtype, **fields})


def own_result(script, text: str) -> None:
    event = {"type": "result", "subtype": "success", "is_error": False, "result": text}
    script.writer.append(transcript.OUT, ts=script._tick(), event=event, own_turn=True)


def test_a_background_task_the_operator_asked_for_has_its_end_told_to_the_operator(script):
    # Claude Code 2.1.332's events (tests/e2e/test_claude_code_cli.py): `task_started` in the turn
    # of the line that began it, `task_notification` when it ends, then the CLI's own turn.
    seq = script.send("telegram", "run the tests in the background")
    system(script, "task_started", task_id="bsx9dpd4g", description="the tests")
    script.result("started them", turn=seq)
    nudge = script.send("sentinel", "the backup job failed")
    system(script, "task_started", task_id="nudge1", description="a rerun")
    script.result("rerunning it", turn=nudge)
    cursor, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == ["started them"] and cursor.tasks == ("bsx9dpd4g",)
    # The nudge's task ends: its turn is the agent's own business, not echoed.
    system(script, "task_notification", task_id="nudge1", status="completed")
    own_result(script, "the rerun passed")
    cursor, answers = advance(cursor, records(script.path, cursor.offset))
    assert answers == [] and cursor.tasks == ("bsx9dpd4g",)
    # The operator's ends: told once, in its own words, keyed by the task; a restart mid-way keeps it.
    system(script, "task_notification", task_id="bsx9dpd4g", status="completed", summary="exit code 0")
    cursor = Cursor.loads(advance(cursor, records(script.path, cursor.offset))[0].dumps())
    assert cursor.tasks == () and cursor.ended == ("bsx9dpd4g",)
    own_result(script, "the tests pass: 212 of 212")
    cursor, answers = advance(cursor, records(script.path, cursor.offset))
    assert [(a.text, a.what) for a in answers] == [("the tests pass: 212 of 212", "task")]
    assert answers[0].key.startswith("telegram_bridge:task:bsx9dpd4g:") and cursor.ended == ()
    # Read again from the start (a lost cursor): the same answers, the same keys (the outbox dedupes).
    again = advance(Cursor(), records(script.path))[1]
    assert [a.what for a in again] == ["answer", "task"] and again[1].key == answers[0].key


def test_a_task_that_ends_inside_another_turn_is_told_at_the_clis_own_turn_after_it(script):
    seq = script.send("telegram", "build it in the background")
    system(script, "task_started", task_id="t1")
    script.result("building", turn=seq)
    other = script.send("canary", "touch the ack file")
    system(script, "task_notification", task_id="t1", status="completed")  # inside the probe's turn
    script.result("done.", turn=other)
    own_result(script, "the build passed")
    _, answers = advance(Cursor(), records(script.path))
    assert [(a.what, a.text) for a in answers] == [("answer", "building"), ("task", "the build passed")]


def test_a_cli_gone_before_its_own_turn_takes_its_tasks_along(script):
    # The CLI exits between telling of the end and its own turn: the next CLI's own turn (a nudge's
    # task, here) is not the operator's.
    seq = script.send("telegram", "build it in the background")
    system(script, "task_started", task_id="t1")
    script.result("building", turn=seq)
    system(script, "task_notification", task_id="t1", status="completed")
    script.writer.append(transcript.PUMP, ts=script._tick(), what="cli_exit", status=1, exit=1)
    script.started()
    nudge = script.send("sentinel", "the backup failed")
    system(script, "task_started", task_id="t2")
    script.result("rerunning", turn=nudge)
    system(script, "task_notification", task_id="t2", status="completed")
    own_result(script, "the rerun passed")
    cursor, answers = advance(Cursor(), records(script.path))
    assert [a.what for a in answers] == ["answer"] and (cursor.tasks, cursor.ended) == ((), ())


def test_a_task_begun_in_a_probes_turn_behind_an_unread_telegram_line_is_not_the_operators(script):
    # The line an error came before stays open (unread); the running turn is the probe's.
    late = script.send("telegram", "and the tests?")
    error = {"type": "result", "subtype": "error_during_execution", "is_error": True}
    script.writer.append(transcript.OUT, ts=script._tick(), event=error, unread=[late])
    probe = script.send("canary", "touch the ack file")
    system(script, "task_started", task_id="t3")
    script.result("done.", turn=probe)
    cursor, _ = advance(Cursor(), records(script.path))
    assert cursor.tasks == ()


def test_task_events_that_say_nothing_usable_change_nothing(script):
    seq = script.send("telegram")
    for bad in (None, 7, "", "x" * 101, ["t"]):
        system(script, "task_started", task_id=bad)
    script.result("ok", turn=seq)
    cursor, answers = advance(Cursor(), records(script.path))
    assert cursor.tasks == () and [a.text for a in answers] == ["ok"]
    assert Cursor.loads('{"offset": 3, "file": "f", "open": [], "tasks": [1, "a"], "ended": "b"}').tasks == ("a",)
    assert Cursor.loads('{"offset": 3, "file": "f", "open": []}') == Cursor(3, "f")


def test_an_error_result_is_a_short_note_and_an_empty_one_says_so(script):
    script.send("telegram")
    script.result("API Error: 529\n   overloaded", is_error=True, subtype="error_during_execution")
    script.send("telegram")
    script.result(None, is_error=True, subtype="error_max_turns")
    script.send("telegram")
    script.result("   ")
    _, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == [
        "Loom: the agent's turn ended in an error (error_during_execution): API Error: 529 overloaded",
        "Loom: the agent's turn ended in an error (error_max_turns)",
        NO_TEXT,
    ]
    assert [a.what for a in answers] == ["error", "error", "answer"]


def test_a_turn_split_over_two_reads_is_answered_once_it_ends(script):
    script.send("telegram")
    script.assistant("thinking")
    first, answers = advance(Cursor(), records(script.path))
    assert answers == [] and [t.origin for t in first.open] == ["telegram"]
    script.result("the answer")
    second, answers = advance(first, records(script.path, first.offset))
    assert [a.text for a in answers] == ["the answer"] and second.open == ()
    # The cursor survives the store as text.
    assert Cursor.loads(first.dumps()) == first


def test_a_cli_that_exits_mid_turn_gets_the_lost_note_once(script):
    script.send("canary")
    script.result("ok")
    script.send("telegram")
    script.assistant("half an answer")
    script.cli_exit()
    script.started()
    script.turn("telegram", "after the relaunch")
    _, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == [LOST, "after the relaunch"]


def test_a_kept_line_the_cli_never_read_is_said_to_go_again_and_its_new_turn_answered(script):
    # The pump keeps a line until the CLI shows it read it, and the next launch writes it again:
    # "send it again" had the operator's message reach the agent twice.
    seq = script.send("telegram")
    script.kept_through_a_relaunch(seq, "answered after the relaunch")
    cursor, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == [AGAIN, "answered after the relaunch"]
    assert [a.what for a in answers] == ["again", "answer"] and cursor.open == ()
    assert answers[0].key != answers[1].key  # two `in` records, two answers, each sent once


def test_an_error_the_cli_printed_before_reading_the_line_is_not_its_answer(script):
    # A resume that finds no session: an error result at once, the line unread, the CLI's exit. The
    # operator was sent the error as the answer, and then, the line delivered again, the real one.
    seq = script.send("telegram")
    event = {"type": "result", "subtype": "error_during_execution", "is_error": True,
             "errors": ["No conversation found with session ID: s-1"]}
    script.writer.append(transcript.OUT, ts=script._tick(), event=event, unread=[seq])
    script.kept_through_a_relaunch(seq, "the real answer")
    _, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == [AGAIN, "the real answer"]


def test_a_killed_pumps_kept_line_is_said_to_go_again_by_the_next_pumps_start(script):
    # No `unread`, no `cli_exit`: the next pump's start says which lines it writes again.
    kept, lost = script.send("telegram"), script.send("telegram")
    script.started(pending=[kept, "7", True])  # untrusted: only ints are seqs
    _, answers = advance(Cursor(), records(script.path))
    assert [(a.key.split(":")[1], a.text) for a in answers] == [(str(kept), AGAIN), (str(lost), LOST)]


def test_a_kept_line_at_its_last_launch_is_said_lost_not_to_go_again(script):
    # Its third launch exited before reading it: the next pump sets it aside (pump.rules.MAX_UNREAD),
    # and "no need to send it again" was followed by the watchdog's "set aside ... send it again".
    aside, kept = script.send("telegram"), script.send("telegram")
    script.writer.append(transcript.PUMP, ts=script._tick(), what="unread", seqs=[aside, kept], set_aside=[aside])
    script.cli_exit()
    _, answers = advance(Cursor(), records(script.path))
    assert [(a.key.split(":")[1], a.what) for a in answers] == [(str(kept), "again"), (str(aside), "lost")]


def test_a_queued_line_whose_write_failed_goes_again(script):
    # The CLI closed its input as the queued line was written: the pump keeps its file (the next
    # launch writes it), where a line written at once is refused to its sender and dropped.
    queued, direct = script.send("telegram"), script.send("telegram")
    script.writer.append(transcript.PUMP, ts=script._tick(), what="write_failed", seq=queued, error="Broken pipe",
                         kept=True)
    script.writer.append(transcript.PUMP, ts=script._tick(), what="write_failed", seq=direct, error="Broken pipe")
    _, answers = advance(Cursor(), records(script.path))
    assert [(a.key.split(":")[1], a.text) for a in answers] == [(str(queued), AGAIN), (str(direct), LOST)]


def test_lines_merged_into_one_turn_get_one_answer_and_the_next_turn_its_own(script):
    first = script.send("canary")
    script.send("telegram")
    script.send("telegram")
    script.result("one turn for all three")
    nxt = script.turn("telegram", "the next answer")
    cursor, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == ["one turn for all three", "the next answer"]
    assert answers[0].key.startswith(f"telegram_bridge:{first + 1}:")
    assert answers[1].key.startswith(f"telegram_bridge:{nxt}:") and cursor.open == ()


def test_a_result_that_never_reached_the_transcript_leaves_the_next_answer_to_its_own_line(script):
    # The disk refused the first turn's result record: the next result was the first line's answer,
    # and the second line had none. The pump names each result's line.
    first, second = script.send("telegram", "first"), script.send("telegram", "second")
    script.result("the answer to the second", turn=second)
    cursor, answers = advance(Cursor(), records(script.path))
    assert [(a.key.split(":")[1], a.what) for a in answers] == [(str(first), "unrecorded"), (str(second), "answer")]
    # The notice names the message by when it went to the agent: nothing else ties it to it in the chat.
    at = time.strftime("%H:%M", time.localtime(records(script.path)[1].ts))
    assert answers[0].text == UNRECORDED.format(at=at) and f"passed to it at {at} " in answers[0].text
    assert answers[1].text == "the answer to the second" and cursor.open == ()


def test_a_named_turn_of_another_origin_answers_no_one_and_ends_the_lines_before_it(script):
    first = script.send("telegram")
    probe = script.send("canary", "touch the ack")
    script.result("touched", turn=probe)
    later = script.send("telegram")
    script.result("the answer to the later one", turn=later)
    _, answers = advance(Cursor(), records(script.path))
    assert [(a.key.split(":")[1], a.what) for a in answers] == [(str(first), "unrecorded"), (str(later), "answer")]
    assert answers[1].text == "the answer to the later one"


def test_a_named_line_whose_in_was_never_read_is_answered_by_order(script):
    # The disk that refused the first result refused the second line's `in` too: the answer still
    # reaches the chat (by order, as before), not dropped with a notice.
    first = script.send("telegram")
    script.result("the answer to the second", turn=first + 1)
    _, answers = advance(Cursor(), records(script.path))
    assert [(a.key.split(":")[1], a.text) for a in answers] == [(str(first), "the answer to the second")]


def test_a_kept_line_written_again_under_its_seq_then_a_refused_result_reads_alike_in_any_pieces(script):
    # A failed resume (an error before the line was read), the line kept and written again by the
    # next pump under the same seq; then its result refused by the disk and the next line's named.
    # Read whole, the first line got the second's answer: the error's mark outlived its line.
    seq = script.send("telegram", "first")
    event = {"type": "result", "subtype": "error_during_execution", "is_error": True}
    script.writer.append(transcript.OUT, ts=script._tick(), event=event, unread=[seq], turn=seq)
    script.unread([seq])
    script.cli_exit()
    script.started(pending=[seq])
    script.again(seq, text="first")
    cut = os.path.getsize(script.path)
    later = seq + 1
    script.writer.append(transcript.IN, ts=script._tick(), seq=later, origin="telegram", ref=None, text="second")
    script.result("the answer to the second", turn=later)
    everything = records(script.path)
    whole = advance(Cursor(), everything)
    part, early = advance(Cursor(), [r for r in everything if r.end <= cut])
    rest, late = advance(part, [r for r in everything if r.end > cut])
    assert whole == (rest, early + late)
    assert [(a.key.split(":")[1], a.what) for a in whole[1]] == [(str(seq), "again"), (str(seq), "unrecorded"),
                                                                 (str(later), "answer")]


@pytest.mark.parametrize("turn", ["2", True, 2.0, [2], {"seq": 2}])
def test_a_turn_that_is_not_a_seq_is_no_turn(script, turn):
    # Untrusted: only an int names a line; anything else reads as a record without it.
    script.send("telegram")
    script.send("telegram")
    script.result("answered", turn=turn)
    _, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == ["answered"]


def test_an_error_printed_before_reading_its_named_line_leaves_that_line_open(script):
    seq = script.send("telegram")
    event = {"type": "result", "subtype": "error_during_execution", "is_error": True}
    script.writer.append(transcript.OUT, ts=script._tick(), event=event, unread=[seq], turn=seq)
    cursor, answers = advance(Cursor(), records(script.path))
    assert answers == [] and [t.seq for t in cursor.open] == [seq]
    script.kept_through_a_relaunch(seq, "the real answer")
    _, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == [AGAIN, "the real answer"]


def test_after_an_error_that_came_before_its_line_was_read_the_next_result_is_that_lines(script):
    # The bridge's premise is that such an error ends the CLI (Claude Code's failed resume). Were it
    # to read the line after all, the pump's count of turns is one behind: its next result, named
    # for the line written after, is the first line's answer, as by order.
    seq = script.send("telegram", "first")
    event = {"type": "result", "subtype": "error_during_execution", "is_error": True}
    script.writer.append(transcript.OUT, ts=script._tick(), event=event, unread=[seq], turn=seq)
    after = script.send("telegram", "second")
    cursor, _ = advance(Cursor(), records(script.path))
    assert cursor.unread == (seq,) and Cursor.loads(cursor.dumps()) == cursor
    script.result("the answer to the first", turn=after)
    cursor, answers = advance(cursor, records(script.path, cursor.offset))
    assert [(a.key.split(":")[1], a.text) for a in answers] == [(str(seq), "the answer to the first")]
    assert cursor.open == () and cursor.unread == ()


def test_an_input_whose_write_failed_takes_no_later_answer(script):
    seq = script.send("telegram")
    script.writer.append(transcript.PUMP, ts=script._tick(), what="write_failed", seq=seq, error="Broken pipe")
    script.turn("canary", "a later turn's answer")
    _, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == [LOST]


def test_a_result_with_no_input_seen_is_not_anyones_answer(script):
    script.result("a turn that began before the bridge looked")
    seq = script.turn("telegram", "mine")
    _, answers = advance(Cursor(), records(script.path))
    assert [a.text for a in answers] == ["mine"] and answers[0].key.startswith(f"telegram_bridge:{seq}:")


def test_inputs_never_answered_are_capped(script):
    for _ in range(bridge.MAX_OPEN + 10):
        script.send("canary")
    cursor, _ = advance(Cursor(), records(script.path))
    assert len(cursor.open) == bridge.MAX_OPEN


def test_an_unreadable_cursor_starts_over():
    assert Cursor.loads("{not json") == Cursor()
    assert Cursor.loads('{"offset": "x"}') == Cursor()
    assert Cursor.loads(None) == Cursor()
    # A cursor an older Loom stored (no `unread`) reads as it was; untrusted seqs are dropped.
    assert Cursor.loads('{"offset": 5, "file": "f", "open": [[1, "telegram", 2.5]]}') == \
        Cursor(5, "f", (bridge.Input(1, "telegram", 2.5),))
    assert Cursor.loads('{"offset": 5, "file": "f", "open": [], "unread": [3, "4", true]}').unread == (3,)


# -- the shell: files, store, restarts ----------------------------------------------------


def test_answers_go_to_the_operators_chat_once_and_a_restart_resumes(tmp_path, store, script):
    script.turn("telegram", "first")
    script.turn("canary", "probe acked")
    b = Bridge(store, tmp_path, CHAT)
    assert b.step() == 1
    assert sent(store) == [(CHAT, "first")]
    assert b.step() == 0
    script.turn("telegram", "second")
    # A new process: its own store connection, the cursor read back from the meta table.
    with Store.in_dir(tmp_path) as again:
        assert Bridge(again, tmp_path, CHAT).step() == 1
    assert sent(store) == [(CHAT, "first"), (CHAT, "second")]
    assert Bridge(store, tmp_path, CHAT).step() == 0


def test_a_line_still_being_written_waits_for_its_newline(tmp_path, store, script):
    script.send("telegram")
    script.raw(b'{"ts":1.0,"dir":"out","event":{"type":"result","is_error":false,"result":"par')
    b = Bridge(store, tmp_path, CHAT)
    assert b.step() == 0
    script.raw(b'tial"}}\n')
    assert b.step() == 1
    assert sent(store) == [(CHAT, "partial")]


def test_a_lost_cursor_sends_nothing_twice(tmp_path, store, script):
    script.turn("telegram", "only once")
    b = Bridge(store, tmp_path, CHAT)
    assert b.step() == 1
    with store.write() as db:
        db.execute("DELETE FROM meta WHERE key = ?", (bridge.CURSOR_KEY,))
    assert b.step() == 0
    assert sent(store) == [(CHAT, "only once")]


def test_a_truncated_transcript_is_read_from_its_start_without_resending(tmp_path, store, script):
    script.turn("telegram", "before the truncation")
    b = Bridge(store, tmp_path, CHAT)
    assert b.step() == 1
    # Cut back to its first line: the same file, only shorter than where the bridge got to.
    os.truncate(script.path, len(script.path.read_bytes().splitlines(keepends=True)[0]))
    script.turn("telegram", "after the truncation")
    assert os.path.getsize(script.path) < Cursor.loads(store.get_meta(bridge.CURSOR_KEY)).offset
    assert b.step() == 1
    assert sent(store) == [(CHAT, "before the truncation"), (CHAT, "after the truncation")]


def test_a_replaced_transcript_longer_than_the_offset_is_read_from_its_start(tmp_path, store, script):
    script.turn("telegram", "old file")
    b = Bridge(store, tmp_path, CHAT)
    assert b.step() == 1
    old_size = os.path.getsize(script.path)
    script.close()
    os.replace(script.path, tmp_path / "transcript.old")
    new = Script(script.path)
    new.ts = script.ts + 100
    new.started()
    new.turn("telegram", "new file")
    for i in range(4):  # longer than the old file, so the offset alone would not tell
        new.turn("canary", f"probe {i}")
    assert os.path.getsize(new.path) > old_size
    try:
        assert b.step() == 1
    finally:
        new.close()
    assert sent(store) == [(CHAT, "old file"), (CHAT, "new file")]


def test_a_transcript_truncated_and_regrown_past_the_offset_is_read_from_its_start(tmp_path, store, script):
    # The same file (the same inode), longer than before: only its first line tells it is new.
    script.turn("telegram", "first life")
    b = Bridge(store, tmp_path, CHAT)
    assert b.step() == 1
    old_size = os.path.getsize(script.path)
    os.truncate(script.path, 0)
    script.ts += 100
    script.started()
    script.turn("telegram", "second life")
    for i in range(4):
        script.turn("canary", f"probe {i}")
    assert os.path.getsize(script.path) > old_size
    assert b.step() == 1
    assert sent(store) == [(CHAT, "first life"), (CHAT, "second life")]


def test_a_transcript_rewritten_with_the_same_turns_is_not_sent_again(tmp_path, store, script):
    script.turn("telegram", "once")
    b = Bridge(store, tmp_path, CHAT)
    assert b.step() == 1
    data = script.path.read_bytes()
    script.path.write_bytes(b"")
    script.path.write_bytes(data)  # the same records, the same keys
    with store.write() as db:
        db.execute("DELETE FROM meta WHERE key = ?", (bridge.CURSOR_KEY,))
    assert b.step() == 0
    assert sent(store) == [(CHAT, "once")]


def test_no_transcript_yet_is_nothing_to_do(tmp_path, store):
    assert Bridge(store, tmp_path, CHAT).step() == 0
    assert store.get_meta(bridge.CURSOR_KEY) is None


def test_long_answers_are_truncated_like_every_telegram_message(tmp_path, store, script):
    script.turn("telegram", "🙂" * 3000)
    assert Bridge(store, tmp_path, CHAT).step() == 1
    [(_, text)] = sent(store)
    assert text.endswith("[truncated]") and len(text.encode("utf-16-le")) // 2 <= 4096


def test_a_secret_in_an_answer_is_scrubbed(tmp_path, store, script):
    secret = "9191919191:bridge-secret-token-abcdefgh"
    redact.register(secret)
    script.turn("telegram", f"the token is {secret}")
    assert Bridge(store, tmp_path, CHAT).step() == 1
    [(_, text)] = sent(store)
    assert secret not in text and text.startswith("the token is ")


def test_neither_side_of_the_conversation_reaches_the_log(tmp_path, store, script, caplog):
    script.turn("telegram", "the agent's private answer", text="the operator's private question")
    caplog.set_level(logging.DEBUG, logger="loomtui.telegram.bridge")
    assert Bridge(store, tmp_path, CHAT).step() == 1
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "answer for input" in logged
    assert "private" not in logged


def test_a_line_longer_than_any_read_is_stepped_over(tmp_path, store, script, monkeypatch):
    monkeypatch.setattr(bridge, "READ_BYTES", 256)
    monkeypatch.setattr(bridge, "MAX_LINE_BYTES", 1024)
    script.send("telegram")
    script.assistant("x" * 600)  # longer than a read: read once at its length
    script.result("answered")
    script.send("telegram")
    script.assistant("y" * 4000)  # longer than any read: skipped
    script.result("also answered")
    assert Bridge(store, tmp_path, CHAT).step() == 2
    assert sent(store) == [(CHAT, "answered"), (CHAT, "also answered")]


def test_with_two_agents_the_bridge_follows_the_first_agents_transcript_only(tmp_path):
    import asyncio

    from loomtui.context import Context
    from loomtui.telegram.bridge import first_agent, run_bridge
    from loomtui.telegram.clock import Clock

    config = tmp_path / "loom.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[telegram]\nchat_id = {CHAT}\nbridge = true\n'
                      '[[agents]]\nname = "beta"\ndriver = "stream-json"\n'
                      '[[agents]]\nname = "alpha"\ndriver = "stream-json"\n')
    # Loaded as the second agent: the bridge still takes the first of the config.
    ctx = Context.load(str(config), None, environ={}).for_agent("alpha")
    first = first_agent(ctx)
    try:
        assert first.agent == "beta" and first.agent_dir == tmp_path / "state" / "agents" / "beta"
        Script(transcript.path_in(first.agent_dir)).turn("telegram", "from beta")
        Script(transcript.path_in(ctx.agent_dir)).turn("telegram", "from alpha")

        class Once(Clock):
            async def sleep(self, seconds, stop):
                stop.set()
                return True

        asyncio.run(run_bridge(ctx, asyncio.Event(), clock=Once()))
        assert sent(ctx.store) == [(CHAT, "from beta")]
        assert first.store.get_meta("bridge_offset@beta") and ctx.store.get_meta("bridge_offset") is None
    finally:
        first.close()
        ctx.close()
