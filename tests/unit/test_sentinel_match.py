"""The sentinel's buffer-wide search gives exactly the failure lines the line-by-line scan gave.

The old scan (split every chunk into lines, decode each, search each with one alternation of
the patterns, then the anti-patterns) is kept here as the oracle. The new one searches the
buffer for the patterns' needles (with bytes.find, or hyperscan where installed) and judges
only the lines holding one.
"""

from __future__ import annotations

import re
import string
import sys
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loomtui.sentinel import literal_search, logscan
from loomtui.sentinel.logscan import MAX_LINE, Carry, Needle

# -- the oracle: the line-by-line scan as it was --------------------------------------------


def old_failures(patterns: list[str], anti: list[str], data: bytes, cuts: list[int], start_carry: Carry):
    yes = re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None
    no = re.compile("|".join(f"(?:{p})" for p in anti)) if anti else None

    def failure(raw: bytes) -> bool:
        if logscan._is_run_mark(raw):
            return False
        text = raw[:MAX_LINE].decode("utf-8", "replace").rstrip("\r")
        if yes is None or not yes.search(text):
            return False
        return no is None or not no.search(text)

    out, count, carry = [], 0, start_carry
    bounds = [0, *sorted(set(cuts)), len(data)]
    for lo, hi in zip(bounds, bounds[1:]):
        if hi <= lo:
            continue
        lines, carry = logscan.split(carry, data[lo:hi], lo)
        count += len(lines)
        out += [line for line in lines if failure(line.raw)]
    return out, count, carry


def new_failures(matcher: logscan.Matcher, data: bytes, cuts: list[int], start_carry: Carry):
    out, count, carry = [], 0, start_carry
    bounds = [0, *sorted(set(cuts)), len(data)]
    for lo, hi in zip(bounds, bounds[1:]):
        if hi <= lo:
            continue
        lines, n, carry = logscan.scan(carry, data[lo:hi], lo, matcher)
        count += n
        out += lines
    return out, count, carry


# -- random logs and random patterns ----------------------------------------------------------

WORDS = ["ERROR", "error", "Error", "ERRNO", "FATAL", "fatal", "Traceback", "traceback", "KILL", "kill", "\u017f", "\u212a", "\u0130",
         "expected", "retry", "ok", "é", "É", "日本", "x", "a", "ab", "12", "0x1f", " ", "  ", "\t", "-", ":", "[loom run-job]",
         "2026-01-01T00:00:00", "\r", "\r\r"]
BAD_BYTES = [b"\xff", b"\xe2\x82", b"\xc3", b"\xed\xa0\x80", b"\xef\xbf\xbd"]


@st.composite
def log_lines(draw) -> bytes:
    parts = draw(st.lists(st.one_of(st.sampled_from(WORDS).map(str.encode), st.sampled_from(BAD_BYTES)), max_size=12))
    line = b"".join(parts)
    if draw(st.integers(0, 30)) == 0:  # now and then a line longer than what is kept of it
        line = b"y" * draw(st.integers(MAX_LINE - 8, MAX_LINE + 8)) + line
    return line


@st.composite
def logs(draw) -> bytes:
    lines = draw(st.lists(log_lines(), max_size=25))
    ends = draw(st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=len(lines), max_size=len(lines)))
    data = b"".join(line + end for line, end in zip(lines, ends))
    if draw(st.booleans()):
        data += draw(log_lines())  # a partial last line, left in the carry
    return data


ATOMS = ["ERROR", "error", "FATAL", "Traceback", "kill", "K", "s", "é", "日", "ab", "x", "12", " ", ":", "-",
         r"\d+", r"\w+", r"\s", ".", "[Ee]", "[a-z]", "[^x]", r"\bERROR\b", r"\Berror", "(?:ok)?", "x*",
         "(?=ERROR)", "(?!kill)", "(?<=a)b", "^", "$", r"\Z", r"\A", "\r", r"\r$", "(?>ab)", "x*+", "(a)?b",
         "[É]", "\ufffd"]


