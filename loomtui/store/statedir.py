"""The state directory: found, created 0700, refused when others may write it, and proven writable
before anything locks in it. Also the one way Loom makes a private file or directory elsewhere."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from loomtui.config import APP_NAME, Config, expand_path
from loomtui.errors import StateDirError
from loomtui.states import MAIN_AGENT

SUBDIRS = ("acks",)


def default_state_dir() -> Path:
    import platformdirs  # only where no state dir was given: a command given one never loads it

    return Path(platformdirs.user_state_dir(APP_NAME))


def resolve_state_dir(cli_value: str | None, config: Config, environ: dict[str, str] | None = None) -> Path:
    """--state-dir, then LOOM_STATE_DIR, then the config's state_dir, then the platform default."""
    env = os.environ if environ is None else environ
    if cli_value:
        return expand_path(cli_value, None).absolute()
    if env.get("LOOM_STATE_DIR"):
        return expand_path(env["LOOM_STATE_DIR"], None).absolute()
    if config.state_dir is not None:
        return config.state_dir.absolute()
    return default_state_dir()


def _fail(path: Path, what: str, exc: OSError) -> StateDirError:
    reason = exc.strerror or str(exc)
    return StateDirError(f"state dir {path} is not usable: {what}: {reason} (errno {exc.errno})")


def refuse_shared(path: Path, what: str = "state dir") -> None:
    """Refuse a directory another user could write: one who can drop a file in the acks dir forges a
    canary's answer, one who can write the state dir replaces the store, the locks or the sidecar.
    A directory owned by someone else is theirs to chmod, so it is refused too. Readable by others
    (0755, from a umask of 022) is the doctor's warning, not a refusal."""
    try:
        st = path.stat()
    except OSError as exc:
        raise _fail(path, "cannot stat", exc) from None
    mode = st.st_mode & 0o7777
    if mode & 0o022:
        raise StateDirError(f"{what} {path} is writable by others (mode {mode:o}): "
                            f"run chmod go-w {path}; Loom will not use it")
    if st.st_uid != os.geteuid():
        raise StateDirError(f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {os.geteuid()}): "
                            "its owner could make it writable; Loom will not use it")


def private_dir(path: Path) -> Path:
    """Make `path` a directory, and each missing parent, all 0700 (`mkdir -p` would give the
    parents the umask's mode); a directory that is there already keeps its mode."""
    if not path.is_dir():
        if path.parent != path:
            private_dir(path.parent)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            if not path.is_dir():
                raise
    return path


def open_private(path: Path, flags: int) -> int:
    """os.open with O_CREAT at 0600: a file Loom creates is the operator's alone (job logs too:
    a job's output may hold a secret). An existing file keeps the mode it has."""
    return os.open(path, flags | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)


def prepare_state_dir(path: Path) -> Path:
    """Create the directory (0700) and its subdirectories, refuse it when others can write it, then
    prove a file can be written and synced.

    Raises StateDirError naming the path and the OS error; the caller exits non-zero.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(path, "cannot create directory", exc) from None
    if not path.is_dir():
        raise StateDirError(f"state dir {path} is not usable: not a directory")
    refuse_shared(path)
    probe = path / f".probe-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"loom state dir probe\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        try:
            probe.unlink()
        except OSError:
            pass
        raise _fail(path, "cannot write a file", exc) from None
    for name in SUBDIRS:
        try:
            (path / name).mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise _fail(path / name, "cannot create directory", exc) from None
        refuse_shared(path / name, f"{name} dir")
    return path


@functools.lru_cache(maxsize=256)
def agent_dir(state_dir: Path, agent: str) -> Path:
    """Where an agent's own files live: the state dir itself for `main` (as before agents had
    names, so an old state dir keeps its acks, locks and sidecar), `agents/NAME/` for another.
    (Made once per state dir and agent: every loop asks at every look, and a Path is immutable.)"""
    return Path(state_dir) if agent == MAIN_AGENT else Path(state_dir) / "agents" / agent


def prepare_agent_dir(path: Path) -> Path:
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        for name in SUBDIRS:
            (path / name).mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise _fail(path, "cannot create directory", exc) from None
    for where, what in ((path.parent, "agents dir"), (path, "agent dir"),
                        *((path / name, f"{name} dir") for name in SUBDIRS)):
        refuse_shared(where, what)
    return path


def create_private_file(path: Path) -> None:
    """Make sure `path` exists with mode 0600 (files under the state dir are private)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
    except FileExistsError:
        pass
