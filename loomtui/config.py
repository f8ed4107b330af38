"""The one TOML configuration file: found, read with tomllib, validated, defaults filled in.

A bad file is one line naming the file, the key path and what is wrong (exit status 2).
Unknown keys are errors: a misspelt key that silently keeps its default is how a
supervisor ends up confidently wrong.

Agents: a single `[agent]` table is one agent named `main`; `[[agents]]` tables name several, each
with the `[agent]` keys and its own `watchdog`, `canary` and `memory` tables that override the
top-level ones key by key. A `Config` is always seen as one agent: `agent`, `watchdog`, `canary` and
`memory` are that agent's (the first one, as loaded); `for_agent(name)` gives the view of another.
"""

from __future__ import annotations

import ipaddress
import os
import re
from string import Formatter
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loomtui.config_schema import (
    Bad,
    Field,
    Loc,
    Section,
    also,
    boolean,
    duration,
    expand_path,
    integer,
    key_path,
    list_of,
    one_of,
    optional_path,
    pane_regex,
    path,
    positive_duration,
    regex,
    screen_regex,
    section,
    string,
    table_of_strings,
    timeout_duration,
)
from loomtui.durations import parse_duration
from loomtui.errors import ConfigError
from loomtui.states import AGENT_NAME_PATTERN, MAIN_AGENT, MEMORY_QUEUE, passes_hook_settings

APP_NAME = "loom"
MAIN = MAIN_AGENT  # the agent a single [agent] table describes
AGENT_NAME = re.compile(AGENT_NAME_PATTERN)

__all__ = ["APP_NAME", "AgentConfig", "AgentSpec", "CanaryConfig", "Config", "HeartbeatConfig", "HostConfig",
           "JobConfig", "LedgerConfig", "MemoryConfig", "MetricsConfig", "Modal", "SentinelConfig", "TelegramConfig",
           "WatchdogConfig", "expand_path", "find_config_path", "load_config", "parse_config"]


def _tmux_name(value: str) -> str:
    # tmux treats ':' and '.' in targets as separators; a name with them targets the wrong thing.
    if not re.fullmatch(r"[A-Za-z0-9_-]+", value):
        raise ValueError("use only letters, digits, '_' and '-'")
    return value


def _has_session_id(value: str) -> str:
    # Without the id, a resume continues "the most recent" conversation (once a stranger's)
    # and a fresh start runs under an id Loom pinned but the agent never heard of.
    available = "available: {session_id}, {memory_index}, {state_dir}, {hook_settings}"
    try:
        # The fields as format() reads them: `{{session_id}}` is an escaped brace, no placeholder
        # (it renders as the literal text, and the pinned id never reached the agent).
        fields = [field for _, field, _, _ in Formatter().parse(value) if field is not None]
    except ValueError as exc:  # states.placeholders reads the same, once this has passed
        raise ValueError(f"bad placeholder: {exc}; {available}") from None
    for field in fields:
        if field not in PLACEHOLDERS:
            # `{state_dir.acks}` or `{session_id[0]}` too: an attribute or an index of the value
            # raised at every launch.
            shown = "{" + field + "}"
            raise ValueError(f"bad placeholder {shown}; {available}")
    if "session_id" not in fields:
        raise ValueError("must contain {session_id}: Loom resumes only the session it pinned")
    try:
        value.format(**dict.fromkeys(PLACEHOLDERS, "x"))
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"bad placeholder {exc}; {available}") from None
    return value


PLACEHOLDERS = ("session_id", "memory_index", "state_dir", "hook_settings")


# What Loom sets for the agent to call back into it (launch.agent_env), and by which a relaunch's
# stop tells the dead pane's leftovers from a stranger: one in agent.env overrode Loom's.
LOOMS_OWN_ENV = ("LOOM_STATE_DIR", "LOOM_AGENT", "LOOM_SESSION_ID")


def _env_names(value: dict[str, str]) -> dict[str, str]:
    for name in value:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"invalid environment variable name {name!r}")
        if name in LOOMS_OWN_ENV:
            raise ValueError(f"{name} is Loom's to set for the agent (the state dir, the agent, its session)")
    return value