def patterns_strategy():
    atom = st.sampled_from(ATOMS)

    def extend(inner):
        return st.one_of(
            st.lists(inner, min_size=1, max_size=4).map("".join),
            st.lists(inner, min_size=2, max_size=3).map(lambda alts: "(?:" + "|".join(alts) + ")"),
            inner.map(lambda p: f"(?i:{p})"),
            inner.map(lambda p: f"(?:{p})?"),
            inner.map(lambda p: f"(?:{p}){{1,2}}"),
            inner.map(lambda p: f"(?:{p})+?"),
        )

    anything = st.recursive(atom, extend, max_leaves=6)
    # Most real patterns are a word with a little around it: those have needles, and then the
    # buffer search (not the line-by-line fallback) is what decides.
    word = st.sampled_from(["ERROR", "error", "FATAL", "Traceback", "kill", "ab", "é", "12", "[Ee]rror", "ERR(?:OR|NO)"])
    word = st.one_of(word, word.map(lambda w: f"(?i:{w})"))
    around = st.one_of(st.just(""), atom)
    usual = st.tuples(around, word, around).map("".join)
    return st.one_of(usual, usual, anything)


def compiles(p: str) -> bool:
    try:
        re.compile(p)
        return True
    except re.error:
        return False


# At most one repetition that is not `?`: two (`(?:\w+)+?`, `(?:\w+){1,2}`, `\d+x*`) can make
# Python's re take minutes on a 4 KB line (catastrophic backtracking). The old scan and the new
# would agree, slowly: what is tested is which lines are judged, not how re backtracks.
REPEATS = re.compile(r"(?<!\\)(?:[*+]|\{1,2\})")


def tame(p: str) -> bool:
    return len(REPEATS.findall(p)) <= 1


PATTERN = patterns_strategy().filter(compiles).filter(tame)
FINDERS = {"bytes.find": None, "hyperscan": literal_search.finder}


@pytest.mark.parametrize("finder", FINDERS)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=logs(), patterns=st.lists(PATTERN, min_size=1, max_size=3), anti=st.lists(PATTERN, max_size=2),
       cuts=st.lists(st.integers(0, 2000), max_size=6), carry=st.sampled_from([Carry(), Carry(discard=True),
                                                                              Carry(b"ERR", 3), Carry(b"y" * 90, 9000)]))
def test_buffer_search_finds_exactly_the_lines_the_line_by_line_scan_found(finder, data, patterns, anti, cuts, carry):
    if finder == "hyperscan" and not literal_search.available():
        pytest.skip("hyperscan is not installed")
    cuts = [c for c in cuts if c <= len(data)]
    matcher = logscan.Matcher(patterns, anti, FINDERS[finder])
    assert new_failures(matcher, data, cuts, carry) == old_failures(patterns, anti, data, cuts, carry)


@settings(max_examples=500, deadline=None)
@given(pattern=PATTERN, text=st.lists(st.sampled_from(WORDS), max_size=10).map("".join))
def test_every_match_holds_one_of_the_needles(pattern, text):
    needles = logscan.pattern_needles(pattern)
    if needles is None or not re.search(pattern, text):
        return
    raw = text.encode("utf-8")
    assert any(n.text in (raw.lower() if n.caseless else raw) for n in needles), (pattern, text, needles)


# -- the cases by name ---------------------------------------------------------------------------


