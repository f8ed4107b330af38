"""Loom: keeps one AI agent CLI alive, reachable and honest, and shows it in a console."""

__version__ = "0.1.0"
