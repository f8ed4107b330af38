"""A DataTable keyed by id that changes only what changed (dolphie's way): no flicker, cursor kept.

One column may stretch: it takes whatever width the others leave, so a column of free text (the
timeline's "what", the queue's "line") uses the screen instead of being cut at its first measure.
Its cells are cut with an ellipsis there (the full text is in the panel's detail view), or, in a
table that wraps, they wrap: each row as tall as its text (the timeline's incidents at 80 columns).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.style import Style
from rich.text import Span, Text
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from loomtui.text import for_terminal, printable


def safe(value: object, style: str = "") -> Text:
    """A cell from untrusted text: never markup, control characters shown, not obeyed (a Text
    is not markup, but what it holds still reaches the terminal: text.printable first)."""
    return Text(for_terminal(value), style=style, no_wrap=True, overflow="ellipsis")


def shown(text: Text) -> Text:
    """`text` with every control character shown as a symbol, its styles kept (printable maps
    one character to one, so the spans still fit) but for links: for a Text built from untrusted
    parts. A link's address is written raw into the terminal's OSC 8 sequence when it is drawn,
    so one holding a BEL ended that sequence and the rest of the address was obeyed (a clipboard
    write, a title): from_ansi makes a link of any OSC 8 on the pane."""
    clean = printable(text.plain, keep_newlines=True)
    if clean != text.plain:
        text.plain = clean
    text.spans = [Span(span.start, span.end, _no_link(span.style)) for span in text.spans]
    text.style = _no_link(text.style)
    return text


def _no_link(style: str | Style) -> str | Style:
    if isinstance(style, str):
        if "link" not in style:
            return style
        style = Style.parse(style)
    return style.update_link(None) if style.link else style


def _sig(text: Text) -> tuple:
    # Text equality ignores the base style; a cell that only changed colour must still update.
    return text.plain, str(text.style), tuple(text.spans)


class KeyedTable(DataTable):
    DEFAULT_CSS = """
    KeyedTable { height: 1fr; }
    """

    MIN_STRETCH = 12

    def __init__(self, columns: Sequence[tuple[str, str, int | None]], *, stretch: str | None = None,
                 wrap: bool = False, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._columns = columns
        self._stretch = stretch
        self._wrap = wrap  # the stretching column's cells wrap, each row as tall as they need
        self._order: list[str] = []
        self._cells: dict[str, tuple[Text, ...]] = {}

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        for key, label, width in self._columns:
            self.add_column(label, key=key, width=width if width is not None or key != self._stretch
                            else self.MIN_STRETCH)
        self.stretch()

    def set_columns(self, columns: Sequence[tuple[str, str, int | None]], *, stretch: str | None = None,
                    wrap: bool = False) -> None:
        """Other columns (another view of the panel's data, with headings of its own): the rows
        go with the old ones, the next `sync` fills the new."""
        if list(columns) == list(self._columns) and stretch == self._stretch and wrap == self._wrap:
            return
        self._columns, self._stretch, self._wrap = columns, stretch, wrap
        self.clear(columns=True)
        self._order, self._cells = [], {}
        self._add_columns()

    def on_resize(self) -> None:
        self.stretch()

    def stretch(self) -> None:
        """Give the stretching column the width the other columns leave (a vertical scrollbar's
        room kept free, so rows appearing never push the table into a horizontal scroll)."""
        if self._stretch is None or not self.size.width:
            return
        column = self.columns.get(ColumnKey(self._stretch))
        if column is None:
            return
        others = sum(c.get_render_width(self) for key, c in self.columns.items() if key != self._stretch)
        width = max(self.MIN_STRETCH, self.size.width - others - 2 * self.cell_padding
                    - self.styles.scrollbar_size_vertical)
        if column.width != width or column.auto_width:
            column.width, column.auto_width = width, False
            self._require_update_dimensions = True
            self._clear_caches()
            self.refresh()
            if self._wrap and self._order:
                # A row's height is measured when it is added: at the new width, added again.
                self._rebuild(list(self._cells.items()))

    @property
    def selected_key(self) -> str | None:
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    def sync(self, rows: Sequence[tuple[str, Sequence[Text]]]) -> None:
        """Show exactly `rows` (key, cells) in this order, touching only cells that changed; a key
        given twice shows its first row only (another host's answer is untrusted: two queue items
        or events with one id made the table raise DuplicateKey, which ended the console)."""
        first: dict[str, Sequence[Text]] = {}
        for key, cells in rows:
            first.setdefault(key, cells)
        rows = list(first.items())
        keys = list(first)
        if self._wrap:
            rows = [(key, self._wrapped(cells)) for key, cells in rows]
            if keys == self._order and any(tuple(map(_sig, cells)) != tuple(map(_sig, self._cells.get(key, ())))
                                           for key, cells in rows):
                self._rebuild(rows)  # a changed text may need another height: only a new row is measured
                return
        if keys == self._order:
            for key, cells in rows:
                old = self._cells.get(key, ())
                for (col, _, _), new, before in zip(self._columns, cells, old):
                    if _sig(new) != _sig(before):
                        self.update_cell(key, col, new)
                self._cells[key] = tuple(cells)
            return
        self._rebuild(rows)

    def _wrapped(self, cells: Sequence[Text]) -> tuple[Text, ...]:
        """`cells` with the stretching column's text free to wrap (every other cell stays one line)."""
        out = []
        for (col, _, _), cell in zip(self._columns, cells):
            if col == self._stretch:
                cell = cell.copy()
                cell.no_wrap, cell.overflow = False, "fold"
            out.append(cell)
        return tuple(out)

    def _rebuild(self, rows: Sequence[tuple[str, Sequence[Text]]]) -> None:
        keys = [key for key, _ in rows]
        keep = self.selected_key
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key, height=None if self._wrap else 1)
        self._order = keys
        self._cells = {key: tuple(cells) for key, cells in rows}
        if keep in self._cells:
            self.move_cursor(row=keys.index(keep), animate=False)