def _schedule(value: str) -> str:
    text = value.strip()
    if text.lower().startswith("every "):
        if parse_duration(text[6:]) <= 0:
            raise ValueError("must be longer than 0s")
        return text
    if not text:
        return text
    from croniter import croniter  # only a config with cron schedules pays for it

    if not croniter.is_valid(text):
        raise ValueError(f"invalid schedule {value!r} (cron like '0 7 * * *' or 'every 10m')")
    # croniter's R (random) and H (hashed) fields: a due time that differs at each reading is no schedule.
    if any(re.match(r"[RH](?![A-Z])", part, re.IGNORECASE) for field in text.split() for part in field.split(",")):
        raise ValueError(f"schedule {value!r}: R and H (random, hashed) fields are not supported")
    try:  # valid, yet matching no date (31 February): every sentinel pass would fail on it
        croniter(text, 1_700_000_000.0).get_next(float)
    except Exception:  # noqa: BLE001 - CroniterBadDateError, or another of croniter's own
        raise ValueError(f"schedule {value!r} matches no date: the job would never be due") from None
    return text


def _no_control_characters(value: str) -> str:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("must not contain control characters")
    return value


LOOPBACK = "a loopback address (127.0.0.0/8, ::1, localhost)"
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[^\]\s]+)\]|(?P<host>[^\s:\[\]]+)):(?P<port>\d{1,5})")


def is_loopback(host: str) -> bool:
    """Whether `host` (an IP address without brackets, or a name) is this machine's own loopback:
    127.0.0.0/8, ::1 or the name localhost. Any other name is not: it may resolve anywhere."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_header_name(host: str) -> str:
    """How a client writes this address in a Host header: IPv6 in brackets in its shortest form
    (0:0:0:0:0:0:0:1 is [::1]), names lower case."""
    bare = host.strip("[]").lower()
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return bare
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def loopback_names(host: str) -> frozenset[str]:
    """The names a client may give in its Host header for a server on `host`: its own, and
    localhost for 127.0.0.1 or ::1 (which localhost resolves to), or those two for localhost. The
    served console's and the metrics endpoint's rule against DNS rebinding alike."""
    name = host_header_name(host)
    names = {name}
    if name in ("127.0.0.1", "[::1]"):
        names.add("localhost")
    if name == "localhost":
        names |= {"127.0.0.1", "[::1]"}
    return frozenset(names)


def split_listen(value: str) -> tuple[str, int]:
    """`127.0.0.1:9464` → ("127.0.0.1", 9464); `[::1]:9464` → ("::1", 9464); ValueError otherwise."""
    found = _HOST_PORT.fullmatch(value)
    if found is None:
        raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:9464 or [::1]:9464")
    host = found["v6"] or found["host"]
    if found["v6"] is not None:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} in brackets is not an IPv6 address") from None
    port = int(found["port"])
    if not 1 <= port <= 65535:
        raise ValueError(f"port must be 1-65535 (got {port})")
    return host, port


def _listen(value: str) -> str:
    if value:
        split_listen(value)
    return value


def _api_base(value: str) -> str:
    # The token is part of every Bot API URL: over plain http it crosses the network readable by
    # anyone on the path. A Bot API server on this machine (or the tests' fake) may be plain http.
    if not value:
        return value
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    try:
        host = parts.hostname or ""
        parts.port  # noqa: B018  # a port that is not a number raises here, not at the first send
    except ValueError as exc:
        raise ValueError(f"not a usable URL ({exc})") from None
    if scheme not in ("http", "https") or not host:
        raise ValueError("expected an https:// URL of a Bot API server, e.g. https://botapi.example.com")
    if scheme == "http" and not is_loopback(host):
        raise ValueError(f"plain http:// to {host!r} would send the bot token in clear text; use https://, "
                         f"or http:// only to {LOOPBACK}")
    return value


def _push_url(value: str) -> str:
    # A push URL's path is its secret (healthchecks.io's ping UUID, Uptime Kuma's push token): it is
    # never echoed back, and over plain http only to this machine.
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    try:
        host = parts.hostname or ""
        parts.port  # noqa: B018
    except ValueError:
        raise ValueError("not a usable URL (its port is not a number)") from None
    if parts.scheme.lower() not in ("http", "https") or not host:
        raise ValueError("expected an https:// push URL, e.g. https://hc-ping.com/<uuid>")
    if parts.scheme.lower() == "http" and not is_loopback(host):
        raise ValueError(f"plain http:// to {host!r} would send the URL's secret in clear text; use https://, "
                         f"or http:// only to {LOOPBACK}")
    return value


class HeartbeatConfig(Section):
    """A push heartbeat (healthchecks.io, Uptime Kuma): a GET to `url` every `interval` while this
    host's agents are well, `url` + /fail while one is down; silence if the daemon is gone."""

    secrets = ("url",)  # its path is the secret (redact.py)

    url = Field(also(string(1, 2000), _push_url))
    name = Field(also(string(0, 60), _no_control_characters), "")  # "" = heartbeat1, heartbeat2, ... in order
    interval = Field(positive_duration, 60.0)
    timeout = Field(timeout_duration, 10.0)
    # The agents it speaks for; [] = every agent of this host.
    agents = Field(list_of(string(1)), factory=list)
    # A hold (the ceiling's or an operator's) counts as a failure only where this says so.
    hold_fails = Field(boolean, False)
    # A relaunch no canary ack has witnessed for this long counts as down.
    unwitnessed_after = Field(positive_duration, 600.0)


