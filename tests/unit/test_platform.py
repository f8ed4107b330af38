"""The platform modules behind loomtui.platform: which one is chosen, and what each gives, on a real
process and a real directory. (On Linux the linux module's facilities are the kernel's own; the
portable one, which macOS shares but for its kqueue and sysctl, is run by `make test-portable`.)"""

from __future__ import annotations

import os
import select
import subprocess
import sys

import pytest
from conftest import REPO

from loomtui import platform
from loomtui.errors import ConfigError
from loomtui.platform import darwin, linux, portable

LINUX = sys.platform.startswith("linux")


@pytest.mark.parametrize("os_name,want", [("linux", "linux"), ("darwin", "darwin"), ("freebsd14", "portable"),
                                          ("win32", "portable")])
def test_each_os_gets_its_own_module(os_name, want):
    assert platform.chosen({}, os_name) == want


def test_the_portable_module_can_be_forced_on_any_os():
    assert platform.chosen({"LOOM_PLATFORM": "portable"}, "linux") == "portable"
    assert platform.chosen({"LOOM_PLATFORM": ""}, "darwin") == "darwin"


def test_a_mistyped_platform_is_one_clear_line_exit_2():
    with pytest.raises(ConfigError) as info:
        platform.chosen({"LOOM_PLATFORM": "portabel"}, "linux")
    assert info.value.exit_code == 2 and "LOOM_PLATFORM='portabel'" in str(info.value)


def test_every_module_has_the_whole_interface():
    for module in (linux, darwin, portable):
        p = module.PLATFORM
        assert p.name in platform.NAMES
        for name in ("boot_id", "exit_watch", "directory_watch"):
            assert callable(getattr(p, name))
        assert isinstance(p.proc_files, bool)


def test_the_portable_boot_id_is_the_boot_s_own():
    first = portable.PLATFORM.boot_id()
    assert first is not None and first.startswith("boot-time-")
    again = subprocess.run([sys.executable, "-c", "from loomtui.platform import portable; "
                            "print(portable.PLATFORM.boot_id())"], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert again.stdout.strip() == first  # another process of this boot says the same


def test_the_portable_module_has_no_kernel_watches(tmp_path):
    assert portable.PLATFORM.exit_watch(os.getpid()) is None
    assert portable.PLATFORM.directory_watch(tmp_path) is None
    assert not portable.PLATFORM.proc_files


@pytest.mark.skipif(not LINUX, reason="Linux's facilities")
def test_linux_s_exit_watch_turns_readable_when_the_process_ends():
    proc = subprocess.Popen(["sleep", "600"])
    watch = linux.PLATFORM.exit_watch(proc.pid)
    try:
        assert watch is not None
        assert not select.select([watch], [], [], 0.2)[0]
        proc.kill()
        assert select.select([watch], [], [], 30)[0] == [watch]
    finally:
        proc.kill()
        proc.wait()
        if watch is not None:
            watch.close()
            watch.close()  # closed once, whoever asks twice


@pytest.mark.skipif(not LINUX, reason="Linux's facilities")
def test_linux_s_boot_id_is_the_kernel_s():
    with open(linux.BOOT_ID) as fh:
        assert linux.PLATFORM.boot_id() == fh.read().strip()


@pytest.mark.skipif(not LINUX, reason="Linux's facilities")
def test_linux_s_directory_watch_names_files_written_and_moved_in_and_ends_with_the_directory(tmp_path):
    watched = tmp_path / "signals"
    watched.mkdir()
    watch = linux.PLATFORM.directory_watch(watched)
    assert watch is not None
    try:
        (watched / "pane-died").write_text("x")
        (tmp_path / "elsewhere").write_text("y")
        os.replace(tmp_path / "elsewhere", watched / "relaunched")
        seen: set[str] = set()
        while seen != {"pane-died", "relaunched"}:
            assert select.select([watch], [], [], 30)[0], f"only {seen}"
            names, lost, ended = watch.changes()
            assert not lost and not ended
            seen |= names
        for name in seen:
            (watched / name).unlink()
        watched.rmdir()
        ended = False
        while not ended:
            assert select.select([watch], [], [], 30)[0]
            _, _, ended = watch.changes()
    finally:
        watch.close()


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfd_open: Linux 5.3 and later")
def test_an_exit_watch_dropped_unclosed_closes_its_descriptor():
    # The exit-watch loop drops its closure, the watch in it, when a tick raises; each restart
    # opened another pidfd for the same pane and the old one was never closed.
    import gc
    import subprocess

    from loomtui.platform import linux

    proc = subprocess.Popen(["sleep", "60"])
    try:
        watch = linux.PLATFORM.exit_watch(proc.pid)
        assert watch is not None
        fd = watch.fileno()
        os.fstat(fd)
        del watch
        gc.collect()
        with pytest.raises(OSError):
            os.fstat(fd)
    finally:
        proc.kill()
        proc.wait()


def test_macos_names_its_boot_by_one_scheme_in_every_process(monkeypatch, tmp_path):
    # A sysctl that timed out once was cached as "no session", and that process named its boot by
    # its boot time while the others used the uuid: each took the other's pending probes for another
    # boot's, settled at once as misses. A timeout is now "not known this time", asked again.
    import subprocess as sp

    fake = tmp_path / "sysctl"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    fake.chmod(0o755)
    real_run = sp.run

    def run(argv, *args, **kwargs):  # the sysctl at its path, played by a script (not Loom's code)
        if argv[:1] == ["/usr/sbin/sysctl"]:
            argv = [str(fake), *argv[1:]]
            kwargs["timeout"] = 0.2
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(darwin.subprocess, "run", run)
    monkeypatch.setattr(darwin, "_SESSION", [])
    assert darwin.PLATFORM.boot_id() is None  # timed out: unknown now, nothing cached
    fake.write_text("#!/bin/sh\necho 0F0E-UUID\n")
    assert darwin.PLATFORM.boot_id() == "0F0E-UUID"
    fake.write_text("#!/bin/sh\nsleep 30\n")
    assert darwin.PLATFORM.boot_id() == "0F0E-UUID"  # once known, the boot's for as long as it runs


def test_the_proc_walk_is_taken_only_where_each_thread_s_children_file_is_there(tmp_path):
    # A kernel without CONFIG_PROC_CHILDREN has /proc/PID/task but no children files: every tree
    # read as its root alone (the poller missing on every look, a stop that left the children).
    from loomtui.platform.linux import Linux, has_children_files

    task = tmp_path / "42" / "task" / "42"
    task.mkdir(parents=True)
    assert not has_children_files(str(tmp_path), 42)
    (task / "children").write_text("")
    assert has_children_files(str(tmp_path), 42)
    assert Linux.proc_files == has_children_files()  # this machine's, as its platform takes it
    # The pump's transcript reads the boot id from its file whatever the tree walk may use: the two
    # were one flag, and a kernel without the children files lost every record's boot.
    from loomtui.platform.linux import BOOT_ID

    assert Linux.boot_from_file == os.path.exists(BOOT_ID)
