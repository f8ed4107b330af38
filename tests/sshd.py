"""A real OpenSSH server for tests and benches: on a free loopback port, its host key, an
authorized key made for it and a client config of its own (`-F FILE`: ssh reads the passwd home,
not $HOME), every file under one directory, ended by pid. Nothing of the machine's ssh setup is
read or changed."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from conftest import REPO
from harness import free_port, toml_value, wait_for

from loomtui.hosts import ssh

SSHD = "/usr/sbin/sshd"
# The remote Loom: this checkout's, whatever PATH an ssh session gets.
REMOTE_LOOM = ["env", f"PYTHONPATH={REPO}", sys.executable, "-m", "loomtui"]


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "loom-test", "-f", str(path)],
                   check=True, capture_output=True, timeout=60)
    return path.with_suffix(".pub").read_text().split()[1]


class Sshd:
    """A real sshd on a free loopback port, every file of it under `root`, ended by pid (its
    sessions too). As root it needs its privilege separation directory, /run/sshd, which only the
    system's ssh service makes: missing, the test's sshd runs in a mount namespace of its own with
    a private /run (unshare), so nothing of the machine's is touched."""

    def __init__(self, root: Path, extra: tuple[str, ...] = ()) -> None:
        root.mkdir(parents=True)
        self.root = root
        self.port = free_port()
        self.user = getpass.getuser()
        keygen(root / "host_key")
        self.host_key = (root / "host_key.pub").read_text().split()[:2]
        keygen(root / "client_key")
        (root / "authorized_keys").write_text((root / "client_key.pub").read_text())
        (root / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {' '.join(self.host_key)}\n")
        (root / "sshd_config").write_text("\n".join([
            "ListenAddress 127.0.0.1", f"Port {self.port}", f"HostKey {root / 'host_key'}",
            f"PidFile {root / 'sshd.pid'}", f"AuthorizedKeysFile {root / 'authorized_keys'}",
            # No PAM (it would read the machine's own stack), and the test's files live under a
            # tmp dir whose modes sshd's StrictModes would refuse.
            "UsePAM no", "StrictModes no", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes", "PermitRootLogin prohibit-password", f"AllowUsers {self.user}",
            "PrintMotd no", "LogLevel VERBOSE", *extra, ""]))
        self.proc: subprocess.Popen | None = None
        self.log = root / "sshd.log"

    def client_config(self, known_hosts: Path | None = None) -> Path:
        """An ssh client config for this sshd (the destination `b` is its alias)."""
        path = self.root / f"ssh_config{'' if known_hosts is None else '-' + known_hosts.name}"
        path.write_text("\n".join([
            "Host *", "  HostName 127.0.0.1", f"  Port {self.port}", f"  User {self.user}",
            f"  IdentityFile {self.root / 'client_key'}", "  IdentitiesOnly yes", "  IdentityAgent none",
            f"  UserKnownHostsFile {known_hosts or self.root / 'known_hosts'}", "  GlobalKnownHostsFile none",
            "  StrictHostKeyChecking yes", ""]))
        return path

    def start(self) -> Sshd:
        argv = [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")]
        if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
            assert shutil.which("unshare"), "root without /run/sshd needs unshare for a private /run"
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    'mount -t tmpfs tmpfs /run && mkdir -m 0755 /run/sshd && exec "$@"', "sh", *argv]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: "Server listening on 127.0.0.1" in self.log.read_text() or self.proc.poll() is not None,
                 30, what="sshd listening")
        assert self.proc.poll() is None, self.log.read_text()
        return self

    def stop(self) -> None:
        """The listener and every session it forked: no connection to it survives."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            victims = [*psutil.Process(self.proc.pid).children(recursive=True), psutil.Process(self.proc.pid)]
        except psutil.Error:
            victims = []
        for victim in victims:
            try:
                victim.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        self.proc.wait(30)


def masters(state_dir: Path) -> list[psutil.Process]:
    """The ssh master connections Loom left running (`ssh: PATH [mux]`) for hosts under `state_dir`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if line.startswith("ssh") and str(state_dir / ssh.CONTROL_DIR) in line:
            found.append(proc)
    return found


def kill_masters(state_dir: Path) -> None:
    """End the ssh master connections Loom left for hosts under `state_dir` (a test's last step)."""
    for proc in masters(state_dir):
        try:
            proc.kill()
        except psutil.Error:
            pass


def add_host(path: Path, name: str, **keys) -> None:
    lines = ["", "[[hosts]]", f"name = {toml_value(name)}", *(f"{k} = {toml_value(v)}" for k, v in keys.items())]
    path.write_text(path.read_text() + "\n".join(lines) + "\n")