class Modal(Section):
    match = Field(pane_regex)
    keys = Field(list_of(string(), min_length=1), factory=lambda: ["Enter"])


DEFAULT_MODALS = (Modal(match="Yes, I trust this folder", keys=["Enter"]),)


# Loom's own tmux socket names (`tmux -L NAME`): "loom" alone is another orchestrator's too
# (rjwalters/loom), and two tools on one server would share it. The names before this one
# (LEGACY) are where an agent launched by an older Loom still runs: it stays there until its next
# relaunch (agent.driver.socket_in_use), so an upgrade never starts a second agent beside it.
DEFAULT_SOCKET = "loomtui"
LEGACY_SOCKET = "loom"


def default_socket(agent: str) -> str:
    return DEFAULT_SOCKET if agent == MAIN else f"{DEFAULT_SOCKET}-{agent}"


def legacy_socket(socket: str) -> str:
    """Where an older Loom ran the agent whose socket is `socket` now: the old default for a default
    name, the same name for one the operator chose."""
    if socket == DEFAULT_SOCKET:
        return LEGACY_SOCKET
    if socket.startswith(DEFAULT_SOCKET + "-"):
        return f"{LEGACY_SOCKET}-{socket[len(DEFAULT_SOCKET) + 1:]}"
    return socket


class AgentConfig(Section):
    secrets = ("env",)  # the agent's environment: an API key as often as not (its keys shown, not values)

    tmux_socket = Field(also(string(1), _tmux_name), DEFAULT_SOCKET)
    session = Field(also(string(1), _tmux_name), "agent")
    cwd = Field(path, factory=lambda: Path("~").expanduser())
    fresh_command = Field(also(string(1), _has_session_id), "claude --session-id {session_id}")
    resume_command = Field(also(string(1), _has_session_id), "claude --resume {session_id}")
    process_match = Field(regex, "claude")
    poller_match = Field(regex, "")
    boot_grace = Field(duration, 90.0)
    # A regex searched in the visible screen that says the agent is ready for input (its prompt,
    # or Claude Code's footer). Seeing it ends the boot grace and the resume check, and the canary
    # witnesses the relaunch at once; "" = the agent counts as ready when the boot grace ends.
    ready_match = Field(screen_regex, "")
    # How long a resumed agent is watched for "No conversation found" before the resume counts
    # (cut short once `ready_match` is seen).
    resume_check = Field(duration, 5.0)
    resume_failed_match = Field(pane_regex, "No conversation found")
    stop_grace = Field(duration, 3.0)
    env = Field(also(table_of_strings, _env_names), factory=dict)
    modals = Field(list_of(section(Modal)), factory=lambda: list(DEFAULT_MODALS))
    width = Field(integer(ge=40, le=1000), 200)
    height = Field(integer(ge=10, le=500), 50)
    # "tmux": the CLI is an interactive screen in the pane (typed into, scraped). "stream-json":
    # `loom pump` runs in the pane and owns the CLI's stdin and stdout (docs/STREAM.md).
    driver = Field(one_of("tmux", "stream-json"), "tmux")
    # May a command run from the agent's own shell (its LOOM_SESSION_ID) hold, release or recycle
    # this agent? Off: refused, recorded and told to the operator. On: done, and still told.
    may_hold = Field(boolean, False)
    # With `{hook_settings}` in the commands, a line Loom types that the CLI's UserPromptSubmit hook
    # has not reported within this long is `dispatch_missing`, and the canary probes at once.
    dispatch_timeout = Field(positive_duration, 15.0)