@pytest.mark.parametrize("pattern, needles", [
    (r"\bERROR\b", {Needle(b"ERROR")}),
    ("Traceback", {Needle(b"Traceback")}),
    ("^FAIL", {Needle(b"FAIL")}),
    ("(?i)fatal", {Needle(b"fatal", True)}),
    ("(?i)traceback", {Needle(b"tracebac", True)}),  # k also matches KELVIN SIGN
    ("(?i:Fatal)|PANIC", {Needle(b"fatal", True), Needle(b"PANIC")}),
    (r"\d+ failed", {Needle(b" failed")}),
    ("a|b", {Needle(b"a"), Needle(b"b")}),
    ("x{0,3}yz", {Needle(b"yz")}),
    ("é", {Needle("é".encode())}),
    ("[Ee]rror", {Needle(b"rror")}),
    (r"\w+", None),
    ("(?i)sk", None),
    ("x?", None),
    ("(?:ERROR)?", None),
    ("a|\\d", None),
])
def test_needles_are_the_literals_every_match_holds(pattern, needles):
    found = logscan.pattern_needles(pattern)
    assert (None if found is None else set(found)) == needles


# -- the private parser logscan reads (allowed in tests/unit/test_sealed_core.py for this) -------------


def test_the_private_regex_parser_keeps_its_shape():
    """logscan reads needles from `re._parser`'s tree, private to Python and free to change in any
    release. An opcode logscan does not know only ends a run of literals (sound: no needle from it),
    but a known one whose arguments change shape would make the needles wrong or raise: so every name
    and every shape logscan relies on is pinned here, and this fails first when Python moves them."""
    import re._constants as c
    import re._parser as p

    for name in ("LITERAL", "SUBPATTERN", "MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT", "ATOMIC_GROUP",
                 "IN", "BRANCH", "SRE_FLAG_IGNORECASE"):
        assert hasattr(c, name), f"re._constants.{name} is gone: logscan's needles need another parser"

    def tree(pattern):
        return [(op, av) for op, av in p.parse(pattern)]

    assert tree("ab") == [(c.LITERAL, ord("a")), (c.LITERAL, ord("b"))] and tree("ab")[0][0] is c.LITERAL
    (op, (group, add, drop, sub)), = tree("(?i:x)")
    assert op is c.SUBPATTERN and (group, add, drop) == (None, c.SRE_FLAG_IGNORECASE, 0)
    assert [(o, v) for o, v in sub] == [(c.LITERAL, ord("x"))]
    (op, (group, add, drop, _sub)), = tree("(?-i:x)")
    assert op is c.SUBPATTERN and (add, drop) == (0, c.SRE_FLAG_IGNORECASE)
    assert tree("(a)")[0][1][0] == 1  # a capturing group's number, then the flags
    for pattern, repeat in (("a{2,3}", c.MAX_REPEAT), ("a*?", c.MIN_REPEAT), ("a*+", c.POSSESSIVE_REPEAT)):
        (op, (least, _most, sub)), = tree(pattern)
        assert op is repeat and least == (2 if "{" in pattern else 0) and list(sub) == [(c.LITERAL, ord("a"))]
    (op, sub), = tree("(?>ab)")
    assert op is c.ATOMIC_GROUP and list(sub) == [(c.LITERAL, ord("a")), (c.LITERAL, ord("b"))]
    for pattern in ("[ab]", "a|b"):
        (op, items), = tree(pattern)
        assert op is c.IN and list(items) == [(c.LITERAL, ord("a")), (c.LITERAL, ord("b"))]
    (op, (_none, alternatives)), = tree("ab|cd")
    assert op is c.BRANCH and [list(alt) for alt in alternatives] == [
        [(c.LITERAL, ord("a")), (c.LITERAL, ord("b"))], [(c.LITERAL, ord("c")), (c.LITERAL, ord("d"))]]
    assert p.parse("(?i)x").state.flags & c.SRE_FLAG_IGNORECASE and not p.parse("x").state.flags & c.SRE_FLAG_IGNORECASE


