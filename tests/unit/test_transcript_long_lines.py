"""A transcript line longer than one read (a tool result carrying an image's base64 runs to
megabytes) is read whole, and one past all reason is stepped over: before, `transcript.read` never
passed such a line, so every reader (the pump's turns, the recorded denials, the boot watch) stayed
before it for good. Real files, the real Writer."""

from __future__ import annotations

from loomtui.hooks import pump_turns, turn_rules
from loomtui.pump import transcript

T0 = 1_000_000.0


def written(tmp_path, *lines: tuple[str, dict]) -> tuple[transcript.Writer, object]:
    path = transcript.path_in(tmp_path)
    log = transcript.Writer(path)
    for direction, data in lines:
        log.append(direction, ts=T0, **data)
    return log, path


def test_a_line_longer_than_a_read_is_read_whole(tmp_path):
    big = "x" * 5000
    log, path = written(tmp_path, (transcript.IN, {"seq": 1, "text": "look"}),
                        (transcript.OUT, {"event": {"type": "user", "blob": big}}),
                        (transcript.OUT, {"event": {"type": "result"}}))
    first = list(transcript.read(path, 0, limit_bytes=1000))
    assert [r.dir for r in first] == [transcript.IN]
    second = list(transcript.read(path, first[-1].end, limit_bytes=1000))
    assert [r.event.get("type") for r in second] == ["user"] and second[0].event["blob"] == big
    third = list(transcript.read(path, second[-1].end, limit_bytes=1000))
    assert [r.event.get("type") for r in third] == ["result"]
    log.close()


def test_a_line_past_all_reason_is_stepped_over_once_its_end_is_written(tmp_path):
    log, path = written(tmp_path, (transcript.OUT, {"event": {"type": "user", "blob": "y" * 9000}}),
                        (transcript.OUT, {"event": {"type": "result"}}))
    [skipped] = list(transcript.read(path, 0, limit_bytes=1000, max_line=4000))
    assert (skipped.dir, skipped.data, skipped.offset) == (transcript.SKIPPED, {}, 0)
    [after] = list(transcript.read(path, skipped.end, limit_bytes=1000, max_line=4000))
    assert after.event == {"type": "result"}
    log.close()
    # Still being written (no newline yet): neither read nor stepped over.
    with open(path, "ab") as fh:
        fh.write(b'{"ts": 1.0, "dir": "out", "event": {"blob": "' + b"z" * 9000)
    assert list(transcript.read(path, after.end, limit_bytes=1000, max_line=4000)) == []
    assert list(transcript.read(path, after.end, limit_bytes=1000)) == []


def test_a_cut_line_longer_than_a_read_is_stepped_over_and_the_records_after_it_read(tmp_path):
    # A pump killed in the middle of a line of megabytes; the next pump ends it and writes on. Read
    # whole (shorter than max_line) and no record, it yielded nothing, and every reader stayed
    # before it for good (the bridge's answers, the pump's turns, the recorded denials).
    log, path = written(tmp_path, (transcript.PUMP, {"what": "started"}))
    log.close()
    with open(path, "ab") as fh:
        fh.write(b'{"ts": 1.0, "dir": "out", "event": {"blob": "' + b"c" * 5000 + b"\n")
    log, _ = written(tmp_path, (transcript.IN, {"seq": 1, "text": "next"}), (transcript.OUT, {"event": {"type": "result"}}))
    first = list(transcript.read(path, 0, limit_bytes=1000))
    assert [r.dir for r in first] == [transcript.PUMP]
    [skipped] = list(transcript.read(path, first[-1].end, limit_bytes=1000))
    assert (skipped.dir, skipped.data, skipped.offset, skipped.end - skipped.offset) == (
        transcript.SKIPPED, {}, first[-1].end, len(b'{"ts": 1.0, "dir": "out", "event": {"blob": "') + 5001)
    after = list(transcript.read(path, skipped.end, limit_bytes=1000))
    assert [r.dir for r in after] == [transcript.IN, transcript.OUT]
    # Read in one piece, the cut line is passed by the records after it; whole lines that are no
    # record after the last one are stepped over; a line not ended yet is neither.
    with open(path, "ab") as fh:
        fh.write(b"not json\n[1, 2]\n{\"half")
    tail = list(transcript.read(path, first[-1].end))
    assert [r.dir for r in tail] == [transcript.IN, transcript.OUT, transcript.SKIPPED]
    assert tail[-1].end == path.stat().st_size - len(b'{"half')
    log.close()

def test_the_pumps_turns_go_on_past_a_line_longer_than_a_read(tmp_path, monkeypatch):
    monkeypatch.setattr(pump_turns, "CHUNK", 2000)
    log, _ = written(tmp_path, (transcript.IN, {"seq": 1, "origin": "operator", "ref": "", "text": "read img"}),
                     (transcript.OUT, {"event": {"type": "system", "subtype": "init"}}),
                     (transcript.OUT, {"event": {"type": "user", "blob": "i" * 10000}}))
    log.append(transcript.OUT, ts=T0 + 9, event={"type": "result", "is_error": False})
    [turn] = turn_rules.turns(pump_turns.marks(tmp_path))
    assert turn.ended is not None and turn.ended.wall == T0 + 9
    log.close()


def test_a_line_nested_past_the_parser_or_dated_past_a_float_stops_no_reader(tmp_path):
    # Either raised out of `read` (RecursionError, OverflowError): every reader stopped at that line,
    # for good. A line too deep is stepped over as one not JSON is; a time no float holds is no time.
    path = transcript.path_in(tmp_path)
    with open(path, "wb") as fh:
        fh.write(b'{"ts":1,"dir":"out","event":{"x":' + b"[" * 5000 + b"]" * 5000 + b"}}\n")
        fh.write(b'{"ts":' + b"9" * 400 + b',"mono":' + b"9" * 400 + b',"dir":"out","event":{"type":"result"}}\n')
    log = transcript.Writer(path)
    log.append(transcript.IN, ts=T0, seq=1, text="after")
    log.close()
    records = list(transcript.read(path))
    assert [(r.dir, r.ts, r.mono, r.event.get("type")) for r in records] == [
        ("out", 0.0, None, "result"), ("in", T0, None, None)]
