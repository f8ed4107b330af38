"""The one TOML configuration file: found, read with tomllib, validated, defaults filled in.

A bad file is one line naming the file, the key path and what is wrong (exit status 2).
Unknown keys are errors: a misspelt key that silently keeps its default is how a
supervisor ends up confidently wrong.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from loomtui.durations import parse_duration
from loomtui.errors import ConfigError

APP_NAME = "loom"


def _duration(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"expected a duration string like 30s, 3m, 1h, got {value!r}")
    return parse_duration(value)


def _positive(value: float) -> float:
    if value <= 0:
        raise ValueError("must be longer than 0s")
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
    return value


def _screen_regex(value: str) -> str:
    _regex(value)
    if value and re.search(value, ""):
        # It would say "ready" on the blank screen of an agent that has not drawn anything yet.
        raise ValueError(f"{value!r} matches an empty screen; it must match something the ready agent shows")
    return value


Duration = Annotated[float, BeforeValidator(_duration)]
Interval = Annotated[float, BeforeValidator(_duration), AfterValidator(_positive)]
Regex = Annotated[str, AfterValidator(_regex)]
ScreenRegex = Annotated[str, AfterValidator(_screen_regex)]


def expand_path(value: str | os.PathLike[str], base: Path | None) -> Path:
    """`~` expanded; a relative path is taken from the config file's directory."""
    path = Path(os.path.expanduser(os.fspath(value)))
    if not path.is_absolute() and base is not None:
        path = base / path
    return path


class _Section(BaseModel):
    # strict: `fuse_count = "3"` or `chat_id = true` is a mistake to report, not to coerce.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _PathMixin:
    @staticmethod
    def _expand(value: Any, info: ValidationInfo) -> Any:
        if value is None or value == "":
            return value
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"expected a path string, got {value!r}")
        base = (info.context or {}).get("base")
        return expand_path(value, base)


class Modal(_Section):
    match: Regex
    keys: list[str] = Field(default_factory=lambda: ["Enter"], min_length=1)


DEFAULT_MODALS = (Modal(match="Yes, I trust this folder", keys=["Enter"]),)


class AgentConfig(_Section, _PathMixin):
    tmux_socket: str = Field("loom", min_length=1)
    session: str = Field("agent", min_length=1)
    cwd: Path = Path("~").expanduser()
    fresh_command: str = Field("claude --session-id {session_id}", min_length=1)
    resume_command: str = Field("claude --resume {session_id}", min_length=1)
    process_match: Regex = "claude"
    poller_match: Regex = ""
    boot_grace: Duration = 90.0
    # A regex searched in the visible screen that says the agent is ready for input (its prompt,
    # or Claude Code's footer). Seeing it ends the boot grace and the resume check, and the canary
    # witnesses the relaunch at once; "" = the agent counts as ready when the boot grace ends.
    ready_match: ScreenRegex = ""
    # How long a resumed agent is watched for "No conversation found" before the resume counts
    # (cut short once `ready_match` is seen).
    resume_check: Duration = 5.0
    resume_failed_match: Regex = "No conversation found"
    stop_grace: Duration = 3.0
    env: dict[str, str] = Field(default_factory=dict)
    modals: list[Modal] = Field(default_factory=lambda: list(DEFAULT_MODALS))
    width: int = Field(200, ge=40, le=1000)
    height: int = Field(50, ge=10, le=500)
    # "tmux": the CLI is an interactive screen in the pane (typed into, scraped). "stream-json":
    # `loom pump` runs in the pane and owns the CLI's stdin and stdout (docs/STREAM.md).
    driver: Literal["tmux", "stream-json"] = "tmux"

    @field_validator("cwd", mode="before")
    @classmethod
    def _cwd(cls, value: Any, info: ValidationInfo) -> Any:
        return cls._expand(value, info)

    @field_validator("tmux_socket", "session")
    @classmethod
    def _tmux_name(cls, value: str) -> str:
        # tmux treats ':' and '.' in targets as separators; a name with them targets the wrong thing.
        if not re.fullmatch(r"[A-Za-z0-9_-]+", value):
            raise ValueError("use only letters, digits, '_' and '-'")
        return value

    @field_validator("fresh_command", "resume_command")
    @classmethod
    def _has_session_id(cls, value: str) -> str:
        # Without the id, a resume continues "the most recent" conversation (once a stranger's)
        # and a fresh start runs under an id Loom pinned but the agent never heard of.
        if "{session_id}" not in value:
            raise ValueError("must contain {session_id}: Loom resumes only the session it pinned")
        try:
            value.format(session_id="x", memory_index="x", state_dir="x")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"bad placeholder {exc}; available: {{session_id}}, {{memory_index}}, {{state_dir}}"
            ) from None
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"invalid environment variable name {name!r}")
        return value


class WatchdogConfig(_Section):
    interval: Interval = 30.0
    poller_grace: Duration = 180.0
    fuse_window: Interval = 900.0
    fuse_count: int = Field(3, ge=1)
    ceiling_window: Interval = 3600.0
    ceiling_count: int = Field(6, ge=1)
    backoff_base: Duration = 5.0
    backoff_max: Duration = 300.0
    # How often a dead pane is looked for between full ticks (an exit is noticed in seconds).
    exit_check: Interval = 2.0
    # The machine-wide scan for foreign pollers is rarer than the tick.
    foreign_scan: Interval = 120.0
    # How long the agent may stay unobservable (tmux not answering) before the operator is told.
    ambiguous_alert: Interval = 600.0