class WatchdogConfig(Section):
    interval = Field(positive_duration, 30.0)
    poller_grace = Field(duration, 180.0)
    fuse_window = Field(positive_duration, 900.0)
    fuse_count = Field(integer(ge=1), 3)
    ceiling_window = Field(positive_duration, 3600.0)
    ceiling_count = Field(integer(ge=1), 6)
    backoff_base = Field(duration, 5.0)
    backoff_max = Field(duration, 300.0)
    # How often a dead pane is looked for between full ticks (an exit is noticed in seconds).
    exit_check = Field(positive_duration, 2.0)
    # The machine-wide scan for foreign pollers is rarer than the tick.
    foreign_scan = Field(positive_duration, 120.0)
    # How long the agent may stay unobservable (tmux not answering) before the operator is told.
    ambiguous_alert = Field(positive_duration, 600.0)


# `canary.ack_timeout` when the agent's commands pass `{hook_settings}` and the config sets none.
HOOKED_ACK_TIMEOUT = 60.0


class CanaryConfig(Section):
    interval = Field(positive_duration, 1200.0)
    # Without hooks, a probe typed into a long turn is missed like one typed into a deaf agent:
    # the wait is long. With them, HOOKED_ACK_TIMEOUT unless the config sets one.
    ack_timeout = Field(positive_duration, 180.0)
    misses_to_recycle = Field(integer(ge=1), 2)
    # With `{hook_settings}` in the commands (or the stream-json driver, whose pump tells the turns
    # without hooks), a miss typed into a turn the agent is still busy with (an event within
    # `turn_quiet`) or that ended by itself does not count toward a recycle; a turn quiet for
    # longer, or older than `max_turn`, counts as a wedge (docs/HOOKS.md).
    turn_quiet = Field(positive_duration, 900.0)
    max_turn = Field(positive_duration, 7200.0)


class SentinelConfig(Section):
    interval = Field(positive_duration, 600.0)
    renudge = Field(positive_duration, 1200.0)
    backstop = Field(positive_duration, 1800.0)
    patterns = Field(list_of(regex), factory=lambda: ["Traceback", r"\bERROR\b", r"\bFATAL\b"])
    anti_patterns = Field(list_of(regex), factory=list)
    missed_grace = Field(duration, 600.0)


class JobConfig(Section):
    name = Field(also(string(1, 200), _no_control_characters))
    log = Field(path)
    schedule = Field(also(string(), _schedule), "")
    patterns = Field(list_of(regex), None)
    anti_patterns = Field(list_of(regex), None)
    # The agent its failures are handed to; "" (not given) = the first agent.
    agent = Field(string(), "")


class TelegramConfig(Section):
    token_env = Field(string(), "LOOM_TELEGRAM_TOKEN")
    token_file = Field(optional_path, None)
    chat_id = Field(integer(), 0)
    api_base = Field(also(string(), _api_base), "")
    commands = Field(boolean, False)
    # The Telegram user ids whose commands (and, with the bridge, messages) Loom acts on. [] = the
    # private chat's own user (a private chat's id is its user's id); a group chat must list them.
    allowed_users = Field(list_of(integer(ge=1)), factory=list)
    # How often an idle sender looks at the outbox, and how it backs off while Telegram is away.
    poll_interval = Field(positive_duration, 2.0)
    backoff_base = Field(positive_duration, 1.0)
    backoff_max = Field(positive_duration, 300.0)
    long_poll = Field(positive_duration, 30.0)  # getUpdates timeout in command mode
    # Loom is the bot's only poller and relays the operator's chat to the agent and the answers
    # back (stream-json driver only: the turns that answer a message are known for sure there).
    bridge = Field(boolean, False)

    @property
    def senders(self) -> frozenset[int]:
        """Who may command Loom: `allowed_users`, or else the private chat's own user (no one in a group)."""
        if self.allowed_users:
            return frozenset(self.allowed_users)
        return frozenset({self.chat_id}) if self.chat_id > 0 else frozenset()

    def validate(self, loc: Loc) -> None:
        # A group chat as a plain notification sink needs no list: only commands and the bridge
        # take orders, and in a group every member could otherwise give them.
        if self.chat_id < 0 and (self.commands or self.bridge) and not self.allowed_users:
            raise Bad((*loc, "allowed_users"), f"chat_id {self.chat_id} is a group chat: list the user ids that "
                      "may command Loom (with commands or the bridge on, every member could otherwise)")


