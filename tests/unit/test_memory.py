"""The memory store: parsing, lint on a large planted directory, search, and read-only access."""

from __future__ import annotations

import os
import random
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, loom_env

from loomtui.config import parse_config
from loomtui.memory import index as memory

# -- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, expected",
    [
        ("- [Title](file.md) — hook", ("Title", "file.md", "hook")),
        ("* [A \\] b](<my file.md>) - h", ("A ] b", "my file.md", "h")),
        ("1. [T](x%20y.md): hook", ("T", "x%20y.md", "hook")),
        ("- **[B](b.md)** — bold", ("B", "b.md", "bold")),
        ('- [D](d.md "a title") — h', ("D", "d.md", "h")),
        ("- [Nested [x]](sub/ñ.md)", ("Nested [x]", "sub/ñ.md", "")),
        ("[C](c (1).md) hook", ("C", "c (1).md", "hook")),
        ("- [Ünïcödé 日本](日本語.md) — 説明\r", ("Ünïcödé 日本", "日本語.md", "説明")),
    ],
)
def test_entry_lines_parse(line, expected):
    assert memory.parse_line(line) == expected


@pytest.mark.parametrize("line", ["", "   ", "# Memory", "## Topics", "<!-- note -->"])
def test_structure_lines_are_neither_entries_nor_problems(line):
    assert memory.parse_line(line) is None


@pytest.mark.parametrize(
    "line", ["prose", "- [ ] todo", "- [x](http://example.com)", "- [F]()", "- [unclosed(x.md)", "- [](a.md)",
             "- [t](#anchor)", "- [a](b.md"],
)
def test_other_lines_are_kept_with_a_reason(line):
    reason = memory.parse_line(line)
    assert isinstance(reason, str) and reason
    index = memory.parse_index(f"# M\n{line}\n- [ok](ok.md)\n")
    assert [u.raw for u in index.unparsed] == [line]
    assert index.lines[1] == line  # kept verbatim, in place


def test_targets_never_leave_the_directory():
    assert memory.candidates("../x.md") == []
    assert memory.candidates("/etc/passwd") == []
    assert memory.candidates("a/../../x.md") == []
    assert memory.candidates("./a/../b.md") == ["b.md"]
    assert memory.candidates("x%20y.md#p") == ["x%20y.md#p", "x y.md#p", "x%20y.md", "x y.md"]


def test_index_line_round_trips_through_the_parser():
    for title, target in [("a [b] \\c", "my file.md"), ("Zürich", "zürich.md"), ("(p)", "sub/p (2).md")]:
        assert memory.parse_line(memory.index_line(title, target, "hook")) == (title, target, "hook")


def test_printable_makes_controls_visible():
    assert memory.printable("a\x1b[31mb\x07") == "a\u241b[31mb\u2407"
    assert memory.printable("x\u202ey\ud800") == "x\ufffdy\ufffd"
    assert memory.printable("l1\n\tl2", keep_newlines=True) == "l1\n\tl2"
    assert memory.printable("[bold]ok[/bold]") == "[bold]ok[/bold]"


def test_slug():
    assert memory.slug("Zürich — Notes! 2024") == "zürich-notes-2024"
    assert memory.slug("!!!") == "entry"
    assert len(memory.slug("日" * 200).encode()) <= 100


def test_memory_index_path_fills_the_launch_placeholder(tmp_path):
    config = parse_config({"memory": {"dir": str(tmp_path), "index": "IDX.md"}}, "c.toml", None)
    assert memory.memory_index_path(config) == tmp_path / "IDX.md"
    default = parse_config({}, "c.toml", None)
    assert memory.memory_index_path(default) == Path("~/.claude/memory/MEMORY.md").expanduser()


# -- lint over a large directory with planted problems -------------------------------------------

ALPHABETS = ["abc", "äöüß", "日本語", "ñç", "Ελληνικά", "кириллица", "😀🎉", "עברית"]


