"""A DataTable keyed by id that changes only what changed (dolphie's way): no flicker, cursor kept."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable


def safe(value: object, style: str = "") -> Text:
    """A cell from untrusted text: never markup, control characters shown, not obeyed."""
    text = "" if value is None else str(value)
    clean = "".join(ch if ch.isprintable() or ch == " " else "\ufffd" if ch in "\x1b\x9b" else "·" for ch in text)
    return Text(clean, style=style, no_wrap=True, overflow="ellipsis")


def _sig(text: Text) -> tuple:
    # Text equality ignores the base style; a cell that only changed colour must still update.
    return text.plain, str(text.style), tuple(text.spans)


class KeyedTable(DataTable):
    DEFAULT_CSS = """
    KeyedTable { height: 1fr; }
    """

    def __init__(self, columns: Sequence[tuple[str, str, int | None]], **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._columns = columns
        self._order: list[str] = []
        self._cells: dict[str, tuple[Text, ...]] = {}

    def on_mount(self) -> None:
        for key, label, width in self._columns:
            self.add_column(label, key=key, width=width)

    @property
    def selected_key(self) -> str | None:
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    def sync(self, rows: Sequence[tuple[str, Sequence[Text]]]) -> None:
        """Show exactly `rows` (key, cells) in this order, touching only cells that changed."""
        keys = [key for key, _ in rows]
        if keys == self._order:
            for key, cells in rows:
                old = self._cells.get(key, ())
                for (col, _, _), new, before in zip(self._columns, cells, old):
                    if _sig(new) != _sig(before):
                        self.update_cell(key, col, new)
                self._cells[key] = tuple(cells)
            return
        keep = self.selected_key
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        self._order = keys
        self._cells = {key: tuple(cells) for key, cells in rows}
        if keep in self._cells:
            self.move_cursor(row=keys.index(keep), animate=False)
