"""`loom memory add`: never overwrites, and concurrent adders never lose or tear an index line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, loom_env, run_loom

from loomtui.memory import index as memory


@pytest.fixture
def mem(tmp_path) -> tuple[Path, Path]:
    root = tmp_path / "mem"
    config = tmp_path / "c.toml"
    config.write_text(f'[memory]\ndir = "{root}"\n')
    return root, config


def entries(root: Path) -> list[memory.Entry]:
    return list(memory.parse_index((root / "MEMORY.md").read_text()).entries)


def test_add_creates_the_file_and_its_index_line(mem, loom):
    root, config = mem
    result = loom("--config", str(config), "memory", "add", "Zürich office", "--hook", "where the team sits")
    assert result.returncode == 0, result.stderr
    assert (root / "zürich-office.md").read_text() == "# Zürich office\n\nwhere the team sits\n"
    assert (root / "MEMORY.md").read_text() == "- [Zürich office](zürich-office.md) — where the team sits\n"
    result = loom("--config", str(config), "memory", "add", "Deploy [prod]", "--hook", "h", "--file", "topics/dep loy",
                  "--body", "make ship\n")
    assert result.returncode == 0, result.stderr
    assert (root / "topics" / "dep loy.md").read_text() == "make ship\n"
    assert [(e.title, e.target) for e in entries(root)][1] == ("Deploy [prod]", "topics/dep loy.md")
    assert loom("--config", str(config), "memory", "lint").returncode == 0
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]


def test_add_refuses_to_overwrite_a_file(mem, loom):
    root, config = mem
    root.mkdir()
    (root / "notes.md").write_text("precious\n")
    result = loom("--config", str(config), "memory", "add", "Notes", "--hook", "h")
    assert result.returncode != 0
    assert str(root / "notes.md") in result.stderr and "not overwriting" in result.stderr
    assert (root / "notes.md").read_text() == "precious\n"
    assert not (root / "MEMORY.md").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["Dup", "--hook", "again"], "already in"),
        (["DUP ", "--hook", "again"], "already in"),
        (["Other", "--hook", "x", "--file", "dup.md"], "already linked"),
        (["Other", "--hook", "x", "--file", "../escape"], "relative path"),
        (["Other", "--hook", "x", "--file", "MEMORY"], "not a usable file name"),
        (["Other", "--hook", "line\nbreak"], "control characters"),
        (["Other", "--hook", "x" * 300], "limit 200"),
        (["  ", "--hook", "x"], "title is empty"),
        # Names its own index reader would not read back as the file (a scheme, a fragment, an escape):
        # the line pointed nowhere and the file was an orphan.
        (["Other", "--hook", "x", "--file", "todo:x.md"], "would not read back as that file"),
        (["Other", "--hook", "x", "--file", "#b.md"], "would not read back as that file"),
        (["Other", "--hook", "x", "--file", "c\\_d.md"], "would not read back as that file"),
    ],
)
def test_add_refuses_what_would_break_the_index(mem, loom, args, message):
    root, config = mem
    assert loom("--config", str(config), "memory", "add", "Dup", "--hook", "first").returncode == 0
    before = (root / "MEMORY.md").read_bytes()
    files = sorted(p.name for p in root.iterdir())
    result = loom("--config", str(config), "memory", "add", *args)
    assert result.returncode == 1, result.stdout
    assert message in result.stderr
    assert (root / "MEMORY.md").read_bytes() == before
    assert sorted(p.name for p in root.iterdir()) == files


def test_add_keeps_the_existing_index_bytes_and_mode(mem, loom):
    root, config = mem
    root.mkdir()
    odd = b"# Memory\r\n\r\nnot utf-8 \xff\xfe here\r\n- [Old](old.md) \xe2\x80\x94 kept"
    (root / "MEMORY.md").write_bytes(odd)
    os.chmod(root / "MEMORY.md", 0o640)
    assert loom("--config", str(config), "memory", "add", "New", "--hook", "h").returncode == 0
    data = (root / "MEMORY.md").read_bytes()
    assert data == odd + b"\r\n- [New](new.md) \xe2\x80\x94 h\r\n"
    assert os.stat(root / "MEMORY.md").st_mode & 0o777 == 0o640
    assert os.stat(root / "new.md").st_mode & 0o777 == 0o600  # a file Loom creates is the operator's alone


def test_add_creates_a_private_dir_file_and_index(mem, loom):
    root, config = mem
    old = os.umask(0o022)
    try:
        assert loom("--config", str(config), "memory", "add", "First", "--hook", "h").returncode == 0
    finally:
        os.umask(old)
    assert os.stat(root).st_mode & 0o777 == 0o700
    assert os.stat(root / "first.md").st_mode & 0o777 == 0o600
    assert os.stat(root / "MEMORY.md").st_mode & 0o777 == 0o600


def test_add_follows_a_symlinked_index_that_stays_inside(mem, loom, tmp_path):
    root, config = mem
    (root / "notes").mkdir(parents=True)
    real = root / "notes" / "index.md"
    real.write_text("- [A](a.md) — a\n")
    (root / "MEMORY.md").symlink_to(real)
    assert loom("--config", str(config), "memory", "add", "B", "--hook", "b").returncode == 0
    assert (root / "MEMORY.md").is_symlink()
    assert real.read_text() == "- [A](a.md) — a\n- [B](b.md) — b\n"


def test_an_index_linked_out_of_the_memory_dir_is_neither_read_nor_written(mem, loom, tmp_path):
    """The agent writes the memory dir: `MEMORY.md -> ../secret` put the secret on the console as
    the index, and `memory add` appended a line to it, where `show` refuses such a link."""
    root, config = mem
    root.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("the operator's secret\n")
    (root / "MEMORY.md").symlink_to(Path("..") / "secret")
    added = loom("--config", str(config), "memory", "add", "B", "--hook", "b")
    assert added.returncode != 0 and "leads outside the memory dir" in added.stderr
    assert secret.read_text() == "the operator's secret\n" and not (root / "b.md").exists()
    assert not (tmp_path / ".secret.lock").exists()
    listing = memory.load(root, "MEMORY.md")
    assert listing.index_text is None
    [problem] = [p for p in memory.analyze(listing).problems if p.path == "MEMORY.md"]
    assert problem.kind == "outside" and "leads outside the memory directory" in problem.message
    shown = loom("--config", str(config), "memory", "--json")
    assert shown.returncode == 0 and "operator's secret" not in shown.stdout


def _watch_index(index: Path, stop: threading.Event, errors: list[str]) -> int:
    """Read the index over and over: every version must be whole and extend the one before."""
    previous, reads = b"", 0
    while not stop.is_set():
        try:
            data = index.read_bytes()
        except FileNotFoundError:
            continue
        reads += 1
        if not data.endswith(b"\n"):
            errors.append(f"torn: {data[-80:]!r}")
        elif not data.startswith(previous):
            errors.append("a version lost lines of the one before")
        else:
            index_ = memory.parse_index(data.decode())
            if index_.unparsed:
                errors.append(f"unparseable line {index_.unparsed[0].raw!r}")
        previous = data
    return reads


def _check_all_once(root: Path, titles: set[str]) -> None:
    found = entries(root)
    assert sorted(e.title for e in found) == sorted(titles)
    for e in found:
        assert (root / e.target).is_file()
    assert memory.survey(root, "MEMORY.md").problems == ()
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]


def test_two_streams_of_cli_adders_never_lose_a_line(mem):
    root, config = mem
    per_stream = 25
    stop, errors = threading.Event(), []
    reader = threading.Thread(target=_watch_index, args=(root / "MEMORY.md", stop, errors))
    results: dict[str, list[int]] = {"a": [], "b": []}

    def stream(tag: str) -> None:
        for i in range(per_stream):
            title = f"{tag} fact {i} ü"
            r = run_loom("--config", str(config), "memory", "add", title, "--hook", f"hook {tag}{i}", timeout=60)
            results[tag].append(r.returncode)

    writers = [threading.Thread(target=stream, args=(tag,)) for tag in results]
    reader.start()
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert results == {"a": [0] * per_stream, "b": [0] * per_stream}
    assert errors == []
    _check_all_once(root, {f"{t} fact {i} ü" for t in results for i in range(per_stream)})


ADDER = """
import sys
from loomtui.memory import index as memory
root, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
for i in range(n):
    memory.add_entry(root, "MEMORY.md", f"{tag} entry {i}", f"hook {i}")
