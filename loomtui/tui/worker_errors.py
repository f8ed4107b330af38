"""A thread worker's failure, told: Textual's Worker.StateChanged reaches only the widget that
started the worker (it does not bubble), so each widget with workers of its own says so here, or
its failures pass in silence (a search that does nothing, a detail that never opens)."""

from __future__ import annotations

from textual.widget import Widget
from textual.worker import Worker, WorkerState

from loomtui import redact
from loomtui.text import printable


def failed(event: Worker.StateChanged) -> BaseException | None:
    """The error the worker ended with, or None (it runs, or it ended well)."""
    return event.worker.error if event.state == WorkerState.ERROR else None


def tell(widget: Widget, event: Worker.StateChanged) -> BaseException | None:
    """Notify the operator of the worker's failure (scrubbed, printable, never markup); the error, or None."""
    error = failed(event)
    if error is not None:
        widget.notify(printable(redact.scrub(f"{event.worker.name}: {error}")), title="error", severity="error",
                      markup=False)
    return error