def build(root: Path, n: int = 5000, seed: int = 7) -> set[tuple[str, int | None, str | None]]:
    """A memory dir of `n` files and its index, with problems planted; returns exactly those problems."""
    rng = random.Random(seed)
    root.mkdir(parents=True)
    (root / "topics").mkdir()
    (root / "deep" / "er").mkdir(parents=True)
    names = []
    for i in range(n):
        word = "".join(rng.choice(ALPHABETS[i % len(ALPHABETS)]) for _ in range(5))
        folder = ["", "topics/", "deep/er/"][i % 10 if i % 10 < 3 else 0]
        names.append(f"{folder}{word} {i:05d}.md" if i % 3 else f"{folder}{word}-{i:05d}.md")
    for i, name in enumerate(names):
        (root / name).write_text(f"# fact {i}\n\nbody of fact {i} {name}\n", encoding="utf-8")
    expected: set[tuple[str, int | None, str | None]] = set()
    lines = ["# Memory", ""]

    def add(line: str) -> int:
        lines.append(line)
        return len(lines)

    orphans = set(rng.sample([k for k, nm in enumerate(names) if "/" not in nm], 40))
    empties = set(rng.sample([k for k in range(n) if k not in orphans], 30))
    for k in empties:
        (root / names[k]).write_bytes(b"" if k % 2 else b"  \n\t\n")
    for i, name in enumerate(names):
        if i in orphans:
            if i in empties:
                expected.add((memory.EMPTY, None, name))
            expected.add((memory.ORPHAN, None, name))
            continue
        line = add(memory.index_line(f"Fact {i} {name[:-3]}", name, f"hook {i}"))
        if i in empties:
            expected.add((memory.EMPTY, line, name))
        if i % 500 == 0:
            expected.add((memory.DUP_FILE, add(memory.index_line(f"Again {i}", name, "dup")), name))
        if i % 700 == 1:
            expected.add((memory.DUP_TITLE, add(memory.index_line(f"fact {i}  {name[:-3]}".upper(), f"dt{i}.md", "x")),
                          f"dt{i}.md"))
            (root / f"dt{i}.md").write_text("x")
    for j in range(25):
        broken = f"gone {j} ☃.md" if j % 2 else f"topics/missing-{j}.md"
        expected.add((memory.MISSING, add(memory.index_line(f"Broken {j}", broken, "x")), broken))
    for j in range(5):
        expected.add((memory.OUTSIDE, add(f"- [Outside {j}](../../etc/x{j}.md) — nope"), None))
    for j in range(7):
        expected.add((memory.UNPARSED, add(f"stray prose {j} [with [brackets"), None))
    for j in range(6):
        line = add(memory.index_line(f"Long {j}", f"long{j}.md", "h" * (memory.LINE_LIMIT + j)))
        (root / f"long{j}.md").write_text("long\n")
        expected.add((memory.LONG_LINE, line, None))
    # Exactly at the limit is fine; one past it is not (planted above).
    (root / "edge.md").write_text("edge\n")
    base = memory.index_line("Edge", "edge.md", "")
    add(base + "e" * (memory.LINE_LIMIT - len(base)))
    # Noise that must not be reported: hidden files, non-markdown files, unlinked files in subfolders.
    (root / ".hidden.md").write_text("")
    (root / "notes.txt").write_text("")
    (root / "topics" / "unlinked.md").write_text("")
    (root / "MEMORY.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return expected


def found(report: memory.Report) -> set[tuple[str, int | None, str | None]]:
    out = set()
    for p in report.problems:
        path = p.path if p.kind in (memory.EMPTY, memory.ORPHAN, memory.MISSING, memory.DUP_FILE, memory.DUP_TITLE) else None
        out.add((p.kind, p.line, path))
    return out


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> tuple[Path, set]:
    root = tmp_path_factory.mktemp("big") / "memory"
    return root, build(root)


def test_lint_finds_exactly_the_planted_problems(big):
    root, expected = big
    report = memory.survey(root, "MEMORY.md")
    assert len(report.problems) == len(expected)  # nothing reported twice
    assert found(report) == expected
    assert report.entries > 4900


def test_lint_cli_on_the_big_directory(big, loom, tmp_path):
    root, expected = big
    config = tmp_path / "c.toml"
    config.write_text(f'[memory]\ndir = "{root}"\n')
    result = loom("--config", str(config), "memory", "lint", timeout=120)
    assert result.returncode == 1, result.stderr
    out = result.stdout.splitlines()
    assert len(out) == len(expected)
    for kind, line, path in expected:
        where = f"MEMORY.md:{line}: {kind}:" if line is not None else f"{path}: {kind}:"
        assert any(o.startswith(where) for o in out), (kind, line, path)


def test_a_clean_directory_lints_clean(tmp_path, loom):
    mem = tmp_path / "m"
    (mem / "sub").mkdir(parents=True)
    (mem / "a.md").write_text("a\n")
    (mem / "sub" / "b ü.md").write_text("b\n")
    (mem / "MEMORY.md").write_text("# Memory\n\n- [A](a.md) — first\n- [B](<sub/b ü.md>) — second\n")
    config = tmp_path / "c.toml"
    config.write_text(f'[memory]\ndir = "{mem}"\n')
    result = loom("--config", str(config), "memory", "lint")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: 2 entries, 2 files" in result.stdout


def test_missing_dir_and_missing_index(tmp_path, loom):
    config = tmp_path / "c.toml"
    config.write_text(f'[memory]\ndir = "{tmp_path / "nope"}"\n')
    result = loom("--config", str(config), "memory")
    assert result.returncode == 1
    assert str(tmp_path / "nope") in result.stderr
    (tmp_path / "nope").mkdir()
    (tmp_path / "nope" / "x.md").write_text("x")
    result = loom("--config", str(config), "memory", "lint")
    assert result.returncode == 1
    assert "MEMORY.md: no-index:" in result.stdout and "x.md: orphan:" in result.stdout


# -- search and listing -------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path) -> tuple[Path, Path]:
    mem = tmp_path / "mem"
    mem.mkdir()
    (mem / "tz.md").write_text("# Time\n\nThe server runs in Europe/ZÜRICH time.\nnothing else\n")
    (mem / "deploy.md").write_text("Deploy with make ship.\n")
    (mem / "orphan.md").write_text("an orphaned zürich note\n")
    (mem / "evil.md").write_bytes(b"zurich \x1b[2J\x1b]0;pwned\x07 \xff\xfe end\n")
    (mem / "MEMORY.md").write_text(
        "# Memory\n- [Timezone](tz.md) — which clock the box uses\n- [Deploy](deploy.md) — Zürich release steps\n"
        "- [Evil](evil.md) — \x1b[31mred\x1b[0m\n"
    )
    config = tmp_path / "c.toml"
    config.write_text(f'[memory]\ndir = "{mem}"\n')
    return mem, config


def test_search_is_case_insensitive_over_titles_hooks_and_bodies(small, loom):
    _, config = small
    result = loom("--config", str(config), "memory", "search", "zürich")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "tz.md: line 3: The server runs in Europe/ZÜRICH time.",
        "deploy.md: hook: Zürich release steps",
        "orphan.md: line 1: an orphaned zürich note",
    ]
    assert loom("--config", str(config), "memory", "search", "TIMEZONE").stdout.startswith("tz.md: title: Timezone")
    none = loom("--config", str(config), "memory", "search", "no such words anywhere")
    assert none.returncode == 1 and none.stdout == ""