def _git_remote(value: str) -> str:
    # Handed to git as an argument: one that starts with '-' would be read as an option.
    if value.startswith("-"):
        raise ValueError("must not start with '-' (git would read it as an option)")
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@]*:[^/@]*@", value) or re.match(r"(?i)https?://[^/@]+@", value):
        # It would be in git's argv, the status line and the console: keep secrets in a credential helper.
        # Over http(s) the user part alone is a token as often as a name (https://ghp_…@github.com/…);
        # ssh's (ssh://git@host/…, git@host:…) is a login name.
        raise ValueError("must not hold a password or token (user:secret@, or a user part over http(s)); "
                         "use a git credential helper or ssh keys")
    return _no_control_characters(value)


def _branch(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}", value) or ".." in value or value.endswith((".lock", "/")):
        raise ValueError("expected a plain git branch name (letters, digits, '.', '_', '-', '/')")
    return value


def _replica_host(value: str) -> str:
    # It names files in the replica (conflict copies, checkpoints): no separators, nothing hidden.
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", value):
        raise ValueError("use 1-63 letters, digits, '_' and '-', starting with a letter or digit")
    return value


def default_host() -> str:
    """This machine's short host name, made a valid `memory.host` (the replica's name for it)."""
    # uname's node name is what gethostname() answers on Linux and macOS, without loading socket
    # (every config load asks, `loom status` over ssh included).
    name = re.sub(r"[^A-Za-z0-9_-]", "-", os.uname().nodename.split(".")[0]).strip("-_")[:63]
    return name or "host"


class MemoryConfig(Section):
    dir = Field(path, factory=lambda: Path("~/.claude/memory").expanduser())
    index = Field(string(1), "MEMORY.md")
    # A git remote the memory directory is replicated to (a path, ssh, a forge); "" = no replica.
    remote = Field(also(string(), _git_remote), "")
    branch = Field(also(string(1), _branch), "main")
    # Changes are committed once the directory has been still this long (not a commit per keystroke).
    sync_quiet = Field(positive_duration, 30.0)
    # How often the remote is pulled (rebased onto) besides at start and by `loom memory sync`.
    pull_interval = Field(positive_duration, 300.0)
    # Every git call is ended after this long: a remote that hangs never holds a loop.
    git_timeout = Field(timeout_duration, 60.0)
    # This box's name in the replica: conflict copies (FILE.conflict-HOST-TIME), ledger checkpoints.
    host = Field(also(string(1), _replica_host), factory=default_host)


class LedgerConfig(Section):
    # Where the ledger's head is checkpointed off the box: "" = the first agent's memory remote.
    remote = Field(also(string(), _git_remote), "")
    checkpoint_interval = Field(positive_duration, 3600.0)


class MetricsConfig(Section):
    listen = Field(also(string(), _listen), "")
    # The metrics tell anyone who can read them what the agent is doing: served to the network only
    # when the operator says so.
    allow_remote = Field(boolean, False)
    # A file (mode 0600) holding the bearer token every scrape must send (Prometheus's
    # `authorization.credentials_file`); required where the network may reach the endpoint.
    token_file = Field(optional_path, None)

    def validate(self, loc: Loc) -> None:
        if not self.listen:
            return
        if self.allow_remote:
            if self.token_file is None:
                raise Bad((*loc, "token_file"), "metrics.allow_remote serves the metrics to the network: set "
                          "metrics.token_file, a file of mode 0600 holding the token every scrape must send")
            return
        host, _ = split_listen(self.listen)
        if not is_loopback(host):
            raise Bad((*loc, "listen"), f"{host!r} is not {LOOPBACK}: anyone who can reach it could read the "
                      "metrics; listen on 127.0.0.1 or [::1], or set metrics.allow_remote = true")


def _ssh_destination(value: str) -> str:
    # The destination is one word to ssh; a leading '-' would be read as an option of ssh's own.
    if value.startswith("-"):
        raise ValueError("must not start with '-' (ssh would read it as an option)")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("must be one word: no spaces or control characters")
    return value


# ssh's words for off (readconf.c's multistate_strict_hostkey: no, off, false), quoted or not.
_NO_KEY_CHECK = re.compile(r"""(?i)(?:-o)?\s*stricthostkeychecking\s*[=\s]\s*(["']?)(?:no|off|false)\1""")


# accept-new trusts a key not yet known; with a known-hosts file that keeps nothing, every key is.
_ACCEPT_NEW = re.compile(r"""(?i)(?:-o)?\s*stricthostkeychecking\s*[=\s]\s*(["']?)accept-new\1""")
_FORGETFUL = re.compile(r"""(?i)(?:-o)?\s*userknownhostsfile\s*[=\s]\s*(["']?)(?:/dev/null|none)\1""")