class CanaryConfig(_Section):
    interval: Interval = 1200.0
    ack_timeout: Interval = 180.0
    misses_to_recycle: int = Field(2, ge=1)


class SentinelConfig(_Section):
    interval: Interval = 600.0
    renudge: Interval = 1200.0
    backstop: Interval = 1800.0
    patterns: list[Regex] = Field(
        default_factory=lambda: ["Traceback", r"\bERROR\b", r"\bFATAL\b"]
    )
    anti_patterns: list[Regex] = Field(default_factory=list)
    missed_grace: Duration = 600.0


def _schedule(value: str) -> str:
    text = value.strip()
    if text.lower().startswith("every "):
        _positive(parse_duration(text[6:]))
        return text
    from croniter import croniter

    if not croniter.is_valid(text):
        raise ValueError(f"invalid schedule {value!r} (cron like '0 7 * * *' or 'every 10m')")
    return text


class JobConfig(_Section, _PathMixin):
    name: str = Field(min_length=1, max_length=200)
    log: Path
    schedule: Annotated[str, AfterValidator(_schedule)] = ""
    patterns: list[Regex] | None = None
    anti_patterns: list[Regex] | None = None

    @field_validator("log", mode="before")
    @classmethod
    def _log(cls, value: Any, info: ValidationInfo) -> Any:
        return cls._expand(value, info)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("must not contain control characters")
        return value


class TelegramConfig(_Section, _PathMixin):
    token_env: str = "LOOM_TELEGRAM_TOKEN"
    token_file: Path | None = None
    chat_id: int = 0
    api_base: str = ""
    commands: bool = False
    # How often an idle sender looks at the outbox, and how it backs off while Telegram is away.
    poll_interval: Interval = 2.0
    backoff_base: Interval = 1.0
    backoff_max: Interval = 300.0
    long_poll: Interval = 30.0  # getUpdates timeout in command mode
    # Loom is the bot's only poller and relays the operator's chat to the agent and the answers
    # back (stream-json driver only: the turns that answer a message are known for sure there).
    bridge: bool = False

    @field_validator("token_file", mode="before")
    @classmethod
    def _token_file(cls, value: Any, info: ValidationInfo) -> Any:
        return cls._expand(value, info) or None


class MemoryConfig(_Section, _PathMixin):
    dir: Path = Path("~/.claude/memory").expanduser()
    index: str = Field("MEMORY.md", min_length=1)

    @field_validator("dir", mode="before")
    @classmethod
    def _dir(cls, value: Any, info: ValidationInfo) -> Any:
        return cls._expand(value, info)


class MetricsConfig(_Section):
    listen: str = ""

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        if value and not re.fullmatch(r"[^\s:]+:\d{1,5}", value):
            raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:9464")
        return value


class Config(_Section, _PathMixin):
    state_dir: Path | None = None
    agent: AgentConfig = Field(default_factory=AgentConfig)
    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig)
    canary: CanaryConfig = Field(default_factory=CanaryConfig)
    sentinel: SentinelConfig = Field(default_factory=SentinelConfig)
    jobs: list[JobConfig] = Field(default_factory=list)
    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)

    @field_validator("state_dir", mode="before")
    @classmethod
    def _state_dir(cls, value: Any, info: ValidationInfo) -> Any:
        return cls._expand(value, info) or None

    @model_validator(mode="after")
    def _unique_jobs(self) -> Config:
        seen: set[str] = set()
        for job in self.jobs:
            if job.name in seen:
                raise ValueError(f"jobs: duplicate job name {job.name!r}")
            seen.add(job.name)
        return self

    @model_validator(mode="after")
    def _bridge_needs_pump(self) -> Config:
        if self.telegram.bridge and self.agent.driver != "stream-json":
            raise ValueError('telegram.bridge: needs agent.driver = "stream-json"')
        if self.telegram.bridge and not self.telegram.chat_id:
            raise ValueError("telegram.bridge: needs telegram.chat_id (the operator's chat)")
        return self

    def job(self, name: str) -> JobConfig | None:
        return next((j for j in self.jobs if j.name == name), None)


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def find_config_path(cli_value: str | None, environ: dict[str, str] | None = None) -> tuple[Path, bool]:
    """(path, explicit). An explicit path that is missing is an error; the default may be absent."""
    env = os.environ if environ is None else environ
    if cli_value:
        return expand_path(cli_value, None).absolute(), True
    if env.get("LOOM_CONFIG"):
        return expand_path(env["LOOM_CONFIG"], None).absolute(), True
    return default_config_path(), False


def _key_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _describe(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    msg = str(err.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if kind not in ("value_error",) and "input" in err and not isinstance(err["input"], (dict, list)):
        msg += f" (got {err['input']!r})"
    return msg


def parse_config(data: dict[str, Any], source: Path | str, base: Path | None) -> Config:
    try:
        return Config.model_validate(data, context={"base": base})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first.get("loc", ()))
        msg = _describe(first)
        if not loc and msg.startswith("jobs: "):
            loc, msg = ("jobs",), msg[len("jobs: "):]
        raise ConfigError(f"{source}: {_key_path(loc)}: {msg}") from None


def load_config(cli_value: str | None = None, environ: dict[str, str] | None = None) -> tuple[Config, Path | None]:
    """The validated config and the file it came from (None when defaults were used)."""
    path, explicit = find_config_path(cli_value, environ)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"{path}: cannot read config: file not found") from None
        return Config.model_validate({}, context={"base": None}), None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: TOML syntax error: {exc}") from None
    return parse_config(data, path, path.parent), path