def test_terminal_output_carries_no_control_characters(small, loom):
    _, config = small
    for args in (["memory"], ["memory", "search", "zurich"], ["memory", "search", "red"], ["memory", "lint"]):
        result = loom("--config", str(config), *args)
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout, args
    listing = loom("--config", str(config), "memory").stdout
    assert "evil.md  Evil — \u241b[31mred\u241b[0m" in listing
    body = loom("--config", str(config), "memory", "search", "zurich").stdout
    assert "\u241b[2J\u241b]0;pwned\u2407 \ufffd\ufffd end" in body


# -- read-only --------------------------------------------------------------------------------


def _noatime_read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOATIME", 0))
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _noatime_names(path: Path) -> list[str]:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOATIME", 0))
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def snapshot(root: Path, atimes: bool = True) -> dict[str, tuple]:
    """Names, bytes, mtimes, ctimes (and atimes) of everything under root, read without touching atimes."""
    out = {}
    todo = [Path(".")]
    while todo:
        rel = todo.pop()
        st = os.lstat(root / rel)
        times = (st.st_mtime_ns, st.st_ctime_ns) + ((st.st_atime_ns,) if atimes else ())
        out[str(rel)] = times + (st.st_mode, st.st_size)
        if stat.S_ISDIR(st.st_mode):
            todo += [rel / name for name in _noatime_names(root / rel)]
        elif stat.S_ISREG(st.st_mode):
            out[str(rel)] += (_noatime_read(root / rel),)
    return out