def _checked_options(value: list[str]) -> list[str]:
    # Host keys are checked as the operator's ssh checks them: an option that turns that off would
    # hand the remote Loom's commands and output to whoever answers on the way.
    for i, word in enumerate(value):
        if _NO_KEY_CHECK.fullmatch(word.strip()):
            raise Bad(("ssh_options", i), "turns host key checking off: Loom never does; "
                      "add the host's key to a known_hosts file instead")
    accepting = [i for i, word in enumerate(value) if _ACCEPT_NEW.fullmatch(word.strip())]
    forgetting = [i for i, word in enumerate(value) if _FORGETFUL.fullmatch(word.strip())]
    if accepting and forgetting:
        raise Bad(("ssh_options", accepting[0]), "accept-new with a known_hosts file that keeps nothing trusts "
                  "every host key on every connection: Loom never does; keep the key in a known_hosts file")
    return value


def _argv(value: Any, loc: Loc, base: Path | None) -> list[str]:
    """A command as an argv list, or a string split the way a POSIX shell splits words."""
    import shlex

    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise Bad(loc, f"cannot split {value!r} into words: {exc}") from None
    else:
        words = list_of(string(1))(value, loc, base)
    if not words:
        raise Bad(loc, "must name a command")
    return words


LOCAL_HOST = "local"  # `loom hosts`' name for this machine's own agents


def _host_name(value: str) -> str:
    if not AGENT_NAME.fullmatch(value):
        raise ValueError(f"must be 1-32 of a-z, 0-9 and '-', starting with a letter or digit (got {value!r})")
    if value == LOCAL_HOST:
        raise ValueError(f"{LOCAL_HOST!r} is this machine's own name in `loom hosts`: choose another")
    return value


class HostConfig(Section):
    """Another machine's Loom, reached with the system OpenSSH client (loomtui/hosts/ssh.py)."""

    name = Field(also(string(1), _host_name))
    # A destination as the operator's own `ssh` understands it (~/.ssh/config, ProxyJump, agents apply).
    ssh = Field(also(string(1), _ssh_destination))
    ssh_options = Field(list_of(string(1)), factory=list)
    # The remote Loom command ("loom", "/opt/loom/bin/loom", ["python3", "-m", "loomtui"]).
    loom = Field(_argv, factory=lambda: ["loom"])
    # The remote config file and state dir, as the remote Loom reads them ("": its own defaults).
    config = Field(also(string(), _no_control_characters), "")
    state_dir = Field(also(string(), _no_control_characters), "")
    # How long ssh may take to connect, a read (`loom hosts`) to answer, and a command (`--host`) to end.
    connect_timeout = Field(timeout_duration, 10.0)
    timeout = Field(timeout_duration, 30.0)
    command_timeout = Field(timeout_duration, 600.0)
    # Where a Prometheus scrapes that host's metrics (HOST:PORT as it reaches them, e.g. over the
    # tailnet; that host serves them with its own metrics.listen): `loom prometheus-config`.
    metrics = Field(also(string(), _listen), "")

    def validate(self, loc: Loc) -> None:
        try:
            _checked_options(self.ssh_options)
        except Bad as exc:
            raise Bad((*loc, *exc.loc), exc.message) from None


@dataclass(frozen=True)
class AgentSpec:
    """One agent as configured: its name, its `[agent]` keys and its effective watchdog, canary and
    memory settings (the top-level tables with its own overrides applied). Made by `_agents` from
    sections already checked, never read from the file as it is."""

    name: str
    agent: AgentConfig
    watchdog: WatchdogConfig
    canary: CanaryConfig
    memory: MemoryConfig


_OVERRIDES = {"watchdog": WatchdogConfig, "canary": CanaryConfig, "memory": MemoryConfig}


def _table(data: dict[str, Any], key: str, loc: Loc) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise Bad((*loc, key), f"expected a table, got {value!r}")
    return value


def _spec(name: str, agent: AgentConfig, tables: dict[str, dict[str, Any]], base: Path | None) -> AgentSpec:
    """An agent with its effective watchdog, canary and memory tables (checked as the top-level ones)."""
    canary = CanaryConfig.build(tables["canary"], ("canary",), base)
    if "ack_timeout" not in tables["canary"] and passes_hook_settings(agent.fresh_command, agent.resume_command):
        # A probe typed into a turn the hooks say is under way is not counted a miss, so a short
        # wait costs a busy agent nothing: the default chosen by simulation (docs/SIM.md, "Defaults").
        canary = canary.replace(ack_timeout=HOOKED_ACK_TIMEOUT)
    return AgentSpec(name, agent, WatchdogConfig.build(tables["watchdog"], ("watchdog",), base), canary,
                     MemoryConfig.build(tables["memory"], ("memory",), base))


