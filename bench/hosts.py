"""`loom hosts` over N hosts (issue 28; default 20): N state dirs, each a Loom of its own with its
config, behind one real sshd on 127.0.0.1 (tests/sshd.py), all asked at once with their master
connections warm (a first `loom hosts` opened them; ControlPersist keeps them).

Anchor, in the same run: the N `ssh … loom status --json --list` run one after the other, each a
connection of its own (what a shell loop over the hosts would do).
Target: `loom hosts` within 1.5 s.

The remote login shell starts with no start-up files of the user's (sshd's `SetEnv` points HOME
at an empty directory): what a host's shell runs at each login is the host's, not Loom's, and
here it would be this machine's. Root's ~/.bashrc on these machines runs `pyenv init` (bash reads
it for a command over ssh), about 130 ms of CPU a session: with N hosts on two shared cores that
alone outweighs Loom. The bench prints that cost beside the rest, from a second sshd that keeps
the user's own HOME: N `ssh b true` at once over warm masters, both ways.

Run: .venv/bin/python bench/hosts.py [N]
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, bound_line, exit_on_sigterm, machine, median, ratio_line, timed
from harness import toml_value
from sshd import REMOTE_LOOM, SSHD, Sshd

TARGET = 1.5
ROUNDS = 5


def loom(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loomtui", "--config", str(config), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


def all_at_once(commands: list[list[str]]) -> None:
    """Every command started at once, then each waited for; one that fails stops the bench."""
    runs = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
            for argv in commands]
    for run in runs:
        _, err = run.communicate(timeout=120)
        if run.returncode != 0:
            raise RuntimeError(err.decode(errors="replace")[-500:])


def at_once(client: Path, masters: Path, n: int) -> None:
    """n `ssh b true` at once, each over a master of its own under `masters` (opened by the first
    call, kept warm by ControlPersist, as `loom hosts` keeps its own)."""
    masters.mkdir(exist_ok=True)
    all_at_once([["ssh", "-F", str(client), "-o", "BatchMode=yes", "-o", "ControlMaster=auto",
                  "-o", f"ControlPath={masters / str(i)}", "-o", "ControlPersist=300", "b", "true"] for i in range(n)])


def main(n: int) -> int:
    exit_on_sigterm()
    print(f"machine: {machine()}")
    if not Path(SSHD).exists():
        print(f"hosts: {SSHD} is not installed (Debian's openssh-server): nothing measured")
        return 1
    root = Path(tempfile.mkdtemp(prefix="lb-", dir="/tmp"))
    # N hosts behind one sshd connect at once, where each would have its own: more than sshd's
    # default 10 unauthenticated connections at a time.
    bare = root / "bare-home"
    bare.mkdir()
    sshd = Sshd(root / "sshd", extra=("MaxStartups 200", f"SetEnv HOME={bare}")).start()
    own = Sshd(root / "sshd-own-home", extra=("MaxStartups 200",)).start()
    try:
        client = sshd.client_config()
        remotes = []
        for i in range(n):
            home = root / f"h{i}"
            home.mkdir()
            # Each host a Loom of its own: a config naming its own state dir and tmux socket (no agent
            # runs: its status is read, as a host's whose agent is between launches would be).
            (home / "config.toml").write_text(f"state_dir = {toml_value(str(home / 'state'))}\n[agent]\n"
                                              f"tmux_socket = {toml_value(f'lbench-{root.name}-{i}')}\n")
            remotes.append(home)
        operator = root / "operator.toml"
        lines = [f"state_dir = {toml_value(str(root / 'op-state'))}", "[agent]",
                 f"tmux_socket = {toml_value(f'lbench-{root.name}-op')}"]
        for i, home in enumerate(remotes):
            lines += ["[[hosts]]", f"name = \"h{i}\"", "ssh = \"b\"", f"ssh_options = {toml_value(['-F', str(client)])}",
                      f"loom = {toml_value(REMOTE_LOOM)}", f"config = {toml_value(str(home / 'config.toml'))}",
                      f"state_dir = {toml_value(str(home / 'state'))}"]
        operator.write_text("\n".join(lines) + "\n")

        first = loom(operator, "hosts", "--json")  # opens the masters
        views = json.loads(first.stdout) if first.returncode == 0 else []
        answered = [v for v in views if v.get("host") != "local" and v.get("reachable") and not v.get("error")]
        if len(answered) != n:
            print(f"hosts: only {len(answered)} of {n} hosts answered the first look:\n{first.stdout[-2000:]}"
                  f"{first.stderr[-2000:]}")
            return 1
        warm = timed(lambda: loom(operator, "hosts", "--json"), ROUNDS)

        def sequential() -> None:
            for home in remotes:
                words = [*REMOTE_LOOM, "--config", str(home / "config.toml"), "--state-dir", str(home / "state"),
                         "status", "--json", "--list"]
                done = subprocess.run(["ssh", "-F", str(client), "-o", "BatchMode=yes", "b",
                                       " ".join(shlex.quote(w) for w in words)],
                                      capture_output=True, text=True, timeout=120)
                if done.returncode != 0:
                    raise RuntimeError(done.stderr[-500:])
        anchor = median(timed(sequential, max(1, ROUNDS // 2)))
        print(bound_line(f"loom hosts over {n} hosts, masters warm", median(warm), TARGET,
                         anchor=(f"{n} sequential ssh … loom status --json", anchor)))
        # What the remote Looms alone cost here: the N status reads at once on this machine, no ssh
        # (on N real hosts each runs on a CPU of its own), beside N bare interpreters at once.
        statuses = [[*REMOTE_LOOM, "--config", str(home / "config.toml"), "--state-dir", str(home / "state"),
                     "status", "--json", "--list"] for home in remotes]
        alone = median(timed(lambda: all_at_once(statuses), ROUNDS))
        bare_python = median(timed(lambda: all_at_once([[sys.executable, "-c", "pass"]] * n), ROUNDS))
        print(ratio_line(f"  {n} loom status --json --list at once, no ssh", alone,
                         f"{n} python -c pass at once", bare_python))
        bare_shell = median(timed(lambda: at_once(client, root / "m-bare", n), ROUNDS))
        own_shell = median(timed(lambda: at_once(own.client_config(), root / "m-own", n), ROUNDS))
        print(ratio_line(f"  {n} ssh b true at once, a bare login shell", bare_shell,
                         f"with the user's own HOME ({Path.home()})", own_shell))
        return 0 if median(warm) <= TARGET else 2
    finally:
        for master in [*root.glob("op-state/ssh/*"), *root.glob("m-*")]:
            subprocess.run(["ssh", "-S", str(master), "-O", "exit", "b"], capture_output=True, timeout=10)
        own.stop()
        sshd.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
