import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomtui.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    "text,seconds",
    [("30s", 30), ("3m", 180), ("1h", 3600), ("1h30m", 5400), ("250ms", 0.25), ("2d", 172800), (" 5M ", 300),
     ("1.5s", 1.5), ("0s", 0)],
)
def test_parse(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "abc", "3 m", "m3", "-1s", "1x", "1h-3m", "s"])
def test_parse_rejects(text):
    with pytest.raises(ValueError, match="30s, 3m, 1h"):
        parse_duration(text)


@given(st.integers(min_value=1, max_value=10**7))
def test_format_round_trips_whole_units(seconds):
    text = format_duration(seconds)
    # The short form drops seconds once past an hour and minutes once past a day; it never adds time.
    loss = seconds - parse_duration(text)
    bound = 3600 if seconds >= 86400 else 60 if seconds >= 3600 else 1
    assert 0 <= loss < bound


@pytest.mark.parametrize("text", ["9" * 400 + "s", "4000000000s", "36501d"])
def test_a_duration_past_a_century_is_refused_never_infinite(text):
    # A 400-digit number read as inf: `loom jobs` crashed formatting it, `--json` printed Infinity.
    with pytest.raises(ValueError, match="longer than 100 years") as raised:
        parse_duration(text)
    assert len(str(raised.value)) < 120
    assert parse_duration("36500d") == 36500 * 86400.0


def test_what_is_no_span_of_time_is_shown_never_raised():
    assert [format_duration(x) for x in (float("inf"), float("-inf"), float("nan"))] == ["?", "?", "?"]