def make_atimes_stale(root: Path) -> None:
    # relatime only skips the atime update when atime > mtime; set them equal so any plain read shows.
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames, "."]:
            p = Path(dirpath) / name
            st = os.stat(p)
            os.utime(p, ns=(st.st_mtime_ns - 10**9, st.st_mtime_ns))


def test_reading_searching_and_linting_modify_nothing(small, loom, tmp_path):
    mem, config = small
    (mem / "sub").mkdir()
    (mem / "sub" / "deep.md").write_text("deep\n")
    (mem / "fifo.md").unlink(missing_ok=True)
    os.mkfifo(mem / "fifo.md")  # must neither hang a reader nor be "read"
    with (mem / "MEMORY.md").open("a") as f:
        f.write("- [Deep](sub/deep.md) — in a folder\n- [Fifo](fifo.md) — a pipe\nprose\n")
    make_atimes_stale(mem)
    before = snapshot(mem)
    # lint exits 1 for orphan.md, which the index does not list; the others find what they look for.
    expected = {("memory",): 0, ("memory", "search", "zürich"): 0, ("memory", "search", "deep"): 0,
                ("memory", "lint"): 1}
    for args, code in expected.items():
        result = loom("--config", str(config), *args, timeout=30)
        assert result.returncode == code and "Traceback" not in result.stderr, (args, result.stderr)
    report = memory.survey(mem, "MEMORY.md")
    memory.read_bodies(mem, [r.path for r in report.rows if r.path])
    for r in report.rows:
        if r.path:
            memory.read_text(mem, r.path)
    assert snapshot(mem) == before


def test_lines_that_are_not_entries_are_searchable_and_listed(small, loom):
    mem, config = small
    with (mem / "MEMORY.md").open("a") as f:
        f.write("remember: the zürich prose line\n")
    result = loom("--config", str(config), "memory", "search", "prose line")
    assert result.stdout == "MEMORY.md:5: not an entry: remember: the zürich prose line\n"
    listing = loom("--config", str(config), "memory")
    assert "MEMORY.md:5: not an entry: remember: the zürich prose line" in listing.stdout


def test_an_index_that_is_a_directory_is_one_clear_line(small, loom):
    mem, config = small
    (mem / "MEMORY.md").unlink()
    (mem / "MEMORY.md").mkdir()
    result = loom("--config", str(config), "memory", "add", "X", "--hook", "y")
    assert result.returncode == 1 and "memory" in result.stderr and "Traceback" not in result.stderr


def test_an_unreadable_index_is_one_clear_line(small, state_dir):
    mem, config = small
    os.chmod(mem / "MEMORY.md", 0)
    command = [sys.executable, "-m", "loomtui", "--state-dir", str(state_dir), "--config", str(config),
               "memory", "lint"]
    if os.geteuid() == 0:
        # root reads through permission bits; drop the capabilities that let it (as CI runs).
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, env=loom_env(), cwd=REPO, timeout=60)
    assert result.returncode == 1
    assert str(mem / "MEMORY.md") in result.stderr and "Permission denied" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
