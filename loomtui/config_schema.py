"""The small schema the configuration is checked with: sections whose fields each carry a check.

Why not pydantic: importing it and building the models cost about 100 ms of every `loom` command's
start (the agent runs `loom resolve`, the operator `loom status`), and the checks needed here are
few. A check takes (value, key path, base directory) and returns the value to keep, or raises
`Bad` naming the key path; `Section` collects the checks of its fields, refuses unknown keys, and
makes its instances read-only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

from loomtui.durations import parse_duration

if TYPE_CHECKING:
    from typing import Self

T = TypeVar("T")
S = TypeVar("S", bound="Section")
Loc = tuple[Any, ...]
# A check: (value, key path, base directory) -> the value to keep, of type T.
Check = Callable[[Any, Loc, "Path | None"], T]


class Bad(ValueError):
    """A value the configuration cannot take: where it is (a key path) and what is wrong."""

    def __init__(self, loc: Loc, message: str) -> None:
        super().__init__(f"{key_path(loc)}: {message}")
        self.loc = loc
        self.message = message


def key_path(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def expand_path(value: str | os.PathLike[str], base: Path | None) -> Path:
    """`~` expanded; a relative path is taken from the config file's directory."""
    path = Path(os.path.expanduser(os.fspath(value)))
    if not path.is_absolute() and base is not None:
        path = base / path
    return path


_REQUIRED = object()


class Field(Generic[T]):
    """A key of a section: its check, and its default (or a factory of one). On an instance the
    attribute is the checked value: a type checker reads `section.key` as the check's type T
    (`__get__` below is for it alone; Section removes the Field from the class)."""

    def __init__(self, check: Check[T], default: Any = _REQUIRED, factory: Callable[[], Any] | None = None) -> None:
        self.check = check
        self.default = default
        self.factory = factory

    if TYPE_CHECKING:
        @overload
        def __get__(self, obj: None, owner: type) -> Field[T]: ...

        @overload
        def __get__(self, obj: object, owner: type) -> T: ...

        def __get__(self, obj: object, owner: type) -> Any: ...

    def missing(self, loc: Loc) -> Any:
        if self.factory is not None:
            return self.factory()
        if self.default is _REQUIRED:
            raise Bad(loc, "required key is missing")
        return self.default


class Section:
    """A table of the file. Built from a dict by `build` (or by keyword, for code and tests)."""

    fields: ClassVar[dict[str, Field[Any]]] = {}
    # Keys a subclass reads itself, outside `fields` (for "did you mean" only).
    read_elsewhere: ClassVar[tuple[str, ...]] = ()
    # Fields whose value is a secret: never in a repr (a traceback with its locals prints one).
    secrets: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = {name: value for name, value in vars(cls).items() if isinstance(value, Field)}
        cls.fields = {**cls.fields, **own}
        for name in own:
            delattr(cls, name)

    def __init__(self, **data: Any) -> None:
        self._fill(data, (), None)

    @classmethod
    def build(cls, data: Any, loc: Loc, base: Path | None) -> Self:
        obj = cls.__new__(cls)
        obj._fill(data, loc, base)
        return obj

    def _fill(self, data: Any, loc: Loc, base: Path | None) -> None:
        if not isinstance(data, dict):
            raise Bad(loc, f"expected a table, got {data!r}")
        for key in data:
            if key not in self.fields:
                known = [*self.fields, *self.read_elsewhere]
                import difflib  # only for a key that is wrong

                close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
                raise Bad((*loc, key), f"unknown key (did you mean {close[0]!r}?)" if close else "unknown key")
        for name, field in self.fields.items():
            here = (*loc, name)
            value = field.check(data[name], here, base) if name in data else field.missing(here)
            object.__setattr__(self, name, value)
        self.validate(loc)

    def validate(self, loc: Loc) -> None:
        """Checks across fields; raise Bad."""

    def replace(self, **changes: Any) -> Self:
        obj = self.__class__.__new__(self.__class__)
        obj.__dict__.update(self.__dict__)
        obj.__dict__.update(changes)
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}: the configuration is read-only")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}: the configuration is read-only")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # type: ignore[assignment]  # equal by value, and lists inside are not hashable

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={_hidden(v) if k in self.secrets else repr(v)}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({inner})"


def _hidden(value: Any) -> str:
    """A secret field in a repr: a table's keys (which variables an agent gets), never a value."""
    if isinstance(value, dict):
        return repr({key: "<secret>" for key in value})
    return "<secret>"


# ---- checks


def _got(value: Any) -> str:
    # A table or a list is named, never printed: `[heartbeat]` for `[[heartbeat]]` would have put the
    # push URL, whose path is its secret, into the error every command and the journal print.
    if isinstance(value, dict):
        return "(got a table)"
    if isinstance(value, list):
        return "(got a list)"
    shown = repr(value)
    return f"(got {shown if len(shown) <= 60 else shown[:57] + '...'})"