def test_a_parse_tree_of_another_shape_gives_no_needle_so_every_line_is_judged(monkeypatch):
    """A Python whose private tree holds, say, a SUBPATTERN of three items: no wrong needle, no crash."""
    import re._constants as c
    import re._parser as p

    real = p.parse

    def reshaped(pattern, flags=0):
        tree = real(pattern, flags)
        tree.data = [(op, av[:3]) if op is c.SUBPATTERN else (op, av) for op, av in tree.data]
        return tree

    # logscan's view of the parser only: `re.compile` keeps the real one.
    monkeypatch.setattr(logscan, "_parser", types.SimpleNamespace(parse=reshaped))
    assert logscan.pattern_needles("(?i:fatal)") is None and logscan.pattern_needles("PANIC") == {Needle(b"PANIC")}
    m = logscan.Matcher(["(Traceback)"], [])
    lines, count, _carry = logscan.scan(Carry(), b"ok\nTraceback (most recent call last):\n", 0, m)
    assert m.needles is None and [line.raw for line in lines] == [b"Traceback (most recent call last):"] and count == 2


def test_the_caseless_needles_use_only_letters_that_match_ascii_alone():
    everything = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000)
    for ch in string.printable:
        partners = set(re.findall("(?i)" + re.escape(ch), everything))
        ascii_only = partners <= {ch.lower(), ch.upper()}
        assert (ch.lower() in logscan._CASE_SAFE) == (ascii_only and ch not in "\n\r\t\x0b\x0c"), ch


def test_global_flags_and_backreferences_mean_what_they_say_in_any_pattern():
    # One alternation of all patterns would reject (?i) after the first and renumber \1.
    m = logscan.Matcher(["Traceback", "(?i)fatal", r"(\w+) \1"], [])
    data = b"all FATAL here\nsame same\nfine\n"
    lines, count, carry = logscan.scan(Carry(), data, 0, m)
    assert [line.raw for line in lines] == [b"all FATAL here", b"same same"] and count == 3 and carry == Carry()


def test_a_needle_past_the_kept_part_of_a_long_line_is_no_failure():
    m = logscan.Matcher([r"\bERROR\b"], [])
    data = b"x" * MAX_LINE + b" ERROR\n" + b"ERROR " + b"x" * MAX_LINE + b"\n"
    lines, count, _ = logscan.scan(Carry(), data, 10, m)
    assert count == 2 and len(lines) == 1
    assert lines[0].offset == 10 + MAX_LINE + 7 and lines[0].cut and lines[0].raw == b"ERROR " + b"x" * (MAX_LINE - 6)


def test_crlf_lines_anchor_at_their_end_and_anti_patterns_apply_to_matched_lines_only():
    m = logscan.Matcher(["^FAIL$", "ERROR"], ["expected"])
    data = b"FAIL\r\nFAIL later\r\nERROR expected\r\nERROR real\r\n"
    lines, _, _ = logscan.scan(Carry(), data, 0, m)
    assert [line.raw for line in lines] == [b"FAIL\r", b"ERROR real\r"]


def test_without_a_needle_every_line_is_judged():
    m = logscan.Matcher([r"\d+ rows? lost"], [])
    assert m.needles is not None
    m = logscan.Matcher([r"\w+ died"], [])
    lines, count, _ = logscan.scan(Carry(), b"one\nworker died\n", 0, m)
    assert m.needles is not None and [line.raw for line in lines] == [b"worker died"] and count == 2
    m = logscan.Matcher([r"[A-Z]{5}"], [])
    assert m.needles is None
    lines, count, _ = logscan.scan(Carry(), b"one\nBOOM! ERROR\n", 0, m)
    assert [line.raw for line in lines] == [b"BOOM! ERROR"] and count == 2


@pytest.mark.skipif(not literal_search.available(), reason="hyperscan is not installed")
def test_hyperscan_finds_needles_as_bytes_and_ascii_caseless_only():
    find = literal_search.finder(frozenset({Needle(b"error", True), Needle(b"FATAL"), Needle("é".encode())}))
    buf = "x ERROR\nfatal\nFATAL\nÉ é\nErRoR\n".encode()
    assert sorted(find(buf, 0, len(buf))) == [2, 14, 23, 26]
    assert sorted(find(buf, 3, len(buf))) == [14, 23, 26]  # a needle not wholly inside lo..hi is not reported
