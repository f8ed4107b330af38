"""What an observation can say, as plain strings: shared by the probes that look (tmux, the
process tree) and the rules that decide (watchdog_core), so the rules need neither."""

from __future__ import annotations

# tmux: the server and session answered (UP), said they are not there (GONE), or did not answer.
UP, GONE, UNKNOWN = "up", "gone", "unknown"
# A process in the pane's tree: found, definitely not there, or the walk could not tell.
PRESENT, MISSING = "present", "missing"