def string(min_length: int = 0, max_length: int | None = None) -> Check[str]:
    def check(value: Any, loc: Loc, base: Path | None) -> str:
        if not isinstance(value, str):
            raise Bad(loc, f"expected a string {_got(value)}")
        if len(value) < min_length:
            raise Bad(loc, "must not be empty" if min_length == 1 else f"must be at least {min_length} characters")
        if max_length is not None and len(value) > max_length:
            raise Bad(loc, f"must be at most {max_length} characters")
        return value
    return check


def integer(ge: int | None = None, le: int | None = None) -> Check[int]:
    def check(value: Any, loc: Loc, base: Path | None) -> int:
        # true is an int to Python; `fuse_count = true` is a mistake to report, not a 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise Bad(loc, f"expected an integer {_got(value)}")
        if ge is not None and value < ge:
            raise Bad(loc, f"must be at least {ge} {_got(value)}")
        if le is not None and value > le:
            raise Bad(loc, f"must be at most {le} {_got(value)}")
        return value
    return check


def boolean(value: Any, loc: Loc, base: Path | None) -> bool:
    if not isinstance(value, bool):
        raise Bad(loc, f"expected true or false {_got(value)}")
    return value


def duration(value: Any, loc: Loc, base: Path | None) -> float:
    if isinstance(value, bool) or not isinstance(value, str):
        raise Bad(loc, f"expected a duration string like 30s, 3m, 1h, got {value!r}")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise Bad(loc, str(exc)) from None


def positive_duration(value: Any, loc: Loc, base: Path | None) -> float:
    seconds = duration(value, loc, base)
    if seconds <= 0:
        raise Bad(loc, "must be longer than 0s")
    return seconds


# The longest a command Loom waits on may take (git, ssh, a heartbeat's GET): one that needs more
# hangs. Longer waits also overflow the poll under subprocess's timeout (milliseconds in a C int,
# about 24.8 days): a `git_timeout = "30d"` failed every replica tick with an OverflowError.
MAX_TIMEOUT = 86400.0


def timeout_duration(value: Any, loc: Loc, base: Path | None) -> float:
    seconds = positive_duration(value, loc, base)
    if seconds > MAX_TIMEOUT:
        raise Bad(loc, "must be at most 1d: a command that needs longer hangs")
    return seconds


def regex(value: Any, loc: Loc, base: Path | None) -> str:
    text = string()(value, loc, base)
    try:
        re.compile(text)
    except re.error as exc:
        raise Bad(loc, f"invalid regular expression {text!r}: {exc}") from None
    return text


def screen_regex(value: Any, loc: Loc, base: Path | None) -> str:
    text = regex(value, loc, base)
    if text and re.search(text, ""):
        # It would say "ready" on the blank screen of an agent that has not drawn anything yet.
        raise Bad(loc, f"{text!r} matches an empty screen; it must match something the ready agent shows")
    return text


def pane_regex(value: Any, loc: Loc, base: Path | None) -> str:
    """A pattern that must say something of the screen, never empty: "" (or `.*`) matched every
    screen: every resume judged failed (`resume_failed_match`), keys sent into a healthy agent
    (`agent.modals`)."""
    text = regex(value, loc, base)
    if re.search(text, ""):
        raise Bad(loc, f"{text!r} matches an empty screen; it must match what it names on the screen")
    return text


def one_of(*choices: str) -> Check[str]:
    def check(value: Any, loc: Loc, base: Path | None) -> str:
        if value not in choices or not isinstance(value, str):
            raise Bad(loc, f"expected one of {', '.join(repr(c) for c in choices)} {_got(value)}")
        return value
    return check


def path(value: Any, loc: Loc, base: Path | None) -> Path:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise Bad(loc, f"expected a path string {_got(value)}")
    return expand_path(value, base)


def optional_path(value: Any, loc: Loc, base: Path | None) -> Path | None:
    return None if value == "" else path(value, loc, base)


def list_of(item: Check[T], min_length: int = 0) -> Check[list[T]]:
    def check(value: Any, loc: Loc, base: Path | None) -> list[T]:
        if not isinstance(value, list):
            raise Bad(loc, f"expected a list {_got(value)}")
        if len(value) < min_length:
            raise Bad(loc, f"must have at least {min_length} item{'s' if min_length > 1 else ''}")
        return [item(v, (*loc, i), base) for i, v in enumerate(value)]
    return check


def table_of_strings(value: Any, loc: Loc, base: Path | None) -> dict[str, str]:
    if not isinstance(value, dict):
        raise Bad(loc, f"expected a table {_got(value)}")
    for key, item in value.items():
        if not isinstance(item, str):
            raise Bad((*loc, key), f"expected a string {_got(item)}")
    return dict(value)


def section(cls: type[S]) -> Check[S]:
    def check(value: Any, loc: Loc, base: Path | None) -> S:
        return cls.build(value, loc, base)
    return check


def also(first: Check[T], *then: Callable[[T], T]) -> Check[T]:
    """`first`, then plain functions of the value that raise ValueError with the message."""
    def check(value: Any, loc: Loc, base: Path | None) -> T:
        out = first(value, loc, base)
        for step in then:
            try:
                out = step(out)
            except Bad:
                raise
            except ValueError as exc:
                raise Bad(loc, str(exc)) from None
        return out
    return check
