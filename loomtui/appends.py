"""Appending whole lines to a file that other processes read line by line (the pump's transcript,
a job's log): every byte of a write goes, and a line a killed writer or a full disk cut short is
ended before the next is appended, or the next line is glued onto it and read as part of it."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (it may write fewer: a full disk, a signal); an
    OSError when no more can be."""
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        if done <= 0:
            raise OSError(errno.ENOSPC, "no byte could be written")
        view = view[done:]


def end_cut_line(path: Path, fd: int) -> None:
    """End the last line of `path` (open for appending as `fd`) with a newline when it has none:
    what is appended next then starts a line of its own. Read through `path`, so that `fd` may be
    open for writing only."""
    size = os.fstat(fd).st_size
    if not size:
        return
    with open(path, "rb") as file:
        file.seek(size - 1)
        last = file.read(1)
    if last and last != b"\n":
        write_all(fd, b"\n")
