"""`loom memory --json`, `loom memory show REL [--json]`, `loom memory search TERM --json` and `loom
memory edit REL`: the memory directory read (and one file edited) by path, as another host's
console asks for it over ssh. Real directories with hostile files: control characters in names
and bodies, `..`, absolute paths, symlinks out of the directory, a FIFO, a folder. What the real
commands print is read back through tui/remote_reads.py into the records a local survey makes."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from loomtui.memory import index as memory
from loomtui.tui import remote_reads


@pytest.fixture
def mem(tmp_path) -> tuple[Path, Path]:
    root = tmp_path / "mem"
    (root / "sub").mkdir(parents=True)
    (root / "tz.md").write_text("# Time\n\nThe box runs on Zürich time.\n")
    (root / "evil.md").write_bytes(b"zurich \x1b[2J\x1b]0;pwned\x07 \xff end\r\nsecond\n")
    (root / "sub" / "deep.md").write_text("deep down\n")
    (root / "orphan.md").write_text("nobody links me\n")
    (tmp_path / "secret.md").write_text("the operator's secret\n")
    os.symlink(tmp_path / "secret.md", root / "out.md")
    os.symlink(tmp_path, root / "up")
    os.mkfifo(root / "pipe.md")
    (root / "MEMORY.md").write_text(
        "# Memory\n- [Timezone](tz.md) — which clock \x1b[31mthe box\x1b[0m uses\n"
        "- [Evil](evil.md) — hostile bytes\n- [Deep](sub/deep.md) — in a folder\n"
        "- [Gone](gone.md) — never written\n- [Out](out.md) — a symlink out\nprose, not an entry\n")
    config = tmp_path / "c.toml"
    config.write_text(f'[memory]\ndir = "{root}"\n')
    return root, config


def test_the_listing_as_json_is_the_survey_field_by_field(mem, loom):
    root, config = mem
    result = loom("--config", str(config), "memory", "--json")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout  # escaped in the JSON text
    doc = json.loads(result.stdout)
    assert (doc["dir"], doc["index"], doc["replica"]) == (str(root), "MEMORY.md", None)
    local = memory.survey(root, "MEMORY.md")
    assert doc["entries"] == local.entries == 5
    rows = {r["key"]: r for r in doc["rows"]}
    assert rows["line:2"]["hook"] == "which clock \x1b[31mthe box\x1b[0m uses"  # the data kept
    assert rows["line:5"]["kinds"] == ["missing"] and rows["file:orphan.md"]["kinds"] == ["orphan"]
    assert any(p["kind"] == "unparsed" and p["line"] == 7 for p in doc["problems"])
    # Read back as another host's console reads it: the local records, the text made printable.
    listing = remote_reads.parse_memory(result.stdout)
    assert listing.replica is None
    assert [r.key for r in listing.report.rows] == [r.key for r in local.rows]
    assert listing.report.problems == local.problems and listing.report.entries == local.entries
    for got, want in zip(listing.report.rows, local.rows):
        assert got == dataclasses.replace(want, hook=memory.printable(want.hook))
    assert listing.report.rows[0].hook == "which clock \u241b[31mthe box\u241b[0m uses"
    # The text listing is as before.
    text = loom("--config", str(config), "memory")
    assert text.returncode == 0 and "tz.md  Timezone — which clock \u241b[31mthe box\u241b[0m uses" in text.stdout


def test_show_prints_one_file_inside_the_directory(mem, loom):
    root, config = mem
    shown = loom("--config", str(config), "memory", "show", "evil.md")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "zurich \u241b[2J\u241b]0;pwned\u2407 \ufffd end\u240d\nsecond\n"  # nothing raw
    doc = json.loads(loom("--config", str(config), "memory", "show", "evil.md", "--json").stdout)
    assert doc == {"path": "evil.md", "text": "zurich \x1b[2J\x1b]0;pwned\x07 \ufffd end\r\nsecond\n",
                   "clipped": False}
    text, clipped = remote_reads.parse_shown(json.dumps(doc))
    assert (text, clipped) == ("zurich \u241b[2J\u241b]0;pwned\u2407 \ufffd end\nsecond\n", False)
    deep = loom("--config", str(config), "memory", "show", "--json", "sub/./deep.md")
    assert deep.returncode == 0 and json.loads(deep.stdout)["text"] == "deep down\n"


@pytest.mark.parametrize("rel, says", [
    ("../secret.md", "is not a relative path inside the memory dir"),
    ("sub/../../secret.md", "is not a relative path inside the memory dir"),
    ("/etc/passwd", "is not a relative path inside the memory dir"),
    ("out.md", "leads outside the memory dir"),
    ("up/secret.md", "leads outside the memory dir"),
    ("pipe.md", "not a regular file"),
    ("sub", "not a regular file"),
    ("gone.md", "no such file"),
])
def test_show_refuses_whatever_is_not_a_regular_file_inside(mem, loom, rel, says):
    _, config = mem
    for json_flag in ([], ["--json"]):
        result = loom("--config", str(config), "memory", "show", *json_flag, "--", rel, timeout=30)
        assert result.returncode == 1 and result.stdout == "", (rel, result.stdout)
        assert says in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
        assert "secret" not in result.stdout and "Traceback" not in result.stderr


def test_show_cuts_a_large_file_and_says_so(mem, loom):
    root, config = mem
    (root / "big.md").write_text("é" * 70_000 + "tail\n")
    doc = json.loads(loom("--config", str(config), "memory", "show", "big.md", "--json").stdout)
    assert doc["clipped"] is True and doc["text"] == "é" * 64 * 1024
    plain = loom("--config", str(config), "memory", "show", "big.md")
    assert plain.returncode == 0 and "first 64 KiB shown" in plain.stderr and "tail" not in plain.stdout


def test_a_missing_memory_dir_is_one_line(tmp_path, loom):
    config = tmp_path / "c.toml"
    config.write_text(f'[memory]\ndir = "{tmp_path / "nope"}"\n')
    for args in (["memory", "--json"], ["memory", "show", "a.md", "--json"], ["memory", "edit", "a.md"]):
        result = loom("--config", str(config), *args)
        assert result.returncode == 1 and result.stdout == "", args
        assert str(tmp_path / "nope") in result.stderr and len(result.stderr.splitlines()) == 1, args


def test_search_as_json_is_its_hits_and_exits_1_for_none(mem, loom):
    _, config = mem
    result = loom("--config", str(config), "memory", "search", "zurich", "--json")
    assert result.returncode == 0, result.stderr
    hits = remote_reads.parse_hits(result.stdout)
    assert [(h.path, h.where) for h in hits] == [("evil.md", "line 1")]
    assert hits[0].text.startswith("zurich \u241b[2J")  # printable once read back
    dash = loom("--config", str(config), "memory", "search", "--json", "--", "-no such words")
    assert dash.returncode == 1 and json.loads(dash.stdout) == []
    # out.md is listed (the index links it) but its text is outside: never searched, as never shown.
    secret = loom("--config", str(config), "memory", "search", "secret", "--json")
    assert secret.returncode == 1 and json.loads(secret.stdout) == [], secret.stdout


def test_this_machine_s_preview_and_search_keep_to_the_directory_as_show_does(mem, tmp_path):
    """The console's own memory tab (tui/memory_source.py:LocalMemory) reads by the same rule as
    `loom memory show`: a symlink out is refused, one that stays inside is read."""
    from loomtui.errors import LoomError
    from loomtui.tui.memory_source import LocalMemory

    root, _ = mem
    os.symlink("tz.md", root / "alias.md")
    local = LocalMemory(root, "MEMORY.md")
    assert local.read("alias.md", 1000) == ("# Time\n\nThe box runs on Zürich time.\n", False)
    for rel in ("out.md", "up/secret.md"):
        with pytest.raises(LoomError, match="leads outside the memory dir"):
            local.read(rel, 1000)
    assert local.read("pipe.md", 1000) is None and local.read("gone.md", 1000) is None
    bodies = memory.read_bodies(root, ["out.md", "up/secret.md", "alias.md", "tz.md", "pipe.md"])
    assert sorted(bodies) == ["alias.md", "tz.md"]
    assert local.search("secret") == [] and sorted(h.path for h in local.search("zürich")) == ["alias.md", "tz.md"]
    # The console's `e` makes `loom memory edit`'s checks: a link out (a secret) or a pipe is never
    # handed to the editor (the preview refused them, and `e` opened them all the same).
    for rel in ("out.md", "up/secret.md", "pipe.md"):
        with pytest.raises(LoomError):
            local.edit_argv(rel, {"EDITOR": "true"})
    assert local.edit_argv("tz.md", {"EDITOR": "true"}) == ["true", str(os.path.realpath(root / "tz.md"))]


def test_this_machine_s_preview_of_a_long_non_ascii_file_says_there_is_more(tmp_path):
    from loomtui.tui.memory_source import LocalMemory

    (tmp_path / "cjk.md").write_text("記" * 30_000, encoding="utf-8")  # 90 KB, 30,000 characters
    text, more = LocalMemory(tmp_path, "MEMORY.md").read("cjk.md", 20_000)
    assert (len(text), more) == (20_000, True) and "\ufffd" not in text
    assert LocalMemory(tmp_path, "MEMORY.md").read("cjk.md", 30_000) == ("記" * 30_000, False)


def test_a_blank_editor_variable_is_passed_over_and_an_unsplittable_one_is_one_line(mem, loom, tmp_path):
    # A blank $VISUAL made the argv the memory file alone: it ran the file the agent wrote.
    root, config = mem
    path = root / "tz.md"
    assert memory.editor_argv({"VISUAL": "  ", "EDITOR": "nano -w"}, path) == ["nano", "-w", str(path)]
    assert memory.editor_argv({"VISUAL": "", "EDITOR": " "}, path) == ["vi", str(path)]
    bad = loom("--config", str(config), "memory", "edit", "tz.md", env={"VISUAL": 'vi "x'})
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().startswith("loom: memory edit: cannot tell which editor to run") and \
        len(bad.stderr.strip().splitlines()) == 1


def test_edit_runs_the_editor_on_the_file_inside_the_directory(mem, loom, tmp_path):
    root, config = mem
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\nopen(sys.argv[-1], 'a').write('edited by ' + sys.argv[1] + '\\n')\n")
    env = {"VISUAL": f"{sys.executable} {editor} visual", "EDITOR": "false"}
    result = loom("--config", str(config), "memory", "edit", "sub/deep.md", env=env)
    assert result.returncode == 0, result.stderr
    assert (root / "sub" / "deep.md").read_text() == "deep down\nedited by visual\n"
    # A broken link's file is created by the editor, inside the directory.
    assert loom("--config", str(config), "memory", "edit", "gone.md", env=env).returncode == 0
    assert (root / "gone.md").read_text() == "edited by visual\n"
    # The editor's own exit status is the command's.
    assert loom("--config", str(config), "memory", "edit", "tz.md", env={"VISUAL": "false"}).returncode == 1
    for rel in ("../secret.md", "out.md", "up/secret.md", "pipe.md", "sub", "nowhere/new.md"):
        refused = loom("--config", str(config), "memory", "edit", "--", rel, env=env, timeout=30)
        assert refused.returncode == 1 and "memory:" in refused.stderr, (rel, refused.stderr)
    assert (tmp_path / "secret.md").read_text() == "the operator's secret\n"
    missing = loom("--config", str(config), "memory", "edit", "tz.md", env={"VISUAL": str(tmp_path / "no-editor")})
    assert missing.returncode == 1 and "cannot run" in missing.stderr and len(missing.stderr.splitlines()) == 1


def test_lint_says_a_link_that_leaves_through_a_symlink_leads_outside(mem, loom):
    # `show`, the preview, search and edit all refuse such a file; lint said the entry was sound.
    root, config = mem
    with open(root / "MEMORY.md", "a") as fh:
        fh.write("- [Up](up/secret.md) — through a linked folder\n")
    report = memory.survey(root, "MEMORY.md")
    outside = {p.path: p.message for p in report.problems if p.kind == "outside"}
    assert set(outside) == {"out.md", "up/secret.md"}
    assert all("leads outside the memory directory through a symlink" in m for m in outside.values())
    lint = loom("--config", str(config), "memory", "lint")
    assert lint.returncode != 0 and "up/secret.md" in lint.stdout + lint.stderr
