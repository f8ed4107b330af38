"""The pump's own process, in parts a test can hold still (tests/e2e/test_pump.py runs it whole):
the pane's thread when the pane takes nothing, and the refusals of sends the CLI's exit cut short."""

from __future__ import annotations

import threading

from harness import wait_for

from loomtui.pump import rules, transcript
from loomtui.pump.runner import PANE_BACKLOG, Pending, Pump


def test_lines_the_pane_has_no_room_for_are_counted_and_said_where_they_were(tmp_path):
    entered, gate = threading.Event(), threading.Event()
    shown: list[str] = []

    def show(line: str) -> None:  # a pane stopped with Ctrl-S: the write blocks until it is let go
        entered.set()
        gate.wait(60)
        shown.append(line)

    pump = Pump(tmp_path, ["true"], show=show)
    pump._show("line 0")
    assert entered.wait(60)  # the pane's thread holds line 0
    for i in range(1, PANE_BACKLOG + 51):  # the main loop never waits: the backlog's worth kept, 50 left out
        pump._show(f"line {i}")
    assert pump.left_out == 50
    gate.set()
    wait_for(lambda: pump.pane.empty(), 60, what="the pane taking its backlog")
    pump._show("after")
    pump._close_pane()
    note = "— 50 lines not shown: the pane took none for a while (the transcript has them all)"
    assert shown == [f"line {i}" for i in range(PANE_BACKLOG + 1)] + [note, "after"]


def test_sends_the_clis_exit_cut_short_are_refused_with_the_exited_code(tmp_path):
    pump = Pump(tmp_path, ["true"], show=lambda line: None)
    pump.log = transcript.Writer(transcript.path_in(tmp_path))
    written, arrived = Pending("typed as it died", "operator", ""), Pending("too late", "canary", "")
    pump.waiting[1] = written
    pump.events.put(("send", arrived))
    assert pump._finish(0) == 0
    refusal = {"ok": False, "error": rules.EXITED, "code": rules.EXITED_CODE}
    assert written.answer == refusal and arrived.answer == refusal
    pump.log.close()
