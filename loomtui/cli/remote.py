"""`loom --host NAME COMMAND ...`: the command run by that host's own Loom, over ssh.

Only the words from the command on go to the host: Loom's own options before it (`--config`,
`--state-dir`) name this machine's config, where `[[hosts]]` says how to reach the host and which
config and state dir its Loom uses. The host's Loom acts through its own actions module, locks and
ledger, and records the command's source as `ssh` from this machine (`--via-ssh`, which it honours
only inside an ssh session: `check_via`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence

from loomtui.errors import LoomError

# The host could not be reached (sysexits' EX_UNAVAILABLE): not the remote command's own failure.
UNREACHABLE = 69
_LOCAL_ONLY = ("--config", "--state-dir")
# The options by which a command reads its text on standard input: this one's goes to the host.
_READS_STDIN = ("--stdin", "--note-stdin")
# The commands that need this terminal there (`ssh -t`, its streams this process's own): a
# command, or a command and its first word (an editor without a terminal exits, or waits on it).
_IN_A_TERMINAL = (("attach",), ("memory", "edit"))


def in_a_terminal(words: Sequence[str]) -> bool:
    """Whether the command `words` runs in a terminal there (its words before any option's value)."""
    plain = [word for word in words if not word.startswith("-")]
    return any(tuple(plain[:len(command)]) == command for command in _IN_A_TERMINAL)


def split(words: Sequence[str], valued: Sequence[str]) -> tuple[str, list[str], list[str]] | None:
    """(host, Loom's own options before the command, the command and its words) when `--host`
    stands before the command; None otherwise. `valued`: Loom's options that take a value."""
    host: str | None = None
    before: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if word == "--host":
            if i + 1 >= len(words):
                raise LoomError("--host needs a host name", exit_code=2)
            host, i = words[i + 1], i + 2
            continue
        if word.startswith("--host="):
            host, i = word[len("--host="):], i + 1
            continue
        if not word.startswith("-"):
            break
        before.append(word)
        if "=" not in word and len(word) > 2 and any(o.startswith(word) for o in valued) and i + 1 < len(words):
            before.append(words[i + 1])
            i += 1
        i += 1
    return None if host is None else (host, before, list(words[i:]))


def run(host_name: str, before: list[str], words: list[str]) -> int:
    from loomtui.context import Context
    from loomtui.hosts import ssh

    parser = argparse.ArgumentParser(prog="loom --host NAME", add_help=False)
    parser.add_argument("--config")
    parser.add_argument("--state-dir")
    try:
        local, rest = parser.parse_known_args(before)
    except SystemExit:
        raise LoomError("--config and --state-dir need a path", exit_code=2) from None
    if rest:
        raise LoomError(f"with --host, Loom's own options are --config and --state-dir (not {rest[0]})", exit_code=2)
    if not words:
        raise LoomError(f"--host {host_name}: name the command to run there (e.g. loom --host {host_name} status)",
                        exit_code=2)
    for word in words:
        if word.split("=", 1)[0] in _LOCAL_ONLY:
            raise LoomError(f"{word.split('=', 1)[0]} after the command would name a file on host {host_name}: "
                            f"its config and state dir are [[hosts]] config and state_dir", exit_code=2)
    ctx = Context.load(local.config, local.state_dir)
    try:
        host = ctx.config.host(host_name)
        if host is None:
            known = ", ".join(h.name for h in ctx.config.hosts) or "none configured"
            raise LoomError(f"no host named {host_name!r} (hosts: {known})", exit_code=2)
        if in_a_terminal(words):
            return _in_terminal(host, words, ctx.state_dir)
        stdin = b""
        options = words[:words.index("--")] if "--" in words else words  # after `--`, words are the line's
        if any(word in _READS_STDIN for word in options):
            from loomtui.cli.common import MAX_STDIN

            stdin = sys.stdin.buffer.read(MAX_STDIN + 1)  # the host's Loom refuses more, and says so
        reply = ssh.run(host, words, state_dir=ctx.state_dir, timeout=host.command_timeout, stdin=stdin)
    finally:
        ctx.close()
    if not reply.reached:
        # Said as it is known: ssh's failure is most often before the command ran, but a timeout or a
        # connection lost midway may come after; the host's ledger says what it did.
        raise LoomError(f"host {host_name} ({host.ssh}) is unreachable: {reply.reason}", exit_code=UNREACHABLE)
    # The host's words: main() has wrapped both streams in text.PrintableStream.
    sys.stdout.write(reply.stdout)
    sys.stderr.write(reply.stderr)
    return reply.code or 0


def _in_terminal(host, words: list[str], state_dir) -> int:
    """`words` run on the host with this terminal (`loom --host b attach`): ssh's own streams are
    this process's, so the operator sees the agent's pane; ssh's failure is said as for any command."""
    import subprocess

    from loomtui.hosts import ssh

    code = subprocess.run(ssh.terminal_argv(host, words, state_dir=state_dir), check=False).returncode
    if code == ssh.SSH_FAILED:
        raise LoomError(f"host {host.name} ({host.ssh}) is unreachable (ssh said why, above)", exit_code=UNREACHABLE)
    return code


def check_via(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> None:
    """`--via-ssh ORIGIN` is what another machine's `loom --host` adds: honoured only in an ssh
    session (sshd sets SSH_CONNECTION), so a local command cannot pass for a remote one."""
    via = getattr(args, "via_ssh", None)
    if via is None:
        return
    from loomtui.hosts.ssh import valid_origin  # only then: `loom pump` imports no config or store

    env = os.environ if environ is None else environ
    if not env.get("SSH_CONNECTION"):
        raise LoomError("--via-ssh is for a command another machine's `loom --host` runs over ssh "
                        "(no SSH_CONNECTION here)", exit_code=2)
    if not valid_origin(via):
        raise LoomError("--via-ssh: a machine name of 1-64 letters, digits, '.', '_' or '-'", exit_code=2)