def _agents(data: dict[str, Any], base: Path | None) -> tuple[AgentSpec, ...]:
    """Every agent the file describes, with its effective settings."""
    tops = {key: _table(data, key, ()) for key in _OVERRIDES}
    if "agents" not in data:
        agent = AgentConfig.build(_table(data, "agent", ()), ("agent",), base)
        return (_spec(MAIN, agent, tops, base),)
    if "agent" in data:
        raise Bad(("agent",), "use either one [agent] table (an agent named main) or [[agents]] tables, not both")
    entries = data["agents"]
    if not isinstance(entries, list) or not entries:
        raise Bad(("agents",), "expected one or more [[agents]] tables")
    specs: list[AgentSpec] = []
    for i, entry in enumerate(entries):
        loc: Loc = ("agents", i)
        if not isinstance(entry, dict):
            raise Bad(loc, f"expected a table, got {entry!r}")
        if "name" not in entry:
            raise Bad((*loc, "name"), "required key is missing")
        name = entry["name"]
        if not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
            raise Bad((*loc, "name"), f"must be 1-32 of a-z, 0-9 and '-', starting with a letter or digit (got {name!r})")
        if any(s.name == name for s in specs):
            raise Bad((*loc, "name"), f"duplicate agent name {name!r}")
        keys = {k: v for k, v in entry.items() if k != "name" and k not in _OVERRIDES}
        # Each agent gets a tmux server of its own by default (docs/DESIGN.md, "Several agents"):
        # a server that hangs, is stopped or crashes then takes one agent down, not all of them.
        # `main` keeps the single-agent names, so moving [agent] into [[agents]] changes nothing.
        keys.setdefault("tmux_socket", default_socket(name))
        keys.setdefault("session", "agent" if name == MAIN else name)
        agent = AgentConfig.build(keys, loc, base)
        for other in specs:
            if (other.agent.tmux_socket, other.agent.session) == (agent.tmux_socket, agent.session):
                raise Bad((*loc, "session"), f"agent {other.name!r} already uses session {agent.session!r} "
                          f"on tmux socket {agent.tmux_socket!r}")
        effective = {}
        for key, cls in _OVERRIDES.items():
            own = _table(entry, key, loc)
            cls.build(own, (*loc, key), base)  # its own keys checked where they are written
            effective[key] = {**tops[key], **own}
        specs.append(_spec(name, agent, effective, base))
    return tuple(specs)