"""


def test_two_tight_adder_processes_interleave_without_loss(mem):
    root, _ = mem
    root.mkdir()
    n = 250
    procs = [subprocess.Popen([sys.executable, "-c", ADDER, str(root), tag, str(n)], env=loom_env(), cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for tag in ("x", "y")]
    stop, errors = threading.Event(), []
    reader = threading.Thread(target=_watch_index, args=(root / "MEMORY.md", stop, errors))
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        reader.start()
        for p in procs:  # released together so they contend for the lock
            p.stdin.write("go\n")
            p.stdin.flush()
        deadline = time.monotonic() + 240
        for p in procs:
            assert p.wait(timeout=max(1, deadline - time.monotonic())) == 0
    finally:
        stop.set()
        if reader.is_alive():
            reader.join()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert errors == []
    _check_all_once(root, {f"{t} entry {i}" for t in ("x", "y") for i in range(n)})


def test_a_failure_after_the_index_took_the_line_keeps_the_file_it_names(tmp_path, monkeypatch):
    # The directory's fsync after the index's rename failed (or Ctrl-C came during it): the new file
    # was deleted, and the index pointed at a file gone. A failure before the line: no file left.
    import errno
    import os
    import stat

    from loomtui.errors import LoomError
    from loomtui.memory import index as memory_index

    real_fsync = os.fsync
    failing: list[str] = []

    def fsync(fd):
        if failing and stat.S_ISDIR(os.fstat(fd).st_mode):
            failing.pop()
            raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    root = tmp_path / "memory"
    root.mkdir()
    memory_index.add_entry(root, "MEMORY.md", "First", "the first")
    failing.append("the file's directory")  # the first directory fsync: the new file's own
    with pytest.raises(LoomError, match="Input/output error"):
        memory_index.add_entry(root, "MEMORY.md", "Second", "the second")
    assert not (root / "second.md").exists() and "Second" not in (root / "MEMORY.md").read_text()
    # Past the file's: the one after the index's rename.
    calls = []

    def fsync_after_rename(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            calls.append(fd)
            if len(calls) == 2:
                raise OSError(errno.EIO, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync_after_rename)
    with pytest.raises(LoomError, match="Input/output error"):
        memory_index.add_entry(root, "MEMORY.md", "Third", "the third")
    assert "[Third](third.md)" in (root / "MEMORY.md").read_text() and (root / "third.md").exists()
    assert memory_index.survey(root, "MEMORY.md").problems == ()


def test_an_index_that_starts_with_a_byte_order_mark_reads_as_any_other(tmp_path):
    from loomtui.errors import LoomError
    from loomtui.memory import index as memory_index

    root = tmp_path / "memory"
    root.mkdir()
    (root / "tz.md").write_text("# Time\n")
    (root / "MEMORY.md").write_bytes("\ufeff- [Timezone](tz.md) — which clock\n".encode("utf-8"))
    report = memory_index.survey(root, "MEMORY.md")
    assert report.problems == () and [r.title for r in report.rows] == ["Timezone"]
    with pytest.raises(LoomError, match="already in"):
        memory_index.add_entry(root, "MEMORY.md", "Timezone", "again")


def test_add_into_a_folder_that_is_a_link_out_is_refused(tmp_path):
    import os

    from loomtui.errors import LoomError
    from loomtui.memory import index as memory_index

    root, elsewhere = tmp_path / "memory", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, root / "sub")
    with pytest.raises(LoomError, match="leads outside the memory dir"):
        memory_index.add_entry(root, "MEMORY.md", "Planted", "x", file="sub/x.md")
    assert list(elsewhere.iterdir()) == [] and not (root / "MEMORY.md").exists()
