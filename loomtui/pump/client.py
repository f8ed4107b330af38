"""Talking to a running pump: one request per connection on `pump.sock`, and `pump.json` read as facts.

Used by the driver, the Telegram bridge and the CLI, often: its imports stay cheap (no pydantic,
no watchfiles).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loomtui.errors import LoomError
from loomtui.pump.rules import INPUT_CLOSED_CODE

SOCKET = "pump.sock"
STATUS = "pump.json"
QUEUE_DIR = "pump-queue"
MAX_REQUEST = 4 << 20       # one request line; a longer one is refused, not buffered forever
# An AF_UNIX address holds about 108 bytes; a deeper state dir is reached through its directory fd.
_SUN_PATH_MAX = 100


class PumpError(LoomError):
    """The pump could not take the message: no socket, no answer, or its refusal."""


class PumpInputClosed(PumpError):
    """The pump's refusal because its CLI no longer reads its input (a write to its stdin failed):
    no line can reach that CLI again (rules.INPUT_CLOSED_CODE)."""


@dataclass(frozen=True)
class Reply:
    ok: bool
    state: str = ""             # "delivered" (reached the CLI's stdin) or "queued" (a turn is running)
    seq: int | None = None
    position: int | None = None
    error: str = ""


def refusal(error: str, code: str = "") -> PumpError:
    """The pump's refusal of a message as the sender raises it: PumpInputClosed for its code
    `input_closed` (the simulator's pump refuses through here too)."""
    kind = PumpInputClosed if code == INPUT_CLOSED_CODE else PumpError
    return kind(f"the pump refused the message: {error}")


def socket_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / SOCKET


def status_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / STATUS


def queue_dir(state_dir: Path | str) -> Path:
    return Path(state_dir) / QUEUE_DIR


@contextlib.contextmanager
def unix_address(path: Path) -> Iterator[str]:
    """An address for `path` that fits in sockaddr_un: the path itself, or the same file reached
    through a short /proc/self/fd/N path to its directory (Linux) while the block runs."""
    text = os.fspath(path)
    if len(os.fsencode(text)) <= _SUN_PATH_MAX or not sys.platform.startswith("linux"):
        yield text
        return
    fd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_PATH", 0) | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def request(state_dir: Path | str, payload: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send one request and return the pump's one-line answer; PumpError if there is none."""
    path = socket_path(state_dir)
    line = json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"
    if len(line) > MAX_REQUEST:
        raise PumpError(f"message too long for the pump ({len(line)} bytes, at most {MAX_REQUEST})")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        try:
            with unix_address(path) as address:
                sock.connect(address)
        except FileNotFoundError:
            raise PumpError(f"no pump is running: {path} does not exist") from None
        except ConnectionRefusedError:
            raise PumpError(f"no pump is listening on {path}") from None
        except PermissionError:
            raise PumpError(f"not allowed to connect to {path}") from None
        except socket.timeout:
            raise PumpError(f"the pump on {path} did not accept within {timeout:g}s") from None
        except OSError as exc:
            raise PumpError(f"cannot connect to {path}: {exc.strerror or exc}") from None
        try:
            sock.sendall(line)
            data = _read_line(sock)
        except socket.timeout:
            raise PumpError(f"the pump on {path} did not answer within {timeout:g}s") from None
        except OSError as exc:
            raise PumpError(f"the pump on {path} failed to answer: {exc.strerror or exc}") from None
    finally:
        sock.close()
    try:
        answer = json.loads(data)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise PumpError(f"the pump on {path} answered something that is not a JSON object")
    return answer


def _read_line(sock: socket.socket) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if b"\n" in chunk or size > MAX_REQUEST:
            break
    return b"".join(chunks).split(b"\n", 1)[0]


def send(state_dir: Path | str, text: str, *, origin: str, ref: str = "", timeout: float = 10.0) -> Reply:
    """Hand one user message to the pump. `delivered`: it reached the CLI's stdin; `queued`: a turn
    is running and it was persisted, to be written in order when the turns before it end."""
    answer = request(state_dir, {"op": "send", "text": text, "origin": origin, "ref": ref}, timeout)
    if answer.get("ok") is not True:
        error, code = answer.get("error"), answer.get("code")
        raise refusal(error if isinstance(error, str) else "no reason given", code if isinstance(code, str) else "")
    seq, position = answer.get("seq"), answer.get("position")
    return Reply(True, str(answer.get("state") or ""), seq if isinstance(seq, int) else None,
                 position if isinstance(position, int) else None, "")


def live_status(state_dir: Path | str, timeout: float = 5.0) -> dict[str, Any]:
    """The pump's status from the pump itself (PumpError when it does not answer)."""
    return request(state_dir, {"op": "status"}, timeout)


def status(state_dir: Path | str) -> dict[str, Any] | None:
    """pump.json as last written; None when it is missing or not a whole JSON object."""
    try:
        data = json.loads(status_path(state_dir).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
