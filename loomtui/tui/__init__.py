"""loom-tui: the operator console."""