class Config(Section):
    state_dir = Field(optional_path, None)
    sentinel = Field(section(SentinelConfig), factory=SentinelConfig)
    jobs = Field(list_of(section(JobConfig)), factory=list)
    telegram = Field(section(TelegramConfig), factory=TelegramConfig)
    metrics = Field(section(MetricsConfig), factory=MetricsConfig)
    heartbeat = Field(list_of(section(HeartbeatConfig)), factory=list)
    ledger = Field(section(LedgerConfig), factory=LedgerConfig)
    hosts = Field(list_of(section(HostConfig)), factory=list)
    # Not fields of their own: [agent], [watchdog], [canary], [memory] and [[agents]] are read by
    # `_agents`, and these are the agent's the view is of (the first, as loaded; see for_agent).
    read_elsewhere = ("agents", "agent", *_OVERRIDES)
    agents: tuple[AgentSpec, ...]
    agent_name: str
    agent: AgentConfig
    watchdog: WatchdogConfig
    canary: CanaryConfig
    memory: MemoryConfig

    def _fill(self, data: Any, loc: Loc, base: Path | None) -> None:
        if not isinstance(data, dict):
            raise Bad(loc, f"expected a table, got {data!r}")
        agents = _agents(data, base)
        rest = {k: v for k, v in data.items() if k not in ("agents", "agent", *_OVERRIDES)}
        super()._fill(rest, loc, base)
        first = agents[0]
        object.__setattr__(self, "agents", agents)
        object.__setattr__(self, "agent_name", first.name)
        for key in ("agent", *_OVERRIDES):
            object.__setattr__(self, key, getattr(first, key))
        names = self.agent_names
        seen: set[str] = set()
        logs: dict[str, str] = {}
        for i, job in enumerate(self.jobs):
            if job.name in seen:
                raise Bad(("jobs", i, "name"), f"duplicate job name {job.name!r}")
            seen.add(job.name)
            # Each job's log is read for that job alone: shared, every failure line in it was two
            # jobs' (two items, two backstops), and one job's clean run witnessed the other's claim.
            log = os.path.normpath(job.log)
            if log in logs:
                raise Bad(("jobs", i, "log"),
                          f"{job.log} is also the log of job {logs[log]!r}: give each job a log of its own")
            logs[log] = job.name
            if not job.agent:
                object.__setattr__(job, "agent", first.name)
            elif job.agent not in names:
                raise Bad(("jobs", i, "agent"), f"no agent named {job.agent!r} (agents: {', '.join(names)})")
        if any(a.memory.remote for a in agents):
            for i, job in enumerate(self.jobs):
                if job.name == MEMORY_QUEUE:
                    raise Bad(("jobs", i, "name"), f"{MEMORY_QUEUE!r} is the memory replica's own queue (memory.remote "
                              "is set; a clean run of this job would witness its conflicts): rename the job")
        beats: set[str] = set()
        for i, beat in enumerate(self.heartbeat):
            if not beat.name:
                object.__setattr__(beat, "name", f"heartbeat{i + 1}")
            if beat.name in beats:
                raise Bad(("heartbeat", i, "name"), f"duplicate heartbeat name {beat.name!r}")
            beats.add(beat.name)
            for j, who in enumerate(beat.agents):
                if who not in names:
                    raise Bad(("heartbeat", i, "agents", j), f"no agent named {who!r} (agents: {', '.join(names)})")
        hosts: set[str] = set()
        for i, host in enumerate(self.hosts):
            if host.name in hosts:
                raise Bad(("hosts", i, "name"), f"duplicate host name {host.name!r}")
            hosts.add(host.name)
        if self.telegram.bridge and self.agent.driver != "stream-json":
            raise Bad(("telegram", "bridge"), 'needs agent.driver = "stream-json" (of the first agent)')
        if self.telegram.bridge and not self.telegram.chat_id:
            raise Bad(("telegram", "bridge"), "needs telegram.chat_id (the operator's chat)")

    @property
    def agent_names(self) -> list[str]:
        return [a.name for a in self.agents]

    def spec(self, name: str) -> AgentSpec | None:
        return next((a for a in self.agents if a.name == name), None)

    def for_agent(self, name: str) -> Config:
        """This configuration seen as the agent `name` (KeyError when there is no such agent)."""
        spec = self.spec(name)
        if spec is None:
            raise KeyError(name)
        return self.replace(agent_name=name, agent=spec.agent, watchdog=spec.watchdog, canary=spec.canary,
                            memory=spec.memory)

    def host(self, name: str) -> HostConfig | None:
        return next((h for h in self.hosts if h.name == name), None)

    def job(self, name: str) -> JobConfig | None:
        return next((j for j in self.jobs if j.name == name), None)


def default_config_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def find_config_path(cli_value: str | None, environ: dict[str, str] | None = None) -> tuple[Path, bool]:
    """(path, explicit). An explicit path that is missing is an error; the default may be absent."""
    env = os.environ if environ is None else environ
    if cli_value:
        return expand_path(cli_value, None).absolute(), True
    if env.get("LOOM_CONFIG"):
        return expand_path(env["LOOM_CONFIG"], None).absolute(), True
    return default_config_path(), False


def _no_nul(value: Any, loc: tuple[str | int, ...]) -> None:
    """TOML lets a string hold U+0000, which no path, argument or environment value can: a state
    dir or a job's log with one was accepted, then every command (or every sentinel pass) ended
    in "embedded null byte"."""
    if isinstance(value, str):
        if "\0" in value:
            raise Bad(loc, "must not contain a NUL character (\\u0000)")
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key, (*loc, key))
            _no_nul(item, (*loc, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _no_nul(item, (*loc, i))


def parse_config(data: dict[str, Any], source: Path | str, base: Path | None) -> Config:
    try:
        _no_nul(data, ())
        return Config.build(data, (), base)
    except Bad as exc:
        raise ConfigError(f"{source}: {key_path(exc.loc)}: {exc.message}") from None


def load_config(cli_value: str | None = None, environ: dict[str, str] | None = None) -> tuple[Config, Path | None]:
    """The validated config and the file it came from (None when defaults were used)."""
    path, explicit = find_config_path(cli_value, environ)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: cannot read config: file not found") from None
        return Config(), None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: TOML syntax error: {exc}") from None
    return parse_config(data, path, path.parent), path
