"""A footer that shows fewer keys rather than cut ones: at 80 columns every tab still shows Quit
and Help whole, and a panel's own keys win over the app keys that matter less there. Every key
works whether it is shown or not; `?` lists them all."""

from __future__ import annotations

from rich.cells import cell_len
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# Dropped last to first when the keys do not fit: a panel's own keys rank between these groups.
KEEP_FIRST = ("loom.quit", "loom.help")
# With several agents the agents view ranks first after quit and help: it is how one is chosen; with
# [[hosts]] the hosts view next, how another host's agent is.
KEEP_AFTER_PANEL = ("loom.agents", "loom.hosts", "loom.canary", "loom.recycle", "loom.inject", "loom.filter", "loom.plots",
                    "loom.resolve", "loom.hold", "loom.attach", "loom.next_agent")


def rank(binding: Binding) -> int:
    if binding.id in KEEP_FIRST:
        return KEEP_FIRST.index(binding.id)
    if binding.id in KEEP_AFTER_PANEL:
        return 100 + KEEP_AFTER_PANEL.index(binding.id)
    return 50  # a panel's own key (memory's Edit, say): it is why the operator is on that tab


def key_width(key_display: str, description: str) -> int:
    """Cells one compact footer key takes: key, space, description, and the margin after it."""
    return cell_len(key_display) + (1 + cell_len(description) if description else 0) + 1


def fit(keys: list[tuple[Binding, str]], width: int) -> list[Binding]:
    """The bindings to show, in their own order: the best-ranked ones that fit in `width` cells."""
    chosen: set[int] = set()
    used = 0
    for index in sorted(range(len(keys)), key=lambda i: (rank(keys[i][0]), i)):
        binding, display = keys[index]
        cost = key_width(display, binding.description)
        if used + cost <= width:
            chosen.add(index)
            used += cost
    return [keys[i][0] for i in sorted(chosen)]


class FittingFooter(Footer):
    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        offered = getattr(self.screen, "shows_action", lambda action: True)  # the console's: g, n with several agents
        shown = [(binding, enabled, tooltip) for (_, binding, enabled, tooltip) in self.screen.active_bindings.values()
                 if binding.show and offered(binding.action)]
        # One key per action (the first), as Textual's footer shows them.
        seen: set[str] = set()
        unique = []
        for binding, enabled, tooltip in shown:
            if binding.action not in seen:
                seen.add(binding.action)
                unique.append((binding, enabled, tooltip))
        width = self.size.width or self.app.size.width
        keep = fit([(b, self.app.get_key_display(b)) for b, _, _ in unique], width - 1)
        for binding, enabled, tooltip in unique:
            if binding in keep:
                yield FooterKey(binding.key, self.app.get_key_display(binding), binding.description, binding.action,
                                disabled=not enabled, tooltip=tooltip).data_bind(compact=Footer.compact)

    _fitted_width = 0

    def on_resize(self, event: events.Resize) -> None:
        # Only a new width changes what fits (the keys' own virtual width must not loop here).
        if self._bindings_ready and event.size.width != self._fitted_width:
            self._fitted_width = event.size.width
            self.call_after_refresh(self.recompose)
